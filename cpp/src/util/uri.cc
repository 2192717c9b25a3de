#include "util/uri.h"

#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include "stoker/redact.h"

namespace stoker {
namespace {

// Parameter names whose values are credentials (lowercase). Matched as whole names.
constexpr const char* kCredentialNames[] = {
    "secret_key",
    "session_token",
    "access_token",
    "password",
    "passwd",
    "token",
    "sig",
    "signature",
    "client_secret",
    "account_key",
    "sas_token",
    "aws_secret_access_key",
    "aws_session_token",
    "aws_security_token",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "x-goog-signature",
    "x-goog-credential",
};

bool WordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
}

// '.' and '/' join words ("test.parquet", "a/test/b"); elsewhere they delimit.
bool Joiner(char c) { return c == '.' || c == '/'; }

// Whether the text before index `begin` continues a word into it.
bool ContinuesLeft(const std::string& text, size_t begin) {
  if (begin == 0) return false;
  const char c = text[begin - 1];
  return WordChar(c) || (Joiner(c) && begin >= 2 && WordChar(text[begin - 2]));
}

// Whether the text from index `end` continues a word out of it.
bool ContinuesRight(const std::string& text, size_t end) {
  if (end >= text.size()) return false;
  const char c = text[end];
  return WordChar(c) || (Joiner(c) && end + 1 < text.size() && WordChar(text[end + 1]));
}

bool IsSchemeChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
}

bool EndsUri(char c) {
  return std::isspace(static_cast<unsigned char>(c)) || std::strchr("'\"<>|`", c) != nullptr;
}

// Rule 1: every scheme://... in `text` as RedactUri shows it.
std::string RedactUris(const std::string& text) {
  std::string out;
  size_t from = 0;
  for (size_t sep = text.find("://"); sep != std::string::npos; sep = text.find("://", from)) {
    size_t begin = sep;
    while (begin > from && IsSchemeChar(text[begin - 1])) --begin;
    while (begin < sep && !std::isalpha(static_cast<unsigned char>(text[begin]))) ++begin;
    size_t end = sep + 3;
    if (sep - begin >= 2) {  // a scheme (UriScheme wants two characters or more)
      while (end < text.size() && !EndsUri(text[end])) ++end;
      out.append(text, from, begin - from);
      out += RedactUri(text.substr(begin, end - begin));
    } else {
      out.append(text, from, end - from);
    }
    from = end;
  }
  out.append(text, from, std::string::npos);
  return out;
}

bool EqualsIgnoringCase(const std::string& text, size_t at, const char* name, size_t length) {
  if (at + length > text.size()) return false;
  for (size_t i = 0; i < length; ++i) {
    if (std::tolower(static_cast<unsigned char>(text[at + i])) != name[i]) return false;
  }
  return true;
}

// Rule 2: the values of credential parameters. Returns the index after the value when a
// parameter named `name` starts at `at` (and `*value_begin`), else npos.
size_t CredentialValue(const std::string& text, size_t at, size_t length, size_t* value_begin) {
  size_t i = at + length;
  const bool quoted_name = at > 0 && (text[at - 1] == '\'' || text[at - 1] == '"');
  if (quoted_name) {
    // 'name': 'value' or "name": "value"
    if (i >= text.size() || text[i] != text[at - 1]) return std::string::npos;
    ++i;
    while (i < text.size() && text[i] == ' ') ++i;
    if (i >= text.size() || (text[i] != ':' && text[i] != '=')) return std::string::npos;
    ++i;
    while (i < text.size() && text[i] == ' ') ++i;
    if (i >= text.size() || (text[i] != '\'' && text[i] != '"')) return std::string::npos;
    const char quote = text[i];
    *value_begin = ++i;
    while (i < text.size() && text[i] != quote) ++i;
    return i;
  }
  // name=value, name = value, name='value'
  while (i < text.size() && text[i] == ' ') ++i;
  if (i >= text.size() || text[i] != '=') return std::string::npos;
  ++i;
  while (i < text.size() && text[i] == ' ') ++i;
  if (i < text.size() && (text[i] == '\'' || text[i] == '"')) {
    const char quote = text[i];
    *value_begin = ++i;
    while (i < text.size() && text[i] != quote) ++i;
    return i;
  }
  *value_begin = i;
  while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i])) &&
         std::strchr("&'\"<>,;)}]#|`", text[i]) == nullptr) {
    ++i;
  }
  return i;
}

std::string RedactCredentialParameters(const std::string& text) {
  std::string out;
  size_t from = 0;
  for (size_t at = 0; at < text.size(); ++at) {
    if (ContinuesLeft(text, at)) continue;  // inside a longer name
    for (const char* name : kCredentialNames) {
      const size_t length = std::strlen(name);
      if (!EqualsIgnoringCase(text, at, name, length)) continue;
      if (at + length < text.size() && WordChar(text[at + length])) continue;
      size_t value_begin = 0;
      const size_t value_end = CredentialValue(text, at, length, &value_begin);
      if (value_end == std::string::npos || value_end == value_begin) continue;
      out.append(text, from, value_begin - from);
      out += "***";
      from = value_end;
      at = value_end - 1;
      break;
    }
  }
  out.append(text, from, std::string::npos);
  return out;
}

// Rule 3: `secret` wherever it stands as a whole token.
std::string RedactToken(const std::string& text, const std::string& secret) {
  const bool check_left = WordChar(secret.front());
  const bool check_right = WordChar(secret.back());
  std::string out;
  size_t from = 0;
  for (size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 1)) {
    if (at < from) continue;  // overlaps a redacted occurrence
    const size_t end = at + secret.size();
    if ((check_left && ContinuesLeft(text, at)) || (check_right && ContinuesRight(text, end))) {
      continue;
    }
    out.append(text, from, at - from);
    out += "***";
    from = end;
  }
  out.append(text, from, std::string::npos);
  return out;
}

}  // namespace

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
  text = RedactCredentialParameters(RedactUris(text));
  for (const auto& secret : secrets) {
    if (!secret.empty()) text = RedactToken(text, secret);
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
