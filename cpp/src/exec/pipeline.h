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
// A worker in a decode task finishes it first, so Next() assembles the batch it waits for itself
// when that job is queued: the consumer's thread is idle until then (the epoch's first batch,
// queued right after the head while both workers decode whole row groups, waited 26 ms for one).
//
// Memory: decoded data in flight (taken by a worker and not yet handed to the sequencer's
// window) stays within prefetch_bytes, except that the tasks of the segment the sequencer waits
// for are always admitted so progress never stalls. At most num_threads + kExtraBatches batches are
// queued or being assembled (their jobs keep windows alive). Finished batches waiting for Next()
// may go beyond that count while they fit: each one past it is counted in the same budget (at the
// largest batch's size, then its own), up to half of prefetch_bytes and kMaxBatchesAhead batches,
// so a consumer whose step releases the CPU (a GPU step) finds batches the workers built meanwhile
// instead of workers that sat idle behind a full queue.
//
// Remote sources (fetch stage): a fetcher thread walks the tasks ahead of the workers, in plan
// order, and requests each task's column-chunk byte ranges on Arrow's I/O pool
// (num_io_threads), reserving the task's bytes in the same in-flight budget first; a worker that
// takes a fetched task decodes from those bytes (io/prefetched_file.h). So downloads run ahead of
// decoding and overlap the batches of earlier windows, while the order of everything the
// sequencer sees stays the plan's. With a tensor cache the stage starts at the first cache miss
// (warm epochs download nothing), or at once when the cache is empty. Local files never use it.
//
// Errors: a worker failure is reported when the sequencer reaches the failing segment, after
// every batch before it: the first error in plan order, whatever the timing.
// Thread safety: Next() from one consumer thread; Stop() from any thread, any number of times
// (callers serialise on joining); counters from any thread. Next() during or after Stop()
// returns a kClosed error unless the epoch had already ended.
#pragma once

#include <arrow/io/interfaces.h>
#include <arrow/util/cancel.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "batch/assembler.h"
#include "catalog/catalog.h"
#include "decode/cached_decoder.h"
#include "decode/decoder.h"
#include "io/prefetched_file.h"
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
  StageCounters fetch{"fetch", "fetcher", 1};  // remote: requesting tasks' bytes ahead (busy:
                                               // opening files and issuing; bytes: requested)
  std::atomic<int64_t> batches{0};
  std::atomic<int64_t> rows{0};
  std::atomic<int64_t> consumer_wait_ns{0};
  std::atomic<int64_t> peak_inflight_bytes{0};

  std::vector<StageStats> Stages() const {
    // The fetch stage shows only where it ran (remote sources), so local stats keep their shape.
    std::vector<StageStats> stages;
    if (fetch.items > 0) stages.push_back(fetch.Snapshot());
    for (const auto* stage : {&decode, &sequence, &batch}) stages.push_back(stage->Snapshot());
    return stages;
  }
};

/// What the pipeline needs from the loader's resolved options.
struct PipelineOptions {
  int num_workers = 1;
  int64_t prefetch_bytes = 256 << 20;
  int64_t task_bytes = 16 << 20;
  /// The files the plan's row groups come from (for the fetch stage); null: no fetch stage.
  std::shared_ptr<const Catalog> catalog;
  /// Fetch remote tasks' bytes ahead of the workers (STOKER_FETCH_AHEAD=0 turns it off).
  bool fetch_ahead = true;
  /// The tensor cache holds nothing: fetch from the start even with a cache, and split the
  /// epoch's head among the workers, decoded without the cache (it would store nothing).
  bool cache_empty = false;
  /// Requests the fetch stage keeps under way (the loader's num_io_threads).
  int io_requests = 4;
};

class Pipeline {
 public:
  Pipeline(std::shared_ptr<const Plan> plan, std::shared_ptr<const Decoder> decoder,
           std::shared_ptr<const BatchAssembler> assembler,
           std::shared_ptr<CachedDecoder> cached_decoder, PipelineOptions options,
           int64_t start_batch, int64_t batch_step, std::shared_ptr<PipelineCounters> counters);
  ~Pipeline();

  void Start();
  /// Waits up to timeout_ms. Sets *out to the next batch, or *done at the end of the epoch;
  /// neither on a timeout.
  Status Next(int64_t timeout_ms, std::shared_ptr<Batch>* out, bool* done);
  /// Stops every thread and joins it; the fetch stage's requests stop retrying, those not
  /// started are dropped, and those already sent are waited for up to 1 s (kStopWaitSeconds;
  /// one still running keeps what it uses alive and finishes on its own).
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
    int64_t index = 0;  // in the plan's batch stream: seeds the batch's random transforms
    int64_t slot = 0;   // in this pipeline's output: (index - start_batch) / batch_step
    std::vector<RowStretch> rows;
    std::vector<std::shared_ptr<DecodedItem>> items;  // keeps `rows` valid
  };

  enum class FetchState : uint8_t { kNone, kIssuing, kIssued };

  void WorkerLoop();
  void FetchLoop();
  /// Requests the byte ranges of task `t` (a remote file's column chunks); null when the task
  /// reads no remote bytes or its file cannot be opened (the worker then reports the error).
  std::shared_ptr<arrow::io::RandomAccessFile> IssueFetch(const DecodeTask& task, const void** key,
                                                          std::function<void()> on_arrived);
  bool FetchAdmissible();  // REQUIRES(mutex_); skips tasks the workers already took
  /// Whether `task`'s estimated bytes fit in prefetch_bytes beside those in flight.
  bool FitsBudget(size_t task) const;  // REQUIRES(mutex_)
  /// Counts `task`'s estimated bytes in flight (and its segment's), once per task.
  void Reserve(size_t task);  // REQUIRES(mutex_)
  // Counts head task `t` as in, once (its bytes fetched, or read directly). REQUIRES(mutex_)
  void HeadTaskLandedLocked(size_t t);
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
  /// Submit for a batch of this pipeline's stride (numbers its slot); drops any other batch.
  Status SubmitIfSelected(AssemblyJob job);
  bool DecodeAdmissible() const;  // REQUIRES(mutex_)
  /// Whether the sequencer may queue one more batch (see "Memory" above).
  bool BatchAdmissible() const;  // REQUIRES(mutex_)
  /// Takes batch `slot`'s bytes (if it was counted) out of the budget.
  void ReleaseBatchBytes(int64_t slot);  // REQUIRES(mutex_)

  const std::shared_ptr<const Plan> plan_;
  const std::shared_ptr<const Decoder> decoder_;
  const std::shared_ptr<const BatchAssembler> assembler_;
  const std::shared_ptr<CachedDecoder> cached_decoder_;  // null without a cache
  const PipelineOptions options_;
  const int64_t start_batch_;
  const int64_t batch_step_;  // delivers batches start_batch_, start_batch_ + batch_step_, ...
  const std::shared_ptr<PipelineCounters> counters_;
  int first_window_ = 0;
  bool any_remote_ = false;
  // The head is split and decoded without the tensor cache: it holds no entry yet, and the head
  // stores none (CachedDecoder::DecodesHeadAlone).
  bool split_cached_head_ = false;
  arrow::StopSource fetch_stop_;            // cancels queued requests and waiting reads on Stop()
  arrow::io::IOContext io_context_;         // Arrow's I/O pool with fetch_stop_'s token
  std::shared_ptr<RequestQueue> requests_;  // the fetch stage's requests, in plan order

  std::vector<DecodeTask> tasks_;
  std::vector<int> task_segment_;  // plan segment of each task

  std::mutex mutex_;
  std::condition_variable work_cv_;      // workers: a task, a job, or stop
  std::condition_variable item_cv_;      // sequencer: its next segment
  std::condition_variable output_cv_;    // sequencer: room for a job; consumer: the next batch
  std::condition_variable fetch_cv_;     // fetcher: budget or a task to fetch; workers: issued
  bool fetch_enabled_ = false;           // GUARDED_BY(mutex_)
  size_t next_fetch_ = 0;                // GUARDED_BY(mutex_) next task the fetcher considers
  std::vector<FetchState> fetch_state_;  // GUARDED_BY(mutex_) per task
  std::vector<bool> reserved_;           // GUARDED_BY(mutex_) bytes counted by the fetcher
  std::vector<bool> arrived_;            // GUARDED_BY(mutex_) every request of the task done
  // Tasks [0, head_tasks_end_) are the epoch's head; the fetcher issues nothing after them until
  // their bytes are in (head_tasks_left_ are not): fetched, or read by a worker directly.
  size_t head_tasks_end_ = 0;
  size_t head_tasks_left_ = 0;     // GUARDED_BY(mutex_)
  std::vector<bool> head_landed_;  // GUARDED_BY(mutex_) per head task
  // Request callbacks may outlive the pipeline: they touch it only while `alive` holds.
  struct Liveness {
    std::mutex mutex;
    bool alive = true;  // GUARDED_BY(mutex)
  };
  std::shared_ptr<Liveness> liveness_ = std::make_shared<Liveness>();
  std::vector<std::shared_ptr<arrow::io::RandomAccessFile>> fetched_;  // GUARDED_BY(mutex_)
  std::vector<const void*> fetched_key_;  // GUARDED_BY(mutex_) CatalogFile of fetched_[t]
  size_t next_task_ = 0;                  // GUARDED_BY(mutex_)
  size_t fail_task_ = SIZE_MAX;           // GUARDED_BY(mutex_)
  int64_t inflight_bytes_ = 0;            // GUARDED_BY(mutex_)
  std::map<int, SegmentState> segments_;  // GUARDED_BY(mutex_)
  std::deque<AssemblyJob> jobs_;          // GUARDED_BY(mutex_)
  int64_t outstanding_batches_ = 0;       // GUARDED_BY(mutex_) submitted, not taken
  int64_t assembling_ = 0;                // GUARDED_BY(mutex_) submitted, not yet assembled
  int consumer_assembling_ = 0;           // GUARDED_BY(mutex_) jobs Next() runs (0 or 1)
  std::thread::id consumer_thread_;       // GUARDED_BY(mutex_) the last that ran one
  int64_t batch_bytes_ = 0;               // GUARDED_BY(mutex_) largest batch assembled so far
  int64_t batch_bytes_ahead_ = 0;         // GUARDED_BY(mutex_) sum of batch_reserved_
  // Batches beyond num_workers + kExtraBatches outstanding, by slot: bytes counted in flight.
  std::map<int64_t, int64_t> batch_reserved_;  // GUARDED_BY(mutex_)
  // Output positions are slots (AssemblyJob::slot), not batch indices.
  std::map<int64_t, std::shared_ptr<Batch>> ready_;  // GUARDED_BY(mutex_) by slot
  int64_t next_output_ = 0;                          // GUARDED_BY(mutex_)
  int64_t end_batch_ = -1;            // GUARDED_BY(mutex_) one past the last slot, once known
  bool stopping_ = false;             // GUARDED_BY(mutex_)
  Status error_;                      // GUARDED_BY(mutex_) delivered after batches before it
  int64_t error_batch_ = INT64_MAX;   // GUARDED_BY(mutex_)
  std::mutex join_mutex_;             // one Stop() joins; concurrent callers wait for it
  std::vector<std::thread> threads_;  // GUARDED_BY(join_mutex_) after Start()
  bool requests_waited_ = false;      // GUARDED_BY(join_mutex_) Stop() waited for requests
};

}  // namespace stoker
