// DiskCache glues the cache's parts together: the entry format (entry_format.h), the folder's
// files, descriptors and locks (cache_files.h), and its byte budget (cache_budget.h). What is
// here is the protocol of each operation: which lock, which check, which counter.
#include "cache/disk_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <system_error>

#include "cache/cache_budget.h"
#include "cache/cache_files.h"
#include "cache/entry_format.h"
#include "cache/write_backlog.h"

namespace stoker {
namespace {

std::shared_ptr<CacheEntry> CopyToMemory(const DiskCache::Parts& parts) {
  size_t size = 0;
  for (const auto& part : parts) size += part.second;
  auto* buffer = static_cast<uint8_t*>(
      ::operator new (std::max<size_t>(size, 1), std::align_val_t{kEntryAlign}));
  std::shared_ptr<const void> owner(buffer, [](const void* p) {
    ::operator delete (const_cast<void*>(p), std::align_val_t{kEntryAlign});
  });
  size_t offset = 0;
  for (const auto& part : parts) {
    if (part.second > 0) std::memcpy(buffer + offset, part.first, part.second);
    offset += part.second;
  }
  return std::make_shared<CacheEntry>(buffer, static_cast<int64_t>(size), std::move(owner));
}

}  // namespace

DiskCache::DiskCache(DiskCacheOptions options)
    : options_(std::move(options)),
      known_(options_.kept_mapping_bytes),
      files_(std::make_unique<CacheFolderFiles>(options_.dir, &counters_)),
      budget_(std::make_unique<CacheBudget>(files_.get(), options_.max_bytes,
                                            options_.min_free_bytes,
                                            options_.free_bytes_for_testing, &counters_)),
      backlog_(std::make_unique<WriteBacklog>(options_.max_write_backlog_bytes,
                                              options_.disk_behind_for_testing)) {}

DiskCache::~DiskCache() = default;

Result<std::shared_ptr<DiskCache>> DiskCache::Open(const DiskCacheOptions& options) {
  if (options.dir.empty()) {
    return MakeError(ErrorKind::kInvalidOption, "cache_dir is empty");
  }
  if (options.max_bytes <= 0) {
    return MakeError(ErrorKind::kInvalidOption, "cache_bytes must be positive, got " +
                                                    std::to_string(options.max_bytes) +
                                                    " (cache_dir " + options.dir + ")");
  }
  if (options.max_write_backlog_bytes < 0) {
    return MakeError(ErrorKind::kInvalidOption,
                     "max_write_backlog_bytes must be >= 0, got " +
                         std::to_string(options.max_write_backlog_bytes));
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
  const std::string& tmp_dir = cache->files_->tmp_dir();
  if (mkdir(tmp_dir.c_str(), 0777) != 0 && errno != EEXIST) {
    return MakeError(ErrorKind::kInvalidOption, "cache_dir " + options.dir +
                                                    " is not writable: cannot create " + tmp_dir +
                                                    ": " + ErrnoText(errno));
  }
  FolderLock lock(cache->budget_.get());
  Status status = lock.Acquire();
  if (!status.ok()) {
    return MakeError(ErrorKind::kInvalidOption,
                     "cache_dir " + options.dir + " is not usable: " + status.message());
  }
  STOKER_RETURN_NOT_OK(cache->budget_->CleanTemps(lock));
  STOKER_RETURN_NOT_OK(cache->budget_->Recount(lock));
  // Kept mappings hold their entries against eviction: at most a quarter of what the cache can
  // hold on this file system (its entries and the free space above the floor), so that on a
  // small disk they do not keep what other processes need to evict. A file system that cannot
  // say (statvfs failing, as on some FUSE mounts) fails each Put as before, not the open.
  if (const Result<int64_t> capacity = cache->budget_->Capacity(lock); capacity.ok()) {
    cache->known_.LowerBound(*capacity / 4);
  }
  return cache;
}

std::string DiskCache::EntryPath(const std::string& ns, const std::string& key) const {
  const KeyName name = NameOf(ns, key);
  return options_.dir + "/" + ns + "/" + name.hex.substr(0, 2) + "/" + name.hex;
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
  FolderLock lock(budget_.get());
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

Result<bool> DiskCache::DropCorrupt(const std::string& path, int fd) {
  FolderLock lock(budget_.get());
  STOKER_RETURN_NOT_OK(lock.Acquire());
  // Unlink only the file we judged: a writer may have renamed a good entry over it meanwhile.
  struct stat judged, current;
  if (fstat(fd, &judged) != 0) return StorageError(path, "cannot stat", errno);
  if (stat(path.c_str(), &current) != 0 || current.st_ino != judged.st_ino ||
      current.st_dev != judged.st_dev) {
    return false;
  }
  if (unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return false;
    return StorageError(path, "cannot remove corrupt entry", errno);
  }
  STOKER_ASSIGN_OR_RAISE(const int64_t used, budget_->ReadUsed(lock));
  STOKER_RETURN_NOT_OK(budget_->WriteUsed(lock, used - static_cast<int64_t>(judged.st_size)));
  return true;
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
    if (err == ENOENT) {
      known_.Forget(path);  // evicted or removed: a mapping kept of it would pin its space
      return miss();
    }
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
  // The stat that says whether this object already verified the file, taken once it is locked
  // (a replacement could have taken its path since the first). Readers move only its atime.
  if (fstat(fd.get(), &st) != 0) return unavailable("cannot stat", errno);
  std::shared_ptr<Mapping> kept;  // this version's mapping, kept from an earlier Get or Put
  const bool known = known_.Contains(path, st, &kept);
  if (st.st_nlink == 0) return miss();
  const int64_t file_size = static_cast<int64_t>(st.st_size);

  auto corrupt = [&]() -> Result<std::shared_ptr<CacheEntry>> {
    // Counted by the reader that removes it: two readers may judge one file at once.
    const Result<bool> dropped = DropCorrupt(path, fd.get());
    if (!dropped.ok()) {
      counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
      Unavailable(dropped.status());
    } else if (*dropped) {
      counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
    }
    return miss();
  };
  if (file_size < static_cast<int64_t>(sizeof(EntryHeader))) return corrupt();
  std::shared_ptr<Mapping> mapping = kept;
  if (!mapping) {
    counters_.maps.fetch_add(1, std::memory_order_relaxed);
    Result<std::shared_ptr<Mapping>> mapped = MapFile(fd.get(), file_size, path);
    if (!mapped.ok()) {
      Unavailable(mapped.status());
      return miss();
    }
    mapping = std::move(*mapped);
  }
  int64_t payload_offset = 0, payload_size = 0;
  if (!known) counters_.payload_checks.fetch_add(1, std::memory_order_relaxed);
  switch (CheckEntry(mapping->data(), file_size, ns, key, /*verify_payload=*/!known,
                     &payload_offset, &payload_size)) {
    case EntryCheck::kCorrupt:
      return corrupt();
    case EntryCheck::kOtherKey:
      return miss();
    case EntryCheck::kValid:
      break;
  }
  MarkUsed(fd.get());
  // A kept mapping holds a descriptor and lock of its own: this one closes on return. A write
  // between the stat and the check moved the mtime, so its version is verified again next time.
  if (!kept) {
    mapping->Hold(fd.release());
    known_.Add(path, st, mapping);
  }
  counters_.hits.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_read.fetch_add(payload_size, std::memory_order_relaxed);
  const uint8_t* payload = mapping->data() + payload_offset;
  return std::make_shared<CacheEntry>(payload, payload_size, std::move(mapping));
}

Result<std::shared_ptr<CacheEntry>> DiskCache::Get(const std::string& ns, const std::string& key) {
  return Lookup(ns, key, /*count_miss=*/true);
}

Result<std::shared_ptr<CacheEntry>> DiskCache::Peek(const std::string& ns, const std::string& key) {
  return Lookup(ns, key, /*count_miss=*/false);
}

Status DiskCache::Put(const std::string& ns, const std::string& key, const Parts& parts,
                      WhenDiskBehind when_behind) {
  return PutImpl(ns, key, parts, /*want_entry=*/false, when_behind).status();
}

Result<std::shared_ptr<CacheEntry>> DiskCache::PutImpl(const std::string& ns,
                                                       const std::string& key, const Parts& parts,
                                                       bool want_entry,
                                                       WhenDiskBehind when_behind) {
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
  // The disk has not caught up with the entries written before: writing more now would only pile
  // up dirty pages, and put this thread to sleep in write() once the kernel throttles it. A later
  // fill stores it. Checked before anything is reserved or written.
  if (when_behind == WhenDiskBehind::kSkip && backlog_->Behind(file_size)) {
    counters_.write_skipped.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }

  // 1. Reserve the entry's bytes and create its temporary file (cache_budget.h).
  const KeyName name = NameOf(ns, key);
  const std::string temp_path = files_->tmp_dir() + "/" + name.hex + "." +
                                std::to_string(getpid()) + "." +
                                std::to_string(temp_seq_.fetch_add(1)) + ".tmp";
  std::unique_ptr<GuardedFd> fd;
  const Result<bool> created = budget_->CreateTemp(temp_path, file_size, &fd);
  if (!created.ok()) return unavailable(created.status());
  if (!*created) return not_stored();

  // 2. Write it, outside the folder lock.
  std::vector<uint8_t> head = EncodeEntryHead(ns, key, parts);
  std::vector<iovec> iov;
  iov.reserve(parts.size() + 1);
  iov.push_back({head.data(), head.size()});
  for (const auto& part : parts) iov.push_back({const_cast<void*>(part.first), part.second});
  const Status written =
      WriteAll(fd->get(), std::move(iov), temp_path, options_.on_write_for_testing);
  if (!written.ok()) {
    unlink(temp_path.c_str());
    return unavailable(written);
  }
  // Write-back starts now, not when the kernel's flusher wakes (up to 30 s later, or once memory
  // is full of dirty pages): the pages go to the disk while the epoch runs, and the backlog
  // (below) follows them. The entry becomes visible only by the rename that follows, as before;
  // nothing here waits for the disk.
  StartWriteBack(fd->get());
  // A descriptor of our own (no lock on it) to follow the write-back after the rename.
  const int follow = open(temp_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

  // 3. Commit: rename it into place under the folder lock.
  const std::string final_path = EntryPath(ns, key);
  // This object keeps the mapping of what it writes, as of what it reads: the next epoch reads
  // the entry without mapping it (the writer, off the epoch's path, populates it now).
  const bool keep = want_entry || file_size <= options_.kept_mapping_bytes;
  const Result<bool> committed = budget_->Commit(temp_path, final_path, fd->get(), file_size, keep);
  if (!committed.ok() || !*committed) {
    if (follow >= 0) close(follow);
    if (!committed.ok()) return unavailable(committed.status());
    return not_stored();
  }
  if (follow >= 0) backlog_->Track(follow, file_size);
  counters_.writes.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_written.fetch_add(payload_size, std::memory_order_relaxed);
  // This object wrote the payload and its checksum from the same bytes: its first Get of the
  // file checks the header only, as after a Get that hashed it. Taken after the commit set its
  // mtime to the nanosecond; any later write to the file moves the mtime to another value.
  struct stat st;
  const bool stated = fstat(fd->get(), &st) == 0;
  std::shared_ptr<Mapping> mapping;
  if (keep) {
    // Map our own descriptor: the entry may already be evicted by another process.
    counters_.maps.fetch_add(1, std::memory_order_relaxed);
    Result<std::shared_ptr<Mapping>> mapped = MapFile(fd->get(), file_size, final_path);
    if (!mapped.ok()) {
      if (want_entry) return unavailable(mapped.status());
    } else {
      mapping = std::move(*mapped);
      (void)flock(fd->get(), LOCK_UN);
      mapping->Hold(fd->release());
    }
  }
  if (stated) known_.Add(final_path, st, mapping);
  if (!want_entry) return nullptr;
  const uint8_t* payload = mapping->data() + header_bytes;
  return std::make_shared<CacheEntry>(payload, payload_size, std::move(mapping));
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
  STOKER_ASSIGN_OR_RAISE(entry,
                         PutImpl(ns, key, parts, /*want_entry=*/true, WhenDiskBehind::kWrite));
  if (entry) return entry;
  return CopyToMemory(parts);
}

DiskCache::KeyLock::~KeyLock() {
  if (fd_ < 0) return;
  UnlockByte(fd_, static_cast<off_t>(offset_));
  ForkRegistry::Instance().Close(fd_);
}

Result<std::unique_ptr<DiskCache::KeyLock>> DiskCache::LockKey(off_t offset) const {
  const std::string& lock_path = files_->lock_path();
  for (int attempt = 0;; ++attempt) {
    // A descriptor of our own: OFD locks on separately opened descriptors exclude each other, in
    // this process too, and closing it releases the key's lock.
    STOKER_ASSIGN_OR_RAISE(const int fd, files_->OpenLockFile());
    // Owns the descriptor from here on; unlocking a byte that is not held is harmless.
    std::unique_ptr<KeyLock> held(new KeyLock(fd, offset));
    STOKER_ASSIGN_OR_RAISE(const bool locked, LockByte(fd, offset, false, lock_path));
    if (!locked) {
      counters_.waits.fetch_add(1, std::memory_order_relaxed);
      STOKER_RETURN_NOT_OK(LockByte(fd, offset, true, lock_path).status());
    }
    // The folder was removed or renamed meanwhile: the lock would not exclude anyone.
    if (files_->IsCurrentLockFile(fd)) return held;
    if (attempt + 1 == kRemovalRounds) {
      return StorageError(lock_path, "keeps being replaced:", ESTALE);
    }
    PauseForRemoval(attempt + 1);
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
  known_.DropMappings();  // their files are about to go: do not hold their space
  FolderLock lock(budget_.get());
  STOKER_RETURN_NOT_OK(lock.Acquire());
  std::vector<ScannedEntry> entries;
  STOKER_RETURN_NOT_OK(ScanEntries(options_.dir, &entries));
  for (const auto& entry : entries) {
    if (unlink(entry.path.c_str()) != 0 && errno != ENOENT) {
      const int err = errno;
      (void)budget_->Recount(lock);
      return StorageError(entry.path, "cannot remove", err);
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
  STOKER_RETURN_NOT_OK(budget_->CleanTemps(lock));
  return budget_->WriteUsed(lock, 0);
}

Result<int64_t> DiskCache::UsedBytes() const {
  std::vector<ScannedEntry> entries;
  STOKER_RETURN_NOT_OK(ScanEntries(options_.dir, &entries));
  int64_t used = 0;
  for (const auto& entry : entries) used += entry.size;
  return used;
}

CacheStats DiskCache::stats() const { return counters_.Snapshot(); }

}  // namespace stoker
