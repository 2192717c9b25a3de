// Op parameters as Python declares them: a small map of typed values (None, bool, int, float,
// string, list), read and checked by each op's factory through ParamReader.
//
// ParamReader records every parameter it reads, defaults included, in canonical text; that text is
// the op's fingerprint, so a changed default changes the cache key. Thread safety: plain values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "stoker/error.h"
#include "stoker/transform_spec.h"

namespace stoker::transform {

using ParamValue = stoker::ParamValue;
using Params = stoker::OpParams;

/// Reads an op's parameters with defaults and type checks. Every getter returns an error naming
/// the op and the parameter; `Finish` fails on a parameter nobody read.
///
/// Usage: (1) construct with the op name and the params; (2) read each parameter once;
/// (3) `Finish()`; (4) `Canonical()` for the fingerprint.
class ParamReader {
 public:
  ParamReader(std::string op, const Params& params) : op_(std::move(op)), params_(params) {}

  const std::string& op() const { return op_; }
  bool Has(const std::string& name) const;

  Result<bool> Bool(const std::string& name, std::optional<bool> fallback);
  Result<int64_t> Int(const std::string& name, std::optional<int64_t> fallback);
  Result<double> Double(const std::string& name, std::optional<double> fallback);
  Result<std::string> String(const std::string& name, std::optional<std::string> fallback);
  /// A list of ints; a single int is accepted when `scalar_ok` (returns a list of one).
  Result<std::vector<int64_t>> IntList(const std::string& name,
                                       std::optional<std::vector<int64_t>> fallback,
                                       bool scalar_ok = false);
  Result<std::vector<double>> DoubleList(const std::string& name,
                                         std::optional<std::vector<double>> fallback,
                                         bool scalar_ok = false);
  Result<std::vector<std::string>> StringList(const std::string& name,
                                              std::optional<std::vector<std::string>> fallback);
  /// The raw value (for parameters whose type depends on another, like fill_null's value).
  Result<ParamValue> Raw(const std::string& name, std::optional<ParamValue> fallback);

  /// A parameter error: kInvalidOption, "op 'resize': parameter 'size' ...".
  Status Error(const std::string& name, const std::string& what) const;
  /// Fails if a parameter was given that no getter read.
  Status Finish() const;
  /// "name{key=value,...}" over every parameter read, sorted by key.
  std::string Canonical() const;

 private:
  const ParamValue* Find(const std::string& name);

  std::string op_;
  const Params& params_;
  std::map<std::string, ParamValue> used_;
};

}  // namespace stoker::transform
