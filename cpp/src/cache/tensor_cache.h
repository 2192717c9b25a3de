// TensorCache: the ready-tensor cache. Stores the decoded columns of one row group (what a decode
// task produces before it is sliced to a segment) in the node-local DiskCache, so later epochs,
// other ranks and other jobs on the node skip fetch and decode.
//
// Layout: an Arrow IPC stream (one record batch) with 64-byte buffer alignment. Reads are
// zero-copy: the arrays point into the entry's read-only mapping, which they keep alive.
// Key: format version, the file's identity (path, size, modification time) and the row group and
// fields read. Options that shape the tensors (casts, fills, padding) apply after the cache, so
// one entry serves every loader that reads those columns.
// Thread safety: all methods may be called from any thread.
#pragma once

#include <arrow/array.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cache/disk_cache.h"
#include "stoker/error.h"

namespace stoker {

using NamedArrays = std::vector<std::pair<std::string, std::shared_ptr<arrow::Array>>>;

struct FileIdentity {
  std::string path;
  int64_t size = 0;
  int64_t mtime_ns = 0;
};

class TensorCache {
 public:
  explicit TensorCache(std::shared_ptr<DiskCache> cache) : cache_(std::move(cache)) {}

  /// The row group's arrays for `fields`, from the cache, or from `decode` (then stored).
  /// `*hit` tells which. Another process decoding the same key is waited for, not repeated.
  Result<NamedArrays> GetOrDecode(const FileIdentity& file, int row_group,
                                  const std::vector<std::string>& fields,
                                  const std::function<Result<NamedArrays>()>& decode, bool* hit);

  DiskCache* disk_cache() const { return cache_.get(); }

  /// The key of one entry (exposed for tests and tools).
  static std::string Key(const FileIdentity& file, int row_group,
                         const std::vector<std::string>& fields);

 private:
  std::shared_ptr<DiskCache> cache_;
};

}  // namespace stoker
