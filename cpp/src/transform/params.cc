#include "transform/params.h"

#include <cmath>
#include <cstdio>

namespace stoker::transform {

bool ParamReader::Has(const std::string& name) const {
  auto it = params_.find(name);
  return it != params_.end() && !std::holds_alternative<std::monostate>(it->second.value);
}

const ParamValue* ParamReader::Find(const std::string& name) {
  auto it = params_.find(name);
  if (it == params_.end() || std::holds_alternative<std::monostate>(it->second.value)) {
    return nullptr;
  }
  return &it->second;
}

Status ParamReader::Error(const std::string& name, const std::string& what) const {
  return MakeError(ErrorKind::kInvalidOption, "op '" + op_ + "': parameter '" + name + "' " + what);
}

Result<ParamValue> ParamReader::Raw(const std::string& name, std::optional<ParamValue> fallback) {
  const ParamValue* found = Find(name);
  if (found == nullptr) {
    if (!fallback) return Error(name, "is required");
    used_[name] = *fallback;
    return *fallback;
  }
  used_[name] = *found;
  return *found;
}

Result<bool> ParamReader::Bool(const std::string& name, std::optional<bool> fallback) {
  STOKER_ASSIGN_OR_RAISE(ParamValue raw,
                         Raw(name, fallback ? std::optional<ParamValue>(*fallback) : std::nullopt));
  if (const bool* b = std::get_if<bool>(&raw.value)) return *b;
  return Error(name, std::string("must be a bool, got ") + raw.TypeName());
}

Result<int64_t> ParamReader::Int(const std::string& name, std::optional<int64_t> fallback) {
  STOKER_ASSIGN_OR_RAISE(ParamValue raw,
                         Raw(name, fallback ? std::optional<ParamValue>(*fallback) : std::nullopt));
  if (const int64_t* i = std::get_if<int64_t>(&raw.value)) return *i;
  return Error(name, std::string("must be an int, got ") + raw.TypeName());
}

Result<double> ParamReader::Double(const std::string& name, std::optional<double> fallback) {
  STOKER_ASSIGN_OR_RAISE(ParamValue raw,
                         Raw(name, fallback ? std::optional<ParamValue>(*fallback) : std::nullopt));
  if (const double* d = std::get_if<double>(&raw.value)) {
    if (!std::isfinite(*d)) return Error(name, "must be finite");
    return *d;
  }
  if (const int64_t* i = std::get_if<int64_t>(&raw.value)) {
    used_[name] = static_cast<double>(*i);  // 1 and 1.0 fingerprint alike
    return static_cast<double>(*i);
  }
  return Error(name, std::string("must be a number, got ") + raw.TypeName());
}

Result<std::string> ParamReader::String(const std::string& name,
                                        std::optional<std::string> fallback) {
  STOKER_ASSIGN_OR_RAISE(ParamValue raw,
                         Raw(name, fallback ? std::optional<ParamValue>(*fallback) : std::nullopt));
  if (const std::string* s = std::get_if<std::string>(&raw.value)) return *s;
  return Error(name, std::string("must be a str, got ") + raw.TypeName());
}

Result<std::vector<int64_t>> ParamReader::IntList(const std::string& name,
                                                  std::optional<std::vector<int64_t>> fallback,
                                                  bool scalar_ok) {
  const ParamValue* found = Find(name);
  if (found == nullptr) {
    if (!fallback) return Error(name, "is required");
    ParamValue::List list(fallback->begin(), fallback->end());
    used_[name] = list;
    return *fallback;
  }
  if (const int64_t* i = std::get_if<int64_t>(&found->value)) {
    if (!scalar_ok) return Error(name, "must be a list of ints, got int");
    used_[name] = *found;
    return std::vector<int64_t>{*i};
  }
  const auto* list = std::get_if<ParamValue::List>(&found->value);
  if (list == nullptr) {
    return Error(name, std::string("must be a list of ints, got ") + found->TypeName());
  }
  std::vector<int64_t> out;
  for (const ParamValue& item : *list) {
    const int64_t* i = std::get_if<int64_t>(&item.value);
    if (i == nullptr) {
      return Error(name, std::string("must be a list of ints, has a ") + item.TypeName());
    }
    out.push_back(*i);
  }
  used_[name] = *found;
  return out;
}

Result<std::vector<double>> ParamReader::DoubleList(const std::string& name,
                                                    std::optional<std::vector<double>> fallback,
                                                    bool scalar_ok) {
  const ParamValue* found = Find(name);
  std::vector<double> out;
  if (found == nullptr) {
    if (!fallback) return Error(name, "is required");
    out = *fallback;
  } else if (std::holds_alternative<int64_t>(found->value) ||
             std::holds_alternative<double>(found->value)) {
    if (!scalar_ok) return Error(name, "must be a list of numbers, got a number");
    out.push_back(std::holds_alternative<int64_t>(found->value)
                      ? static_cast<double>(std::get<int64_t>(found->value))
                      : std::get<double>(found->value));
  } else if (const auto* list = std::get_if<ParamValue::List>(&found->value)) {
    for (const ParamValue& item : *list) {
      if (const int64_t* i = std::get_if<int64_t>(&item.value)) {
        out.push_back(static_cast<double>(*i));
      } else if (const double* d = std::get_if<double>(&item.value)) {
        out.push_back(*d);
      } else {
        return Error(name, std::string("must be a list of numbers, has a ") + item.TypeName());
      }
    }
  } else {
    return Error(name, std::string("must be a list of numbers, got ") + found->TypeName());
  }
  for (double d : out) {
    if (!std::isfinite(d)) return Error(name, "must hold finite numbers");
  }
  used_[name] = ParamValue::List(out.begin(), out.end());
  return out;
}

Result<std::vector<std::string>> ParamReader::StringList(
    const std::string& name, std::optional<std::vector<std::string>> fallback) {
  const ParamValue* found = Find(name);
  if (found == nullptr) {
    if (!fallback) return Error(name, "is required");
    used_[name] = ParamValue::List(fallback->begin(), fallback->end());
    return *fallback;
  }
  const auto* list = std::get_if<ParamValue::List>(&found->value);
  if (list == nullptr) {
    return Error(name, std::string("must be a list of str, got ") + found->TypeName());
  }
  std::vector<std::string> out;
  for (const ParamValue& item : *list) {
    const std::string* s = std::get_if<std::string>(&item.value);
    if (s == nullptr) {
      return Error(name, std::string("must be a list of str, has a ") + item.TypeName());
    }
    out.push_back(*s);
  }
  used_[name] = *found;
  return out;
}

Status ParamReader::Finish() const {
  for (const auto& [name, value] : params_) {
    if (!used_.contains(name)) {
      std::string known;
      for (const auto& [used_name, unused] : used_) {
        known += (known.empty() ? "" : ", ") + used_name;
      }
      // MakeOp names unknown parameters from the registry first; this is the backstop.
      return MakeError(ErrorKind::kInvalidOption,
                       "op '" + op_ + "': unknown parameter '" + name + "' (" +
                           (known.empty() ? "it takes no parameters" : "parameters: " + known) +
                           ")");
    }
  }
  return Status::OK();
}

std::string ParamReader::Canonical() const {
  std::string out = op_ + "{";
  bool first = true;
  for (const auto& [name, value] : used_) {
    if (!first) out += ",";
    first = false;
    out += name + "=" + value.ToString();
  }
  return out + "}";
}

}  // namespace stoker::transform
