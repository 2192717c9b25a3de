// Tools for a node-local cache folder (the `cache_dir` of LoaderOptions): what it holds and how
// to empty it. Safe while loaders use the folder. Both first check, reading only, that the folder
// is a stoker cache (the layout DiskCache creates: a .lock file, a .tmp folder, entry folders)
// or empty, and refuse any other folder (kInvalidOption, naming what does not belong) without
// changing it: pointed at a data folder by mistake, they never write or delete there.
// Thread safety: free functions, no shared state.
#pragma once

#include <cstdint>
#include <string>

#include "stoker/error.h"

namespace stoker {

struct CacheUsage {
  int64_t tensors_entries = 0;  // decoded row groups (ready-tensor cache)
  int64_t tensors_bytes = 0;
  int64_t blocks_entries = 0;  // raw byte blocks of remote objects (block cache)
  int64_t blocks_bytes = 0;
};

/// Counts the entries of a cache folder (all zero for an empty folder). Writes nothing: no lock,
/// no cleanup of dead writers' temporary files (a Loader opening the folder does that), so it
/// also works on a read-only folder. kNotFound when `dir` does not exist.
Result<CacheUsage> InspectCache(const std::string& dir);

/// Removes every entry; mappings held by running loaders stay valid. An empty folder is left as
/// it is. kNotFound when `dir` does not exist.
Status ClearCache(const std::string& dir);

}  // namespace stoker
