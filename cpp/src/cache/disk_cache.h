// DiskCache: the storage primitive of the node-local cache (docs/cache.md).
//
// A folder of immutable entries, each a byte payload stored under (namespace, key), shared by every
// process on the node that opens the same folder. The block cache ("blocks") and the ready-tensor
// cache ("tensors") are two namespaces of one DiskCache, so they share one byte budget.
//
// Guarantees:
//  - An entry is visible whole or not at all: it is written to a temporary file and rename()d
//    into place. A process killed mid-write leaves only a temporary file, which the next Open()
//    (in any process) removes once its writer is dead.
//  - Get() returns only verified bytes: magic, format version, the full key (hashes name the
//    files; the key in the header rules out collisions), size and an XXH64 checksum of the
//    payload. A corrupt or truncated entry is deleted, counted in stats().corrupt, and is a miss.
//    The payload is hashed on the first Get of each version of an entry file in this object
//    (stats().payload_checks), unless this object wrote that version (Put, GetOrFill); later
//    Gets of the same file, unchanged since (same inode, size and mtime: other processes' reads
//    move only the atime), skip the hash and check the header only. With
//    `kept_mapping_bytes`, such a Get also reuses the mapping of that file version it made
//    before (Get or Put), so a warm epoch does not map the entries the epoch before it mapped.
//  - Committed entries stay within `max_bytes` and the file system keeps `min_free_bytes` free:
//    each commit evicts least-recently-used entries (last use = file atime, set on write and hit).
//    Entries being written count too: a writer reserves its entry's bytes under the folder lock
//    before writing (its temporary file is allocated at full size), so concurrent writers in any
//    number of processes never undershoot the floor or, together with the committed entries,
//    exceed the budget.
//  - GetOrFill() runs the filler once per key across threads and processes (a byte-range lock
//    per key on the folder's lock file); the others wait, then read the filled entry.
//  - An entry some process has mapped is not evicted (the mapping holds a read lock on the
//    entry file; eviction skips entries it cannot write-lock), so evicting frees the space it
//    counts on and the floor holds while processes use the cache.
//  - The cache never fails its caller because of its folder: a removed folder (rm -rf, a tmp
//    cleaner, a rename) is recreated on demand; when that is impossible, or any other I/O error
//    occurs, the operation runs without the cache (a miss, or not stored), is counted in
//    stats().unavailable, and the first one prints a warning. Non-regular files at an entry's
//    path (FIFO, socket, directory, symlink) are never opened for reading; they are absent,
//    counted in stats().foreign, and removed when possible.
//
// Usage:
//  1. auto cache = DiskCache::Open({dir, max_bytes, min_free_bytes});
//  2. auto entry = cache->GetOrFill("blocks", key, [&](auto* parts, auto* keep_alive) {...});
//     or Get() / Put() when the caller coordinates itself.
//  3. Read entry->data()[0, entry->size()): a read-only mapping, 64-byte aligned, valid while the
//     shared_ptr lives even if the entry is evicted, replaced or cleared meanwhile.
//
// Thread safety: every method may be called from any thread at once. A DiskCache may be used in a
// child after fork() (the folder lock is reopened there). A child forked while another thread is
// inside a call never inherits that call's locks (see ForkRegistry in cache_files.h). Entries must
// never be edited in place (a mapped file that shrinks raises SIGBUS in its readers); the cache
// itself only creates, renames and unlinks.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/cache_counters.h"
#include "cache/known_files.h"
#include "stoker/error.h"
#include "stoker/stats.h"

namespace stoker {

class CacheBudget;
class CacheFolderFiles;
class WriteBacklog;

struct DiskCacheOptions {
  /// The cache folder; created if missing. Node-local storage only (no NFS: locks and rename()
  /// semantics are what make sharing safe).
  std::string dir;
  /// Budget of committed entries (header + payload bytes).
  int64_t max_bytes = int64_t{50} << 30;
  /// Eviction keeps at least this much free space on the cache's file system.
  int64_t min_free_bytes = int64_t{1} << 30;
  /// Put(..., WhenDiskBehind::kSkip) skips an entry while this process's entries written earlier
  /// and not yet on the disk (dirty or being written back) exceed this many bytes (0: no bound
  /// of our own; the kernel-wide test still applies). See cache/write_backlog.h.
  int64_t max_write_backlog_bytes = int64_t{64} << 20;
  /// Mappings this object keeps after their entries are released, least recently used dropped
  /// beyond this many bytes (0: none), and beyond a quarter of what the cache can hold when
  /// Open() runs (its entries and the free space above min_free_bytes, within max_bytes).
  /// Mapping an entry (page tables for each of its pages) was half of a warm epoch's cost on
  /// wide rows; a kept mapping is reused while its file is unchanged. Kept mappings hold their
  /// entries' read locks: other processes do not evict them (stats().kept_in_use) until this
  /// object drops them or is destroyed.
  int64_t kept_mapping_bytes = 0;

  /// Test seams; leave empty. `free_bytes_for_testing` replaces statvfs();
  /// `on_write_for_testing` runs after each chunk of a temporary file is written;
  /// `disk_behind_for_testing` replaces the write-back probes (true: the disk is behind).
  std::function<int64_t()> free_bytes_for_testing;
  std::function<void(int64_t bytes_written)> on_write_for_testing;
  std::function<bool(int64_t incoming_bytes)> disk_behind_for_testing;
};

/// A read-only view of one payload. Owns what keeps the bytes alive (a mapping of the entry
/// file, or the filler's buffers when an entry could not be stored); copyable via shared_ptr.
class CacheEntry {
 public:
  CacheEntry(const uint8_t* data, int64_t size, std::shared_ptr<const void> owner)
      : data_(data), size_(size), owner_(std::move(owner)) {}

  /// 64-byte aligned (for payloads read from disk).
  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  const uint8_t* data_;
  int64_t size_;
  std::shared_ptr<const void> owner_;
};

class DiskCache {
 public:
  /// Payload pieces, concatenated in order (written straight from them with writev()).
  using Parts = std::vector<std::pair<const void*, size_t>>;
  /// Produces the payload of a missing key. `keep_alive` may own the buffers `parts` point to;
  /// it is released once the payload is written (or copied, when it could not be stored).
  using Filler = std::function<Status(Parts* parts, std::shared_ptr<void>* keep_alive)>;

  /// Creates the folder if needed, removes temporary files of dead writers and recounts the
  /// used bytes. kInvalidOption for an empty, non-folder or unwritable `dir` or a bad budget.
  static Result<std::shared_ptr<DiskCache>> Open(const DiskCacheOptions& options);
  ~DiskCache();

  DiskCache(const DiskCache&) = delete;
  DiskCache& operator=(const DiskCache&) = delete;

  /// The verified entry, or nullptr on a miss (absent, corrupt, or another key's file).
  /// Marks the entry as recently used. `ns`: [A-Za-z0-9_-]{1,64}; `key`: any bytes.
  Result<std::shared_ptr<CacheEntry>> Get(const std::string& ns, const std::string& key);
  /// Get() without counting a miss in stats().misses: for a caller that, on a miss, stores
  /// nothing (the tensor cache's epoch head), so that misses stay the entries to fill.
  Result<std::shared_ptr<CacheEntry>> Peek(const std::string& ns, const std::string& key);

  /// What Put() does when the disk is behind: earlier entries' pages not yet written exceed
  /// `max_write_backlog_bytes`, or the kernel is about to throttle writers (write_backlog.h).
  enum class WhenDiskBehind {
    kWrite,  // write anyway (the kernel may make write() sleep until the disk catches up)
    kSkip,   // store nothing, count it in stats().write_skipped; never waits for the disk
  };

  /// Stores (or replaces) an entry, evicting as needed. Not an error when the entry cannot be
  /// stored because it exceeds max_bytes or no room is left above the floor (counted in
  /// stats().not_stored), nor when the folder cannot be used (stats().unavailable), nor when it
  /// is skipped because the disk is behind (stats().write_skipped); nothing is left behind
  /// either way. Every entry written has its write-back started at once, so that dirty pages do
  /// not pile up in memory.
  Status Put(const std::string& ns, const std::string& key, const Parts& parts,
             WhenDiskBehind when_behind = WhenDiskBehind::kWrite);

  /// Get(), or on a miss: take the key's lock (waiting for any other thread or process that
  /// holds it; a killed holder releases it), Get() again, and only if still missing run `fill`
  /// and store its payload. Returns the entry in every case (from memory when it could not be
  /// stored). An error from `fill` is returned and the next caller fills again. `fill` runs
  /// with the key's lock held: it must not call GetOrFill() for the same key (self-deadlock), and
  /// when the entry cannot be stored the waiters fill again one after another.
  Result<std::shared_ptr<CacheEntry>> GetOrFill(const std::string& ns, const std::string& key,
                                                const Filler& fill);

  /// A key's fill lock held by this process (from GetOrLock). It may be handed to another
  /// thread (a write-behind writer); destroying it releases the lock. Never kept by a forked
  /// child (its descriptor is detached there, like every locked descriptor).
  class KeyLock {
   public:
    ~KeyLock();
    KeyLock(const KeyLock&) = delete;
    KeyLock& operator=(const KeyLock&) = delete;

   private:
    friend class DiskCache;
    KeyLock(int fd, int64_t offset) : fd_(fd), offset_(offset) {}
    int fd_;
    int64_t offset_;
  };

  /// GetOrFill() in two steps, for callers that store the payload later or on another thread:
  /// the verified entry on a hit; on a miss, nullptr with `*lock` holding the key's lock (after
  /// waiting for any other filler, as GetOrFill() does). The caller then Put()s the entry, or
  /// gives up, and destroys the lock; other fillers of the key wait until then. When the folder
  /// cannot be used, a miss leaves `*lock` empty (stats().unavailable): nothing to release.
  Result<std::shared_ptr<CacheEntry>> GetOrLock(const std::string& ns, const std::string& key,
                                                std::unique_ptr<KeyLock>* lock);

  /// Removes every entry and dead writers' temporary files (files the cache did not create are
  /// left alone). Mappings held by callers stay valid.
  Status Clear();

  /// Bytes of committed entries, counted from the folder itself (a full scan).
  Result<int64_t> UsedBytes() const;

  /// This object's counters.
  CacheStats stats() const;

  /// Bytes of the mappings kept for reuse (kept_mapping_bytes). For tests.
  int64_t kept_mapping_bytes() const { return known_.mapped_bytes(); }

  /// Where the entry for (ns, key) lives (whether or not it exists). For tools and tests.
  std::string EntryPath(const std::string& ns, const std::string& key) const;

  const DiskCacheOptions& options() const { return options_; }

 private:
  explicit DiskCache(DiskCacheOptions options);

  Result<std::shared_ptr<CacheEntry>> Lookup(const std::string& ns, const std::string& key,
                                             bool count_miss);
  // Returns nullptr when the entry was not stored (or not wanted).
  Result<std::shared_ptr<CacheEntry>> PutImpl(const std::string& ns, const std::string& key,
                                              const Parts& parts, bool want_entry,
                                              WhenDiskBehind when_behind);
  // Removes the corrupt entry file open as `fd` if it is still at `path`; whether this call
  // removed it (readers that judged the same file at once count it once).
  Result<bool> DropCorrupt(const std::string& path, int fd);
  // Something that is not a regular file at an entry's path: counted, and removed (unlinked, or
  // rmdir()ed when an empty folder) if it is still the file `judged` (lstat) describes.
  void DropForeign(const std::string& path, const struct stat& judged);
  // Counts an operation that ran without the cache because of `why`; warns once per object.
  void Unavailable(const Status& why) const;
  // Takes a key's lock (waiting for its holder) on the current lock file.
  Result<std::unique_ptr<KeyLock>> LockKey(off_t offset) const;

  const DiskCacheOptions options_;
  mutable DiskCacheCounters counters_;
  // Entry file versions this object verified, and the mappings it keeps (known_files.h).
  KnownFiles known_;
  // The folder's structure and lock file (cache_files.h), and its byte budget (cache_budget.h).
  const std::unique_ptr<const CacheFolderFiles> files_;
  const std::unique_ptr<const CacheBudget> budget_;
  const std::unique_ptr<WriteBacklog> backlog_;
  std::atomic<uint64_t> temp_seq_{0};
  mutable std::atomic<bool> warned_{false};
};

}  // namespace stoker
