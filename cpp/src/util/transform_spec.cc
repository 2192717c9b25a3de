#include "stoker/transform_spec.h"

#include <cstdio>

namespace stoker {
namespace {

std::string Quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

const char* ParamValue::TypeName() const {
  switch (value.index()) {
    case 0:
      return "None";
    case 1:
      return "bool";
    case 2:
      return "int";
    case 3:
      return "float";
    case 4:
      return "str";
    default:
      return "list";
  }
}

std::string ParamValue::ToString() const {
  if (std::holds_alternative<std::monostate>(value)) return "null";
  if (const bool* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (const int64_t* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  if (const double* d = std::get_if<double>(&value)) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.17g", *d);
    return text;
  }
  if (const std::string* s = std::get_if<std::string>(&value)) return Quote(*s);
  std::string out = "[";
  const auto& list = std::get<List>(value);
  for (size_t i = 0; i < list.size(); ++i) {
    if (i > 0) out += ",";
    out += list[i].ToString();
  }
  return out + "]";
}

}  // namespace stoker
