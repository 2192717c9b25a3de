// Describe: what a Parquet dataset holds and what stoker makes of each of its columns, from the
// footers alone (no data pages are read).
//
// One call lists the sources exactly as a Loader would (same globs, hidden-file rules,
// storage_options and retries), reads every footer once, and resolves every column on its own
// against the options, so that one column stoker cannot read does not hide the others. The CLI
// (`stoker inspect`, `stoker bench`) only formats this description.
//
// Nothing in a description carries credentials: paths are shown as the engine shows them in its
// messages (no user info, no query string).
// Thread safety: Describe may be called from any thread; the result is a plain value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stoker/error.h"
#include "stoker/options.h"
#include "stoker/tensor.h"

namespace stoker {

/// One Parquet file of the dataset.
struct FileDescription {
  std::string path;  // as the engine names it in messages: scrubbed of credentials
  int64_t size = 0;  // bytes
  int64_t rows = 0;
  int num_row_groups = 0;  // including empty row groups
};

/// One row group, empty ones included (a Loader skips those).
struct RowGroupDescription {
  int file = 0;   // index into DatasetDescription::files
  int index = 0;  // row group index inside the file
  int64_t rows = 0;
  int64_t bytes = 0;             // uncompressed, all columns (the footer's total_byte_size)
  int64_t compressed_bytes = 0;  // sum of the column chunks' compressed sizes
};

/// One column of the schema (hive partition columns included) and what stoker makes of it.
struct ColumnDescription {
  std::string name;
  std::string arrow_type;
  bool partition = false;  // a hive `key=value` folder, constant per file
  // From the footers (empty / zero for partition columns), over every file's row groups.
  std::vector<std::string> physical_types;  // Parquet physical types of its leaves, sorted
  std::vector<std::string> encodings;       // sorted, distinct ("PLAIN", "RLE_DICTIONARY", ...)
  std::vector<std::string> compression;     // sorted, distinct ("ZSTD", "SNAPPY", ...)
  int64_t compressed_bytes = 0;
  int64_t uncompressed_bytes = 0;
  int64_t null_count = 0;
  /// False when a footer lacks the statistic, or for nested columns (whose leaf null counts
  /// include empty lists, not only null rows).
  bool null_count_known = true;

  /// Whether a Loader with these options accepts the column. When false, `error_kind` and
  /// `error` are what it raises (resolving this column alone).
  bool ok = false;
  std::string error_kind;  // ErrorKindName(), "" when ok
  std::string error;
  /// A variable-length list read without a `lists` mode: not ok, and kind/dtype/inner_shape
  /// describe it as lists='ragged' would deliver it.
  bool needs_list_mode = false;
  // What the Loader delivers (valid when ok or needs_list_mode).
  ColumnKind kind = ColumnKind::kDense;
  DType dtype = DType::kUInt8;
  std::vector<int64_t> inner_shape;
  std::string annotation;
  /// The feature group the column is stacked into ("" for a column of `columns`); `dtype` is
  /// then the group's.
  std::string feature_group;
  /// A categorical column (LoaderOptions::categories): its vocabulary's size (0 otherwise).
  int64_t vocabulary_size = 0;
};

struct DatasetDescription {
  std::vector<FileDescription> files;  // sorted by path, as a Loader orders them
  std::vector<RowGroupDescription> row_groups;
  /// The requested columns and features, in that order; every column of the schema when
  /// neither is given.
  std::vector<ColumnDescription> columns;
  int64_t rows = 0;
  /// The dataset's identity as a Loader computes it (paths, sizes, row counts).
  uint64_t fingerprint = 0;
};

/// Describes the dataset of `options.sources`. Uses `sources`, `storage_options`, the retry
/// settings, `num_io_threads`, `columns`, `features` and the per-column options; other options
/// are validated but do not change the description.
/// Errors: what Loader::Open raises for the same sources (not found, empty, corrupt footer,
/// schema mismatch, storage). Column problems are not errors: they are in each column's entry.
Result<DatasetDescription> Describe(const LoaderOptions& options);

}  // namespace stoker
