// OptionValue: Python's bool() and repr() of the values an option takes, and ParseSize.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>

#include "options/options_internal.h"
#include "stoker/option_values.h"

namespace stoker {
namespace {

std::string ReprString(const std::string& text) {
  const bool single = text.find('\'') != std::string::npos;
  const bool dbl = text.find('"') != std::string::npos;
  const char quote = single && !dbl ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : text) {
    if (c == static_cast<unsigned char>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < ' ' || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);  // UTF-8 passes through, as Python prints printable text
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string ReprFloat(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  // The shortest digits that round-trip, placed as Python's repr places them: positional for
  // exponents in [-4, 16), else d.ddde+XX.
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string text(buf, result.ptr);
  std::string sign;
  if (!text.empty() && text[0] == '-') {
    sign = "-";
    text.erase(0, 1);
  }
  const size_t e = text.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (text[i] != '.') digits += text[i];
  }
  const int exponent = std::stoi(text.substr(e + 1));
  const int decpt = exponent + 1;
  if (decpt <= -4 || decpt > 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (decpt <= 0) return sign + "0." + std::string(-decpt, '0') + digits;
  if (decpt >= static_cast<int>(digits.size())) {
    return sign + digits + std::string(decpt - digits.size(), '0') + ".0";
  }
  return sign + digits.substr(0, decpt) + "." + digits.substr(decpt);
}

std::string PyStr(const OptionValue& value) {
  switch (value.kind) {
    case OptionValue::Kind::kString:
      return value.text;
    case OptionValue::Kind::kOther:
      return value.str;
    default:
      return value.Repr();
  }
}

OptionValue OptionValue::Bool(bool value) {
  OptionValue out;
  out.kind = Kind::kBool;
  out.boolean = value;
  return out;
}

OptionValue OptionValue::Int(int64_t value) {
  OptionValue out;
  out.kind = Kind::kInt;
  out.integer = value;
  return out;
}

OptionValue OptionValue::Float(double value) {
  OptionValue out;
  out.kind = Kind::kFloat;
  out.number = value;
  return out;
}

OptionValue OptionValue::String(std::string value) {
  OptionValue out;
  out.kind = Kind::kString;
  out.text = std::move(value);
  return out;
}

OptionValue OptionValue::List(std::vector<OptionValue> items, bool tuple) {
  OptionValue out;
  out.kind = tuple ? Kind::kTuple : Kind::kList;
  out.items = std::move(items);
  return out;
}

OptionValue OptionValue::Dict(const std::vector<std::pair<OptionValue, OptionValue>>& entries) {
  OptionValue out;
  out.kind = Kind::kDict;
  for (const auto& [key, value] : entries) {
    out.keys.push_back(key);
    out.items.push_back(value);
  }
  return out;
}

bool OptionValue::Truthy() const {
  switch (kind) {
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return boolean;
    case Kind::kInt:
      return integer != 0;
    case Kind::kFloat:
      return number != 0;
    case Kind::kString:
      return !text.empty();
    case Kind::kList:
    case Kind::kTuple:
      return !items.empty();
    case Kind::kDict:
      return !keys.empty();
    case Kind::kOther:
      return truthy;
  }
  return false;
}

std::string OptionValue::Repr() const {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return boolean ? "True" : "False";
    case Kind::kInt:
      return std::to_string(integer);
    case Kind::kFloat:
      return ReprFloat(number);
    case Kind::kString:
      return ReprString(text);
    case Kind::kList:
    case Kind::kTuple: {
      const bool tuple = kind == Kind::kTuple;
      std::string out = tuple ? "(" : "[";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += ", ";
        out += items[i].Repr();
      }
      if (tuple && items.size() == 1) out += ",";
      return out + (tuple ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < keys.size(); ++i) {
        if (i > 0) out += ", ";
        out += keys[i].Repr() + ": " + items[i].Repr();
      }
      return out + "}";
    }
    case Kind::kOther:
      return text;
  }
  return "";
}

const OptionValue* OptionValue::Find(const std::string& key) const {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].kind == Kind::kString && keys[i].text == key) return &items[i];
  }
  return nullptr;
}

Result<int64_t> ParseSize(const OptionValue& value, const std::string& option) {
  auto bad = [&] {
    return MakeError(ErrorKind::kInvalidOption, option +
                                                    " must be a byte count or a size like "
                                                    "'64MiB', got " +
                                                    value.Repr());
  };
  if (value.kind == OptionValue::Kind::kInt) return value.integer;
  if (value.kind != OptionValue::Kind::kString) return bad();
  // \s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*, the whole text.
  const std::string& text = value.text;
  auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  size_t i = 0;
  while (i < text.size() && space(text[i])) ++i;
  const size_t start = i;
  while (i < text.size() && digit(text[i])) ++i;
  if (i < text.size() && text[i] == '.') {
    const size_t dot = ++i;
    while (i < text.size() && digit(text[i])) ++i;
    if (i == dot) return bad();
  } else if (i == start) {
    return bad();
  }
  const std::string number = text.substr(start, i - start);
  while (i < text.size() && space(text[i])) ++i;
  std::string unit;
  while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) {
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i++])));
  }
  while (i < text.size() && space(text[i])) ++i;
  if (i != text.size()) return bad();
  static const std::map<std::string, double> kUnits = {
      {"", 1},
      {"b", 1},
      {"kb", 1e3},
      {"mb", 1e6},
      {"gb", 1e9},
      {"tb", 1e12},
      {"kib", 1024.0},
      {"mib", 1048576.0},
      {"gib", 1073741824.0},
      {"tib", 1099511627776.0},
  };
  auto it = kUnits.find(unit);
  if (it == kUnits.end()) return bad();
  double parsed = 0;
  std::from_chars(number.data(), number.data() + number.size(), parsed);
  const double bytes = parsed * it->second;
  if (!(bytes < 9.2e18)) return bad();
  return static_cast<int64_t>(bytes);  // int(): toward zero
}

}  // namespace stoker
