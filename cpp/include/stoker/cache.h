// Tools for a node-local cache folder (the `cache_dir` of LoaderOptions): what it holds and how
// to empty it. Safe while loaders use the folder. Thread safety: free functions, no shared state.
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

/// Opens (and tidies: dead writers' temporary files go) the folder, then counts its entries.
Result<CacheUsage> InspectCache(const std::string& dir);

/// Removes every entry; mappings held by running loaders stay valid.
Status ClearCache(const std::string& dir);

}  // namespace stoker
