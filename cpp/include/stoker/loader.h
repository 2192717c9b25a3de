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
// Thread safety: one consumer thread calls StartEpoch and Next; Stop() and Stats() may be called
// from any thread at any time. A Next() that is running or called after another thread's Stop()
// returns a kClosed error (never a silently short epoch).
// fork(): the child of a process that holds a Loader must not use it: every call returns kClosed,
// and Stop() and the destructor leave the parent's threads alone.
#pragma once

#include <arrow/util/cancel.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stoker/column_info.h"
#include "stoker/error.h"
#include "stoker/options.h"
#include "stoker/stats.h"
#include "stoker/tensor.h"

namespace stoker {

class Loader {
 public:
  static Result<std::unique_ptr<Loader>> Open(const LoaderOptions& options);
  /// Open that another thread can cancel (the Python binding does on Ctrl-C): once `stop` is
  /// requested, remote listing, footer and data requests stop retrying at their next step (a
  /// backoff sleep ends at once; a request already sent runs until the store answers or its
  /// request_timeout passes) and Open returns a kStorage error.
  static Result<std::unique_ptr<Loader>> Open(const LoaderOptions& options,
                                              const arrow::StopToken& stop);
  ~Loader();

  /// Starts delivering `epoch` at batch `start_batch` (0 for a fresh epoch). Stops any epoch in
  /// progress first. With `batch_step` > 1 only batches start_batch, start_batch + batch_step,
  /// ... are delivered (byte-identical to those batches of the whole stream): N loaders with
  /// steps N and starts j..j+N-1 share an epoch's batches between them (stoker.ray).
  Status StartEpoch(int64_t epoch, int64_t start_batch, int64_t batch_step = 1);
  /// Starts the rest of `epoch` that `old_world_size` ranks left after each delivered
  /// `old_batches` batches, dealt to this loader's rank and world size (MakeElasticPlan), at
  /// batch `start_batch` of that rest, every `batch_step`-th batch. Returns the rest's batch
  /// count on this rank (all of them, not only this stride's).
  Result<int64_t> StartElasticEpoch(int64_t epoch, int old_world_size, int64_t old_batches,
                                    int64_t start_batch, int64_t batch_step = 1);
  /// Returns the next batch, or nullptr when the epoch is done. Blocks while workers produce.
  Result<std::shared_ptr<Batch>> Next();
  /// Like Next() but waits at most `timeout_ms`: sets *out to a batch, or *done at the end of
  /// the epoch, or neither on a timeout (so a caller can check for signals and call again).
  Status NextFor(int64_t timeout_ms, std::shared_ptr<Batch>* out, bool* done);
  /// Blocks until the ready-tensor cache entries queued so far are on disk (or skipped, when
  /// the loader is closed meanwhile). Entries are written behind the pipeline, so an epoch can
  /// end before its entries are stored; other processes find them once written. No-op without
  /// cache_dir.
  void FlushCache();
  /// Stops and joins every thread. Idempotent; safe at any time, from any thread.
  void Stop();
  /// Stop() for good: every later StartEpoch, StartElasticEpoch or Next returns kClosed, so an
  /// epoch being started by another thread at the same moment cannot outlive the close.
  void Close();

  /// Sets the seed of the epochs started from now on (the plan's only per-epoch input besides
  /// the epoch itself); nothing is re-read. Resuming a state saved with another seed uses it.
  void SetSeed(uint64_t seed);
  uint64_t Seed() const;

  /// Batches per epoch for this rank.
  int64_t NumBatches() const;
  /// Batches per epoch for each rank of `world_size` ranks (what a resume state saved at that
  /// world size may have delivered).
  int64_t NumBatchesAt(int world_size) const;
  /// Rows per epoch for this rank (including padding rows).
  int64_t NumRows() const;
  /// The shuffle window in rows (after converting shuffle_window_bytes).
  int64_t ShuffleWindowRows() const;
  /// Rows in the dataset.
  int64_t DatasetRows() const;
  int64_t NumFiles() const;
  int64_t NumRowGroups() const;
  /// Options fingerprint mixed with the dataset's identity (files, sizes, rows).
  uint64_t Fingerprint(bool with_shard = true) const;
  /// The dataset's identity alone (files, sizes, row counts), to tell a changed dataset from
  /// changed options.
  uint64_t DatasetFingerprint() const;
  std::vector<ColumnInfo> Columns() const;
  /// The vocabulary of categorical column `column` (LoaderOptions::categories): value i has
  /// id i + 1, 0 is out-of-vocabulary. kInvalidOption when the column is not categorical.
  Result<std::vector<std::string>> Vocabulary(const std::string& column) const;
  LoaderStats Stats() const;

  class Impl;

 private:
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// For process exit, before S3 is finalised (Python: stoker's atexit hook; C++ programs get it
/// from std::atexit): every remote request of the process stops retrying at its next step and
/// later ones fail at once; then waits for those in progress, at most `timeout_s` (negative:
/// the longest connect + request timeout of the stores opened so far, plus 1 s). Returns
/// whether none is left. Remote sources cannot be read afterwards.
bool StopRemoteRequestsForExit(double timeout_s = -1);

}  // namespace stoker
