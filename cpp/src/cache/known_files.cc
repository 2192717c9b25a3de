#include "cache/known_files.h"

#include <utility>
#include <vector>

#include "cache/cache_files.h"

namespace stoker {
namespace {

bool SameTime(const timespec& a, const timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

}  // namespace

bool KnownFiles::SameVersion(const Version& v, const struct stat& st) {
  return v.dev == st.st_dev && v.size == st.st_size && SameTime(v.mtime, st.st_mtim);
}

std::shared_ptr<Mapping> KnownFiles::ForgetMappingLocked(Version* version) {
  if (!version->mapping) return nullptr;
  mapped_.erase(version->lru);
  mapped_bytes_ -= version->mapping->size();
  kept_paths_.erase(version->path);
  version->path.clear();
  return std::move(version->mapping);
}

std::shared_ptr<Mapping> KnownFiles::ForgetPathLocked(const std::string& path, uint64_t inode) {
  const auto it = kept_paths_.find(path);
  if (it == kept_paths_.end() || it->second == inode) return nullptr;
  return ForgetMappingLocked(&versions_.at(it->second));
}

bool KnownFiles::Contains(const std::string& path, const struct stat& st,
                          std::shared_ptr<Mapping>* mapping) {
  std::shared_ptr<Mapping> stale, replaced;  // unmapped after the lock is released
  std::lock_guard<std::mutex> lock(mu_);
  const auto inode = static_cast<uint64_t>(st.st_ino);
  replaced = ForgetPathLocked(path, inode);
  const auto it = versions_.find(inode);
  if (it == versions_.end()) return false;
  Version& v = it->second;
  if (!SameVersion(v, st)) {
    // Written since, or another file on the inode: the mapping kept shows other bytes, and its
    // lock would hold a damaged entry in place.
    stale = ForgetMappingLocked(&v);
    return false;
  }
  if (v.mapping) {
    *mapping = v.mapping;
    mapped_.splice(mapped_.end(), mapped_, v.lru);  // now the most recently used
  }
  return true;
}

void KnownFiles::Forget(const std::string& path) {
  std::shared_ptr<Mapping> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  dropped = ForgetPathLocked(path, 0);
}

void KnownFiles::Add(const std::string& path, const struct stat& st,
                     std::shared_ptr<Mapping> mapping) {
  std::vector<std::shared_ptr<Mapping>> dropped;  // unmapped after the lock is released
  std::lock_guard<std::mutex> lock(mu_);
  if (versions_.size() >= kMaxFiles) {
    for (auto& entry : versions_) dropped.push_back(ForgetMappingLocked(&entry.second));
    versions_.clear();
  }
  const auto inode = static_cast<uint64_t>(st.st_ino);
  dropped.push_back(ForgetPathLocked(path, inode));
  Version& v = versions_[inode];
  // The kept mapping stays for its own file version; another version, or another file on a
  // reused inode, makes it stale.
  if (v.mapping && mapping != v.mapping && !(mapping == nullptr && SameVersion(v, st))) {
    dropped.push_back(ForgetMappingLocked(&v));
  }
  v.dev = st.st_dev;
  v.size = st.st_size;
  v.mtime = st.st_mtim;
  if (mapping && !v.mapping && mapping->holds_lock() && mapping->size() <= max_mapped_bytes_) {
    v.mapping = std::move(mapping);
    v.path = path;
    v.lru = mapped_.insert(mapped_.end(), inode);
    kept_paths_[path] = inode;
    mapped_bytes_ += v.mapping->size();
  }
  while (mapped_bytes_ > max_mapped_bytes_) {
    dropped.push_back(ForgetMappingLocked(&versions_.at(mapped_.front())));
  }
}

void KnownFiles::DropMappings() {
  std::vector<std::shared_ptr<Mapping>> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  while (!mapped_.empty()) dropped.push_back(ForgetMappingLocked(&versions_.at(mapped_.front())));
}

void KnownFiles::LowerBound(int64_t max_mapped_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  max_mapped_bytes_ = std::min(max_mapped_bytes_, max_mapped_bytes);
}

int64_t KnownFiles::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mapped_bytes_;
}

}  // namespace stoker
