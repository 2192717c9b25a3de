#include <dirent.h>
#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "cache/disk_cache.h"
#include "stoker/cache.h"

namespace stoker {
namespace {

// The layout DiskCache creates (entry_format.h, cache_files.h): a ".lock" file and a ".tmp"
// folder, and per namespace ([A-Za-z0-9_-]{1,64}) folders of 2-hex shard folders holding 32-hex
// entry files.
// Everything here only reads (opendir/lstat): these tools must never write into a folder that
// turns out not to be a cache (a data folder given by mistake).

bool IsNamespaceName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

bool IsHexName(const std::string& name, size_t length) {
  if (name.size() != length) return false;
  for (char c : name) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) ||
        std::isupper(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return true;
}

// Every name in `dir` but "." and ".."; false with errno set when it cannot be listed.
bool List(const std::string& dir, std::vector<std::string>* names) {
  names->clear();
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) return false;
  while (const dirent* item = readdir(handle)) {
    const std::string name = item->d_name;
    if (name != "." && name != "..") names->push_back(name);
  }
  closedir(handle);
  return true;
}

struct Scan {
  bool empty = true;  // nothing at all in the folder
  bool has_lock = false;
  // The first path a stoker cache never holds ("" when none): at the top level, else below.
  std::string foreign_top;
  std::string foreign;
  CacheUsage usage;
};

Status ListError(const std::string& path, int error) {
  return MakeError(ErrorKind::kStorage, "cannot list " + path + ": " + std::strerror(error));
}

// Walks `dir` as a cache folder: counts the entries of each namespace and notes the first thing
// that a cache does not hold. Dot names below the top level are skipped, as DiskCache does.
Status ScanFolder(const std::string& dir, Scan* scan) {
  std::vector<std::string> top, shards, files;
  if (!List(dir, &top)) return ListError(dir, errno);
  scan->empty = top.empty();
  for (const std::string& name : top) {
    const std::string path = dir + "/" + name;
    struct stat info;
    if (lstat(path.c_str(), &info) != 0) continue;  // removed meanwhile
    if (name == ".lock") {
      scan->has_lock = S_ISREG(info.st_mode);
      if (!scan->has_lock && scan->foreign_top.empty()) scan->foreign_top = path;
      continue;
    }
    if (name == ".tmp" && S_ISDIR(info.st_mode)) continue;
    if (!S_ISDIR(info.st_mode) || !IsNamespaceName(name)) {
      if (scan->foreign_top.empty()) scan->foreign_top = path;
      continue;
    }
    int64_t* entries = name == "tensors"  ? &scan->usage.tensors_entries
                       : name == "blocks" ? &scan->usage.blocks_entries
                                          : nullptr;
    int64_t* bytes = name == "tensors"  ? &scan->usage.tensors_bytes
                     : name == "blocks" ? &scan->usage.blocks_bytes
                                        : nullptr;
    if (!List(path, &shards)) return ListError(path, errno);
    for (const std::string& shard : shards) {
      if (shard[0] == '.') continue;
      const std::string shard_path = path + "/" + shard;
      if (lstat(shard_path.c_str(), &info) != 0) continue;
      if (!S_ISDIR(info.st_mode) || !IsHexName(shard, 2)) {
        if (scan->foreign.empty()) scan->foreign = shard_path;
        continue;
      }
      if (!List(shard_path, &files)) {
        if (errno == ENOENT) continue;  // emptied and removed by a clear meanwhile
        return ListError(shard_path, errno);
      }
      for (const std::string& file : files) {
        if (file[0] == '.') continue;
        const std::string file_path = shard_path + "/" + file;
        if (lstat(file_path.c_str(), &info) != 0) continue;  // evicted meanwhile
        if (!S_ISREG(info.st_mode) || !IsHexName(file, 32) || file.compare(0, 2, shard) != 0) {
          if (scan->foreign.empty()) scan->foreign = file_path;
          continue;
        }
        if (entries != nullptr) {
          ++*entries;
          *bytes += info.st_size;
        }
      }
    }
  }
  return Status::OK();
}

// Scans `dir` and fails unless it is a stoker cache folder or empty (`*empty` then).
Status CheckCacheFolder(const std::string& dir, Scan* scan) {
  struct stat info;
  if (stat(dir.c_str(), &info) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return MakeError(ErrorKind::kNotFound, "cache folder " + dir + " does not exist");
    }
    return MakeError(ErrorKind::kStorage,
                     "cannot read cache folder " + dir + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(info.st_mode)) {
    return MakeError(ErrorKind::kInvalidOption, dir + " is a file, not a cache folder");
  }
  STOKER_RETURN_NOT_OK(ScanFolder(dir, scan));
  if (scan->empty) return Status::OK();
  const std::string& foreign = scan->foreign_top.empty() ? scan->foreign : scan->foreign_top;
  const std::string why = !foreign.empty()
                              ? "it holds " + foreign + ", which a stoker cache never holds"
                              : "it has no .lock file";
  if (!foreign.empty() || !scan->has_lock) {
    return MakeError(ErrorKind::kInvalidOption,
                     dir + " is not a stoker cache folder (" + why +
                         "; a cache is the folder given as cache_dir= to a Loader, with a .lock "
                         "file, a .tmp folder and entry folders such as tensors/ and blocks/); "
                         "nothing was changed");
  }
  return Status::OK();
}

}  // namespace

Result<CacheUsage> InspectCache(const std::string& dir) {
  Scan scan;
  STOKER_RETURN_NOT_OK(CheckCacheFolder(dir, &scan));
  return scan.usage;
}

Status ClearCache(const std::string& dir) {
  Scan scan;
  STOKER_RETURN_NOT_OK(CheckCacheFolder(dir, &scan));
  if (scan.empty) return Status::OK();  // nothing to remove, and nothing is written
  DiskCacheOptions options;
  options.dir = dir;
  STOKER_ASSIGN_OR_RAISE(auto cache, DiskCache::Open(options));
  return cache->Clear();
}

}  // namespace stoker
