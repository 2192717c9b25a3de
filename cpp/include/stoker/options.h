// LoaderOptions: everything that decides what a Loader yields.
//
// Options that change the delivered batches are part of Fingerprint(); options that only change
// speed or memory (num_threads, prefetch_bytes) are not, so a run can resume with other values.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoker/error.h"
#include "stoker/tensor.h"
#include "stoker/transform_spec.h"
#include "stoker/user_transform.h"

namespace stoker {

/// How a variable-length list column becomes a tensor.
enum class ListMode {
  kUnset,   // an error: the user must choose
  kPadded,  // [B, max_len] padded with pad_value, plus `<name>_lengths`
  kRagged,  // flat values plus int64 offsets [B + 1]
};

/// How timestamp, date, time and duration columns are delivered (`time_unit`).
enum class TimeUnit {
  kUnset,  // as stored: int64 counts of the column's own unit (no conversion)
  kDay,
  kHour,
  kMinute,
  kSecond,
  kMilli,
  kMicro,
  kNano,
};

/// How decimal columns are delivered (`decimals`).
enum class DecimalMode {
  kUnset,        // an error: the user must choose
  kFloat64,      // exact (round-trips) up to precision 15, else needs allow_lossy_cast
  kFloat32,      // the float64 value rounded to float32: exact up to precision 6
  kScaledInt64,  // the unscaled integer (value * 10**scale); precision must be <= 18
};

/// Per-column choices. Every field defaults to "do nothing lossy".
struct ColumnOptions {
  ListMode list_mode = ListMode::kUnset;
  double pad_value = 0;
  /// When set, nulls are replaced by this value (cast to the column dtype).
  bool has_fill_null = false;
  double fill_null = 0;
  /// When true, a bool validity mask `<name>_mask` is delivered alongside the values and nulls are
  /// zero-filled.
  bool null_mask = false;
  /// For a column with transforms: a row its chain cannot transform (a corrupt image or array, a
  /// value an op refuses, a null) becomes a zero tensor of the chain's output shape and
  /// `<name>_valid` (bool [B]) is false for it, instead of failing the epoch.
  bool on_error_zero = false;
  /// Temporal columns become float64 counts of this unit since the Unix epoch (time-of-day
  /// columns: since midnight; durations: their length). kUnset: int64 as stored.
  TimeUnit time_unit = TimeUnit::kUnset;
  DecimalMode decimals = DecimalMode::kUnset;
};

/// "D", "h", "m", "s", "ms", "us", "ns" (empty for kUnset).
const char* TimeUnitName(TimeUnit unit);
bool ParseTimeUnit(const std::string& name, TimeUnit* out);
/// "float64", "float32", "scaled_int64" (empty for kUnset).
const char* DecimalModeName(DecimalMode mode);
bool ParseDecimalMode(const std::string& name, DecimalMode* out);
/// One stacked feature group: scalar columns cast to `dtype` and stacked into a [B, F] tensor
/// named `name`.
struct FeatureGroup {
  std::string name;
  std::vector<std::string> columns;
  DType dtype = DType::kFloat32;
  /// Adds `<name>_mask`, bool [B, F], true where the value is present; nulls become fill_null
  /// (per column) or zero.
  bool null_mask = false;
};

/// Where the data is (Catalog::Open).
struct SourceOptions {
  /// Files, folders (recursive), globs or URIs (file://, s3://, ...). Local paths are absolute.
  std::vector<std::string> sources;
};

/// How remote stores are reached (io/: OpenFileSystem). Never part of the fingerprint.
struct StorageOptions {
  /// Filesystem settings for remote sources, with Arrow's names (endpoint_override, region,
  /// scheme, access_key, secret_key, session_token, anonymous, connect_timeout, request_timeout).
  /// Values never appear in errors, logs, repr or stats.
  std::map<std::string, std::string> storage_options;
  /// Transient storage errors (5xx, SlowDown, resets, timeouts) are retried this many times with
  /// exponential backoff and jitter starting at retry_base_delay_s.
  int max_retries = 5;
  double retry_base_delay_s = 0.1;
};

/// What each column becomes (resolve/: ResolveColumns, ColumnLookup, the feature groups).
struct ColumnsOptions {
  /// Columns delivered one tensor each. Empty with empty `features`: every column.
  std::vector<std::string> columns;
  /// Scalar columns stacked into one dense [B, F] tensor named `features_name`.
  std::vector<std::string> features;
  std::string features_name = "features";
  DType features_dtype = DType::kFloat32;
  /// Several stacked groups, each with its own dtype and mask (`features` must then be empty).
  /// Empty: `features` is the one group, named `features_name`, of `features_dtype`, masked when
  /// `default_column_options.null_mask` is set. Group names must not collide with columns.
  std::vector<FeatureGroup> feature_groups;
  /// Categorical string columns (string, large_string, dictionary<string>, or hive partition
  /// columns) delivered as int64 ids: 0 for a value outside the vocabulary, vocabulary[i] as
  /// i + 1. An empty vocabulary means "auto": the sorted distinct values of the dataset, built at
  /// open. Nulls stay nulls (the column's fill_null / null_mask rules apply).
  std::map<std::string, std::vector<std::string>> categories;
  /// Allows casts that can lose information (int64 -> float32, float64 -> float32, ...).
  bool allow_lossy_cast = false;
  std::map<std::string, ColumnOptions> column_options;
  /// Per-column op chains run on the workers (cpp/src/transform/). Their deterministic prefix runs
  /// before the ready-tensor cache (its output is what the cache stores); the rest runs per batch,
  /// each random op keyed by (seed, epoch, global row id, op index). The chain's output must be a
  /// tensor of fixed shape: the column becomes a dense [B, ...] tensor.
  std::map<std::string, std::vector<OpSpec>> transforms;
  /// Columns whose transforms give several outputs: source column -> (output name, ops), in
  /// order. The outputs take the source's place in `columns`; each output's chain reads the
  /// source, and a deterministic prefix the chains share runs once per row.
  std::map<std::string, std::vector<std::pair<std::string, std::vector<OpSpec>>>> transform_outputs;
  ColumnOptions default_column_options;
  /// User code run on each decoded row group before the cache (stoker/user_transform.h); null:
  /// none. Its output columns replace the file's columns for every option above.
  std::shared_ptr<UserTransform> user_transform;
  /// The file columns the user transform receives; empty: every file column.
  std::vector<std::string> transform_columns;
};

/// OrderOptions::shuffle_window_rows when none is given: resolved at open to
/// kAutoShuffleWindowRows, or to the rows that kAutoShuffleWindowBytes holds decoded where fewer.
inline constexpr int64_t kAutoShuffleWindow = -1;
inline constexpr int64_t kAutoShuffleWindowRows = 65536;
inline constexpr int64_t kAutoShuffleWindowBytes = int64_t{256} << 20;

/// Which rows go into which batch, in which order, on which rank (plan/, the padding writer).
struct OrderOptions {
  int64_t batch_size = 1024;
  bool shuffle = true;
  uint64_t seed = 0;
  /// Rows whose order is permuted together. 0 or 1: only the row-group order is shuffled.
  /// kAutoShuffleWindow (the default): kAutoShuffleWindowRows, or fewer where that many rows
  /// would hold more than kAutoShuffleWindowBytes decoded (large rows, such as decoded images).
  int64_t shuffle_window_rows = kAutoShuffleWindow;
  /// When > 0, overrides shuffle_window_rows: the window holds about this many uncompressed
  /// bytes of the selected columns (converted to rows from the footers' statistics).
  int64_t shuffle_window_bytes = 0;
  bool drop_last = true;
  /// Adds a bool tensor `padding_name` marking rows repeated to even out ranks (drop_last=false).
  bool padding_mask = false;
  std::string padding_name = "__padding__";
  int rank = 0;
  int world_size = 1;
};

/// Threads and memory (exec/). Never part of the fingerprint: a run can resume with others.
struct ExecutionOptions {
  /// Target uncompressed bytes of one decode task (row groups are split by column groups).
  int64_t task_bytes = 16 << 20;
  int num_threads = 0;     // CPU workers; 0: the number of cores
  int num_io_threads = 0;  // footers read at once, and the remote range-read pool; 0: default
  int64_t prefetch_bytes = 256 << 20;
  /// Allocate batch slabs page-locked through the CUDA runtime in the process (for asynchronous
  /// copies to a GPU). Needs a CUDA build of torch loaded; does not change the batches.
  bool pin_memory = false;
};

/// The node-local cache (cache/: DiskCache). Never part of the fingerprint.
struct CacheOptions {
  /// Cache folder shared by every process on the node; empty: no cache.
  std::string dir;
  int64_t bytes = int64_t{50} << 30;
  int64_t min_free_bytes = int64_t{1} << 30;
};

/// Every option of a Loader, one struct per layer that reads them: each layer is handed only its
/// own (OpenFileSystem the storage, ResolveColumns the columns, the planner the order, ...).
struct LoaderOptions {
  SourceOptions source;
  StorageOptions storage;
  ColumnsOptions columns;
  OrderOptions order;
  ExecutionOptions execution;
  CacheOptions cache;

  /// Checks ranges and consistency; errors name the option.
  Status Validate() const;
  /// A stable hash of every option that changes the delivered batches, except the seed (a
  /// resume state carries the seed itself).
  /// `with_shard=false` leaves out rank and world_size: what ranks of one job share, and what an
  /// elastic resume on another world size checks.
  uint64_t Fingerprint(bool with_shard = true) const;
};

}  // namespace stoker
