#include "cache/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <system_error>
#include <tuple>

namespace stoker {
namespace {

// Entry file: EntryHeader, namespace bytes, key bytes, zero padding to a multiple of 64, payload.
// Fields are native-endian: the cache is node-local.
constexpr char kMagic[8] = {'S', 'T', 'K', 'C', 'A', 'C', 'H', 'E'};
constexpr uint32_t kFormatVersion = 1;
constexpr int64_t kAlign = 64;
constexpr size_t kMaxKeyBytes = size_t{1} << 20;
constexpr size_t kMaxNamespaceBytes = 64;
constexpr int64_t kWriteChunk = int64_t{8} << 20;
constexpr size_t kMaxIov = 512;
// A temporary file that nobody holds locked and that has not changed for this long is abandoned
// even if its writer's pid is alive (pid reuse, or another pid namespace).
constexpr int64_t kStaleTempSeconds = 600;
constexpr uint64_t kNameSeed2 = 0x5374b0e7c0ffee11ULL;
// Byte 0 of the lock file is the folder lock (accounting, eviction, commits); every key's
// GetOrFill lock is one byte at an offset >= 1 derived from the key's hash. Bytes 0-7 of the
// file's content hold the used-bytes counter (content and lock ranges are unrelated).
constexpr off_t kFolderLockOffset = 0;

struct EntryHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // offset of the payload, a multiple of kAlign
  uint32_t ns_size;
  uint32_t key_size;
  uint64_t payload_size;
  uint64_t payload_checksum;  // XXH64 of the payload
  uint64_t header_checksum;   // XXH64 of the bytes before the payload (with this field 0)
  uint8_t reserved[16];
};
static_assert(sizeof(EntryHeader) == 64, "the payload offset math assumes a 64-byte header");

int64_t RoundUp(int64_t value, int64_t align) { return (value + align - 1) / align * align; }

// Streaming XXH64 (libxxhash). The state is the library's own allocation: its layout is not part
// of the shared library's ABI (XXH_STATIC_LINKING_ONLY would tie the build to one version).
class Xxh64Stream {
 public:
  explicit Xxh64Stream(uint64_t seed = 0) : state_(XXH64_createState()) {
    if (state_ == nullptr) throw std::bad_alloc();
    XXH64_reset(state_.get(), seed);
  }
  void Update(const void* data, size_t size) { XXH64_update(state_.get(), data, size); }
  uint64_t Digest() const { return XXH64_digest(state_.get()); }

 private:
  struct Free {
    void operator()(XXH64_state_t* state) const { XXH64_freeState(state); }
  };
  std::unique_ptr<XXH64_state_t, Free> state_;
};

int64_t HeaderBytes(size_t ns_size, size_t key_size) {
  return RoundUp(static_cast<int64_t>(sizeof(EntryHeader) + ns_size + key_size), kAlign);
}

// Covers every byte before the payload: the header, namespace, key and padding.
uint64_t HeaderChecksum(const EntryHeader& header, const uint8_t* rest) {
  EntryHeader copy = header;
  copy.header_checksum = 0;
  Xxh64Stream hash;
  hash.Update(&copy, sizeof(copy));
  hash.Update(rest, header.header_bytes - sizeof(EntryHeader));
  return hash.Digest();
}

std::string ErrnoText(int err) { return std::system_category().message(err); }

Status StorageError(const std::string& path, const std::string& what, int err) {
  return MakeError(ErrorKind::kStorage,
                   "stoker cache: " + what + " " + path + ": " + ErrnoText(err));
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Descriptors whose open file carries a lock (a key's lock, the folder lock, a temporary file's
// flock). A child forked while one is open would inherit a reference to the open file, and so keep
// its lock alive after the parent releases it by close() or dies: every other process waiting on
// that key or folder would hang for the child's lifetime (think of DataLoader workers forked
// while a pipeline thread fills). After fork(), the child points these descriptors at /dev/null.
class ForkRegistry {
 public:
  static ForkRegistry& Instance() {
    static ForkRegistry* registry = new ForkRegistry();  // never destroyed: atfork handlers
    return *registry;
  }
  // Opens and registers under one lock, so that no fork() falls in between.
  int Open(const char* path, int flags, mode_t mode) {
    std::lock_guard<std::mutex> guard(mutex_);
    const int fd = ::open(path, flags, mode);
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }
  void Close(int fd) {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      fds_.erase(std::remove(fds_.begin(), fds_.end(), fd), fds_.end());
    }
    ::close(fd);
  }

 private:
  ForkRegistry() { pthread_atfork(&Prepare, &Parent, &Child); }
  static void Prepare() { Instance().mutex_.lock(); }
  static void Parent() { Instance().mutex_.unlock(); }
  static void Child() {
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

  std::mutex mutex_;
  std::vector<int> fds_;  // GUARDED_BY(mutex_)
};

// An owned descriptor registered with ForkRegistry.
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

struct KeyName {
  std::string hex;  // 32 hex digits: the file name
  off_t lock_offset;
};

KeyName NameOf(const std::string& ns, const std::string& key) {
  // The namespace has no NUL byte, so "ns\0key" is unambiguous.
  uint64_t digests[2];
  const uint64_t seeds[2] = {0, kNameSeed2};
  for (int i = 0; i < 2; ++i) {
    Xxh64Stream hash(seeds[i]);
    hash.Update(ns.data(), ns.size());
    hash.Update("", 1);
    hash.Update(key.data(), key.size());
    digests[i] = hash.Digest();
  }
  static const char kHex[] = "0123456789abcdef";
  KeyName name;
  name.hex.resize(32);
  for (int i = 0; i < 32; ++i) {
    name.hex[i] = kHex[(digests[i / 16] >> (60 - 4 * (i % 16))) & 0xF];
  }
  name.lock_offset = static_cast<off_t>(1 + (digests[0] >> 2));
  return name;
}

bool IsHex(const std::string& text, size_t size) {
  if (text.size() != size) return false;
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool IsNamespace(const std::string& ns) {
  if (ns.empty() || ns.size() > kMaxNamespaceBytes) return false;
  return std::all_of(ns.begin(), ns.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

Status CheckNameAndKey(const std::string& dir, const std::string& ns, const std::string& key) {
  if (!IsNamespace(ns)) {
    return MakeError(ErrorKind::kInvalidOption, "stoker cache " + dir + ": namespace '" + ns +
                                                    "' must be 1-64 characters of [A-Za-z0-9_-]");
  }
  if (key.size() > kMaxKeyBytes) {
    return MakeError(ErrorKind::kInvalidOption, "stoker cache " + dir + ": a key of " +
                                                    std::to_string(key.size()) +
                                                    " bytes is longer than 1 MiB");
  }
  return Status::OK();
}

timespec Now() {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return now;
}

// Marks an entry as used now. An explicit time (not UTIME_NOW, which has the kernel's coarse
// tick) keeps the order of quick successive uses. Best effort: a shared folder written by another
// user refuses it, and then recency falls back to the write time.
void Touch(int fd) {
  const timespec times[2] = {{0, UTIME_OMIT}, Now()};
  (void)futimens(fd, times);
}

// Names in `path`; a missing or non-folder path lists as empty.
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

struct ScannedEntry {
  timespec used;
  int64_t size;
  std::string path;
  dev_t dev;
  ino_t ino;
};

// Every committed entry: <dir>/<namespace>/<2 hex>/<32 hex>. Anything else is not ours.
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
            {st.st_mtim, static_cast<int64_t>(st.st_size), std::move(path), st.st_dev, st.st_ino});
      }
    }
  }
  return Status::OK();
}

// Takes (or with wait=false, tries) the one-byte open-file-description lock at `offset`. OFD
// locks belong to the open file, not the process, so they exclude threads that opened the file
// separately, and the kernel drops them when their holder dies.
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

// Entry files are locked on byte 0: a reader's read lock for as long as it maps the entry, an
// evictor's write lock while it removes the file (see Mapping and EvictEntry).
constexpr off_t kEntryLockOffset = 0;

// Takes a read (shared) or write lock on an entry file without waiting. 1: taken; 0: another
// open file holds a conflicting lock; -1: locks do not work here (another error).
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

// A read-only mapping of a whole file; it outlives unlink() and close(). While `Hold` keeps the
// entry's descriptor with a read lock on it, eviction (in any process) leaves the file in place:
// unlinking a mapped file would not give its space back, so the free-space floor would count on
// bytes that are still taken.
class Mapping {
 public:
  Mapping(void* base, size_t size) : base_(base), size_(size) {}
  ~Mapping() {
    munmap(base_, size_);
    if (fd_ < 0) return;
    ForkRegistry::Instance().Close(fd_);  // releases the read lock
    held_entry_fds.fetch_sub(1, std::memory_order_relaxed);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const uint8_t* data() const { return static_cast<const uint8_t*>(base_); }

  // Takes `fd` (registered with ForkRegistry, read-locked) until unmapped, or closes it at once
  // when the process already holds MaxHeldEntryFds().
  void Hold(int fd) {
    if (held_entry_fds.fetch_add(1, std::memory_order_relaxed) < MaxHeldEntryFds()) {
      fd_ = fd;
      return;
    }
    held_entry_fds.fetch_sub(1, std::memory_order_relaxed);
    ForkRegistry::Instance().Close(fd);
  }

 private:
  void* base_;
  size_t size_;
  int fd_ = -1;
};

Result<std::shared_ptr<Mapping>> MapFile(int fd, int64_t size, const std::string& path) {
  void* base =
      mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) return StorageError(path, "cannot map", errno);
  return std::make_shared<Mapping>(base, static_cast<size_t>(size));
}

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

// Writes `iov` fully, at most kWriteChunk bytes per writev().
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

std::shared_ptr<CacheEntry> CopyToMemory(const DiskCache::Parts& parts) {
  size_t size = 0;
  for (const auto& part : parts) size += part.second;
  auto* buffer =
      static_cast<uint8_t*>(::operator new (std::max<size_t>(size, 1), std::align_val_t{kAlign}));
  std::shared_ptr<const void> owner(buffer, [](const void* p) {
    ::operator delete (const_cast<void*>(p), std::align_val_t{kAlign});
  });
  size_t offset = 0;
  for (const auto& part : parts) {
    if (part.second > 0) std::memcpy(buffer + offset, part.first, part.second);
    offset += part.second;
  }
  return std::make_shared<CacheEntry>(buffer, static_cast<int64_t>(size), std::move(owner));
}

}  // namespace

// Holds the folder lock: this process's mutex, then byte 0 of the lock file.
class DiskCache::FolderLock {
 public:
  explicit FolderLock(const DiskCache* cache) : cache_(cache), guard_(cache->folder_mutex_) {}
  ~FolderLock() {
    if (locked_) UnlockByte(fd_, kFolderLockOffset);
  }
  Status Acquire() {
    for (int attempt = 0;; ++attempt) {
      STOKER_ASSIGN_OR_RAISE(fd_, cache_->LockFd());
      STOKER_ASSIGN_OR_RAISE(locked_, LockByte(fd_, kFolderLockOffset, true, cache_->lock_path_));
      // A lock on a lock file that was removed or renamed away (with its folder) no longer
      // excludes processes that opened the new one: start again on the current file, whose
      // used-bytes counter then has to be counted afresh.
      if (cache_->IsCurrentLockFile(fd_))
        return attempt == 0 ? Status::OK() : cache_->RecountLocked();
      UnlockByte(fd_, kFolderLockOffset);
      locked_ = false;
      cache_->ForgetLockFdLocked();
      if (attempt == 2) return StorageError(cache_->lock_path_, "keeps being replaced:", ESTALE);
    }
  }
  int fd() const { return fd_; }

 private:
  const DiskCache* cache_;
  std::lock_guard<std::mutex> guard_;
  int fd_ = -1;
  bool locked_ = false;
};

DiskCache::DiskCache(DiskCacheOptions options)
    : options_(std::move(options)),
      lock_path_(options_.dir + "/.lock"),
      tmp_dir_(options_.dir + "/.tmp") {}

DiskCache::~DiskCache() {
  if (lock_fd_ >= 0) ForkRegistry::Instance().Close(lock_fd_);
}

Result<std::shared_ptr<DiskCache>> DiskCache::Open(const DiskCacheOptions& options) {
  if (options.dir.empty()) {
    return MakeError(ErrorKind::kInvalidOption, "cache_dir is empty");
  }
  if (options.max_bytes <= 0) {
    return MakeError(ErrorKind::kInvalidOption, "cache_bytes must be positive, got " +
                                                    std::to_string(options.max_bytes) +
                                                    " (cache_dir " + options.dir + ")");
  }
  if (options.min_free_bytes < 0) {
    return MakeError(ErrorKind::kInvalidOption, "cache_min_free_bytes must be >= 0, got " +
                                                    std::to_string(options.min_free_bytes) +
                                                    " (cache_dir " + options.dir + ")");
  }
  std::error_code error;
  std::filesystem::create_directories(options.dir, error);
  if (error || !std::filesystem::is_directory(options.dir)) {
    return MakeError(ErrorKind::kInvalidOption,
                     "cache_dir " + options.dir + " is not a usable folder" +
                         (error ? ": " + error.message() : std::string()));
  }
  // An absolute path: a later chdir() must not move the cache.
  DiskCacheOptions normalized = options;
  std::string absolute = std::filesystem::absolute(options.dir, error).lexically_normal().string();
  while (absolute.size() > 1 && absolute.back() == '/') absolute.pop_back();
  if (!error) normalized.dir = absolute;
  std::shared_ptr<DiskCache> cache(new DiskCache(std::move(normalized)));
  if (mkdir(cache->tmp_dir_.c_str(), 0777) != 0 && errno != EEXIST) {
    return MakeError(ErrorKind::kInvalidOption, "cache_dir " + options.dir +
                                                    " is not writable: cannot create " +
                                                    cache->tmp_dir_ + ": " + ErrnoText(errno));
  }
  FolderLock lock(cache.get());
  Status status = lock.Acquire();
  if (!status.ok()) {
    return MakeError(ErrorKind::kInvalidOption,
                     "cache_dir " + options.dir + " is not usable: " + status.message());
  }
  STOKER_RETURN_NOT_OK(cache->CleanTempsLocked());
  STOKER_RETURN_NOT_OK(cache->RecountLocked());
  return cache;
}

std::string DiskCache::EntryPath(const std::string& ns, const std::string& key) const {
  const KeyName name = NameOf(ns, key);
  return options_.dir + "/" + ns + "/" + name.hex.substr(0, 2) + "/" + name.hex;
}

Result<int> DiskCache::LockFd() const {
  const int pid = static_cast<int>(getpid());
  if (lock_fd_ >= 0 && lock_fd_pid_ == pid) return lock_fd_;
  // After fork() the inherited descriptor shares its open file, hence its locks, with the parent.
  if (lock_fd_ >= 0) ::close(lock_fd_);  // (in the child, ForkRegistry made it /dev/null)
  lock_fd_ = -1;
  STOKER_ASSIGN_OR_RAISE(lock_fd_, OpenLockFile());
  lock_fd_pid_ = pid;
  return lock_fd_;
}

void DiskCache::ForgetLockFdLocked() const {
  if (lock_fd_ < 0) return;
  if (lock_fd_pid_ == static_cast<int>(getpid())) {
    ForkRegistry::Instance().Close(lock_fd_);
  } else {
    ::close(lock_fd_);  // inherited: no longer registered (ForkRegistry made it /dev/null)
  }
  lock_fd_ = -1;
}

Result<int> DiskCache::OpenLockFile() const {
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
      counters_.foreign.fetch_add(1, std::memory_order_relaxed);
      (void)unlink(lock_path_.c_str());
    }
  }
  return StorageError(lock_path_, "cannot open", err);
}

bool DiskCache::IsCurrentLockFile(int fd) const {
  struct stat held, current;
  return fstat(fd, &held) == 0 && lstat(lock_path_.c_str(), &current) == 0 &&
         held.st_ino == current.st_ino && held.st_dev == current.st_dev;
}

Status DiskCache::RecreateFolder() const {
  // A few rounds: a cleaner still at work (rm -rf) may remove what was just made.
  Status status;
  for (int round = 0; round < 3; ++round) {
    std::error_code error;
    bool made = std::filesystem::create_directories(options_.dir, error);
    struct stat st;
    if (stat(options_.dir.c_str(), &st) != 0) {
      status = StorageError(options_.dir, "cannot create", error ? error.value() : errno);
      continue;
    }
    if (!S_ISDIR(st.st_mode)) return StorageError(options_.dir, "cannot create", ENOTDIR);
    if (mkdir(tmp_dir_.c_str(), 0777) == 0) {
      made = true;
    } else if (errno != EEXIST) {
      status = StorageError(tmp_dir_, "cannot create", errno);
      continue;
    }
    if (made) counters_.recreated.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  }
  return status;
}

void DiskCache::Unavailable(const Status& why) const {
  counters_.unavailable.fetch_add(1, std::memory_order_relaxed);
  if (warned_.exchange(true)) return;
  std::fprintf(stderr,
               "stoker: warning: cannot use the cache folder %s (%s); going on without the cache "
               "where it fails (stats()[\"cache\"][\"unavailable\"] counts those operations)\n",
               options_.dir.c_str(), why.message().c_str());
}

void DiskCache::DropForeign(const std::string& path, const struct stat& judged) {
  counters_.foreign.fetch_add(1, std::memory_order_relaxed);
  FolderLock lock(this);
  if (!lock.Acquire().ok()) return;
  // Only the file judged: a writer may have renamed an entry there meanwhile.
  struct stat current;
  if (lstat(path.c_str(), &current) != 0 || current.st_ino != judged.st_ino ||
      current.st_dev != judged.st_dev) {
    return;
  }
  // A folder goes only when empty; anything else is left alone (and stays a miss).
  if (S_ISDIR(current.st_mode)) {
    (void)rmdir(path.c_str());
  } else if (!S_ISREG(current.st_mode)) {
    (void)unlink(path.c_str());
  }
}

Result<int64_t> DiskCache::ReadUsedLocked() const {
  int64_t used = 0;
  const ssize_t n = pread(lock_fd_, &used, sizeof(used), 0);
  if (n < 0) return StorageError(lock_path_, "cannot read", errno);
  return n == sizeof(used) ? std::max<int64_t>(used, 0) : 0;
}

Status DiskCache::WriteUsedLocked(int64_t used) const {
  used = std::max<int64_t>(used, 0);
  if (pwrite(lock_fd_, &used, sizeof(used), 0) != sizeof(used)) {
    return StorageError(lock_path_, "cannot write", errno);
  }
  return Status::OK();
}

Status DiskCache::RecountLocked() const {
  std::vector<ScannedEntry> entries;
  STOKER_RETURN_NOT_OK(ScanEntries(options_.dir, &entries));
  int64_t used = 0;
  for (const auto& entry : entries) used += entry.size;
  return WriteUsedLocked(used);
}

Status DiskCache::CleanTempsLocked() const {
  std::vector<std::string> names;
  STOKER_RETURN_NOT_OK(ListDir(tmp_dir_, &names));
  const timespec now = Now();
  for (const auto& name : names) {
    const std::string path = tmp_dir_ + "/" + name;
    // <32 hex>.<pid>.<seq>.tmp
    long pid = 0;
    const size_t dot = name.find('.');
    if (dot != std::string::npos) pid = std::strtol(name.c_str() + dot + 1, nullptr, 10);
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

Result<int64_t> DiskCache::FreeBytes() const {
  if (options_.free_bytes_for_testing) return options_.free_bytes_for_testing();
  struct statvfs fs;
  if (statvfs(options_.dir.c_str(), &fs) != 0)
    return StorageError(options_.dir, "cannot statvfs", errno);
  return static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
}

Result<bool> DiskCache::EvictLocked(int64_t incoming_bytes, int64_t incoming_disk_bytes) {
  STOKER_ASSIGN_OR_RAISE(int64_t used, ReadUsedLocked());
  STOKER_ASSIGN_OR_RAISE(const int64_t free_bytes, FreeBytes());
  const int64_t max_bytes = options_.max_bytes;
  const int64_t floor = options_.min_free_bytes;
  if (used + incoming_bytes <= max_bytes && free_bytes - incoming_disk_bytes >= floor) return true;

  // Count from the folder itself: this also repairs a counter left stale by a killed writer.
  std::vector<ScannedEntry> entries;
  STOKER_RETURN_NOT_OK(ScanEntries(options_.dir, &entries));
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
      (void)WriteUsedLocked(used - freed);
      return evicted.status();
    }
    if (*evicted == Evicted::kInUse) counters_.kept_in_use.fetch_add(1, std::memory_order_relaxed);
    if (*evicted != Evicted::kRemoved) continue;
    freed += entry.size;
    counters_.evictions.fetch_add(1, std::memory_order_relaxed);
  }
  used -= freed;
  STOKER_RETURN_NOT_OK(WriteUsedLocked(used));
  if (used + incoming_bytes > max_bytes) return false;
  // The space that actually came back: a removed entry that a process still maps (one its
  // locks do not cover) keeps its space until it is unmapped.
  STOKER_ASSIGN_OR_RAISE(const int64_t free_now, freed > 0 ? FreeBytes() : free_bytes);
  return free_now - incoming_disk_bytes >= floor;
}

Result<int64_t> DiskCache::ReservedBytesLocked() const {
  std::vector<std::string> names;
  STOKER_RETURN_NOT_OK(ListDir(tmp_dir_, &names));
  int64_t reserved = 0;
  for (const auto& name : names) {
    struct stat st;
    if (lstat((tmp_dir_ + "/" + name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      reserved += static_cast<int64_t>(st.st_size);
    }
  }
  return reserved;
}

Result<bool> DiskCache::ReserveLocked(int64_t file_size) {
  STOKER_ASSIGN_OR_RAISE(int64_t reserved, ReservedBytesLocked());
  if (reserved > 0 && reserved + file_size > options_.max_bytes) {
    // Temporary files of dead writers count until removed: remove them, then look again.
    STOKER_RETURN_NOT_OK(CleanTempsLocked());
    STOKER_ASSIGN_OR_RAISE(reserved, ReservedBytesLocked());
  }
  // Entries being written by others fill the budget first: evicting would not make room.
  if (reserved + file_size > options_.max_bytes) return false;
  // statvfs() already counts the others' reservations (allocated at full size): only this
  // entry's bytes are still to come off the free space.
  return EvictLocked(reserved + file_size, file_size);
}

Result<bool> DiskCache::Allocate(int fd, int64_t size, const std::string& path) {
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

Status DiskCache::DropCorrupt(const std::string& path, int fd) {
  FolderLock lock(this);
  STOKER_RETURN_NOT_OK(lock.Acquire());
  // Unlink only the file we judged: a writer may have renamed a good entry over it meanwhile.
  struct stat judged, current;
  if (fstat(fd, &judged) != 0) return StorageError(path, "cannot stat", errno);
  if (stat(path.c_str(), &current) != 0 || current.st_ino != judged.st_ino ||
      current.st_dev != judged.st_dev) {
    return Status::OK();
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return StorageError(path, "cannot remove corrupt entry", errno);
  }
  STOKER_ASSIGN_OR_RAISE(const int64_t used, ReadUsedLocked());
  return WriteUsedLocked(used - static_cast<int64_t>(judged.st_size));
}

Result<std::shared_ptr<CacheEntry>> DiskCache::Lookup(const std::string& ns, const std::string& key,
                                                      bool count_miss) {
  STOKER_RETURN_NOT_OK(CheckNameAndKey(options_.dir, ns, key));
  const std::string path = EntryPath(ns, key);
  auto miss = [&]() -> std::shared_ptr<CacheEntry> {
    if (count_miss) counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  };
  auto unavailable = [&](const std::string& what, int err) {
    Unavailable(StorageError(path, what, err));
    return miss();
  };
  // O_NONBLOCK: opening a FIFO planted at the path must not wait for a writer; O_NOFOLLOW: a
  // symlink is never an entry. Registered: the descriptor may end up holding a lock (below).
  GuardedFd fd(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  struct stat st;
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ENOENT) return miss();
    // ELOOP: a symlink; ENXIO: a socket.
    if ((err == ELOOP || err == ENXIO) && lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      DropForeign(path, st);
      return miss();
    }
    return unavailable("cannot open", err);
  }
  if (fstat(fd.get(), &st) != 0) return unavailable("cannot stat", errno);
  if (!S_ISREG(st.st_mode)) {  // a FIFO, a folder, a device
    DropForeign(path, st);
    return miss();
  }
  // The read lock keeps the entry from being evicted while it is mapped (Mapping). An evictor
  // holds the write lock while it removes the file: then, or once it is gone, this is a miss.
  if (TryLockEntry(fd.get(), /*write=*/false) == 0) return miss();
  if (fstat(fd.get(), &st) != 0) return unavailable("cannot stat", errno);
  if (st.st_nlink == 0) return miss();
  const int64_t file_size = static_cast<int64_t>(st.st_size);

  auto corrupt = [&]() -> Result<std::shared_ptr<CacheEntry>> {
    counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
    const Status dropped = DropCorrupt(path, fd.get());
    if (!dropped.ok()) Unavailable(dropped);
    return miss();
  };
  if (file_size < static_cast<int64_t>(sizeof(EntryHeader))) return corrupt();
  Result<std::shared_ptr<Mapping>> mapped = MapFile(fd.get(), file_size, path);
  if (!mapped.ok()) {
    Unavailable(mapped.status());
    return miss();
  }
  std::shared_ptr<Mapping> mapping = std::move(*mapped);
  const uint8_t* base = mapping->data();
  EntryHeader header;
  std::memcpy(&header, base, sizeof(header));
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0 || header.version != kFormatVersion ||
      static_cast<int64_t>(header.header_bytes) != HeaderBytes(header.ns_size, header.key_size) ||
      header.header_bytes > file_size ||
      header.payload_size != static_cast<uint64_t>(file_size - header.header_bytes)) {
    return corrupt();
  }
  const uint8_t* stored_ns = base + sizeof(EntryHeader);
  const uint8_t* stored_key = stored_ns + header.ns_size;
  if (HeaderChecksum(header, stored_ns) != header.header_checksum) return corrupt();
  // Another key whose name hashes the same: not ours, and not damaged either.
  if (header.ns_size != ns.size() || header.key_size != key.size() ||
      std::memcmp(stored_ns, ns.data(), ns.size()) != 0 ||
      std::memcmp(stored_key, key.data(), key.size()) != 0) {
    return miss();
  }
  const uint8_t* payload = base + header.header_bytes;
  if (XXH64(payload, header.payload_size, 0) != header.payload_checksum) return corrupt();
  Touch(fd.get());
  mapping->Hold(fd.release());
  counters_.hits.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_read.fetch_add(static_cast<int64_t>(header.payload_size),
                                 std::memory_order_relaxed);
  return std::make_shared<CacheEntry>(payload, static_cast<int64_t>(header.payload_size),
                                      std::move(mapping));
}

Result<std::shared_ptr<CacheEntry>> DiskCache::Get(const std::string& ns, const std::string& key) {
  return Lookup(ns, key, /*count_miss=*/true);
}

Status DiskCache::Put(const std::string& ns, const std::string& key, const Parts& parts) {
  return PutImpl(ns, key, parts, /*want_entry=*/false).status();
}

Result<std::shared_ptr<CacheEntry>> DiskCache::PutImpl(const std::string& ns,
                                                       const std::string& key, const Parts& parts,
                                                       bool want_entry) {
  STOKER_RETURN_NOT_OK(CheckNameAndKey(options_.dir, ns, key));
  const int64_t header_bytes = HeaderBytes(ns.size(), key.size());
  int64_t payload_size = 0;
  for (const auto& part : parts) payload_size += static_cast<int64_t>(part.second);
  const int64_t file_size = header_bytes + payload_size;
  auto not_stored = [&]() -> std::shared_ptr<CacheEntry> {
    counters_.not_stored.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  };
  // The folder cannot be used: the caller goes on without the cache.
  auto unavailable = [&](const Status& why) -> std::shared_ptr<CacheEntry> {
    Unavailable(why);
    return nullptr;
  };
  // Evicting everything would not make room: keep the cache as it is.
  if (file_size > options_.max_bytes) return not_stored();

  // Reserve the entry's space before writing it: under the folder lock, other writers' reserved
  // (not yet committed) entries count against the budget and the floor, and the temporary file
  // is allocated at its full size, so the next writer's statvfs() sees it.
  const KeyName name = NameOf(ns, key);
  const std::string temp_path = tmp_dir_ + "/" + name.hex + "." + std::to_string(getpid()) + "." +
                                std::to_string(temp_seq_.fetch_add(1)) + ".tmp";
  constexpr int kTempFlags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW;
  std::unique_ptr<GuardedFd> fd;
  {
    FolderLock lock(this);
    Status status = lock.Acquire();
    if (!status.ok()) return unavailable(status);
    const Result<bool> fits = ReserveLocked(file_size);
    if (!fits.ok()) return unavailable(fits.status());
    if (!*fits) return not_stored();
    fd = std::make_unique<GuardedFd>(temp_path, kTempFlags, 0644);
    if (fd->get() < 0 && errno == ENOENT) {  // .tmp was removed: make it again
      status = RecreateFolder();
      if (!status.ok()) return unavailable(status);
      fd = std::make_unique<GuardedFd>(temp_path, kTempFlags, 0644);
    }
    if (fd->get() < 0) return unavailable(StorageError(temp_path, "cannot create", errno));
    // Tells Open()/Clear() in other processes that this file has a live writer.
    (void)flock(fd->get(), LOCK_EX | LOCK_NB);
    const Result<bool> allocated = Allocate(fd->get(), file_size, temp_path);
    if (!allocated.ok() || !*allocated) unlink(temp_path.c_str());
    if (!allocated.ok()) return unavailable(allocated.status());
    if (!*allocated) return not_stored();
  }

  std::vector<uint8_t> head(static_cast<size_t>(header_bytes), 0);
  EntryHeader header = {};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kFormatVersion;
  header.header_bytes = static_cast<uint32_t>(header_bytes);
  header.ns_size = static_cast<uint32_t>(ns.size());
  header.key_size = static_cast<uint32_t>(key.size());
  header.payload_size = static_cast<uint64_t>(payload_size);
  Xxh64Stream checksum;
  for (const auto& part : parts) checksum.Update(part.first, part.second);
  header.payload_checksum = checksum.Digest();
  std::memcpy(head.data() + sizeof(header), ns.data(), ns.size());
  std::memcpy(head.data() + sizeof(header) + ns.size(), key.data(), key.size());
  header.header_checksum = HeaderChecksum(header, head.data() + sizeof(header));
  std::memcpy(head.data(), &header, sizeof(header));

  auto discard = [&](const Status& why) {
    unlink(temp_path.c_str());
    return unavailable(why);
  };

  std::vector<iovec> iov;
  iov.reserve(parts.size() + 1);
  iov.push_back({head.data(), head.size()});
  for (const auto& part : parts) iov.push_back({const_cast<void*>(part.first), part.second});
  Status status = WriteAll(fd->get(), std::move(iov), temp_path, options_.on_write_for_testing);
  if (!status.ok()) return discard(status);

  const std::string final_path = EntryPath(ns, key);
  {
    FolderLock lock(this);
    status = lock.Acquire();
    if (!status.ok()) return discard(status);
    // The temporary file is on disk already: only the budget needs room, the floor must hold.
    Result<bool> fits = EvictLocked(file_size, 0);
    if (!fits.ok()) return discard(fits.status());
    if (!*fits) {
      unlink(temp_path.c_str());
      return not_stored();
    }
    // Mapped by the caller from the moment it is visible: never evicted while mapped.
    if (want_entry) (void)TryLockEntry(fd->get(), /*write=*/false);
    Touch(fd->get());
    struct stat old;
    const int64_t replaced = lstat(final_path.c_str(), &old) == 0 && S_ISREG(old.st_mode)
                                 ? static_cast<int64_t>(old.st_size)
                                 : 0;
    int err = rename(temp_path.c_str(), final_path.c_str()) == 0 ? 0 : errno;
    for (int round = 0; err == ENOENT && round < 3; ++round) {
      struct stat temp;
      // The folder was removed or renamed while we wrote (our temporary file went with it): the
      // next operation recreates it; this entry is simply not stored.
      if (lstat(temp_path.c_str(), &temp) != 0) return not_stored();
      std::error_code error;
      std::filesystem::create_directories(std::filesystem::path(final_path).parent_path(), error);
      err = rename(temp_path.c_str(), final_path.c_str()) == 0 ? 0 : errno;
    }
    if (err == ENOENT) {  // a cleaner removing the folder as fast as it is made
      unlink(temp_path.c_str());
      return not_stored();
    }
    if (err == EISDIR || err == ENOTEMPTY || err == EEXIST) {
      // A folder at the entry's path (not ours): removed if empty, else the entry is skipped.
      counters_.foreign.fetch_add(1, std::memory_order_relaxed);
      if (rmdir(final_path.c_str()) != 0) {
        unlink(temp_path.c_str());
        return not_stored();
      }
      err = rename(temp_path.c_str(), final_path.c_str()) == 0 ? 0 : errno;
    }
    if (err != 0) return discard(StorageError(final_path, "cannot commit", err));
    // Only counts: a failure here leaves the counter low, and the next listing repairs it.
    const Result<int64_t> used = ReadUsedLocked();
    if (used.ok()) (void)WriteUsedLocked(*used + file_size - replaced);
  }
  counters_.writes.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_written.fetch_add(payload_size, std::memory_order_relaxed);
  if (!want_entry) return nullptr;
  // Map our own descriptor: the entry may already be evicted by another process.
  Result<std::shared_ptr<Mapping>> mapping = MapFile(fd->get(), file_size, final_path);
  if (!mapping.ok()) return unavailable(mapping.status());
  (void)flock(fd->get(), LOCK_UN);
  (*mapping)->Hold(fd->release());
  const uint8_t* payload = (*mapping)->data() + header_bytes;
  return std::make_shared<CacheEntry>(payload, payload_size, std::move(*mapping));
}

Result<std::shared_ptr<CacheEntry>> DiskCache::GetOrFill(const std::string& ns,
                                                         const std::string& key,
                                                         const Filler& fill) {
  std::unique_ptr<KeyLock> lock;  // released on every return path, after the entry is stored
  STOKER_ASSIGN_OR_RAISE(auto entry, GetOrLock(ns, key, &lock));
  if (entry) return entry;
  Parts parts;
  std::shared_ptr<void> keep_alive;
  STOKER_RETURN_NOT_OK(fill(&parts, &keep_alive));
  STOKER_ASSIGN_OR_RAISE(entry, PutImpl(ns, key, parts, /*want_entry=*/true));
  if (entry) return entry;
  return CopyToMemory(parts);
}

DiskCache::KeyLock::~KeyLock() {
  if (fd_ < 0) return;
  UnlockByte(fd_, static_cast<off_t>(offset_));
  ForkRegistry::Instance().Close(fd_);
}

Result<std::unique_ptr<DiskCache::KeyLock>> DiskCache::LockKey(off_t offset) const {
  for (int attempt = 0;; ++attempt) {
    // A descriptor of our own: OFD locks on separately opened descriptors exclude each other, in
    // this process too, and closing it releases the key's lock.
    STOKER_ASSIGN_OR_RAISE(const int fd, OpenLockFile());
    // Owns the descriptor from here on; unlocking a byte that is not held is harmless.
    std::unique_ptr<KeyLock> held(new KeyLock(fd, offset));
    STOKER_ASSIGN_OR_RAISE(const bool locked, LockByte(fd, offset, false, lock_path_));
    if (!locked) {
      counters_.waits.fetch_add(1, std::memory_order_relaxed);
      STOKER_RETURN_NOT_OK(LockByte(fd, offset, true, lock_path_).status());
    }
    // The folder was removed or renamed meanwhile: the lock would not exclude anyone.
    if (IsCurrentLockFile(fd)) return held;
    if (attempt == 2) return StorageError(lock_path_, "keeps being replaced:", ESTALE);
  }
}

Result<std::shared_ptr<CacheEntry>> DiskCache::GetOrLock(const std::string& ns,
                                                         const std::string& key,
                                                         std::unique_ptr<KeyLock>* lock) {
  lock->reset();
  STOKER_ASSIGN_OR_RAISE(auto entry, Lookup(ns, key, /*count_miss=*/false));
  if (entry) return entry;
  Result<std::unique_ptr<KeyLock>> held = LockKey(NameOf(ns, key).lock_offset);
  if (!held.ok()) Unavailable(held.status());  // fill without the lock
  STOKER_ASSIGN_OR_RAISE(entry, Lookup(ns, key, /*count_miss=*/true));
  if (entry || !held.ok()) return entry;
  *lock = std::move(*held);
  return nullptr;
}

Status DiskCache::Clear() {
  FolderLock lock(this);
  STOKER_RETURN_NOT_OK(lock.Acquire());
  std::vector<ScannedEntry> entries;
  STOKER_RETURN_NOT_OK(ScanEntries(options_.dir, &entries));
  for (const auto& entry : entries) {
    if (unlink(entry.path.c_str()) != 0 && errno != ENOENT) {
      (void)RecountLocked();
      return StorageError(entry.path, "cannot remove", errno);
    }
  }
  // Empty shard and namespace folders go too; rmdir() refuses non-empty ones (foreign files).
  std::vector<std::string> namespaces, shards;
  STOKER_RETURN_NOT_OK(ListDir(options_.dir, &namespaces));
  for (const auto& ns : namespaces) {
    if (!IsNamespace(ns)) continue;
    const std::string ns_dir = options_.dir + "/" + ns;
    STOKER_RETURN_NOT_OK(ListDir(ns_dir, &shards));
    for (const auto& shard : shards) {
      if (IsHex(shard, 2)) (void)rmdir((ns_dir + "/" + shard).c_str());
    }
    (void)rmdir(ns_dir.c_str());
  }
  STOKER_RETURN_NOT_OK(CleanTempsLocked());
  return WriteUsedLocked(0);
}

Result<int64_t> DiskCache::UsedBytes() const {
  std::vector<ScannedEntry> entries;
  STOKER_RETURN_NOT_OK(ScanEntries(options_.dir, &entries));
  int64_t used = 0;
  for (const auto& entry : entries) used += entry.size;
  return used;
}

CacheStats DiskCache::stats() const {
  CacheStats out;
  out.hits = counters_.hits.load();
  out.misses = counters_.misses.load();
  out.writes = counters_.writes.load();
  out.not_stored = counters_.not_stored.load();
  out.corrupt = counters_.corrupt.load();
  out.evictions = counters_.evictions.load();
  out.bytes_read = counters_.bytes_read.load();
  out.bytes_written = counters_.bytes_written.load();
  out.waits = counters_.waits.load();
  out.unavailable = counters_.unavailable.load();
  out.recreated = counters_.recreated.load();
  out.foreign = counters_.foreign.load();
  out.kept_in_use = counters_.kept_in_use.load();
  return out;
}

}  // namespace stoker
