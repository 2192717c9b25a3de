// The counters of one DiskCache object (each process counts its own), shared by the parts of the
// cache that count: disk_cache.cc (hits, misses, writes...), cache_files.cc (a recreated folder,
// a foreign lock file) and cache_budget.cc (evictions, entries kept because in use).
// Thread safety: every counter is atomic; relaxed order (they are statistics, never conditions).
#pragma once

#include <atomic>
#include <cstdint>

#include "stoker/stats.h"

namespace stoker {

struct DiskCacheCounters {
  std::atomic<int64_t> hits{0}, misses{0}, writes{0}, not_stored{0}, corrupt{0}, evictions{0},
      bytes_read{0}, bytes_written{0}, waits{0}, unavailable{0}, recreated{0}, foreign{0},
      kept_in_use{0}, write_skipped{0}, payload_checks{0}, maps{0};

  CacheStats Snapshot() const {
    CacheStats out;
    out.hits = hits.load();
    out.misses = misses.load();
    out.writes = writes.load();
    out.not_stored = not_stored.load();
    out.corrupt = corrupt.load();
    out.evictions = evictions.load();
    out.bytes_read = bytes_read.load();
    out.bytes_written = bytes_written.load();
    out.waits = waits.load();
    out.unavailable = unavailable.load();
    out.recreated = recreated.load();
    out.foreign = foreign.load();
    out.kept_in_use = kept_in_use.load();
    out.write_skipped = write_skipped.load();
    out.payload_checks = payload_checks.load();
    out.maps = maps.load();
    return out;
  }
};

}  // namespace stoker
