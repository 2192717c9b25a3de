// Counters the engine reports: one definition of each, used by the engine, the bindings, the CLI
// and the benchmark report alike.
//
// Every struct lists its fields once more in `ForEachField`, next to the declarations, so that
// the bindings turn any of them into a Python dict without naming a field. Adding a counter means
// adding it in both places here and nowhere else.
//
// Values are snapshots: plain copies, safe to pass between threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stoker {

/// One pipeline stage. Times are seconds summed over the stage's threads.
struct StageStats {
  std::string name;
  std::string pool;       // the threads it runs on; stages of one pool share its time
  int threads = 0;        // threads in that pool
  double busy_s = 0;      // doing the stage's work
  double wait_in_s = 0;   // blocked on the stage's input
  double wait_out_s = 0;  // blocked because the next stage had no room
  int64_t items = 0;      // work items finished (tasks, batches)
  int64_t bytes = 0;      // bytes produced

  template <typename F>
  void ForEachField(F&& f) const {
    f("name", name);
    f("pool", pool);
    f("threads", threads);
    f("busy_s", busy_s);
    f("wait_in_s", wait_in_s);
    f("wait_out_s", wait_out_s);
    f("items", items);
    f("bytes", bytes);
  }
};

/// The node-local cache, as seen by one process (zero without a cache_dir).
struct CacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t writes = 0;         // entries committed by this process
  int64_t not_stored = 0;     // entries not written: larger than the budget, or no room
  int64_t corrupt = 0;        // entries found corrupt and deleted
  int64_t evictions = 0;      // entries evicted by this process
  int64_t bytes_read = 0;     // payload bytes returned by hits
  int64_t bytes_written = 0;  // payload bytes committed
  int64_t waits = 0;          // reads that waited for another thread or process to fill
  /// Ready-tensor entries decoded by this process but not written: the write-behind queue was
  /// full (the disk was slower than decoding), the disk was behind (its write-back), the
  /// loader closed first, or the write failed.
  /// A later epoch decodes those row groups again (and may store them then).
  int64_t write_skipped = 0;
  /// Operations that ran without the cache because its folder could not be used (removed and
  /// not recreatable, no permission, a file where a folder goes, an I/O error): a miss, or an
  /// entry not stored. The first one prints a warning.
  int64_t unavailable = 0;
  /// Times this process recreated the cache folder's structure after it had been removed.
  int64_t recreated = 0;
  /// Files at an entry's path that are not regular files (FIFO, socket, directory, symlink):
  /// treated as absent and removed when possible.
  int64_t foreign = 0;
  /// Entries that eviction left in place because a process had them mapped (their space would
  /// not have come back until unmapped).
  int64_t kept_in_use = 0;
  /// Ready-tensor hits served after hashing the column chunks read from the file (files without
  /// a trusted identity, or changed since the loader opened them; docs/cache.md).
  int64_t content_checks = 0;
  /// Reads of an entry file this process had not verified before: its payload is hashed. Later
  /// reads of the same file, unchanged since, check its header only.
  int64_t payload_checks = 0;
  /// Entry files mapped into memory (on a read, or after a write). A read of an entry whose
  /// mapping this loader kept from an earlier read or its own write maps nothing: warm epochs
  /// after the first map no entry (within the kept bytes: docs/cache.md).
  int64_t maps = 0;

  template <typename F>
  void ForEachField(F&& f) const {
    f("hits", hits);
    f("misses", misses);
    f("writes", writes);
    f("not_stored", not_stored);
    f("corrupt", corrupt);
    f("evictions", evictions);
    f("bytes_read", bytes_read);
    f("bytes_written", bytes_written);
    f("waits", waits);
    f("write_skipped", write_skipped);
    f("unavailable", unavailable);
    f("recreated", recreated);
    f("foreign", foreign);
    f("kept_in_use", kept_in_use);
    f("content_checks", content_checks);
    f("payload_checks", payload_checks);
    f("maps", maps);
  }
};

/// Requests to remote storage (zero for local sources). Holds no names or settings.
struct StorageStats {
  int64_t requests = 0;  // calls to the store, first tries and retries
  int64_t retries = 0;   // transient failures that were retried
  int64_t failures = 0;  // errors handed on (permanent, or out of retries)
  double backoff_s = 0;  // time slept between retries

  template <typename F>
  void ForEachField(F&& f) const {
    f("requests", requests);
    f("retries", retries);
    f("failures", failures);
    f("backoff_s", backoff_s);
  }
};

/// Rows through the columns' transform chains, summed over columns (zero without transforms).
struct TransformStats {
  int64_t prefix_rows = 0;       // rows run through a cached prefix (decoded; a warm epoch has 0)
  int64_t batch_rows = 0;        // rows run through the per-batch rest of a chain
  int64_t substituted_rows = 0;  // rows replaced by zeros under on_error="zero" (per epoch read)

  template <typename F>
  void ForEachField(F&& f) const {
    f("prefix_rows", prefix_rows);
    f("batch_rows", batch_rows);
    f("substituted_rows", substituted_rows);
  }
};

/// Everything `Loader::Stats()` reports, cumulative over the loader's epochs.
struct LoaderStats {
  std::vector<StageStats> stages;  // in data-flow order
  CacheStats cache;
  StorageStats storage;
  TransformStats transforms;
  int64_t batches = 0;
  int64_t rows = 0;
  double consumer_wait_s = 0;  // time the consumer spent blocked in Next()
  int64_t peak_inflight_bytes = 0;

  template <typename F>
  void ForEachField(F&& f) const {
    f("stages", stages);
    f("cache", cache);
    f("storage", storage);
    f("transforms", transforms);
    f("batches", batches);
    f("rows", rows);
    f("consumer_wait_s", consumer_wait_s);
    f("peak_inflight_bytes", peak_inflight_bytes);
  }
};

}  // namespace stoker
