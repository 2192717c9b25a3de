#include "cache/cache_budget.h"

#include <fcntl.h>
#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX kill()
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <tuple>

#include "cache/entry_format.h"

namespace stoker {
namespace {

// A temporary file that nobody holds locked and that has not changed for this long is abandoned
// even if its writer's pid is alive (pid reuse, or another pid namespace).
constexpr int64_t kStaleTempSeconds = 600;
// Byte 0 of the lock file is the folder lock (accounting, eviction, commits); every key's
// GetOrFill lock is one byte at an offset >= 1 derived from the key's hash (entry_format.h,
// NameOf). Bytes 0-7 of the file's content hold the used-bytes counter (content and lock ranges
// are unrelated).
constexpr off_t kFolderLockOffset = 0;

enum class Evicted { kRemoved, kInUse, kReplaced };

// Removes an entry file unless some process maps it (holds a read lock on it). The write lock is
// held across unlink(): a reader that opened the file meanwhile cannot lock it, or finds it
// unlinked once it has, and treats it as a miss. Without write access to the file (another
// user's entry) only a test of the locks is possible, which a reader can race.
Result<Evicted> EvictEntry(const ScannedEntry& entry) {
  GuardedFd fd(entry.path, O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  const int open_error = fd.get() < 0 ? errno : 0;
  if (open_error == ENOENT) return Evicted::kRemoved;  // removed by someone else meanwhile
  int locked = -1;
  if (fd.get() >= 0) {
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return StorageError(entry.path, "cannot stat", errno);
    // A newer entry renamed over the listed one since: not the least recently used any more.
    if (st.st_ino != entry.ino || st.st_dev != entry.dev) return Evicted::kReplaced;
    locked = TryLockEntry(fd.get(), /*write=*/true);
  } else if (open_error == EACCES || open_error == EPERM) {
    Fd read_only(open(entry.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW));
    struct flock probe = {};
    probe.l_type = F_WRLCK;
    probe.l_whence = SEEK_SET;
    probe.l_start = kEntryLockOffset;
    probe.l_len = 1;
    if (read_only.get() >= 0 && fcntl(read_only.get(), F_OFD_GETLK, &probe) == 0) {
      locked = probe.l_type == F_UNLCK ? 1 : 0;
    }
  }
  if (locked == 0) return Evicted::kInUse;
  if (unlink(entry.path.c_str()) != 0 && errno != ENOENT) {
    return StorageError(entry.path, "cannot evict", errno);
  }
  return Evicted::kRemoved;
}

}  // namespace

Status ScanEntries(const std::string& dir, std::vector<ScannedEntry>* out) {
  out->clear();
  std::vector<std::string> namespaces, shards, files;
  STOKER_RETURN_NOT_OK(ListDir(dir, &namespaces));
  for (const auto& ns : namespaces) {
    if (!IsNamespace(ns)) continue;
    STOKER_RETURN_NOT_OK(ListDir(dir + "/" + ns, &shards));
    for (const auto& shard : shards) {
      if (!IsHex(shard, 2)) continue;
      const std::string shard_path = dir + "/" + ns + "/" + shard;
      STOKER_RETURN_NOT_OK(ListDir(shard_path, &files));
      for (const auto& file : files) {
        if (!IsHex(file, 32) || file.compare(0, 2, shard) != 0) continue;
        std::string path = shard_path + "/" + file;
        struct stat st;
        if (lstat(path.c_str(), &st) != 0) {
          if (errno == ENOENT) continue;
          return StorageError(path, "cannot stat", errno);
        }
        if (!S_ISREG(st.st_mode)) continue;
        out->push_back(
            {st.st_atim, static_cast<int64_t>(st.st_size), std::move(path), st.st_dev, st.st_ino});
      }
    }
  }
  return Status::OK();
}

// ---- FolderLock ------------------------------------------------------------------------------

FolderLock::FolderLock(const CacheBudget* budget)
    : budget_(budget), guard_(budget->files().mutex()) {}

FolderLock::~FolderLock() {
  if (locked_) UnlockByte(fd_, kFolderLockOffset);
}

Status FolderLock::Acquire() {
  const CacheFolderFiles& files = budget_->files();
  for (int attempt = 0;; ++attempt) {
    STOKER_ASSIGN_OR_RAISE(fd_, files.SharedFdLocked());
    STOKER_ASSIGN_OR_RAISE(locked_, LockByte(fd_, kFolderLockOffset, true, files.lock_path()));
    // A lock on a lock file that was removed or renamed away (with its folder) no longer
    // excludes processes that opened the new one: start again on the current file, whose
    // used-bytes counter then has to be counted afresh.
    if (files.IsCurrentLockFile(fd_)) return attempt == 0 ? Status::OK() : budget_->Recount(*this);
    UnlockByte(fd_, kFolderLockOffset);
    locked_ = false;
    files.ForgetSharedFdLocked();
    if (attempt + 1 == kRemovalRounds) {
      return StorageError(files.lock_path(), "keeps being replaced:", ESTALE);
    }
    PauseForRemoval(attempt + 1);
  }
}

// ---- CacheBudget -----------------------------------------------------------------------------

CacheBudget::CacheBudget(const CacheFolderFiles* files, int64_t max_bytes, int64_t min_free_bytes,
                         std::function<int64_t()> free_bytes_for_testing,
                         DiskCacheCounters* counters)
    : files_(files),
      max_bytes_(max_bytes),
      min_free_bytes_(min_free_bytes),
      free_bytes_for_testing_(std::move(free_bytes_for_testing)),
      counters_(counters) {}

Result<int64_t> CacheBudget::ReadUsed(const FolderLock& lock) const {
  int64_t used = 0;
  const ssize_t n = pread(lock.fd(), &used, sizeof(used), 0);
  if (n < 0) return StorageError(files_->lock_path(), "cannot read", errno);
  return n == sizeof(used) ? std::max<int64_t>(used, 0) : 0;
}

Status CacheBudget::WriteUsed(const FolderLock& lock, int64_t used) const {
  used = std::max<int64_t>(used, 0);
  if (pwrite(lock.fd(), &used, sizeof(used), 0) != sizeof(used)) {
    return StorageError(files_->lock_path(), "cannot write", errno);
  }
  return Status::OK();
}

Status CacheBudget::Recount(const FolderLock& lock) const {
  std::vector<ScannedEntry> entries;
  STOKER_RETURN_NOT_OK(ScanEntries(files_->dir(), &entries));
  int64_t used = 0;
  for (const auto& entry : entries) used += entry.size;
  return WriteUsed(lock, used);
}

Status CacheBudget::CleanTemps(const FolderLock& lock) const {
  const std::string& tmp_dir = files_->tmp_dir();
  std::vector<std::string> names;
  STOKER_RETURN_NOT_OK(ListDir(tmp_dir, &names));
  const timespec now = Now();
  for (const auto& name : names) {
    const std::string path = tmp_dir + "/" + name;
    // <32 hex>.<pid>.<seq>.tmp
    int64_t pid = 0;
    const size_t dot = name.find('.');
    if (dot != std::string::npos) pid = std::strtoll(name.c_str() + dot + 1, nullptr, 10);
    // O_NONBLOCK: a FIFO planted here must not block the open.
    Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (fd.get() < 0) continue;  // gone meanwhile, or not a file
    // A writer holds flock() on its temporary file until it is renamed or removed.
    if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    struct stat st;
    if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const bool writer_dead = pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    const bool stale = now.tv_sec - st.st_mtim.tv_sec > kStaleTempSeconds;
    if ((writer_dead || stale) && unlink(path.c_str()) != 0 && errno != ENOENT) {
      return StorageError(path, "cannot remove", errno);
    }
  }
  return Status::OK();
}

Result<int64_t> CacheBudget::Capacity(const FolderLock& lock) const {
  STOKER_ASSIGN_OR_RAISE(const int64_t used, ReadUsed(lock));
  STOKER_ASSIGN_OR_RAISE(const int64_t free_bytes, FreeBytes());
  return std::clamp<int64_t>(used + free_bytes - min_free_bytes_, 0, max_bytes_);
}

Result<int64_t> CacheBudget::FreeBytes() const {
  if (free_bytes_for_testing_) return free_bytes_for_testing_();
  struct statvfs fs;
  int err = statvfs(files_->dir().c_str(), &fs) == 0 ? 0 : errno;
  if (err == ENOENT) {
    // The folder was removed after the lock was taken (the lock file went with it): make it
    // again, as every other step does, instead of calling the cache unusable.
    STOKER_RETURN_NOT_OK(files_->RecreateFolder());
    err = statvfs(files_->dir().c_str(), &fs) == 0 ? 0 : errno;
  }
  if (err != 0) return StorageError(files_->dir(), "cannot statvfs", err);
  return static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
}

Result<bool> CacheBudget::Evict(const FolderLock& lock, int64_t incoming_bytes,
                                int64_t incoming_disk_bytes) const {
  STOKER_ASSIGN_OR_RAISE(int64_t used, ReadUsed(lock));
  STOKER_ASSIGN_OR_RAISE(const int64_t free_bytes, FreeBytes());
  const int64_t max_bytes = max_bytes_;
  const int64_t floor = min_free_bytes_;
  if (used + incoming_bytes <= max_bytes && free_bytes - incoming_disk_bytes >= floor) return true;

  // Count from the folder itself: this also repairs a counter left stale by a killed writer.
  std::vector<ScannedEntry> entries;
  STOKER_RETURN_NOT_OK(ScanEntries(files_->dir(), &entries));
  used = 0;
  for (const auto& entry : entries) used += entry.size;
  int64_t to_free = 0;
  if (used + incoming_bytes > max_bytes) {
    // Go a little below the budget so that the next commits do not each scan the folder.
    to_free = used + incoming_bytes - (max_bytes - max_bytes / 64);
  }
  to_free = std::max(to_free, floor + incoming_disk_bytes - free_bytes);
  std::sort(entries.begin(), entries.end(), [](const ScannedEntry& a, const ScannedEntry& b) {
    return std::tie(a.used.tv_sec, a.used.tv_nsec, a.path) <
           std::tie(b.used.tv_sec, b.used.tv_nsec, b.path);
  });
  int64_t freed = 0;
  for (const auto& entry : entries) {
    if (freed >= to_free) break;
    const Result<Evicted> evicted = EvictEntry(entry);
    if (!evicted.ok()) {
      (void)WriteUsed(lock, used - freed);
      return evicted.status();
    }
    if (*evicted == Evicted::kInUse) {
      counters_->kept_in_use.fetch_add(1, std::memory_order_relaxed);
    }
    if (*evicted != Evicted::kRemoved) continue;
    freed += entry.size;
    counters_->evictions.fetch_add(1, std::memory_order_relaxed);
  }
  used -= freed;
  STOKER_RETURN_NOT_OK(WriteUsed(lock, used));
  if (used + incoming_bytes > max_bytes) return false;
  // The space that actually came back: a removed entry that a process still maps (one its
  // locks do not cover) keeps its space until it is unmapped.
  STOKER_ASSIGN_OR_RAISE(const int64_t free_now, freed > 0 ? FreeBytes() : free_bytes);
  return free_now - incoming_disk_bytes >= floor;
}

Result<int64_t> CacheBudget::ReservedBytes(const FolderLock& lock) const {
  const std::string& tmp_dir = files_->tmp_dir();
  std::vector<std::string> names;
  STOKER_RETURN_NOT_OK(ListDir(tmp_dir, &names));
  int64_t reserved = 0;
  for (const auto& name : names) {
    struct stat st;
    if (lstat((tmp_dir + "/" + name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      reserved += static_cast<int64_t>(st.st_size);
    }
  }
  return reserved;
}

Result<bool> CacheBudget::Reserve(const FolderLock& lock, int64_t file_size) const {
  STOKER_ASSIGN_OR_RAISE(int64_t reserved, ReservedBytes(lock));
  if (reserved > 0 && reserved + file_size > max_bytes_) {
    // Temporary files of dead writers count until removed: remove them, then look again.
    STOKER_RETURN_NOT_OK(CleanTemps(lock));
    STOKER_ASSIGN_OR_RAISE(reserved, ReservedBytes(lock));
  }
  // Entries being written by others fill the budget first: evicting would not make room.
  if (reserved + file_size > max_bytes_) return false;
  // statvfs() already counts the others' reservations (allocated at full size): only this
  // entry's bytes are still to come off the free space.
  return Evict(lock, reserved + file_size, file_size);
}

Result<bool> CacheBudget::CreateTemp(const std::string& temp_path, int64_t file_size,
                                     std::unique_ptr<GuardedFd>* fd) const {
  // Reserve the entry's space before writing it: under the folder lock, other writers' reserved
  // (not yet committed) entries count against the budget and the floor, and the temporary file
  // is allocated at its full size, so the next writer's statvfs() sees it.
  constexpr int kTempFlags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW;
  FolderLock lock(this);
  STOKER_RETURN_NOT_OK(lock.Acquire());
  STOKER_ASSIGN_OR_RAISE(const bool fits, Reserve(lock, file_size));
  if (!fits) return false;
  *fd = std::make_unique<GuardedFd>(temp_path, kTempFlags, 0644);
  // .tmp was removed: make it again (a few rounds: kRemovalRounds).
  for (int round = 0; round < kRemovalRounds && (*fd)->get() < 0 && errno == ENOENT; ++round) {
    PauseForRemoval(round);
    STOKER_RETURN_NOT_OK(files_->RecreateFolder());
    *fd = std::make_unique<GuardedFd>(temp_path, kTempFlags, 0644);
  }
  if ((*fd)->get() < 0) return StorageError(temp_path, "cannot create", errno);
  // Tells Open()/Clear() in other processes that this file has a live writer.
  (void)flock((*fd)->get(), LOCK_EX | LOCK_NB);
  const Result<bool> allocated = AllocateFile((*fd)->get(), file_size, temp_path);
  if (!allocated.ok() || !*allocated) unlink(temp_path.c_str());
  return allocated;
}

Result<bool> CacheBudget::Commit(const std::string& temp_path, const std::string& final_path,
                                 int fd, int64_t file_size, bool keep_mapped) const {
  auto discard = [&](const Status& why) -> Result<bool> {
    unlink(temp_path.c_str());
    return why;
  };
  auto not_stored = [&]() -> Result<bool> {
    unlink(temp_path.c_str());
    return false;
  };
  FolderLock lock(this);
  Status status = lock.Acquire();
  if (!status.ok()) return discard(status);
  // The temporary file is on disk already: only the budget needs room, the floor must hold.
  Result<bool> fits = Evict(lock, file_size, 0);
  if (!fits.ok()) return discard(fits.status());
  if (!*fits) return not_stored();
  // Mapped by the caller from the moment it is visible: never evicted while mapped.
  if (keep_mapped) (void)TryLockEntry(fd, /*write=*/false);
  MarkWritten(fd);
  struct stat old;
  const int64_t replaced = lstat(final_path.c_str(), &old) == 0 && S_ISREG(old.st_mode)
                               ? static_cast<int64_t>(old.st_size)
                               : 0;
  int err = rename(temp_path.c_str(), final_path.c_str()) == 0 ? 0 : errno;
  for (int round = 0; err == ENOENT && round < 3; ++round) {
    struct stat temp;
    // The folder was removed or renamed while we wrote (our temporary file went with it): the
    // next operation recreates it; this entry is simply not stored.
    if (lstat(temp_path.c_str(), &temp) != 0) return false;
    std::error_code error;
    std::filesystem::create_directories(std::filesystem::path(final_path).parent_path(), error);
    err = rename(temp_path.c_str(), final_path.c_str()) == 0 ? 0 : errno;
  }
  if (err == ENOENT) return not_stored();  // a cleaner removing the folder as fast as it is made
  if (err == EISDIR || err == ENOTEMPTY || err == EEXIST) {
    // A folder at the entry's path (not ours): removed if empty, else the entry is skipped.
    counters_->foreign.fetch_add(1, std::memory_order_relaxed);
    if (rmdir(final_path.c_str()) != 0) return not_stored();
    err = rename(temp_path.c_str(), final_path.c_str()) == 0 ? 0 : errno;
  }
  if (err != 0) return discard(StorageError(final_path, "cannot commit", err));
  // Only counts: a failure here leaves the counter low, and the next listing repairs it.
  const Result<int64_t> used = ReadUsed(lock);
  if (used.ok()) (void)WriteUsed(lock, *used + file_size - replaced);
  return true;
}

}  // namespace stoker
