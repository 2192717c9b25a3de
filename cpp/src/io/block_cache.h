// Block cache: raw bytes of remote objects in fixed-size aligned blocks in the node-local
// DiskCache ("blocks" namespace), so footers and column chunks are downloaded once per node,
// whatever the number of processes or epochs reading them.
//
// A BlockCachedFile decorates a RandomAccessFile: every read is cut into the blocks it touches;
// each block comes from the cache or is fetched whole from the base file and stored
// (DiskCache::GetOrFill, so one process downloads a block while the others wait for it).
// The key names the object's identity (path, size, modification time) and the block, so a
// changed object never serves stale bytes.
// Thread safety: ReadAt may be called from many threads at once (the parquet pre-buffer does).
#pragma once

#include <arrow/io/interfaces.h>

#include <cstdint>
#include <memory>
#include <string>

#include "cache/disk_cache.h"

namespace stoker {

constexpr int64_t kCacheBlockBytes = int64_t{4} << 20;

/// `identity` must change whenever the object's content may have (e.g. "s3://b/k|size|mtime").
std::shared_ptr<arrow::io::RandomAccessFile> MakeBlockCachedFile(
    std::shared_ptr<arrow::io::RandomAccessFile> base, std::shared_ptr<DiskCache> cache,
    std::string identity, int64_t size, int64_t block_bytes = kCacheBlockBytes);

}  // namespace stoker
