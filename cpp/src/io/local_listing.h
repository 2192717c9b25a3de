// Recursive listing of a local folder that resolves symbolic links.
//
// Arrow's LocalFileSystem follows a link to a folder every time it meets it, so a link back to
// an ancestor (`ln -s . again`) lists the same files again at every depth until the kernel's
// ELOOP limit. This walk follows links to files and folders (inside or outside the folder) but
// enters each real folder once, so loops and repeated links list nothing twice.
// Thread safety: a pure function of the file system's state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stoker/error.h"

namespace stoker {

struct LocalEntry {
  std::string path;       // as reached from the folder: `dir/name/...`, links not resolved
  std::string real_path;  // symbolic links resolved; empty for a broken link
  int64_t size = 0;
  int64_t mtime_ns = 0;
  /// A symbolic link whose target does not exist or cannot be resolved (a link to itself).
  bool broken_link = false;
  std::string link_target;  // what a broken link points to, as written in the link
};

/// The regular files (and broken links) below the local folder `dir`, at any depth, in sorted
/// path order. A folder reached again under another path (a loop, or two links to one folder) is
/// entered only the first time the walk reaches it, names in sorted order; files reached through
/// two paths are both listed (`real_path` tells them apart). Other kinds of entries (sockets,
/// FIFOs, devices) are left out. Errors: kStorage naming the folder that cannot be read.
Result<std::vector<LocalEntry>> ListLocalTree(const std::string& dir);

/// `path` with every symbolic link resolved, or `path` itself when that fails.
std::string RealPath(const std::string& path);

}  // namespace stoker
