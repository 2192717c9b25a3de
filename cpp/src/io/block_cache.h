// Block cache: raw bytes of remote objects in fixed-size aligned blocks in the node-local
// DiskCache ("blocks" namespace), so footers and column chunks are downloaded once per node,
// whatever the number of processes or epochs reading them.
//
// A BlockCachedFile decorates a RandomAccessFile: every read is cut into the blocks it touches;
// each block comes from the cache or is fetched whole from the base file and stored
// (DiskCache::GetOrFill, so one process downloads a block while the others wait for it).
// The key names the object's identity (path, size and the store's ETag or version id, see
// CatalogFile::identity) and the block, so a replaced object never serves stale bytes. A block is
// stored only once a VersionCheck that started after its read confirms the object still has
// that identity: bytes of an object replaced during the read are never stored under the old
// key, and a loader opened before the replacement fails (kStorage) instead of mixing them with
// the blocks it has.
// Thread safety: ReadAt may be called from many threads at once (the parquet pre-buffer does);
// a VersionCheck is shared by every reader of one object.
#pragma once

#include <arrow/io/interfaces.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "cache/disk_cache.h"

namespace stoker {

constexpr int64_t kCacheBlockBytes = int64_t{4} << 20;

/// Confirms that an object still has the identity its cache keys name, after a read: `check`
/// asks the store (a HEAD) and fails when the object changed. Reads that end together share one
/// check: a check that started after a read ended covers it.
class VersionCheck {
 public:
  explicit VersionCheck(std::function<Status()> check) : check_(std::move(check)) {}

  /// Ok once a check that started at or after `read_end` has passed; the check's error if the
  /// one this call waited for or ran failed.
  Status ConfirmAfter(std::chrono::steady_clock::time_point read_end);

 private:
  using Clock = std::chrono::steady_clock;
  const std::function<Status()> check_;
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool passed_any_ = false;          // GUARDED_BY(mutex_)
  Clock::time_point passed_start_;   // GUARDED_BY(mutex_) start of the latest passed check
  bool running_ = false;             // GUARDED_BY(mutex_)
  Clock::time_point running_start_;  // GUARDED_BY(mutex_)
  uint64_t rounds_ = 0;              // GUARDED_BY(mutex_) checks finished
  Status last_status_;               // GUARDED_BY(mutex_) of the last finished check
};

/// `identity` must change whenever the object's content does (see CatalogFile::identity);
/// `version_check`, when given, confirms it after every block read from `base`. With
/// `exact_ranges`, each read is an entry of its own (its offset and length in the key), fetched
/// as asked rather than as whole blocks: for reads that recur as they are, such as a footer's.
std::shared_ptr<arrow::io::RandomAccessFile> MakeBlockCachedFile(
    std::shared_ptr<arrow::io::RandomAccessFile> base, std::shared_ptr<DiskCache> cache,
    std::string identity, int64_t size, std::shared_ptr<VersionCheck> version_check,
    int64_t block_bytes = kCacheBlockBytes, bool exact_ranges = false);

}  // namespace stoker
