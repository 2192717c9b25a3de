#include "stoker/options.h"

#include <algorithm>

#include "options/options_internal.h"
#include "stoker/redact.h"
#include "util/hash.h"

namespace stoker {
namespace {

void HashColumnOptions(const ColumnOptions& options, Fnv1a* hash) {
  hash->AddInt(static_cast<uint64_t>(options.list_mode));
  hash->AddDouble(options.pad_value);
  hash->AddInt(options.has_fill_null);
  hash->AddDouble(options.has_fill_null ? options.fill_null : 0);
  hash->AddInt(options.null_mask);
  if (options.on_error_zero) hash->Add("on_error=zero");  // older fingerprints stay as they were
  if (options.time_unit != TimeUnit::kUnset) {
    hash->Add(std::string("time_unit=") + TimeUnitName(options.time_unit));
  }
  if (options.decimals != DecimalMode::kUnset) {
    hash->Add(std::string("decimals=") + DecimalModeName(options.decimals));
  }
}

constexpr std::pair<TimeUnit, const char*> kTimeUnits[] = {
    {TimeUnit::kDay, "D"},    {TimeUnit::kHour, "h"},   {TimeUnit::kMinute, "m"},
    {TimeUnit::kSecond, "s"}, {TimeUnit::kMilli, "ms"}, {TimeUnit::kMicro, "us"},
    {TimeUnit::kNano, "ns"},
};
constexpr std::pair<DecimalMode, const char*> kDecimalModes[] = {
    {DecimalMode::kFloat64, "float64"},
    {DecimalMode::kFloat32, "float32"},
    {DecimalMode::kScaledInt64, "scaled_int64"},
};

}  // namespace

bool ParseListMode(const std::string& name, ListMode* out) {
  if (name == "padded") {
    *out = ListMode::kPadded;
  } else if (name == "ragged") {
    *out = ListMode::kRagged;
  } else {
    return false;
  }
  return true;
}

const char* TimeUnitName(TimeUnit unit) {
  for (const auto& [value, name] : kTimeUnits) {
    if (value == unit) return name;
  }
  return "";
}

bool ParseTimeUnit(const std::string& name, TimeUnit* out) {
  for (const auto& [value, text] : kTimeUnits) {
    if (name == text) {
      *out = value;
      return true;
    }
  }
  return false;
}

const char* DecimalModeName(DecimalMode mode) {
  for (const auto& [value, name] : kDecimalModes) {
    if (value == mode) return name;
  }
  return "";
}

bool ParseDecimalMode(const std::string& name, DecimalMode* out) {
  for (const auto& [value, text] : kDecimalModes) {
    if (name == text) {
      *out = value;
      return true;
    }
  }
  return false;
}

Status LoaderOptions::Validate() const {
  if (order.batch_size <= 0) {
    return Invalid("batch_size must be positive, got " + std::to_string(order.batch_size));
  }
  if (order.world_size < 1) {
    return Invalid("world_size must be at least 1, got " + std::to_string(order.world_size));
  }
  if (order.rank < 0 || order.rank >= order.world_size) {
    return Invalid("rank must be in [0, world_size=" + std::to_string(order.world_size) +
                   "), got " + std::to_string(order.rank));
  }
  if ((order.shuffle_window_rows < 0 && order.shuffle_window_rows != kAutoShuffleWindow) ||
      order.shuffle_window_rows > (int64_t{1} << 31)) {
    return Invalid("shuffle_window must be between 0 and 2**31 rows, got " +
                   std::to_string(order.shuffle_window_rows));
  }
  if (order.shuffle_window_bytes < 0) {
    return Invalid("shuffle_window must not be negative, got " +
                   std::to_string(order.shuffle_window_bytes) + " bytes");
  }
  if (execution.num_threads < 0) {
    return Invalid("num_threads must be positive (or None), got " +
                   std::to_string(execution.num_threads));
  }
  if (execution.num_io_threads < 0) {
    return Invalid("num_io_threads must be positive (or None), got " +
                   std::to_string(execution.num_io_threads));
  }
  if (execution.prefetch_bytes <= 0) {
    return Invalid("prefetch_bytes must be positive, got " +
                   std::to_string(execution.prefetch_bytes));
  }
  if (execution.task_bytes <= 0) {
    return Invalid("task_bytes must be positive, got " + std::to_string(execution.task_bytes));
  }
  if (storage.max_retries < 0) {
    return Invalid("max_retries must be >= 0, got " + std::to_string(storage.max_retries));
  }
  if (storage.retry_base_delay_s < 0) return Invalid("retry_base_delay must be >= 0");
  if (!cache.dir.empty() && cache.bytes <= 0) {
    return Invalid("cache_bytes must be positive, got " + std::to_string(cache.bytes));
  }
  if (cache.min_free_bytes < 0) {
    return Invalid("cache_min_free_bytes must be >= 0, got " +
                   std::to_string(cache.min_free_bytes));
  }
  if (columns.features_dtype == DType::kBool || columns.features_dtype == DType::kFloat16) {
    return Invalid(std::string("features_dtype ") + DTypeName(columns.features_dtype) +
                   " is not supported; use a float32/float64 or integer dtype");
  }
  if (columns.features_name.empty()) return Invalid("features_name must not be empty");
  if (!columns.feature_groups.empty() && !columns.features.empty()) {
    return Invalid("features and feature_groups are both set; give the groups only");
  }
  for (size_t g = 0; g < columns.feature_groups.size(); ++g) {
    const FeatureGroup& group = columns.feature_groups[g];
    if (group.name.empty()) return Invalid("a feature group's name must not be empty");
    if (group.columns.empty()) {
      return Invalid("feature group '" + group.name + "' names no columns");
    }
    if (group.dtype == DType::kBool || group.dtype == DType::kFloat16) {
      return Invalid("features_dtype['" + group.name + "'] " + DTypeName(group.dtype) +
                     " is not supported; use a float32/float64 or integer dtype");
    }
    for (size_t h = 0; h < g; ++h) {
      if (columns.feature_groups[h].name == group.name) {
        return Invalid("feature group '" + group.name + "' is given twice");
      }
    }
  }
  for (const auto& [column, vocabulary] : columns.categories) {
    std::vector<std::string> sorted = vocabulary;
    std::sort(sorted.begin(), sorted.end());
    auto duplicate = std::adjacent_find(sorted.begin(), sorted.end());
    if (duplicate != sorted.end()) {
      return Invalid("categories['" + column + "'] lists '" + *duplicate +
                     "' twice; each value gets one id");
    }
  }
  if (!columns.transform_columns.empty() && !columns.user_transform) {
    return Invalid("transform_columns needs transform=");
  }
  return Status::OK();
}

// Storage and cache settings are left out on purpose: they never change the batches.
uint64_t LoaderOptions::Fingerprint(bool with_shard) const {
  Fnv1a hash;
  // v2: the first shuffle windows grow from one batch (a resume state of v1 orders rows
  // differently, so it must not match).
  hash.Add("stoker-options-v2");
  // Without user info or query string: a password or an endpoint given in a URI is not part of
  // what the batches depend on (the catalog fingerprint names the files themselves).
  // Sorted: the files are read in sorted order whatever order the sources were given in.
  std::vector<std::string> redacted;
  for (const auto& uri : source.sources) redacted.push_back(RedactUri(uri));
  std::sort(redacted.begin(), redacted.end());
  for (const auto& source : redacted) hash.Add(source);
  hash.AddInt(columns.columns.size());
  for (const auto& column : columns.columns) hash.Add(column);
  hash.AddInt(columns.features.size());
  for (const auto& feature : columns.features) hash.Add(feature);
  hash.Add(columns.features_name);
  hash.AddInt(static_cast<uint64_t>(columns.features_dtype));
  hash.AddInt(columns.allow_lossy_cast);
  // Only when set, so fingerprints of loaders without them are unchanged.
  for (const auto& group : columns.feature_groups) {
    hash.Add("feature-group:" + group.name);
    hash.AddInt(group.columns.size());
    for (const auto& column : group.columns) hash.Add(column);
    hash.AddInt(static_cast<uint64_t>(group.dtype));
    hash.AddInt(group.null_mask);
  }
  for (const auto& [column, vocabulary] : columns.categories) {
    hash.Add("categories:" + column);
    hash.AddInt(vocabulary.size());
    for (const auto& value : vocabulary) {
      hash.AddInt(value.size());
      hash.Add(value);
    }
  }
  for (const auto& [name, options] : columns.column_options) {
    hash.Add(name);
    HashColumnOptions(options, &hash);
  }
  HashColumnOptions(columns.default_column_options, &hash);
  for (const auto& [column, chain] : columns.transforms) {
    hash.Add(column);
    for (const auto& op : chain) {
      hash.Add(op.op);
      for (const auto& [name, value] : op.params) {
        hash.Add(name);
        hash.Add(value.ToString());
      }
    }
  }
  for (const auto& [column, outputs] : columns.transform_outputs) {
    hash.Add("outputs:" + column);
    for (const auto& [output, chain] : outputs) {
      hash.Add(output);
      for (const auto& op : chain) {
        hash.Add(op.op);
        for (const auto& [name, value] : op.params) {
          hash.Add(name);
          hash.Add(value.ToString());
        }
      }
    }
  }
  // Only when set, so fingerprints of loaders without user code are unchanged.
  if (columns.user_transform) {
    hash.Add("user-transform");
    hash.Add(columns.user_transform->Fingerprint());
    hash.AddInt(columns.transform_columns.size());
    for (const auto& column : columns.transform_columns) hash.Add(column);
  }
  hash.AddInt(order.batch_size);
  hash.AddInt(order.shuffle);
  // An open loader hashes its default window as resolved (Loader::Open); unresolved (beside a
  // byte size), it hashes as the 65,536 rows the default was before its byte bound (2026-12-05),
  // so resume states saved then still match.
  hash.AddInt(order.shuffle_window_rows == kAutoShuffleWindow ? kAutoShuffleWindowRows
                                                              : order.shuffle_window_rows);
  hash.AddInt(order.shuffle_window_bytes);
  hash.AddInt(order.drop_last);
  // Only with drop_last and shuffle, whose plans changed (the dropped rows are a randomly placed
  // stretch, not the tail): a resume state saved before must not match. Others are unchanged.
  if (order.drop_last && order.shuffle) hash.Add("drop-at-random-start");
  // Only with shuffled windows, whose plans changed (the first batch's rows are a window of their
  // own, the epoch's head): a resume state saved before must not match. Others are unchanged.
  if (order.shuffle &&
      (order.shuffle_window_rows > 1 || order.shuffle_window_rows == kAutoShuffleWindow ||
       order.shuffle_window_bytes > 0)) {
    hash.Add("head-window");
  }
  hash.AddInt(order.padding_mask);
  hash.Add(order.padding_name);
  if (with_shard) {
    hash.AddInt(order.rank);
    hash.AddInt(order.world_size);
  }
  return hash.digest();
}

}  // namespace stoker
