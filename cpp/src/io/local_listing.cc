#include "io/local_listing.h"

#include <dirent.h>
#include <limits.h>  // NOLINT(modernize-deprecated-headers): POSIX PATH_MAX
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_set>

namespace stoker {
namespace {

std::string Join(const std::string& dir, const std::string& name) {
  return !dir.empty() && dir.back() == '/' ? dir + name : dir + "/" + name;
}

// `path` with every link resolved; empty when that fails.
std::string Resolve(const std::string& path) {
  std::unique_ptr<char, void (*)(void*)> resolved(realpath(path.c_str(), nullptr), &std::free);
  return resolved ? std::string(resolved.get()) : std::string();
}

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

Status CannotList(const std::string& dir, int error) {
  return MakeError(ErrorKind::kStorage,
                   "cannot list '" + dir + "': " + std::string(std::strerror(error)));
}

Result<std::vector<std::string>> SortedNames(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> handle(opendir(dir.c_str()), &closedir);
  if (!handle) return CannotList(dir, errno);
  std::vector<std::string> names;
  while (true) {
    errno = 0;
    const dirent* entry = readdir(handle.get());
    if (entry == nullptr) {
      if (errno != 0) return CannotList(dir, errno);
      break;
    }
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Depth first, names in sorted order, so which path first reaches a folder does not depend on
// the order the kernel lists entries in.
Status Walk(const std::string& dir, const std::string& real_dir,
            std::unordered_set<std::string>* entered, std::vector<LocalEntry>* out) {
  STOKER_ASSIGN_OR_RAISE(const std::vector<std::string> names, SortedNames(dir));
  for (const std::string& name : names) {
    const std::string path = Join(dir, name);
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;  // removed since the folder was read
      return CannotList(path, errno);
    }
    std::string real = Join(real_dir, name);
    if (S_ISLNK(st.st_mode)) {
      // stat() fails for a link to nothing and for a loop of links (ELOOP).
      if (stat(path.c_str(), &st) != 0 || (real = Resolve(path)).empty()) {
        LocalEntry broken;
        broken.path = path;
        broken.broken_link = true;
        char target[PATH_MAX];
        const ssize_t n = readlink(path.c_str(), target, sizeof(target));
        if (n > 0) broken.link_target.assign(target, static_cast<size_t>(n));
        out->push_back(std::move(broken));
        continue;
      }
    }
    if (S_ISDIR(st.st_mode)) {
      if (entered->insert(real).second) STOKER_RETURN_NOT_OK(Walk(path, real, entered, out));
    } else if (S_ISREG(st.st_mode)) {
      out->push_back({path, real, static_cast<int64_t>(st.st_size), MtimeNs(st), false, ""});
    }
  }
  return Status::OK();
}

}  // namespace

std::string RealPath(const std::string& path) {
  std::string real = Resolve(path);
  return real.empty() ? path : real;
}

Result<std::vector<LocalEntry>> ListLocalTree(const std::string& dir) {
  std::vector<LocalEntry> out;
  const std::string real = RealPath(dir);
  std::unordered_set<std::string> entered{real};
  STOKER_RETURN_NOT_OK(Walk(dir, real, &entered, &out));
  std::sort(out.begin(), out.end(),
            [](const LocalEntry& a, const LocalEntry& b) { return a.path < b.path; });
  return out;
}

}  // namespace stoker
