#include "cache/cache_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>

namespace stoker {
namespace {

// Bytes per writev(): a system call's return is where a kernel without preemption (Firecracker
// guests: PREEMPT_NONE) can switch to a woken worker; an 8 MiB copy into the page cache held a
// core for 10-25 ms there (the many-outputs set's filling epoch: 0.74 -> ~0.8 of no cache, medians
// of 3 runs of 5 epochs, and a tighter spread).
constexpr int64_t kWriteChunk = int64_t{256} << 10;
constexpr size_t kMaxIov = 512;

// Descriptors (with their read locks) that one process keeps for entries it maps. Beyond this
// many, a mapping is not protected from eviction (its space then comes back only once it is
// unmapped): a process holding many small entries must not run out of descriptors.
int MaxHeldEntryFds() {
  static const int cap = [] {
    rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 256;
    return static_cast<int>(std::clamp<rlim_t>(limit.rlim_cur / 4, 16, 4096));
  }();
  return cap;
}
std::atomic<int> held_entry_fds{0};

}  // namespace

std::string ErrnoText(int err) { return std::system_category().message(err); }

Status StorageError(const std::string& path, const std::string& what, int err) {
  return MakeError(ErrorKind::kStorage,
                   "stoker cache: " + what + " " + path + ": " + ErrnoText(err));
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

// ---- ForkRegistry ----------------------------------------------------------------------------

ForkRegistry& ForkRegistry::Instance() {
  static ForkRegistry* registry = new ForkRegistry();  // never destroyed: atfork handlers
  return *registry;
}

int ForkRegistry::Open(const char* path, int flags, mode_t mode) {
  std::lock_guard<std::mutex> guard(mutex_);
  const int fd = ::open(path, flags, mode);
  if (fd >= 0) fds_.push_back(fd);
  return fd;
}

void ForkRegistry::Close(int fd) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    fds_.erase(std::remove(fds_.begin(), fds_.end(), fd), fds_.end());
  }
  ::close(fd);
}

ForkRegistry::ForkRegistry() { pthread_atfork(&Prepare, &Parent, &Child); }
void ForkRegistry::Prepare() { Instance().mutex_.lock(); }
void ForkRegistry::Parent() { Instance().mutex_.unlock(); }

void ForkRegistry::Child() {
  ForkRegistry& registry = Instance();
  // dup2() rather than close(): the descriptor numbers stay valid for their owners' own
  // close() (the forking thread may be one of them), but no longer reach the locked files.
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (int fd : registry.fds_) {
    if (null_fd >= 0) {
      ::dup3(null_fd, fd, O_CLOEXEC);
    } else {
      ::close(fd);
    }
  }
  if (null_fd >= 0) ::close(null_fd);
  registry.fds_.clear();
  registry.mutex_.unlock();
}

// ---- Small file operations -------------------------------------------------------------------

timespec Now() {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return now;
}

void MarkUsed(int fd) {
  const timespec times[2] = {Now(), {0, UTIME_OMIT}};
  (void)futimens(fd, times);
}

void MarkWritten(int fd) {
  const timespec now = Now();
  const timespec times[2] = {now, now};
  (void)futimens(fd, times);
}

Status ListDir(const std::string& path, std::vector<std::string>* names) {
  names->clear();
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) {
    if (errno == ENOENT || errno == ENOTDIR) return Status::OK();
    return StorageError(path, "cannot list", errno);
  }
  while (const dirent* item = readdir(dir)) {
    if (item->d_name[0] == '.') continue;  // ".", "..", and our own ".lock" / ".tmp"
    names->emplace_back(item->d_name);
  }
  closedir(dir);
  return Status::OK();
}

Result<bool> LockByte(int fd, off_t offset, bool wait, const std::string& path) {
  struct flock lock = {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = offset;
  lock.l_len = 1;
  for (;;) {
    if (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &lock) == 0) return true;
    if (errno == EINTR) continue;
    if (!wait && (errno == EAGAIN || errno == EACCES)) return false;
    return StorageError(path, "cannot lock", errno);
  }
}

void UnlockByte(int fd, off_t offset) {
  struct flock lock = {};
  lock.l_type = F_UNLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = offset;
  lock.l_len = 1;
  (void)fcntl(fd, F_OFD_SETLK, &lock);
}

int TryLockEntry(int fd, bool write) {
  struct flock lock = {};
  lock.l_type = write ? F_WRLCK : F_RDLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = kEntryLockOffset;
  lock.l_len = 1;
  while (fcntl(fd, F_OFD_SETLK, &lock) != 0) {
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EACCES ? 0 : -1;
  }
  return 1;
}

// ---- Mapping and writing ---------------------------------------------------------------------

Mapping::~Mapping() {
  munmap(base_, size_);
  if (fd_ < 0) return;
  ForkRegistry::Instance().Close(fd_);  // releases the read lock
  held_entry_fds.fetch_sub(1, std::memory_order_relaxed);
}

void Mapping::Hold(int fd) {
  if (held_entry_fds.fetch_add(1, std::memory_order_relaxed) < MaxHeldEntryFds()) {
    fd_ = fd;
    return;
  }
  held_entry_fds.fetch_sub(1, std::memory_order_relaxed);
  ForkRegistry::Instance().Close(fd);
}

Result<std::shared_ptr<Mapping>> MapFile(int fd, int64_t size, const std::string& path) {
  void* base =
      mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) return StorageError(path, "cannot map", errno);
  return std::make_shared<Mapping>(base, static_cast<size_t>(size));
}

Status WriteAll(int fd, std::vector<iovec> iov, const std::string& path,
                const std::function<void(int64_t)>& on_write) {
  size_t index = 0;
  int64_t written = 0;
  std::vector<iovec> batch;
  while (index < iov.size()) {
    if (iov[index].iov_len == 0) {
      ++index;
      continue;
    }
    batch.clear();
    int64_t bytes = 0;
    for (size_t i = index; i < iov.size() && batch.size() < kMaxIov && bytes < kWriteChunk; ++i) {
      iovec piece = iov[i];
      piece.iov_len = std::min<size_t>(piece.iov_len, static_cast<size_t>(kWriteChunk - bytes));
      batch.push_back(piece);
      bytes += static_cast<int64_t>(piece.iov_len);
    }
    const ssize_t n = writev(fd, batch.data(), static_cast<int>(batch.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return StorageError(path, "cannot write", n < 0 ? errno : ENOSPC);
    written += n;
    size_t left = static_cast<size_t>(n);
    while (left > 0) {
      if (left >= iov[index].iov_len) {
        left -= iov[index].iov_len;
        ++index;
      } else {
        iov[index].iov_base = static_cast<char*>(iov[index].iov_base) + left;
        iov[index].iov_len -= left;
        left = 0;
      }
    }
    if (on_write) on_write(written);
  }
  return Status::OK();
}

Result<bool> AllocateFile(int fd, int64_t size, const std::string& path) {
  const int err = posix_fallocate(fd, 0, static_cast<off_t>(size));
  if (err == 0) return true;
  if (err == ENOSPC || err == EDQUOT) return false;
  if (err == EINTR || err == EOPNOTSUPP || err == EINVAL) {
    // No allocation on this file system: at least give the file its size, so that other
    // writers count it against the budget (the floor then relies on statvfs() alone).
    if (ftruncate(fd, static_cast<off_t>(size)) == 0) return true;
    return StorageError(path, "cannot size", errno);
  }
  return StorageError(path, "cannot allocate", err);
}

void StartWriteBack(int fd) { (void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE); }

int64_t UnwrittenBytes(int fd) {
  // cachestat(2) is newer than the C library's headers: its number is 451 on every architecture.
  constexpr long kCachestat = 451;  // NOLINT(google-runtime-int): syscall()'s type
  struct {
    uint64_t off, len;
  } range = {0, 0};  // 0: to the end of the file
  struct {
    uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
  } stat = {};
  static std::atomic<bool> unsupported{false};
  if (unsupported.load(std::memory_order_relaxed)) return -1;
  if (syscall(kCachestat, fd, &range, &stat, 0) != 0) {
    if (errno == ENOSYS || errno == EPERM) unsupported.store(true, std::memory_order_relaxed);
    return -1;
  }
  static const int64_t page = sysconf(_SC_PAGESIZE);
  return static_cast<int64_t>(stat.nr_dirty + stat.nr_writeback) * page;
}

bool ReadDirtyPages(DirtyPages* out) {
  Fd fd(open("/proc/vmstat", O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return false;
  char buffer[16384];
  ssize_t size = 0;
  while (size < static_cast<ssize_t>(sizeof(buffer)) - 1) {
    const ssize_t n = read(fd.get(), buffer + size, sizeof(buffer) - 1 - size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    size += n;
  }
  buffer[size] = '\0';
  int64_t dirty = -1, writeback = -1, threshold = -1, background = -1;
  for (char* line = buffer; line != nullptr && *line != '\0';) {
    char* next = std::strchr(line, '\n');
    if (next != nullptr) *next++ = '\0';
    char name[64];
    long long value = 0;  // NOLINT(google-runtime-int): sscanf's type
    if (std::sscanf(line, "%63s %lld", name, &value) == 2) {
      if (std::strcmp(name, "nr_dirty") == 0) dirty = value;
      if (std::strcmp(name, "nr_writeback") == 0) writeback = value;
      if (std::strcmp(name, "nr_dirty_threshold") == 0) threshold = value;
      if (std::strcmp(name, "nr_dirty_background_threshold") == 0) background = value;
    }
    line = next;
  }
  if (dirty < 0 || writeback < 0 || threshold <= 0 || background < 0) return false;
  static const int64_t page = sysconf(_SC_PAGESIZE);
  out->unwritten = (dirty + writeback) * page;
  out->throttle_at = (threshold + background) / 2 * page;
  return true;
}

// ---- CacheFolderFiles ------------------------------------------------------------------------

CacheFolderFiles::CacheFolderFiles(std::string dir, DiskCacheCounters* counters)
    : dir_(std::move(dir)),
      lock_path_(dir_ + "/.lock"),
      tmp_dir_(dir_ + "/.tmp"),
      counters_(counters) {}

CacheFolderFiles::~CacheFolderFiles() {
  if (lock_fd_ >= 0) ForkRegistry::Instance().Close(lock_fd_);
}

Result<int> CacheFolderFiles::SharedFdLocked() const {
  const int pid = static_cast<int>(getpid());
  if (lock_fd_ >= 0 && lock_fd_pid_ == pid) return lock_fd_;
  // After fork() the inherited descriptor shares its open file, hence its locks, with the parent.
  if (lock_fd_ >= 0) ::close(lock_fd_);  // (in the child, ForkRegistry made it /dev/null)
  lock_fd_ = -1;
  STOKER_ASSIGN_OR_RAISE(lock_fd_, OpenLockFile());
  lock_fd_pid_ = pid;
  return lock_fd_;
}

void CacheFolderFiles::ForgetSharedFdLocked() const {
  if (lock_fd_ < 0) return;
  if (lock_fd_pid_ == static_cast<int>(getpid())) {
    ForkRegistry::Instance().Close(lock_fd_);
  } else {
    ::close(lock_fd_);  // inherited: no longer registered (ForkRegistry made it /dev/null)
  }
  lock_fd_ = -1;
}

Result<int> CacheFolderFiles::OpenLockFile() const {
  constexpr int kFlags = O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  int err = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int fd = ForkRegistry::Instance().Open(lock_path_.c_str(), kFlags, 0666);
    if (fd >= 0) {
      struct stat st;
      if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) return fd;
      ForkRegistry::Instance().Close(fd);
      err = EINVAL;
    } else {
      err = errno;
      // The folder was removed (rm -rf, a tmp cleaner, a rename): make it again.
      if (err == ENOENT) STOKER_RETURN_NOT_OK(RecreateFolder());
      if (err != ELOOP) continue;
    }
    // A FIFO, socket or symlink named .lock: never ours, and never a lock file.
    struct stat st;
    if (lstat(lock_path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
      counters_->foreign.fetch_add(1, std::memory_order_relaxed);
      (void)unlink(lock_path_.c_str());
    }
  }
  return StorageError(lock_path_, "cannot open", err);
}

void PauseForRemoval(int round) { std::this_thread::sleep_for(std::chrono::milliseconds(round)); }

bool CacheFolderFiles::IsCurrentLockFile(int fd) const {
  struct stat held, current;
  return fstat(fd, &held) == 0 && lstat(lock_path_.c_str(), &current) == 0 &&
         held.st_ino == current.st_ino && held.st_dev == current.st_dev;
}

Status CacheFolderFiles::RecreateFolder() const {
  // A few rounds: a cleaner still at work (rm -rf) may remove what was just made.
  Status status;
  for (int round = 0; round < kRemovalRounds; ++round) {
    PauseForRemoval(round);
    std::error_code error;
    bool made = std::filesystem::create_directories(dir_, error);
    struct stat st;
    if (stat(dir_.c_str(), &st) != 0) {
      status = StorageError(dir_, "cannot create", error ? error.value() : errno);
      continue;
    }
    if (!S_ISDIR(st.st_mode)) return StorageError(dir_, "cannot create", ENOTDIR);
    if (mkdir(tmp_dir_.c_str(), 0777) == 0) {
      made = true;
    } else if (errno != EEXIST) {
      status = StorageError(tmp_dir_, "cannot create", errno);
      continue;
    }
    if (made) counters_->recreated.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  }
  return status;
}

}  // namespace stoker
