#include "cache/write_backlog.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

namespace stoker {
namespace {

// An entry still unwritten after this long stops counting: a probe that misreports (a file
// system whose pages never look clean) must not stop writes for good. The kernel's flusher
// writes pages that have been dirty for 30 s anyway.
constexpr int64_t kForgetWrittenSeconds = 30;
// Descriptors kept for tracked entries, at most (the newest): a process's descriptors stay few
// (a default RLIMIT_NOFILE is 1024, shared with the files read and the mapped entries). Only
// bytes make a backlog: many tiny entries queued on a busy disk are not one (a count made
// warm epochs miss entries of small test sets under load).
constexpr size_t kMaxTrackedEntries = 64;

}  // namespace

WriteBacklog::WriteBacklog(int64_t max_bytes, std::function<bool(int64_t)> behind_for_testing)
    : max_bytes_(max_bytes), behind_for_testing_(std::move(behind_for_testing)), pid_(getpid()) {}

bool WriteBacklog::Behind(int64_t incoming) {
  if (behind_for_testing_) return behind_for_testing_(incoming);
  // The kernel's own test: past `throttle_at` dirty bytes it makes every writer sleep inside
  // write(). An entry that would take the pages there is skipped (one larger than half the
  // room is written whenever the pages are below half of it, else it would never be).
  DirtyPages pages;
  if (ReadDirtyPages(&pages) &&
      pages.throttle_at - pages.unwritten < std::min(incoming, pages.throttle_at / 2)) {
    return true;
  }
  if (max_bytes_ <= 0 || getpid() != pid_) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  return UnwrittenLocked() > max_bytes_;
}

void WriteBacklog::Track(int fd, int64_t bytes) {
  auto owned = std::make_unique<Fd>(fd);
  if (behind_for_testing_ || max_bytes_ <= 0 || getpid() != pid_ || UnwrittenBytes(fd) <= 0) {
    return;  // nothing to follow (or written back already)
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.size() >= kMaxTrackedEntries) entries_.pop_front();
  entries_.push_back({std::move(owned), bytes, Now()});
}

int64_t WriteBacklog::Unwritten() {
  if (getpid() != pid_) return -1;
  std::lock_guard<std::mutex> lock(mutex_);
  return UnwrittenLocked();
}

int64_t WriteBacklog::UnwrittenLocked() {
  const timespec now = Now();
  int64_t total = 0;
  bool known = true;
  for (auto it = entries_.begin(); it != entries_.end();) {
    const int64_t left = UnwrittenBytes(it->fd->get());
    if (left < 0) known = false;
    if (left <= 0 || now.tv_sec - it->since.tv_sec > kForgetWrittenSeconds) {
      it = entries_.erase(it);  // written back (or no longer followed): closes its descriptor
      continue;
    }
    total += std::min(left, it->bytes);
    ++it;
  }
  return known ? total : -1;
}

}  // namespace stoker
