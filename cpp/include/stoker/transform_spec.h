// How a transform op is declared: a registry name and a small map of typed parameters, as Python
// passes them (`{"op": "resize", "size": 224}`). The ops themselves are in cpp/src/transform/.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace stoker {

/// One op parameter: None, bool, int, float, str or a list of these.
struct ParamValue {
  using List = std::vector<ParamValue>;
  std::variant<std::monostate, bool, int64_t, double, std::string, List> value;

  ParamValue() = default;
  ParamValue(bool v) : value(v) {}                       // NOLINT(google-explicit-constructor)
  ParamValue(int v) : value(static_cast<int64_t>(v)) {}  // NOLINT
  ParamValue(int64_t v) : value(v) {}                    // NOLINT
  ParamValue(double v) : value(v) {}                     // NOLINT
  ParamValue(const char* v) : value(std::string(v)) {}   // NOLINT
  ParamValue(std::string v) : value(std::move(v)) {}     // NOLINT
  ParamValue(List v) : value(std::move(v)) {}            // NOLINT

  /// Python-like type name for messages: "None", "bool", "int", "float", "str", "list".
  const char* TypeName() const;
  /// Canonical text: 1, 0.5, "text", [1, 2], true, null.
  std::string ToString() const;
};

using OpParams = std::map<std::string, ParamValue>;

/// One step of a column's transform chain.
struct OpSpec {
  std::string op;  // registry name, e.g. "decode_image"
  OpParams params;
};

}  // namespace stoker
