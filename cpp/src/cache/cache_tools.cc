#include <dirent.h>
#include <sys/stat.h>

#include "cache/disk_cache.h"
#include "stoker/cache.h"

namespace stoker {
namespace {

// Entries of one namespace folder, recursively; names starting with '.' are not entries.
void Count(const std::string& dir, int64_t* entries, int64_t* bytes) {
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) return;
  while (dirent* item = readdir(handle)) {
    if (item->d_name[0] == '.') continue;
    const std::string path = dir + "/" + item->d_name;
    struct stat info;
    if (stat(path.c_str(), &info) != 0) continue;  // evicted meanwhile
    if (S_ISDIR(info.st_mode)) {
      Count(path, entries, bytes);
    } else if (S_ISREG(info.st_mode)) {
      ++*entries;
      *bytes += info.st_size;
    }
  }
  closedir(handle);
}

}  // namespace

Result<CacheUsage> InspectCache(const std::string& dir) {
  DiskCacheOptions options;
  options.dir = dir;
  STOKER_ASSIGN_OR_RAISE(auto cache, DiskCache::Open(options));
  CacheUsage usage;
  Count(dir + "/tensors", &usage.tensors_entries, &usage.tensors_bytes);
  Count(dir + "/blocks", &usage.blocks_entries, &usage.blocks_bytes);
  return usage;
}

Status ClearCache(const std::string& dir) {
  DiskCacheOptions options;
  options.dir = dir;
  STOKER_ASSIGN_OR_RAISE(auto cache, DiskCache::Open(options));
  return cache->Clear();
}

}  // namespace stoker
