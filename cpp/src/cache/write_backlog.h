// WriteBacklog: whether the disk keeps up with this process's entry writes, asked before each one
// without waiting for the disk.
//
// A write goes to the page cache; the kernel writes dirty pages to the disk later. A writer that
// dirties pages faster than the disk drains them piles them up until the kernel puts it to sleep
// inside write() (balance_dirty_pages) for as long as the disk needs, and meanwhile the pile
// competes with the epoch's reads for the disk. So each entry's write-back is started as soon as
// it is written (StartWriteBack), and the entries whose pages are still dirty or being written
// back are tracked here: their bytes, probed with cachestat() (never waits), are the backlog.
// Behind() is true while the backlog (of the 64 newest entries) is above its bound, or
// when the kernel's own dirty pages (every process's) are near the level where it throttles
// writers; the caller then skips the entry instead of writing it.
//
// Where cachestat() is missing (Linux < 6.5) only the kernel-wide test applies. Thread safety: any
// thread. In a child forked while entries were tracked, tracking is off (Behind() keeps the
// kernel-wide test): the parent's mutex may have been held at the fork.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include "cache/cache_files.h"

namespace stoker {

class WriteBacklog {
 public:
  /// `max_bytes`: the bound on this process's unwritten entry bytes (0: no bound of our own).
  /// `behind_for_testing`, when set, replaces every probe: Behind() returns what it returns.
  WriteBacklog(int64_t max_bytes, std::function<bool(int64_t)> behind_for_testing);

  /// Whether writing `incoming` more bytes now would outrun the disk (see above).
  bool Behind(int64_t incoming);

  /// Tracks a written entry whose write-back has been started: `fd` (owned, carries no lock) is
  /// a descriptor of the entry's file, `bytes` its size.
  void Track(int fd, int64_t bytes);

  /// This process's unwritten bytes of tracked entries, probed now (-1: cannot tell).
  int64_t Unwritten();

 private:
  struct Written {
    std::unique_ptr<Fd> fd;
    int64_t bytes;
    timespec since;
  };
  // Unwritten(), with mutex_ held.
  int64_t UnwrittenLocked();

  const int64_t max_bytes_;
  const std::function<bool(int64_t)> behind_for_testing_;
  const pid_t pid_;
  std::mutex mutex_;
  std::deque<Written> entries_;  // GUARDED_BY(mutex_) oldest first
};

}  // namespace stoker
