// CachedDecoder: the decoder with the ready-tensor cache in front, a decorator of its run-time
// entry point (Decoder::Decode). Stores the decoded columns of one row group (what a decode task
// produces before it is cut to a segment: Decoder::DecodeRows of the whole row group) in the
// node-local DiskCache, so later epochs, other ranks and other jobs on the node skip fetch and
// decode.
//
// Layout: decode/tensor_entry.h, an Arrow IPC stream (one record batch) with 64-byte buffer
// alignment. Reads are zero-copy: the arrays point into the entry's read-only mapping, which
// they keep alive.
// Key: format version, the file's identity (its path, CatalogFile::identity, which changes with
// the file's bytes, and a hash of its footer) and the row group and fields of the task. A file
// without a trusted identity (CatalogFile::identity_trusted), or a local file that changed since
// the loader opened it, is keyed by content instead: a hash of the column chunks the task reads,
// read again for every use (a read, no decode); a miss decodes exactly those bytes, after
// checking that the file's footer is still the loader's (else kStorage: the loader's columns
// are no longer where it reads them). Options that shape tensors (casts, fills, padding) apply
// after the cache, so one entry serves every loader that reads those columns. Whole row groups
// are cached and then sliced, so a segment that is part of a row group (a rank boundary) shares
// the entry with the rest of it.
//
// Write-behind: on a miss the worker decodes (stacked features and packed runs in their stored
// blocks), hands the arrays to the cache's own writer thread (which serializes and stores them)
// and returns at once; the batch
// never waits on the disk. The queue holds at most
// `write_buffer_bytes` of entries (the decoded arrays they reference); when it is full (the disk
// is slower than decoding) the entry is not written and stats().write_skipped counts it (a later
// epoch decodes that row group again). While an entry waits or is being written, the key's
// cross-process fill lock stays held (other processes wait for it, as with a synchronous fill) and
// workers of this process needing it take the queued arrays instead.
// The epoch's head (Segment::head) takes no lock: on a miss it decodes its own rows and stores
// nothing (DecodesHeadAlone); the rest of its row group stores the entry.
// Thread safety: all methods may be called from any thread. After fork() a child must not use it
// (the Loader refuses every call there); destroying it in a child leaks the writer thread's state
// instead of joining a thread that does not exist there.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/disk_cache.h"
#include "catalog/catalog.h"
#include "decode/decoder.h"
#include "plan/planner.h"
#include "resolve/column_spec.h"
#include "stoker/error.h"
#include "stoker/stats.h"

namespace stoker {

class CachedDecoder {
 public:
  /// Entries go to `cache`, misses to `decoder`. `write_buffer_bytes`: the write-behind queue's
  /// budget (at least one entry is always taken when the queue is empty). `packed_runs`: entries
  /// hold PackedRuns packed by rows (the batches' writers gather them so: WriterOptions::pack).
  CachedDecoder(std::shared_ptr<DiskCache> cache, std::shared_ptr<const Decoder> decoder,
                int64_t write_buffer_bytes = int64_t{128} << 20, bool packed_runs = false);
  ~CachedDecoder();

  /// Decoder::Decode through the cache: the task's columns for its segment, from the cache or
  /// decoded (and stored). `*hit` tells which. Another process decoding the same entry is waited
  /// for, not repeated (except by the epoch's head, which decodes its own rows).
  Result<DecodedColumns> Decode(const Plan& plan, const DecodeTask& task, bool* hit) const;

  /// Waits until every queued entry is written (or dropped by Close), so that other loaders and
  /// processes find them on disk (Loader::FlushCache; epochs end without waiting).
  void Flush() const;

  /// Whether the epoch's head (Segment::head) is decoded on its own on a miss, storing nothing
  /// (Decode): not with a user transform, which sees whole row groups (the head would run it
  /// on its row group a second time).
  bool DecodesHeadAlone() const;

  /// Whether the cache folder holds any entry of this kind: a hint, read when an epoch starts
  /// (with none, nothing can hit, and the fetch stage starts at once).
  bool HoldsEntries() const;

  /// Stops the writer: queued entries are dropped (counted as skipped), the one being written
  /// is finished, the thread is joined. Later misses are decoded and not stored. Idempotent.
  void Close() const;

  /// Adds this cache's write-behind counters to `stats` (DiskCache counts the rest).
  void AddStats(CacheStats* stats) const;

  /// The key of the entry holding `fields` of one row group (for tests and tools).
  std::string Key(const RowGroupRef& rg, const std::vector<std::string>& fields) const;

  /// Test-only seam, never called by production code: every CachedDecoder made after this call
  /// pauses `delay_ms` before each write-behind write (a disk slower than decoding), a pause that
  /// Close() cuts short; 0, the default, turns it off. Process-wide. Python tests set it through
  /// `stoker._stoker._testing_set_cache_write_delay_ms`.
  static void SetWriteDelayForTesting(int64_t delay_ms);

 private:
  class Writer;

  static std::string KeyWith(const std::string& identity, const RowGroupRef& rg,
                             const std::vector<std::string>& fields);

  const bool packed_runs_;
  std::shared_ptr<DiskCache> cache_;
  std::unique_ptr<Writer> writer_;
  std::shared_ptr<const Decoder> decoder_;
  std::shared_ptr<const Catalog> catalog_;
  std::shared_ptr<const OutputSpec> spec_;
  std::vector<std::string> file_identity_;     // per catalog file
  std::vector<std::string> content_identity_;  // per catalog file, for content keys
  // Per catalog file: a local file found changed since the catalog opened it (keyed by content
  // from then on).
  std::unique_ptr<std::atomic<bool>[]> changed_;
  mutable std::atomic<int64_t> content_checks_{0};
};

}  // namespace stoker
