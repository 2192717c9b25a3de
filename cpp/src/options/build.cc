// BuildLoaderOptions: a Loader's keyword values checked and set, with errors naming the option.
// The messages are the ones users and tests know; keep their wording.
#include <algorithm>
#include <charconv>
#include <set>

#include "options/options_internal.h"
#include "stoker/option_values.h"

namespace stoker {
namespace {

using Kind = OptionValue::Kind;

const OptionValue& Get(const OptionValue& values, const std::string& key) {
  static const OptionValue kNone;
  const OptionValue* found = values.Find(key);
  return found ? *found : kNone;
}

bool Has(const OptionValue& values, const std::string& key) { return values.Find(key) != nullptr; }

// None or an int (a bool is refused).
Status CheckInt(const std::string& name, const OptionValue& value) {
  if (value.is_none() || value.is_int()) return Status::OK();
  return Invalid(name + " must be an integer, got " + value.Repr());
}

// An int option that must be given (None is refused with the same words).
Result<int64_t> Int(const std::string& name, const OptionValue& value) {
  if (!value.is_int()) return Invalid(name + " must be an integer, got " + value.Repr());
  return value.integer;
}

// Python's float(value) for what an option takes as a number.
Result<double> Number(const std::string& name, const OptionValue& value) {
  switch (value.kind) {
    case Kind::kBool:
      return value.boolean ? 1.0 : 0.0;
    case Kind::kInt:
      return static_cast<double>(value.integer);
    case Kind::kFloat:
      return value.number;
    case Kind::kString: {
      std::string text = value.text;
      text.erase(0, text.find_first_not_of(" \t\n\r\f\v"));
      text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
      double parsed = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed);
      if (error == std::errc() && end == text.data() + text.size() && !text.empty()) return parsed;
      break;
    }
    default:
      break;
  }
  return Invalid(name + " must be a number, got " + value.Repr());
}

// An option given for every column (a scalar) or per column (a dict).
struct PerColumn {
  const OptionValue* all = nullptr;  // null: given per column (or not at all)
  std::vector<std::pair<OptionValue, const OptionValue*>> by;
};

PerColumn Split(const OptionValue& value) {
  PerColumn out;
  if (value.kind == Kind::kDict) {
    for (size_t i = 0; i < value.keys.size(); ++i)
      out.by.emplace_back(value.keys[i], &value.items[i]);
  } else {
    out.all = &value;
  }
  return out;
}

const OptionValue* Lookup(const PerColumn& option, const OptionValue& name,
                          const OptionValue* fallback) {
  for (const auto& [key, value] : option.by) {
    if (key.Repr() == name.Repr()) return value;
  }
  return fallback;
}

// A struct's name stands for its leaves, and a leaf may be named below a parent.
bool Requested(const std::vector<std::string>& requested, const std::string& name) {
  for (const auto& r : requested) {
    if (r == name || r.rfind(name + ".", 0) == 0 || name.rfind(r + ".", 0) == 0) return true;
  }
  return false;
}

Status SetEnum(const std::string& option, const std::string& where, const OptionValue* value,
               const std::vector<std::string>& allowed, std::string* out) {
  if (!value || value->is_none()) return Status::OK();
  if (!value->is_string() ||
      std::find(allowed.begin(), allowed.end(), value->text) == allowed.end()) {
    std::string names;
    for (const auto& name : allowed) names += (names.empty() ? "'" : ", '") + name + "'";
    return Invalid(option + where + " must be one of " + names + ", got " +
                   (value ? value->Repr() : "None"));
  }
  *out = value->text;
  return Status::OK();
}

struct ColumnValues {
  const OptionValue* mode;
  const OptionValue* pad;
  const OptionValue* fill;
  bool mask;
  const OptionValue* error;
  const OptionValue* unit;
  const OptionValue* decimal;
};

Result<ColumnOptions> MakeColumn(const ColumnValues& v, const std::string& where) {
  ColumnOptions col;
  std::string unit;
  std::string decimal;
  STOKER_RETURN_NOT_OK(SetEnum("time_unit", where, v.unit, TimeUnitNames(), &unit));
  if (!unit.empty()) ParseTimeUnit(unit, &col.time_unit);
  STOKER_RETURN_NOT_OK(SetEnum("decimals", where, v.decimal, DecimalModeNames(), &decimal));
  if (!decimal.empty()) ParseDecimalMode(decimal, &col.decimals);
  const std::string error = v.error && v.error->is_string() ? v.error->text : "";
  if (error != "raise" && error != "zero") {
    return Invalid("on_error" + where + " must be 'raise' or 'zero', got " +
                   (v.error ? v.error->Repr() : "None"));
  }
  col.on_error_zero = error == "zero";
  if (v.mode && !v.mode->is_none()) {
    if (!ParseListMode(v.mode->is_string() ? v.mode->text : "", &col.list_mode) ||
        col.list_mode == ListMode::kUnset) {
      return Invalid("lists" + where + " must be 'padded' or 'ragged', got " + v.mode->Repr());
    }
  }
  STOKER_ASSIGN_OR_RAISE(col.pad_value, Number("pad_value" + where, *v.pad));
  if (v.fill && !v.fill->is_none()) {
    col.has_fill_null = true;
    STOKER_ASSIGN_OR_RAISE(col.fill_null, Number("fill_null" + where, *v.fill));
  }
  col.null_mask = v.mask;
  return col;
}

// lists, pad_value, fill_null, null_mask, on_error, time_unit, decimals -> the default
// ColumnOptions and one per column named.
Status SetColumnOptions(const OptionValue& values, ColumnsOptions* columns) {
  std::vector<std::string> requested = columns->columns;
  if (columns->feature_groups.empty()) {
    requested.insert(requested.end(), columns->features.begin(), columns->features.end());
  } else {
    for (const auto& group : columns->feature_groups) {
      requested.insert(requested.end(), group.columns.begin(), group.columns.end());
    }
  }
  static const OptionValue kZero = OptionValue::Int(0);
  static const OptionValue kRaise = OptionValue::String("raise");
  const PerColumn lists = Split(Get(values, "lists"));
  PerColumn pad = Split(Has(values, "pad_value") ? Get(values, "pad_value") : kZero);
  if (pad.all && pad.all->is_none()) pad.all = &kZero;
  if (!pad.all) pad.all = &kZero;
  const PerColumn fill = Split(Get(values, "fill_null"));
  PerColumn error = Split(Has(values, "on_error") ? Get(values, "on_error") : kRaise);
  if (!error.all || error.all->is_none()) error.all = &kRaise;
  const PerColumn unit = Split(Get(values, "time_unit"));
  const PerColumn decimal = Split(Get(values, "decimals"));
  // null_mask: True/False for every column, or a list of names.
  const OptionValue& null_mask = Get(values, "null_mask");
  static const OptionValue kTrue = OptionValue::Bool(true);
  bool mask_all = false;
  PerColumn mask;
  if (null_mask.kind == Kind::kBool) {
    mask_all = null_mask.boolean;
  } else if (null_mask.is_string()) {
    return Invalid("null_mask takes True or a list of column names, not a string");
  } else if (null_mask.kind == Kind::kList || null_mask.kind == Kind::kTuple) {
    for (const auto& name : null_mask.items) mask.by.emplace_back(name, &kTrue);
  } else if (null_mask.kind == Kind::kDict) {
    for (const auto& name : null_mask.keys) mask.by.emplace_back(name, &kTrue);
  } else if (!null_mask.is_none() || Has(values, "null_mask")) {
    mask_all = null_mask.Truthy();
  }
  const std::pair<const char*, const PerColumn*> named[] = {
      {"lists", &lists},    {"pad_value", &pad},  {"fill_null", &fill},  {"null_mask", &mask},
      {"on_error", &error}, {"time_unit", &unit}, {"decimals", &decimal}};
  std::vector<OptionValue> names;  // every column named, in first-seen order
  std::set<std::string> seen;
  for (const auto& [option, by] : named) {
    for (const auto& [name, unused] : by->by) {
      if (!requested.empty() && !Requested(requested, PyStr(name))) {
        return Invalid(std::string(option) + " names column " + name.Repr() +
                       ", which is not in columns or features");
      }
      if (seen.insert(name.Repr()).second) names.push_back(name);
    }
  }
  const ColumnValues defaults{lists.all, pad.all,  fill.all,   mask_all,
                              error.all, unit.all, decimal.all};
  STOKER_ASSIGN_OR_RAISE(columns->default_column_options, MakeColumn(defaults, ""));
  columns->column_options.clear();
  for (const auto& name : names) {
    const ColumnValues own{
        Lookup(lists, name, lists.all),    Lookup(pad, name, pad.all),
        Lookup(fill, name, fill.all),      Lookup(mask, name, nullptr) != nullptr || mask_all,
        Lookup(error, name, error.all),    Lookup(unit, name, unit.all),
        Lookup(decimal, name, decimal.all)};
    STOKER_ASSIGN_OR_RAISE(columns->column_options[PyStr(name)],
                           MakeColumn(own, "[" + name.Repr() + "]"));
  }
  return Status::OK();
}

// storage_options configure remote filesystems: given (non-empty) with nothing but local paths,
// they would be ignored. An empty dict is allowed (code that always passes one).
Status SetStorageOptions(const OptionValue& given, const std::vector<std::string>& sources,
                         StorageOptions* storage) {
  if (given.is_none()) return Status::OK();
  if (given.kind != Kind::kDict) return Invalid("storage_options must be a dict of strings");
  if (!given.keys.empty()) {
    std::vector<std::string> local;
    for (const auto& source : sources) {
      if (source.find("://") == std::string::npos || source.rfind("file://", 0) == 0) {
        local.push_back(source);
      }
    }
    if (!sources.empty() && local.size() == sources.size()) {
      std::vector<std::string> keys;
      for (const auto& key : given.keys) keys.push_back(PyStr(key));
      std::sort(keys.begin(), keys.end());
      std::string listed;
      for (const auto& key : keys) listed += (listed.empty() ? "" : ", ") + key;
      return Invalid("storage_options (" + listed +
                     ") configure remote filesystems (s3://, gs://, hdfs://, ...), but source " +
                     OptionValue::String(local[0]).Repr() +
                     " is a local path, where they would be ignored: drop storage_options, or "
                     "give the remote URI");
    }
  }
  storage->storage_options.clear();
  for (size_t i = 0; i < given.keys.size(); ++i) {
    const OptionValue& key = given.keys[i];
    const OptionValue& value = given.items[i];
    // Bools as the engine's true/false; anything else as Python's str().
    storage->storage_options[PyStr(key)] =
        value.kind == Kind::kBool ? (value.boolean ? "true" : "false") : PyStr(value);
  }
  return Status::OK();
}

}  // namespace

const std::vector<std::string>& TimeUnitNames() {
  static const std::vector<std::string> kNames = {"D", "h", "m", "s", "ms", "us", "ns"};
  return kNames;
}

const std::vector<std::string>& DecimalModeNames() {
  static const std::vector<std::string> kNames = {"float64", "float32", "scaled_int64"};
  return kNames;
}

Result<LoaderOptions> BuildLoaderOptions(const OptionValue& values, LoaderOptions base,
                                         bool describe) {
  LoaderOptions out = std::move(base);
  if (values.kind != Kind::kDict) return Invalid("options must be given as a dict");
  const std::vector<std::string> checked_ints =
      describe
          ? std::vector<std::string>{"num_io_threads"}
          : std::vector<std::string>{"batch_size", "num_threads", "num_io_threads", "max_retries"};
  for (const auto& name : checked_ints) STOKER_RETURN_NOT_OK(CheckInt(name, Get(values, name)));
  if (Has(values, "allow_lossy_cast")) {
    out.columns.allow_lossy_cast = Get(values, "allow_lossy_cast").Truthy();
  }
  if (!describe) {
    OrderOptions& order = out.order;
    ExecutionOptions& execution = out.execution;
    if (Has(values, "batch_size")) {
      STOKER_ASSIGN_OR_RAISE(order.batch_size, Int("batch_size", Get(values, "batch_size")));
    }
    if (Has(values, "shuffle")) order.shuffle = Get(values, "shuffle").Truthy();
    if (Has(values, "shuffle_window")) {
      // An int is a row count; anything else a byte size.
      const OptionValue& window = Get(values, "shuffle_window");
      if (window.is_int()) {
        order.shuffle_window_rows = window.integer;
      } else {
        STOKER_ASSIGN_OR_RAISE(order.shuffle_window_bytes, ParseSize(window, "shuffle_window"));
      }
    }
    if (Has(values, "drop_last")) order.drop_last = Get(values, "drop_last").Truthy();
    if (Has(values, "padding_mask")) order.padding_mask = Get(values, "padding_mask").Truthy();
    if (Has(values, "num_threads")) {
      const OptionValue& threads = Get(values, "num_threads");
      execution.num_threads = threads.is_int() ? static_cast<int>(threads.integer) : 0;
    }
    if (Has(values, "prefetch_bytes")) {
      STOKER_ASSIGN_OR_RAISE(execution.prefetch_bytes,
                             ParseSize(Get(values, "prefetch_bytes"), "prefetch_bytes"));
    }
    if (Has(values, "task_bytes")) {
      STOKER_ASSIGN_OR_RAISE(execution.task_bytes,
                             ParseSize(Get(values, "task_bytes"), "task_bytes"));
    }
  }
  if (Has(values, "num_io_threads")) {
    const OptionValue& threads = Get(values, "num_io_threads");
    out.execution.num_io_threads = threads.is_int() ? static_cast<int>(threads.integer) : 0;
  }
  STOKER_RETURN_NOT_OK(
      SetStorageOptions(Get(values, "storage_options"), out.source.sources, &out.storage));
  if (Has(values, "max_retries")) {
    STOKER_ASSIGN_OR_RAISE(const int64_t retries, Int("max_retries", Get(values, "max_retries")));
    out.storage.max_retries = static_cast<int>(retries);
  }
  if (Has(values, "retry_base_delay")) {
    STOKER_ASSIGN_OR_RAISE(out.storage.retry_base_delay_s,
                           Number("retry_base_delay", Get(values, "retry_base_delay")));
  }
  if (describe) {
    // Sizes are checked as a Loader checks them, though they do not change the description.
    for (const char* name :
         {"prefetch_bytes", "task_bytes", "cache_bytes", "cache_min_free_bytes"}) {
      if (Has(values, name)) STOKER_RETURN_NOT_OK(ParseSize(Get(values, name), name).status());
    }
  } else {
    if (Has(values, "cache_bytes")) {
      STOKER_ASSIGN_OR_RAISE(out.cache.bytes, ParseSize(Get(values, "cache_bytes"), "cache_bytes"));
    }
    if (Has(values, "cache_min_free_bytes")) {
      STOKER_ASSIGN_OR_RAISE(
          out.cache.min_free_bytes,
          ParseSize(Get(values, "cache_min_free_bytes"), "cache_min_free_bytes"));
    }
  }
  STOKER_RETURN_NOT_OK(SetColumnOptions(values, &out.columns));
  return out;
}

}  // namespace stoker
