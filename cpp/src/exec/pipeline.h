// Pipeline: runs one epoch (or the rest of one) of a Plan on worker threads.
//
//   decode tasks (plan order) --> N CPU workers: decode + prepare --> reorder buffer -->
//   sequencer thread: shuffle window, rows of each batch --> assembly jobs --> N CPU workers:
//   gather into slabs --> batches reordered by index --> Next()
//
// Workers take decode tasks strictly in plan order from a shared cursor but finish in any order;
// the sequencer consumes segments strictly in plan order and numbers the batches, and Next()
// releases batches strictly by number. So the output never depends on the number of workers or
// their timing. Workers prefer assembly jobs to decode tasks (finishing batches frees memory).
//
// Memory: decoded data in flight (taken by a worker and not yet handed to the sequencer's
// window) stays within prefetch_bytes, except that one task is always admitted so progress never
// stalls; at most num_threads + kExtraBatches batches are being assembled or wait for Next().
//
// Errors: a worker failure is reported when the sequencer reaches the failing segment, after
// every batch before it: the first error in plan order, whatever the timing.
// Thread safety: Next() from one consumer thread; Stop() from any thread, any number of times
// (callers serialise on joining); counters from any thread. Next() during or after Stop()
// returns a kClosed error unless the epoch had already ended.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "batch/assembler.h"
#include "decode/decoder.h"
#include "decode/tensor_cache.h"
#include "plan/planner.h"
#include "stoker/loader.h"
#include "util/stage_counters.h"

namespace stoker {

/// The pipeline's stages and totals, cumulative over a loader's epochs. A new stage is a new
/// member listed in Stages(): stats(), `stoker bench` and the bench report pick it up from there.
struct PipelineCounters {
  explicit PipelineCounters(int workers)
      : decode("decode", "workers", workers),
        sequence("sequence", "sequencer", 1),
        batch("batch", "workers", workers) {}

  StageCounters decode;    // read + decode + prepare a segment (wait_in: workers idle)
  StageCounters sequence;  // window permutation, batch cutting
  StageCounters batch;     // gathering a batch's rows into its slab
  std::atomic<int64_t> batches{0};
  std::atomic<int64_t> rows{0};
  std::atomic<int64_t> consumer_wait_ns{0};
  std::atomic<int64_t> peak_inflight_bytes{0};

  std::vector<StageStats> Stages() const {
    return {decode.Snapshot(), sequence.Snapshot(), batch.Snapshot()};
  }
};

/// What the pipeline needs from the loader's resolved options.
struct PipelineOptions {
  int num_workers = 1;
  int64_t prefetch_bytes = 256 << 20;
  int64_t task_bytes = 16 << 20;
};

class Pipeline {
 public:
  Pipeline(std::shared_ptr<const Plan> plan, std::shared_ptr<const Decoder> decoder,
           std::shared_ptr<const BatchAssembler> assembler,
           std::shared_ptr<TensorCache> tensor_cache, const PipelineOptions& options,
           int64_t start_batch, std::shared_ptr<PipelineCounters> counters);
  ~Pipeline();

  void Start();
  /// Waits up to timeout_ms. Sets *out to the next batch, or *done at the end of the epoch;
  /// neither on a timeout.
  Status Next(int64_t timeout_ms, std::shared_ptr<Batch>* out, bool* done);
  void Stop();

 private:
  struct SegmentState {
    int first_task = 0;
    int num_tasks = 0;
    int finished = 0;
    int64_t accounted_bytes = 0;  // counts against prefetch_bytes until the sequencer takes it
    std::vector<DecodedColumns> parts;
    std::shared_ptr<DecodedItem> item;
    Status error;  // surfaces when the sequencer reaches this segment
  };

  struct AssemblyJob {
    int64_t index = 0;
    std::vector<RowRef> rows;
    std::vector<std::shared_ptr<DecodedItem>> items;  // keeps `rows` valid
  };

  void WorkerLoop();
  void RunDecodeTask(std::unique_lock<std::mutex>* lock);
  void RunAssemblyJob(std::unique_lock<std::mutex>* lock);
  void SequencerLoop();
  Status RunSequencer();
  /// Records a worker failure on segment `s`; no task after `task` is started any more.
  void FailSegment(int s, size_t task, const Status& status);
  /// Blocks until segment `s` is decoded; takes it out of the reorder buffer.
  Result<std::shared_ptr<DecodedItem>> TakeSegment(int s);
  /// Queues a batch for assembly; blocks while too many batches are outstanding.
  Status Submit(AssemblyJob job);
  bool DecodeAdmissible() const;  // REQUIRES(mutex_)

  const std::shared_ptr<const Plan> plan_;
  const std::shared_ptr<const Decoder> decoder_;
  const std::shared_ptr<const BatchAssembler> assembler_;
  const std::shared_ptr<TensorCache> tensor_cache_;  // null without a cache
  const PipelineOptions options_;
  const int64_t start_batch_;
  const std::shared_ptr<PipelineCounters> counters_;
  int first_window_ = 0;

  std::vector<DecodeTask> tasks_;
  std::vector<int> task_segment_;  // plan segment of each task

  std::mutex mutex_;
  std::condition_variable work_cv_;       // workers: a task, a job, or stop
  std::condition_variable item_cv_;       // sequencer: its next segment
  std::condition_variable output_cv_;     // sequencer: room for a job; consumer: the next batch
  size_t next_task_ = 0;                  // GUARDED_BY(mutex_)
  size_t fail_task_ = SIZE_MAX;           // GUARDED_BY(mutex_)
  int64_t inflight_bytes_ = 0;            // GUARDED_BY(mutex_)
  std::map<int, SegmentState> segments_;  // GUARDED_BY(mutex_)
  std::deque<AssemblyJob> jobs_;          // GUARDED_BY(mutex_)
  int64_t outstanding_batches_ = 0;       // GUARDED_BY(mutex_) submitted, not taken
  std::map<int64_t, std::shared_ptr<Batch>> ready_;  // GUARDED_BY(mutex_) by batch index
  int64_t next_output_ = 0;                          // GUARDED_BY(mutex_)
  int64_t end_batch_ = -1;            // GUARDED_BY(mutex_) one past the last batch, once known
  bool stopping_ = false;             // GUARDED_BY(mutex_)
  Status error_;                      // GUARDED_BY(mutex_) delivered after batches before it
  int64_t error_batch_ = INT64_MAX;   // GUARDED_BY(mutex_)
  std::mutex join_mutex_;             // one Stop() joins; concurrent callers wait for it
  std::vector<std::thread> threads_;  // GUARDED_BY(join_mutex_) after Start()
};

}  // namespace stoker
