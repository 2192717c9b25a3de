#include "util/uri.h"

#include <cctype>
#include <string>
#include <vector>

#include "stoker/redact.h"

namespace stoker {

std::string LowerAscii(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string UriScheme(const std::string& uri) {
  const size_t colon = uri.find("://");
  if (colon == std::string::npos || colon < 2) return "";
  for (size_t i = 0; i < colon; ++i) {
    const char c = uri[i];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') {
      return "";
    }
  }
  return LowerAscii(uri.substr(0, colon));
}

std::string RedactSecrets(std::string text, const std::vector<std::string>& secrets) {
  for (const auto& secret : secrets) {
    if (secret.empty()) continue;
    std::string out;
    size_t from = 0;
    for (size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, from)) {
      out.append(text, from, at - from);
      out.append("***");
      from = at + secret.size();
    }
    out.append(text, from, std::string::npos);
    text = std::move(out);
  }
  return text;
}

std::string RedactUri(const std::string& uri_or_path) {
  const std::string scheme = UriScheme(uri_or_path);
  if (scheme.empty()) return uri_or_path;
  std::string rest = uri_or_path.substr(scheme.size() + 3);
  rest = rest.substr(0, rest.find_first_of("?#"));
  const size_t slash = rest.find('/');
  const size_t at = rest.rfind('@', slash == std::string::npos ? std::string::npos : slash);
  if (at != std::string::npos && (slash == std::string::npos || at < slash)) {
    // abfs://container@account... names a container, not a user: keep what is not a secret.
    const std::string userinfo = rest.substr(0, at);
    const size_t colon = userinfo.find(':');
    rest = (colon == std::string::npos && (scheme == "abfs" || scheme == "abfss") ? userinfo + "@"
                                                                                  : std::string()) +
           rest.substr(at + 1);
  }
  return scheme + "://" + rest;
}

}  // namespace stoker
