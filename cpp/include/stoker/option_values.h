// Options as a user gives them: a tree of plain values (what Python's keyword arguments hold),
// turned into LoaderOptions by one function that checks them with errors naming the option.
//
// The Python binding converts keyword values into OptionValue and does nothing else; every
// default, parse (sizes, enum names), check and message is here, in cpp/src/options/. The resume
// summary (one number per option, so that a state saved with other options names what differs)
// is here too, beside the fingerprint it explains. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "stoker/error.h"
#include "stoker/options.h"

namespace stoker {

/// One value of an option: None, bool, int, float, str, list, tuple, dict, or another object
/// (kept as its Python repr, str, type name and truth value).
struct OptionValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kOther };
  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  /// kString: the text. kOther: Python's repr of the object.
  std::string text;
  /// kOther: str() of the object, its type's name and its truth value.
  std::string str;
  std::string type_name;
  bool truthy = false;
  /// kList, kTuple: the items. kDict: the values, in order, and their keys in `keys`.
  std::vector<OptionValue> items;
  std::vector<OptionValue> keys;

  static OptionValue None() { return OptionValue(); }
  static OptionValue Bool(bool value);
  static OptionValue Int(int64_t value);
  static OptionValue Float(double value);
  static OptionValue String(std::string value);
  static OptionValue List(std::vector<OptionValue> items, bool tuple = false);
  static OptionValue Dict(const std::vector<std::pair<OptionValue, OptionValue>>& entries);

  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  /// An int (a bool is not).
  bool is_int() const { return kind == Kind::kInt; }
  /// Python's bool(value).
  bool Truthy() const;
  /// Python's repr(value) ('text', 1.0, [1, 2], (1,), {'a': None}, True).
  std::string Repr() const;
  /// The value of str key `key` of a dict, or null.
  const OptionValue* Find(const std::string& key) const;
};

/// "padded" or "ragged" (the `lists` option).
bool ParseListMode(const std::string& name, ListMode* out);
/// The names `time_unit` and `decimals` take, in the order messages list them.
const std::vector<std::string>& TimeUnitNames();
const std::vector<std::string>& DecimalModeNames();

/// "1048576", 1048576, "64MiB", "1.5GB" -> bytes (units b, kb, mb, gb, tb in powers of 1000,
/// kib, mib, gib, tib in powers of 1024, case-insensitive). Errors name `option`.
Result<int64_t> ParseSize(const OptionValue& value, const std::string& option);

/// The keyword values of a Loader (or of `describe`, with `describe` true) checked and set on a
/// copy of `base`: source (made absolute as Python's os.path.abspath(expanduser()) does),
/// features, features_name, features_dtype (names), categories ("auto", lists, vocabulary
/// files), batch_size, shuffle, shuffle_window, drop_last, padding_mask, num_threads,
/// num_io_threads, prefetch_bytes, task_bytes, storage_options (refused with only local
/// sources), max_retries, retry_base_delay, cache_bytes, cache_min_free_bytes, allow_lossy_cast
/// and the per-column options (lists, pad_value, fill_null, null_mask, on_error, time_unit,
/// decimals), whose column names must be among `base`'s columns and features when those are
/// given; the shape of transforms (a dict of op chains, or of {output: chain} dicts; the ops
/// themselves are checked at open) and transform_columns (given only with transform=). `values`
/// is a dict keyed by the keyword names; a missing key keeps `base`'s value.
/// Errors are kInvalidOption and name the option.
Result<LoaderOptions> BuildLoaderOptions(const OptionValue& values, LoaderOptions base,
                                         bool describe);

/// One option of a Loader: its keyword name, where it lives ("source", "storage", "columns",
/// "order", "execution", "cache", or "python" for what only the Python front reads) and whether
/// it is part of the options fingerprint (directly, or through the transform's fingerprint).
struct OptionInfo {
  std::string name;
  std::string part;
  bool fingerprinted;
};

/// Every keyword option of a Loader, in the user guide's order.
const std::vector<OptionInfo>& OptionTable();

/// What the options fingerprint covers, one number per option (CRC-32s of the larger ones), as
/// a resume state keeps it: `dataset_fingerprint` and `shuffle_window_rows` are the open
/// loader's; `transforms` the transforms as given (with a Petastorm store's codec ops);
/// `transform_fingerprint` and `has_transform` the user transform's. The numbers are those
/// stoker has always saved, so a state saved before still names what differs.
std::vector<std::pair<std::string, uint64_t>> OptionSummary(
    const LoaderOptions& options, uint64_t dataset_fingerprint, int64_t shuffle_window_rows,
    const OptionValue& transforms, const std::string& transform_fingerprint, bool has_transform);

/// What differs between a saved state's summary (`saved`: a dict of ints, or None when the state
/// has none) and this loader's `mine`, for the error of a fingerprint mismatch.
std::string OptionDifferences(const OptionValue& saved,
                              const std::vector<std::pair<std::string, uint64_t>>& mine);

}  // namespace stoker
