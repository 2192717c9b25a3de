// Catalog: resolves sources to Parquet files, reads their footers once, and indexes row groups.
//
// Sources go through Arrow's filesystem layer, so local paths and object-store URIs share one
// code path. Footers are read in parallel. Nested fields are flattened into leaf columns (struct
// children as `parent.child`, map entries as `<map>.keys` / `<map>.values`; a struct inside a
// list gives one list column per leaf). The files' column types are unified as Arrow's schema
// unification does (see UnifyTypes): a column missing in some files is null there; a column whose
// types cannot be unified is recorded as a conflict, an error only when a loader reads it.
// Hive-style `key=value` folders become extra (constant per file) columns.
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

/// One step from a nested array towards a leaf column.
struct PathStep {
  enum Kind {
    kChild,     // a struct's child `name` (the parent's nulls carried down)
    kElements,  // into the values of a list (the list's offsets and nulls kept)
    kMapKeys,   // into the keys of a map (as a list)
    kMapItems,  // into the values of a map (as a list)
  };
  Kind kind = kChild;
  std::string name;
};

struct FieldLeaves {
  int field_index = -1;     // top-level field in the file's Arrow schema
  std::string top;          // its name: the column the Parquet reader returns
  std::vector<int> leaves;  // Parquet leaf column indices read for the column
  /// From the top-level array to this column (empty for a top-level column).
  std::vector<PathStep> path;
  /// The column's type in this file (before unification).
  std::shared_ptr<arrow::DataType> type;
};

class DiskCache;
class VersionCheck;

struct CatalogFile {
  std::string path;  // as the filesystem names it
  std::string display_path;
  std::shared_ptr<arrow::fs::FileSystem> fs;
  int64_t size = 0;
  int64_t mtime_ns = 0;  // from the listing
  /// What tells this version of the file's bytes apart, taken when the catalog opened it, before
  /// its footer was read (docs/cache.md, "File identity"): for local files the device, inode,
  /// size, mtime and ctime (ns); for remote files with a cache_dir, what the store reports (S3:
  /// ETag and version id, from a HEAD). Part of every cache key.
  std::string identity;
  /// Whether `identity` changes whenever the bytes do. False for a store that reports no ETag or
  /// version, a network, FUSE or FAT file system, a ctime too recent to tell a later rewrite in
  /// the same clock tick apart, and with STOKER_CACHE_IDENTITY=content: the ready-tensor cache
  /// then keys entries on a hash of the column chunks it reads, and remote blocks are not cached.
  bool identity_trusted = false;
  /// Set for remote files with a trusted identity when a cache_dir is given: reads go through
  /// the block cache, and every block read is confirmed against `identity` (version_check).
  std::shared_ptr<DiskCache> block_cache;
  std::shared_ptr<VersionCheck> version_check;
  std::shared_ptr<parquet::FileMetaData> metadata;
  /// Columns of this file by (flattened) name. A column of the dataset missing here is null.
  std::unordered_map<std::string, FieldLeaves> fields;
  /// Hive partition values, in the order of Catalog::partition_fields().
  std::vector<std::string> partition_values;
  /// Whether every column of the dataset's schema (partition columns aside) is in this file with
  /// the dataset's type: Catalog::ReadAs then has nothing to say for them.
  bool as_dataset = false;
  /// Per column chunk (row group * leaves + leaf): whether its statistics count a null, read
  /// once with the footer (such a leaf is not read directly: row_group_reader.cc).
  std::vector<bool> chunk_nulls;

  /// Whether the footer's statistics count a null in leaf `leaf` of row group `row_group` (false
  /// when they do not say, or for a chunk the footer check did not see).
  bool ChunkCountsNulls(int row_group, int leaf) const;

  /// Opens the file for reading (through the block cache when there is one; with
  /// `exact_ranges`, caching each read as it is asked rather than whole blocks).
  Result<std::shared_ptr<arrow::io::RandomAccessFile>> Open(bool exact_ranges = false) const;

  /// Ok while the file still has `identity`: a local file is stat()ed, a remote one asked again
  /// (a HEAD). kStorage naming the file when it changed or vanished since the catalog opened it.
  Status CheckUnchanged() const;
};

struct RowGroupRef {
  int file = 0;
  int row_group = 0;
  int64_t num_rows = 0;
};

/// The type both `a` and `b` convert to without changing a value, as Arrow's permissive
/// unification would choose it (null with anything; integer and float widening; integers to a
/// float that holds them exactly; string, large_string and dictionaries of them; binary likewise;
/// list and large_list with unified values); null when there is none.
std::shared_ptr<arrow::DataType> UnifyTypes(const std::shared_ptr<arrow::DataType>& a,
                                            const std::shared_ptr<arrow::DataType>& b);

class Catalog {
 public:
  /// Lists and opens every source. `num_threads` footers are read at once. Remote sources are
  /// opened with `storage.storage_options` and retried per `storage.max_retries`.
  static Result<std::shared_ptr<Catalog>> Open(const std::vector<std::string>& sources,
                                               int num_threads,
                                               const StorageOptions& storage = StorageOptions(),
                                               std::shared_ptr<DiskCache> block_cache = nullptr);

  const std::vector<CatalogFile>& files() const { return files_; }
  const std::vector<RowGroupRef>& row_groups() const { return row_groups_; }
  /// Columns of the files (flattened, types unified over the files, in order of first
  /// appearance) followed by hive partition columns.
  const std::shared_ptr<arrow::Schema>& schema() const { return schema_; }
  /// Why column `name`'s types cannot be unified over the files ("" when they can).
  std::string Conflict(const std::string& name) const;
  /// The first file (display path) that lacks file column `name` ("" when every file has it).
  std::string MissingIn(const std::string& name) const;
  /// How file `file`'s column `name` is converted when read: "" when it is read as stored, else
  /// the dataset's type for it (and "absent" when the file lacks it). Part of cache keys, so
  /// that adding a file that widens a column never serves arrays of the old type.
  std::string ReadAs(int file, const std::string& name) const;
  int num_file_fields() const { return num_file_fields_; }
  int64_t total_rows() const { return total_rows_; }
  /// Identity of the dataset: paths, sizes and row counts.
  uint64_t fingerprint() const { return fingerprint_; }

  /// Uncompressed bytes of each of `fields` in one row group, from the footer (one pass: the
  /// footer's row group and column chunk objects are made once per call, not per field).
  std::vector<int64_t> FieldBytes(const RowGroupRef& rg,
                                  const std::vector<std::string>& fields) const;
  /// "path, row group N" for error messages.
  std::string Where(const RowGroupRef& rg) const;

 private:
  std::vector<CatalogFile> files_;
  std::vector<RowGroupRef> row_groups_;
  std::shared_ptr<arrow::Schema> schema_;
  int num_file_fields_ = 0;
  std::unordered_map<std::string, std::string> conflicts_;
  std::unordered_map<std::string, std::string> missing_in_;
  int64_t total_rows_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace stoker
