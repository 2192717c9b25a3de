// The files of a DiskCache folder, as POSIX sees them: descriptors (and their fate across
// fork()), byte-range locks, listing, mapping and writing, and the folder's lock file. No policy:
// what to evict and when is cache_budget.h; what an entry file holds is entry_format.h.
//
// Rules every open here follows: O_CLOEXEC always; O_NOFOLLOW | O_NONBLOCK for files another
// process or user may have planted (a symlink is never ours, a FIFO must not block the open),
// then fstat() to make sure it is a regular file. Descriptors whose open file may carry a lock go
// through ForkRegistry, so that a forked child never keeps a lock alive.
// Thread safety: free functions and Mapping are safe on any thread; ForkRegistry is process-wide
// and locked; CacheFolderFiles' shared descriptor needs its mutex() (see FolderLock).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>  // NOLINT(modernize-deprecated-headers): POSIX timespec, clock_gettime

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cache/cache_counters.h"
#include "stoker/error.h"

namespace stoker {

/// kStorage: "stoker cache: <what> <path>: <strerror(err)>".
Status StorageError(const std::string& path, const std::string& what, int err);
std::string ErrnoText(int err);

/// An owned descriptor, closed on destruction (not registered: it never carries a lock that a
/// child could inherit).
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd();
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

/// Descriptors whose open file carries a lock (a key's lock, the folder lock, a temporary file's
/// flock, an entry's read lock). A child forked while one is open would inherit a reference to the
/// open file, and so keep its lock alive after the parent releases it by close() or dies: every
/// other process waiting on that key or folder would hang for the child's lifetime (think of
/// DataLoader workers forked while a pipeline thread fills). After fork(), the child points these
/// descriptors at /dev/null.
class ForkRegistry {
 public:
  static ForkRegistry& Instance();
  /// Opens and registers under one lock, so that no fork() falls in between. -1 with errno set.
  int Open(const char* path, int flags, mode_t mode);
  /// Unregisters and closes.
  void Close(int fd);

 private:
  ForkRegistry();
  static void Prepare();
  static void Parent();
  static void Child();

  std::mutex mutex_;
  std::vector<int> fds_;  // GUARDED_BY(mutex_)
};

/// An owned descriptor registered with ForkRegistry.
class GuardedFd {
 public:
  GuardedFd(const std::string& path, int flags, mode_t mode = 0)
      : fd_(ForkRegistry::Instance().Open(path.c_str(), flags, mode)) {}
  ~GuardedFd() {
    if (fd_ >= 0) ForkRegistry::Instance().Close(fd_);
  }
  GuardedFd(const GuardedFd&) = delete;
  GuardedFd& operator=(const GuardedFd&) = delete;
  int get() const { return fd_; }
  /// Hands the (still registered) descriptor to the caller, who closes it with
  /// ForkRegistry::Instance().Close().
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

timespec Now();

/// Marks an entry as used now: its atime, eviction's recency. Not the mtime, which is part of the
/// file version that KnownFiles trusts: another process's read must not make this one verify
/// the entry again. An explicit time (not UTIME_NOW, which has the kernel's coarse tick) keeps
/// the order of quick successive uses. Best effort: a shared folder written by another user
/// refuses it, and then recency falls back to the write time.
void MarkUsed(int fd);
/// Marks a just-written entry: atime and mtime now, to the nanosecond. A later write to the file
/// moves the mtime to the kernel's coarse tick, which differs, even within the same tick.
void MarkWritten(int fd);

/// Names in `path` except those starting with '.' (".", "..", and our own ".lock" / ".tmp"); a
/// missing or non-folder path lists as empty.
Status ListDir(const std::string& path, std::vector<std::string>* names);

/// Takes (or with wait=false, tries) the one-byte open-file-description lock at `offset`. OFD
/// locks belong to the open file, not the process, so they exclude threads that opened the file
/// separately, and the kernel drops them when their holder dies. False: held elsewhere
/// (wait=false).
Result<bool> LockByte(int fd, off_t offset, bool wait, const std::string& path);
void UnlockByte(int fd, off_t offset);

/// How many times an operation on the folder is tried while something removes it: a cleaner
/// still at work (rm -rf walking the folder) can take what was just made again. Between rounds,
/// PauseForRemoval(round) sleeps `round` ms (28 ms in all at most).
inline constexpr int kRemovalRounds = 8;
void PauseForRemoval(int round);

/// Entry files are locked on byte 0: a reader's read lock for as long as it maps the entry, an
/// evictor's write lock while it removes the file (see Mapping and EvictEntry).
inline constexpr off_t kEntryLockOffset = 0;

/// Takes a read (shared) or write lock on an entry file without waiting. 1: taken; 0: another
/// open file holds a conflicting lock; -1: locks do not work here (another error).
int TryLockEntry(int fd, bool write);

/// A read-only mapping of a whole file; it outlives unlink() and close(). While `Hold` keeps the
/// entry's descriptor with a read lock on it, eviction (in any process) leaves the file in place:
/// unlinking a mapped file would not give its space back, so the free-space floor would count on
/// bytes that are still taken.
class Mapping {
 public:
  Mapping(void* base, size_t size) : base_(base), size_(size) {}
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const uint8_t* data() const { return static_cast<const uint8_t*>(base_); }
  int64_t size() const { return static_cast<int64_t>(size_); }
  /// Whether it holds its entry's descriptor (and read lock): the entry stays in place.
  bool holds_lock() const { return fd_ >= 0; }

  /// Takes `fd` (registered with ForkRegistry, read-locked) until unmapped, or closes it at once
  /// when the process already holds as many as it may (a quarter of RLIMIT_NOFILE, 16-4096):
  /// a process holding many small entries must not run out of descriptors.
  void Hold(int fd);

 private:
  void* base_;
  size_t size_;
  int fd_ = -1;
};

/// Maps the first `size` bytes of `fd` read-only (and populated).
Result<std::shared_ptr<Mapping>> MapFile(int fd, int64_t size, const std::string& path);

/// Writes `iov` fully, at most 256 KiB per writev(); `on_write` (may be empty) runs after each
/// writev() with the bytes written so far.
Status WriteAll(int fd, std::vector<iovec> iov, const std::string& path,
                const std::function<void(int64_t)>& on_write);

/// Allocates `size` bytes for a new temporary file; false when the disk is full.
Result<bool> AllocateFile(int fd, int64_t size, const std::string& path);

/// Starts writing the file's dirty pages to the disk now (sync_file_range(SYNC_FILE_RANGE_WRITE)),
/// instead of when the kernel's flusher gets to them (30 s later, or when memory is full of dirty
/// pages). Returns once the pages are queued to the device, not written. Best effort.
void StartWriteBack(int fd);

/// Bytes of the file's pages still dirty or being written back (cachestat(), Linux 6.5+): a
/// probe that never waits. -1 where the kernel cannot tell (older kernels, seccomp).
int64_t UnwrittenBytes(int fd);

/// The kernel's dirty-page state, from /proc/vmstat: pages dirty or under write-back, in bytes,
/// and the level above which it puts writers to sleep inside write() until the disk catches up
/// (balance_dirty_pages; halfway between the background and the hard dirty thresholds).
struct DirtyPages {
  int64_t unwritten = 0;
  int64_t throttle_at = 0;
};
/// False when /proc/vmstat cannot be read.
bool ReadDirtyPages(DirtyPages* out);

/// The folder's structure: `dir`, its `.tmp/` (temporary files) and `.lock` (the folder lock, the
/// key locks and the used-bytes counter), made again when something removed them, and this
/// process's own descriptor of `.lock`.
class CacheFolderFiles {
 public:
  /// `counters` (not owned) counts a recreated folder and a foreign `.lock`.
  CacheFolderFiles(std::string dir, DiskCacheCounters* counters);
  ~CacheFolderFiles();
  CacheFolderFiles(const CacheFolderFiles&) = delete;
  CacheFolderFiles& operator=(const CacheFolderFiles&) = delete;

  const std::string& dir() const { return dir_; }
  const std::string& lock_path() const { return lock_path_; }
  const std::string& tmp_dir() const { return tmp_dir_; }

  /// A new descriptor of the lock file, registered with ForkRegistry (the caller closes it with
  /// ForkRegistry::Instance().Close()). Creates the folder's structure when it is missing; a FIFO,
  /// socket or symlink named `.lock` is removed (counted as foreign).
  Result<int> OpenLockFile() const;
  /// Creates the folder and its .tmp again when something removed them; kStorage when that is
  /// impossible (no permission, a file in the way).
  Status RecreateFolder() const;
  /// Whether `fd` is still the folder's lock file (not one removed or renamed away).
  bool IsCurrentLockFile(int fd) const;

  /// Serializes this process's holders of the folder lock, and guards the shared descriptor.
  std::mutex& mutex() const { return mutex_; }
  /// This process's descriptor of the lock file, opened on first use and again after fork() (a
  /// descriptor inherited from the parent would share the parent's locks). Needs mutex().
  Result<int> SharedFdLocked() const;
  /// Closes the shared descriptor (its file was replaced); the next SharedFdLocked() opens the
  /// current one. Needs mutex().
  void ForgetSharedFdLocked() const;

 private:
  const std::string dir_;
  const std::string lock_path_;
  const std::string tmp_dir_;
  DiskCacheCounters* const counters_;
  mutable std::mutex mutex_;
  mutable int lock_fd_ = -1;      // GUARDED_BY(mutex_)
  mutable int lock_fd_pid_ = -1;  // GUARDED_BY(mutex_)
};

}  // namespace stoker
