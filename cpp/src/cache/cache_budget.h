// The byte budget of a DiskCache folder, shared by every process that opens it: the folder lock,
// the used-bytes counter, least-recently-used eviction, the reservations of entries being written
// (their temporary files) and the two disk steps of storing an entry (reserve, then commit).
//
// The budget holds committed entries within `max_bytes` and keeps `min_free_bytes` free on the
// file system; entries being written count too, since a writer reserves (allocates) its entry's
// bytes under the folder lock before writing. Last use is an entry file's atime (cache_files.h,
// MarkUsed). The used-bytes counter lives in bytes 0-7 of the lock file; it is only changed under
// the folder lock, and every listing repairs it.
// Thread safety: a FolderLock serializes the threads of this process and the processes sharing
// the folder; the methods taking a `const FolderLock&` need it held (the argument is the proof).
// The rest may be called from any thread.
#pragma once

#include <sys/types.h>
#include <time.h>  // NOLINT(modernize-deprecated-headers): POSIX timespec, clock_gettime

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cache/cache_counters.h"
#include "cache/cache_files.h"
#include "stoker/error.h"

namespace stoker {

/// One committed entry as listed: its last use (atime), size and identity.
struct ScannedEntry {
  timespec used;
  int64_t size;
  std::string path;
  dev_t dev;
  ino_t ino;
};

/// Every committed entry of the folder `dir`: <dir>/<namespace>/<2 hex>/<32 hex>, regular files
/// only. Anything else is not ours.
Status ScanEntries(const std::string& dir, std::vector<ScannedEntry>* out);

class CacheBudget;

/// Holds the folder lock: this process's mutex, then byte 0 of the lock file (which excludes the
/// other processes). Released on destruction.
class FolderLock {
 public:
  explicit FolderLock(const CacheBudget* budget);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

  /// Takes the lock, on the lock file the folder's path names now: a lock on one that was
  /// removed or renamed away is taken again on the current one, whose counter is then recounted.
  Status Acquire();
  /// The lock file's descriptor (valid once acquired).
  int fd() const { return fd_; }

 private:
  const CacheBudget* budget_;
  std::lock_guard<std::mutex> guard_;
  int fd_ = -1;
  bool locked_ = false;
};

class CacheBudget {
 public:
  /// `files` and `counters` are not owned. `free_bytes_for_testing`, when set, replaces statvfs().
  CacheBudget(const CacheFolderFiles* files, int64_t max_bytes, int64_t min_free_bytes,
              std::function<int64_t()> free_bytes_for_testing, DiskCacheCounters* counters);

  const CacheFolderFiles& files() const { return *files_; }

  /// The used-bytes counter.
  Result<int64_t> ReadUsed(const FolderLock& lock) const;
  Status WriteUsed(const FolderLock& lock, int64_t used) const;
  /// Sets the counter from a listing of the folder.
  Status Recount(const FolderLock& lock) const;
  /// Removes temporary files whose writer is dead (or that are 10 minutes stale).
  Status CleanTemps(const FolderLock& lock) const;
  /// What the cache can hold on its file system now: its entries and the free space above the
  /// floor, within the budget.
  Result<int64_t> Capacity(const FolderLock& lock) const;

  /// Evicts least-recently-used entries until `incoming_bytes` more fit in the budget and
  /// `incoming_disk_bytes` more leave the floor free; false when even an empty cache would not
  /// do. Entries some process maps (read-locked) are skipped (kept_in_use).
  Result<bool> Evict(const FolderLock& lock, int64_t incoming_bytes,
                     int64_t incoming_disk_bytes) const;

  /// Storing an entry, step 1: under the folder lock, makes room for `file_size` bytes (counting
  /// the entries other writers are writing against the budget and the floor, evicting as
  /// needed), then creates `temp_path` flock()ed and allocated at full size, in `*fd`. False:
  /// not stored (no room). An error: the folder cannot be used.
  Result<bool> CreateTemp(const std::string& temp_path, int64_t file_size,
                          std::unique_ptr<GuardedFd>* fd) const;
  /// Step 2, once `temp_path` (`fd`, `file_size` bytes) is written: under the folder lock, evicts
  /// to fit the budget and renames it to `final_path`, counting it. With `keep_mapped`, `fd`
  /// takes the entry's read lock before the entry is visible (the caller maps it). False: not
  /// stored. On false or an error, nothing is left behind.
  Result<bool> Commit(const std::string& temp_path, const std::string& final_path, int fd,
                      int64_t file_size, bool keep_mapped) const;

 private:
  friend class FolderLock;

  Result<int64_t> FreeBytes() const;
  // Bytes of the temporary files (allocated at their final size when created).
  Result<int64_t> ReservedBytes(const FolderLock& lock) const;
  // Whether `file_size` more bytes may be written now (see CreateTemp); evicts to make room.
  Result<bool> Reserve(const FolderLock& lock, int64_t file_size) const;

  const CacheFolderFiles* const files_;
  const int64_t max_bytes_;
  const int64_t min_free_bytes_;
  const std::function<int64_t()> free_bytes_for_testing_;
  DiskCacheCounters* const counters_;
};

}  // namespace stoker
