// TensorCache: the ready-tensor cache, a wrapper around Decoder::DecodeRows. Stores the decoded
// columns of one row group (what a decode task produces before it is cut to a segment) in the
// node-local DiskCache, so later epochs, other ranks and other jobs on the node skip fetch and
// decode.
//
// Layout: an Arrow IPC stream (one record batch) with 64-byte buffer alignment. Reads are
// zero-copy: the arrays point into the entry's read-only mapping, which they keep alive.
// Key: format version, the file's identity (path, size and a hash of its footer, which changes
// whenever the file's content does) and the row group and fields of the task. Options that shape
// tensors (casts, fills, padding) apply after the cache, so one entry serves every loader that
// reads those columns. Whole row groups are cached and then sliced, so a segment that is part of
// a row group (a rank boundary) shares the entry with the rest of it.
// Thread safety: all methods may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cache/disk_cache.h"
#include "catalog/catalog.h"
#include "decode/decoder.h"
#include "plan/planner.h"
#include "stoker/error.h"

namespace stoker {

class TensorCache {
 public:
  TensorCache(std::shared_ptr<DiskCache> cache, std::shared_ptr<const Catalog> catalog);

  /// The task's columns for its segment, from the cache or decoded with `decoder` (and stored).
  /// `*hit` tells which. Another process decoding the same entry is waited for, not repeated.
  Result<DecodedColumns> Decode(const Decoder& decoder, const Plan& plan, const DecodeTask& task,
                                bool* hit) const;

  /// The key of the entry holding `fields` of one row group (for tests and tools).
  std::string Key(const RowGroupRef& rg, const std::vector<std::string>& fields) const;

 private:
  std::shared_ptr<DiskCache> cache_;
  std::shared_ptr<const Catalog> catalog_;
  std::vector<std::string> file_identity_;  // per catalog file
};

}  // namespace stoker
