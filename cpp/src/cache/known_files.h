// KnownFiles: the entry file versions one DiskCache object verified, and the mappings it keeps.
//
// A version is a file's (device, inode, size, mtime) as stat() read it when this object verified
// its payload (Get) or wrote it (Put). A later Get of the same version checks the header only;
// any write to the file, or a new file on a reused inode, changes the version. Not the ctime:
// every reader's MarkUsed (the atime, eviction's recency) moves it, so N processes reading one
// cache would verify and map each other's reads again. The cost: an edit that restores the
// mtime afterwards (futimens) goes unseen; entries are never edited in place (disk_cache.h).
//
// Some versions keep their mapping (up to `max_mapped_bytes`, least recently used dropped), so a
// warm epoch does not map again what the epoch before it mapped: page tables for each page of an
// entry were half of a warm epoch's cost on wide rows. Only a mapping that holds its entry's read
// lock is kept (the entry then stays in place: an unlocked one could pin the space of an evicted
// entry); a kept mapping is dropped as soon as a lookup of its path finds another file or none.
//
// Thread safety: every member may be called from any thread. Dropped mappings are unmapped after
// the lock is released.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace stoker {

class Mapping;

class KnownFiles {
 public:
  explicit KnownFiles(int64_t max_mapped_bytes) : max_mapped_bytes_(max_mapped_bytes) {}

  /// Whether `st` (the file now at `path`) is a version this object verified; its kept mapping,
  /// if any, in `*mapping`. A mapping kept for another file at `path` is dropped.
  bool Contains(const std::string& path, const struct stat& st, std::shared_ptr<Mapping>* mapping);
  /// No file at `path` any more: drops the mapping kept for it.
  void Forget(const std::string& path);
  /// Records `st` as the verified version of the file at `path` (replacing the inode's older
  /// one); keeps `mapping` for it if given, holding its lock, and within the bound.
  void Add(const std::string& path, const struct stat& st, std::shared_ptr<Mapping> mapping);
  /// Drops every kept mapping (their files are about to go: Clear()).
  void DropMappings();
  /// Lowers the bound on kept mappings (DiskCache::Open, before any mapping is kept).
  void LowerBound(int64_t max_mapped_bytes);
  int64_t mapped_bytes() const;

 private:
  struct Version {
    dev_t dev = 0;
    off_t size = 0;
    timespec mtime{};
    std::shared_ptr<Mapping> mapping;   // kept for reuse, or empty
    std::string path;                   // where it was, when kept
    std::list<uint64_t>::iterator lru;  // its place in mapped_, when kept
  };
  static constexpr size_t kMaxFiles = size_t{1} << 16;  // then forgotten, and verified again

  static bool SameVersion(const Version& v, const struct stat& st);

  // Moves the kept mapping out of `version` (released by the caller after unlocking).
  std::shared_ptr<Mapping> ForgetMappingLocked(Version* version);
  // The mapping kept for `path` unless it belongs to `inode`, moved out.
  std::shared_ptr<Mapping> ForgetPathLocked(const std::string& path, uint64_t inode);

  int64_t max_mapped_bytes_;  // guarded by mu_
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Version> versions_;        // by inode
  std::unordered_map<std::string, uint64_t> kept_paths_;  // path -> inode of its kept mapping
  std::list<uint64_t> mapped_;                            // inodes with a kept mapping, newest last
  int64_t mapped_bytes_ = 0;
};

}  // namespace stoker
