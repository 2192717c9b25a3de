// Catalog: resolves sources to Parquet files, reads their footers once, and indexes row groups.
//
// Sources go through Arrow's filesystem layer, so local paths and object-store URIs share one
// code path. Footers are read in parallel. Every file must have the same columns with the same
// types; hive-style `key=value` folders become extra (constant per file) columns.
// Thread safety: immutable after Open(); share it freely.
#pragma once

#include <arrow/filesystem/filesystem.h>
#include <arrow/type.h>
#include <parquet/metadata.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "stoker/error.h"
#include "stoker/options.h"

namespace stoker {

struct FieldLeaves {
  int field_index = -1;     // top-level field in the file's Arrow schema
  std::vector<int> leaves;  // Parquet leaf column indices under it
};

class DiskCache;

struct CatalogFile {
  std::string path;  // as the filesystem names it
  std::string display_path;
  std::shared_ptr<arrow::fs::FileSystem> fs;
  int64_t size = 0;
  int64_t mtime_ns = 0;  // from the listing; part of the object's identity in the block cache
  /// Set for remote files when a cache_dir is given: reads go through the block cache.
  std::shared_ptr<DiskCache> block_cache;
  std::shared_ptr<parquet::FileMetaData> metadata;
  std::unordered_map<std::string, FieldLeaves> fields;
  /// Hive partition values, in the order of Catalog::partition_fields().
  std::vector<std::string> partition_values;

  /// Opens the file for reading (through the block cache when there is one).
  Result<std::shared_ptr<arrow::io::RandomAccessFile>> Open() const;
};

struct RowGroupRef {
  int file = 0;
  int row_group = 0;
  int64_t num_rows = 0;
};

class Catalog {
 public:
  /// Lists and opens every source. `num_threads` footers are read at once. Remote sources are
  /// opened with `options.storage_options` and retried per `options.max_retries`.
  static Result<std::shared_ptr<Catalog>> Open(const std::vector<std::string>& sources,
                                               int num_threads,
                                               const LoaderOptions& options = LoaderOptions(),
                                               std::shared_ptr<DiskCache> block_cache = nullptr);

  const std::vector<CatalogFile>& files() const { return files_; }
  const std::vector<RowGroupRef>& row_groups() const { return row_groups_; }
  /// Columns of the files followed by hive partition columns.
  const std::shared_ptr<arrow::Schema>& schema() const { return schema_; }
  int num_file_fields() const { return num_file_fields_; }
  int64_t total_rows() const { return total_rows_; }
  /// Identity of the dataset: paths, sizes and row counts.
  uint64_t fingerprint() const { return fingerprint_; }

  /// Uncompressed bytes of `field` in one row group, from the footer.
  int64_t FieldBytes(const RowGroupRef& rg, const std::string& field) const;
  /// "path, row group N" for error messages.
  std::string Where(const RowGroupRef& rg) const;

 private:
  std::vector<CatalogFile> files_;
  std::vector<RowGroupRef> row_groups_;
  std::shared_ptr<arrow::Schema> schema_;
  int num_file_fields_ = 0;
  int64_t total_rows_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace stoker
