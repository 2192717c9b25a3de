// Loader: the public entry point of the engine.
//
// Usage:
//   1. auto loader = Loader::Open(options);          // lists files, reads footers, plans
//   2. loader->StartEpoch(epoch, start_batch);       // starts worker threads
//   3. while ((batch = loader->Next()) != nullptr)   // blocks until the next batch is ready
//   4. loader->Stop();                               // or let the destructor do it
//
// The batches of an epoch are a pure function of (dataset, options, seed, epoch, rank,
// world_size): they do not depend on num_threads, prefetch_bytes or timing.
// Thread safety: one consumer thread calls StartEpoch/Next/Stop; Stats() may be called from any
// thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stoker/error.h"
#include "stoker/options.h"
#include "stoker/tensor.h"

namespace stoker {

/// What the loader will produce for one column, for Python's `loader.columns` and `inspect`.
struct ColumnInfo {
  std::string name;
  std::string arrow_type;
  ColumnKind kind;
  DType dtype;
  std::vector<int64_t> inner_shape;  // per-row shape after the batch dimension
  std::string annotation;
};

/// Per-stage counters. Times are seconds summed over the threads of a stage.
struct StageStats {
  std::string name;
  double busy_s = 0;
  double wait_input_s = 0;
  double wait_output_s = 0;
  int64_t items = 0;
  int64_t bytes = 0;
};

/// Node-local cache counters of this loader's process (zero without a cache_dir).
struct CacheCounters {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t writes = 0;
  int64_t not_stored = 0;
  int64_t corrupt = 0;
  int64_t evictions = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  int64_t waits = 0;
};

/// Requests to remote storage made by this loader's filesystems (zero for local sources).
struct StorageStats {
  int64_t requests = 0;  // first tries and retries
  int64_t retries = 0;   // transient failures retried
  int64_t failures = 0;  // errors handed on (permanent, or out of retries)
  double backoff_s = 0;  // time slept between retries
};

struct LoaderStats {
  std::vector<StageStats> stages;
  CacheCounters cache;
  StorageStats storage;
  int64_t batches = 0;
  int64_t rows = 0;
  double consumer_wait_s = 0;  // time Next() spent blocked
  int64_t peak_inflight_bytes = 0;
};

class Loader {
 public:
  static Result<std::unique_ptr<Loader>> Open(const LoaderOptions& options);
  ~Loader();

  /// Starts delivering `epoch` at batch `start_batch` (0 for a fresh epoch). Stops any epoch in
  /// progress first.
  Status StartEpoch(int64_t epoch, int64_t start_batch);
  /// Returns the next batch, or nullptr when the epoch is done. Blocks while workers produce.
  Result<std::shared_ptr<Batch>> Next();
  /// Like Next() but waits at most `timeout_ms`: sets *out to a batch, or *done at the end of
  /// the epoch, or neither on a timeout (so a caller can check for signals and call again).
  Status NextFor(int64_t timeout_ms, std::shared_ptr<Batch>* out, bool* done);
  /// Stops and joins every thread. Idempotent; safe at any time.
  void Stop();

  /// Batches per epoch for this rank.
  int64_t NumBatches() const;
  /// Rows per epoch for this rank (including padding rows).
  int64_t NumRows() const;
  /// The shuffle window in rows (after converting shuffle_window_bytes).
  int64_t ShuffleWindowRows() const;
  /// Rows in the dataset.
  int64_t DatasetRows() const;
  int64_t NumFiles() const;
  int64_t NumRowGroups() const;
  /// Options fingerprint mixed with the dataset's identity (files, sizes, rows).
  uint64_t Fingerprint() const;
  std::vector<ColumnInfo> Columns() const;
  LoaderStats Stats() const;

  class Impl;

 private:
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker
