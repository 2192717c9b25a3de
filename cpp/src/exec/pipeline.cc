#include "exec/pipeline.h"

#include <parquet/metadata.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "io/filesystem.h"

namespace stoker {
namespace {

// Batches that may be assembled or waiting for Next() beyond one per worker, whatever their size.
constexpr int kExtraBatches = 2;
// Finished batches ahead of the consumer, at most (beyond num_workers + kExtraBatches, each is
// also counted in prefetch_bytes): bounds the bookkeeping of tiny batches.
constexpr int64_t kMaxBatchesAhead = 256;
// Stop() waits at most this long for the fetch stage's requests that are already sent (they
// stop retrying at once, but an attempt under way lasts until the store answers or its
// request_timeout passes). One still running after that keeps what it uses alive and ends on
// its own; process exit waits for it (io/filesystem.h StopRemoteRequests).
constexpr double kStopWaitSeconds = 1.0;

// Tasks the epoch's head is split into. Locally several per worker: equal shares of bytes are
// not equal shares of time (a dictionary-encoded column costs more per byte than a plain one:
// 24 of them took 11.6 ms against 2.4 ms for 20 plain floats of the same share), and workers
// taking small shares in turn even that out. Remotely one per worker: each task is one GET.
int HeadTasks(int num_workers, bool remote) { return remote ? num_workers : 4 * num_workers; }

// Windows, from the first this pipeline delivers (the head's included), whose segments are split
// into at least one task per worker (local files). A window after the head holds the rest of the
// head's row group: decoded as one task, the second batch waited for one worker to decode most of a
// row group while the consumer, fed one batch, idled (the overlap bench's stall after the first
// batch). Later windows start while the first ones are consumed, so the pipeline is ahead.
constexpr int kStartWindows = 3;

void UpdatePeak(std::atomic<int64_t>* peak, int64_t value) {
  int64_t seen = peak->load();
  while (value > seen && !peak->compare_exchange_weak(seen, value)) {
  }
}

}  // namespace

Pipeline::Pipeline(std::shared_ptr<const Plan> plan, std::shared_ptr<const Decoder> decoder,
                   std::shared_ptr<const BatchAssembler> assembler,
                   std::shared_ptr<CachedDecoder> cached_decoder, PipelineOptions options,
                   int64_t start_batch, int64_t batch_step,
                   std::shared_ptr<PipelineCounters> counters)
    : plan_(std::move(plan)),
      decoder_(std::move(decoder)),
      assembler_(std::move(assembler)),
      cached_decoder_(std::move(cached_decoder)),
      options_(std::move(options)),
      start_batch_(start_batch),
      batch_step_(batch_step),
      counters_(std::move(counters)),
      io_context_(arrow::default_memory_pool(), fetch_stop_.token()),
      requests_(std::make_shared<RequestQueue>(options_.io_requests, io_context_)) {
  // The windows after the head are split among the workers from local files only (below): from
  // a remote store each task is a GET of its own, and the link, not decoding, sets the pace.
  bool remote_source = false;
  if (options_.catalog) {
    for (const auto& file : options_.catalog->files()) remote_source |= IsRemote(*file.fs);
  }
  any_remote_ = remote_source && options_.fetch_ahead;
  split_cached_head_ =
      cached_decoder_ && options_.cache_empty && cached_decoder_->DecodesHeadAlone();
  const int64_t start_row = std::min(start_batch_ * plan_->options.batch_size, plan_->rank_rows);
  const int num_windows = static_cast<int>(plan_->windows.size());
  first_window_ = start_row >= plan_->rank_rows ? num_windows : FindWindow(*plan_, start_row);
  const int first_segment = first_window_ < num_windows
                                ? plan_->windows[first_window_].segment_begin
                                : static_cast<int>(plan_->segments.size());
  // The windows whose segments are split among the workers (kStartWindows).
  const int start_windows_end =
      first_window_ < num_windows ? std::min(num_windows, first_window_ + kStartWindows) : 0;
  const int start_segments_end = start_windows_end > first_window_
                                     ? plan_->windows[start_windows_end - 1].segment_end
                                     : first_segment;
  for (int s = first_segment; s < static_cast<int>(plan_->segments.size()); ++s) {
    SegmentState& state = segments_[s];
    state.first_task = static_cast<int>(tasks_.size());
    // The head (the first batch's rows) and the next windows are split among the workers, so the
    // first batches wait for a share of a row group's columns each. Not with a tensor cache:
    // there every segment stores its row group's entries, grouped alike (their keys). Except the
    // head while the cache holds no entry: it stores nothing (CachedDecoder::Decode), and a split
    // could only miss the whole row group's entry it would otherwise read.
    int min_tasks = 1;
    if ((!cached_decoder_ || split_cached_head_) && plan_->segments[s].head) {
      min_tasks = HeadTasks(options_.num_workers, any_remote_);
    } else if (!cached_decoder_ && !remote_source && s < start_segments_end) {
      min_tasks = options_.num_workers;
    }
    for (auto& task : decoder_->MakeTasks(*plan_, s, options_.task_bytes, min_tasks)) {
      tasks_.push_back(std::move(task));
      task_segment_.push_back(s);
    }
    state.num_tasks = static_cast<int>(tasks_.size()) - state.first_task;
    if (s == first_segment && plan_->segments[s].head) {
      head_tasks_end_ = head_tasks_left_ = tasks_.size();
      head_landed_.assign(head_tasks_end_, false);
    }
    state.parts.resize(state.num_tasks);
  }
  fetch_state_.assign(tasks_.size(), FetchState::kNone);
  reserved_.assign(tasks_.size(), false);
  arrived_.assign(tasks_.size(), false);
  fetched_.resize(tasks_.size());
  fetched_key_.assign(tasks_.size(), nullptr);
  // With a tensor cache the first miss turns fetching on: a warm epoch downloads nothing.
  fetch_enabled_ = any_remote_ && (!cached_decoder_ || options_.cache_empty);
}

Pipeline::~Pipeline() { Stop(); }

void Pipeline::Start() {
  std::lock_guard<std::mutex> join_lock(join_mutex_);
  for (int i = 0; i < options_.num_workers; ++i) threads_.emplace_back([this] { WorkerLoop(); });
  threads_.emplace_back([this] { SequencerLoop(); });
  if (any_remote_) threads_.emplace_back([this] { FetchLoop(); });
}

void Pipeline::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  {
    std::lock_guard<std::mutex> lock(liveness_->mutex);
    liveness_->alive = false;
  }
  fetch_stop_.RequestStop();  // reads waiting for bytes give up
  requests_->Cancel();        // requests not started are dropped
  fetch_cv_.notify_all();
  work_cv_.notify_all();
  item_cv_.notify_all();
  output_cv_.notify_all();
  std::lock_guard<std::mutex> join_lock(join_mutex_);
  for (auto& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
  {
    // An assembly the consumer runs in Next() uses what the pipeline owns: wait for it (it ends
    // on its own) unless this is that thread (a transform stopping its own loader).
    std::unique_lock<std::mutex> lock(mutex_);
    if (consumer_thread_ != std::this_thread::get_id()) {
      output_cv_.wait(lock, [&] { return consumer_assembling_ == 0; });
    }
  }
  if (!requests_waited_) {
    requests_waited_ = true;
    requests_->WaitIdle(kStopWaitSeconds);
  }
}

void Pipeline::FailSegment(int s, size_t task, const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    SegmentState& state = segments_[s];
    if (state.error.ok()) state.error = status;
    fail_task_ = std::min(fail_task_, task);
  }
  item_cv_.notify_all();
  work_cv_.notify_all();
  fetch_cv_.notify_all();
}

bool Pipeline::DecodeAdmissible() const {
  if (next_task_ >= tasks_.size() || next_task_ > fail_task_) return false;
  // A fetched task's bytes are already counted: decoding it costs nothing more. While the fetch
  // stage runs it admits every task (its requests go out in plan order, before workers need them).
  // Workers take a fetched task once all its bytes are here: a worker never sits in a
  // download while a batch waits to be assembled.
  if (fetch_enabled_ || fetch_state_[next_task_] != FetchState::kNone) {
    return fetch_state_[next_task_] == FetchState::kIssued && arrived_[next_task_];
  }
  if (reserved_[next_task_]) return true;
  return FitsBudget(next_task_);
}

void Pipeline::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    const int64_t wait_start = NowNs();
    // Workers outlive errors: batches before the failing one must still be finished.
    work_cv_.wait(lock, [&] { return stopping_ || !jobs_.empty() || DecodeAdmissible(); });
    counters_->decode.wait_in_ns += NowNs() - wait_start;
    if (stopping_) return;
    if (!jobs_.empty()) {
      RunAssemblyJob(&lock);
    } else {
      RunDecodeTask(&lock);
    }
  }
}

void Pipeline::RunAssemblyJob(std::unique_lock<std::mutex>* lock) {
  AssemblyJob job = std::move(jobs_.front());
  jobs_.pop_front();
  if (job.slot > error_batch_) {  // never delivered
    --assembling_;
    ReleaseBatchBytes(job.slot);
    output_cv_.notify_all();
    return;
  }
  lock->unlock();
  Result<std::shared_ptr<Batch>> batch;
  {
    ScopedTimer timer(&counters_->batch.busy_ns);
    batch = assembler_->Assemble(job.index, job.rows, plan_->options.seed, plan_->epoch);
  }
  job.items.clear();  // drop the references to decoded data before taking the lock
  job.rows.clear();
  lock->lock();
  --assembling_;
  if (!batch.ok()) {
    if (job.slot < error_batch_) {
      error_ = batch.status();
      error_batch_ = job.slot;
    }
  } else {
    counters_->rows += (*batch)->num_rows;
    counters_->batches += 1;
    counters_->batch.items += 1;
    int64_t bytes = 0;
    for (const auto& column : (*batch)->columns) bytes += column.values.num_bytes();
    counters_->batch.bytes += bytes;
    batch_bytes_ = std::max(batch_bytes_, bytes);
    // A batch ahead of the base count holds its real size in the budget from now on.
    if (auto it = batch_reserved_.find(job.slot); it != batch_reserved_.end()) {
      inflight_bytes_ += bytes - it->second;
      batch_bytes_ahead_ += bytes - it->second;
      it->second = bytes;
      UpdatePeak(&counters_->peak_inflight_bytes, inflight_bytes_);
    }
    ready_[job.slot] = std::move(*batch);
  }
  output_cv_.notify_all();
}

void Pipeline::RunDecodeTask(std::unique_lock<std::mutex>* lock) {
  const size_t task_index = next_task_++;
  const DecodeTask& task = tasks_[task_index];
  const int segment = task_segment_[task_index];
  if (!reserved_[task_index]) Reserve(task_index);
  std::shared_ptr<arrow::io::RandomAccessFile> prefetched = std::move(fetched_[task_index]);
  const void* prefetched_key = fetched_key_[task_index];
  lock->unlock();

  Result<DecodedColumns> decoded;
  bool hit = false;
  {
    ScopedTimer timer(&counters_->decode.busy_ns);
    std::optional<PrefetchScope> scope;
    if (prefetched) scope.emplace(prefetched_key, prefetched);
    // A head split while the cache is empty has no entry to look up (its tasks' keys are not the
    // row group's), and stores nothing: decoded as without a cache.
    const bool split_head = split_cached_head_ && task_index < head_tasks_end_;
    decoded = cached_decoder_ && !split_head ? cached_decoder_->Decode(*plan_, task, &hit)
                                             : decoder_->Decode(*plan_, task);
  }
  prefetched.reset();  // the fetched bytes are free once decoded
  if (task_index < head_tasks_end_) {
    std::lock_guard<std::mutex> guard(*lock->mutex());
    HeadTaskLandedLocked(task_index);
  }
  if (!decoded.ok()) {
    FailSegment(segment, task_index, decoded.status());
    lock->lock();
    return;
  }
  counters_->decode.items += 1;
  counters_->decode.bytes += decoded->bytes;

  lock->lock();
  if (cached_decoder_ && !hit && any_remote_ && !fetch_enabled_) {
    fetch_enabled_ = true;
    fetch_cv_.notify_all();
  }
  SegmentState& state = segments_[segment];
  // Replace the estimate with what the task really holds.
  const int64_t delta = decoded->bytes - task.estimated_bytes;
  inflight_bytes_ += delta;
  state.accounted_bytes += delta;
  UpdatePeak(&counters_->peak_inflight_bytes, inflight_bytes_);
  state.parts[task_index - state.first_task] = std::move(*decoded);
  if (++state.finished < state.num_tasks) return;

  // Last part of the segment: build the item here, off the sequencer's thread.
  const size_t last_task = state.first_task + state.num_tasks - 1;
  std::vector<DecodedColumns> parts = std::move(state.parts);
  lock->unlock();
  Result<std::shared_ptr<DecodedItem>> item;
  {
    ScopedTimer timer(&counters_->decode.busy_ns);
    item = decoder_->Join(*plan_, segment, parts);
    parts = {};  // the item holds what it reads: Prepare may release columns it transposes
    if (item.ok()) {
      const Status prepared = assembler_->Prepare(item->get());
      if (!prepared.ok()) item = prepared;
    }
  }
  if (!item.ok()) {
    FailSegment(segment, last_task, item.status());
    lock->lock();
    return;
  }
  lock->lock();
  segments_[segment].item = std::move(*item);
  item_cv_.notify_all();
}

bool Pipeline::FetchAdmissible() {
  if (!fetch_enabled_) return false;
  next_fetch_ = std::max(next_fetch_, next_task_);  // tasks taken already are read directly
  if (next_fetch_ >= tasks_.size() || next_fetch_ > fail_task_) return false;
  // The head's column chunks get the link to themselves: downloaded beside the next tasks'
  // chunks, they shared its bandwidth and the first batch came 0.2-0.6 s later (bench.remote:
  // 0.83-1.38 s after Loader(), against 0.68-0.71 s with the fetch stage off).
  if (next_fetch_ >= head_tasks_end_ && head_tasks_left_ > 0) return false;
  return FitsBudget(next_fetch_);
}

void Pipeline::HeadTaskLandedLocked(size_t t) {
  if (t >= head_tasks_end_ || head_landed_[t]) return;
  head_landed_[t] = true;
  if (--head_tasks_left_ == 0) fetch_cv_.notify_all();
}

bool Pipeline::FitsBudget(size_t task) const {
  // The tasks of the segment the sequencer waits for are always admitted (tasks go in plan
  // order, so all in flight then belong to it): a task, or a segment of several tasks, larger
  // than prefetch_bytes still runs. (Admitting one task only when nothing was in flight hung
  // when a segment's second task did not fit beside its first.)
  return inflight_bytes_ == 0 ||
         inflight_bytes_ + tasks_[task].estimated_bytes <= options_.prefetch_bytes ||
         (!segments_.empty() && task_segment_[task] == segments_.begin()->first);
}

void Pipeline::Reserve(size_t task) {
  reserved_[task] = true;
  inflight_bytes_ += tasks_[task].estimated_bytes;
  segments_[task_segment_[task]].accounted_bytes += tasks_[task].estimated_bytes;
  UpdatePeak(&counters_->peak_inflight_bytes, inflight_bytes_);
}

void Pipeline::FetchLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    const int64_t wait_start = NowNs();
    fetch_cv_.wait(lock, [&] { return stopping_ || FetchAdmissible(); });
    counters_->fetch.wait_in_ns += NowNs() - wait_start;
    if (stopping_) return;
    const size_t t = next_fetch_++;
    const DecodeTask& task = tasks_[t];
    // The task's decoded size is reserved now, as if a worker had taken it, so the fetched and
    // decoded bytes together stay within prefetch_bytes.
    Reserve(t);
    fetch_state_[t] = FetchState::kIssuing;
    lock.unlock();
    const void* key = nullptr;
    std::shared_ptr<arrow::io::RandomAccessFile> file;
    {
      ScopedTimer timer(&counters_->fetch.busy_ns);
      auto on_arrived = [this, t, liveness = liveness_] {
        std::lock_guard<std::mutex> alive(liveness->mutex);
        if (!liveness->alive) return;
        {
          std::lock_guard<std::mutex> guard(mutex_);
          arrived_[t] = true;
          HeadTaskLandedLocked(t);
        }
        work_cv_.notify_all();
      };
      file = IssueFetch(task, &key, on_arrived);
      if (!file) on_arrived();  // nothing to wait for: the worker reads directly
    }
    lock.lock();
    fetched_[t] = std::move(file);
    fetched_key_[t] = key;
    fetch_state_[t] = FetchState::kIssued;
    fetch_cv_.notify_all();  // a worker may wait for this task's requests
    work_cv_.notify_all();   // the task is admissible now
  }
}

std::shared_ptr<arrow::io::RandomAccessFile> Pipeline::IssueFetch(
    const DecodeTask& task, const void** key, std::function<void()> on_arrived) {
  const Catalog& catalog = *options_.catalog;
  const RowGroupRef& rg = catalog.row_groups()[plan_->segments[task.segment].row_group];
  const CatalogFile& file = catalog.files()[rg.file];
  if (!IsRemote(*file.fs) || !file.metadata) return nullptr;
  // The column chunks the decoder will read: the same leaves as ReadRowGroupTable.
  std::vector<arrow::io::ReadRange> ranges;
  auto row_group = file.metadata->RowGroup(rg.row_group);
  for (const auto& field : task.fields) {
    auto it = file.fields.find(field);
    if (it == file.fields.end()) continue;
    for (const int leaf : it->second.leaves) {
      auto chunk = row_group->ColumnChunk(leaf);
      int64_t start = chunk->data_page_offset();
      if (chunk->has_dictionary_page() && chunk->dictionary_page_offset() > 0 &&
          chunk->dictionary_page_offset() < start) {
        start = chunk->dictionary_page_offset();
      }
      ranges.push_back({start, chunk->total_compressed_size()});
    }
  }
  if (ranges.empty()) return nullptr;
  auto input = file.Open();
  if (!input.ok()) return nullptr;  // the worker opens it again and reports the error
  int64_t requested = 0;
  auto fetched = FetchRanges(std::move(*input), std::move(ranges), requests_, &requested,
                             std::move(on_arrived));
  counters_->fetch.items += 1;
  counters_->fetch.bytes += requested;
  *key = &file;
  return fetched;
}

Result<std::shared_ptr<DecodedItem>> Pipeline::TakeSegment(int s) {
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t wait_start = NowNs();
  SegmentState& state = segments_.at(s);
  item_cv_.wait(lock, [&] {
    return stopping_ || !error_.ok() || state.item != nullptr || !state.error.ok();
  });
  counters_->sequence.wait_in_ns += NowNs() - wait_start;
  if (!state.error.ok()) return state.error;
  if (stopping_ || !error_.ok()) return Status::Cancelled("stopped");
  std::shared_ptr<DecodedItem> item = std::move(state.item);
  inflight_bytes_ -= state.accounted_bytes;
  segments_.erase(s);
  lock.unlock();
  work_cv_.notify_all();
  fetch_cv_.notify_all();
  return item;
}

bool Pipeline::BatchAdmissible() const {
  const int64_t base = options_.num_workers + kExtraBatches;
  // Jobs not yet assembled keep their windows' decoded rows alive: at most `base` of them.
  if (assembling_ >= base) return false;
  if (outstanding_batches_ < base) return true;
  // More finished batches ahead of the consumer while they fit the budget beside the decoded
  // data in flight, using at most half of it (decoding ahead keeps the other half).
  return batch_bytes_ > 0 && outstanding_batches_ < kMaxBatchesAhead &&
         inflight_bytes_ + batch_bytes_ <= options_.prefetch_bytes &&
         batch_bytes_ahead_ + batch_bytes_ <= options_.prefetch_bytes / 2;
}

void Pipeline::ReleaseBatchBytes(int64_t slot) {
  auto it = batch_reserved_.find(slot);
  if (it == batch_reserved_.end()) return;
  inflight_bytes_ -= it->second;
  batch_bytes_ahead_ -= it->second;
  batch_reserved_.erase(it);
  work_cv_.notify_all();  // decode tasks may fit the budget now
  fetch_cv_.notify_all();
}

Status Pipeline::Submit(AssemblyJob job) {
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t wait_start = NowNs();
  output_cv_.wait(lock, [&] { return stopping_ || !error_.ok() || BatchAdmissible(); });
  counters_->sequence.wait_out_ns += NowNs() - wait_start;
  if (stopping_ || !error_.ok()) return Status::Cancelled("stopped");
  if (outstanding_batches_ >= options_.num_workers + kExtraBatches) {
    // Ahead of the base count: its bytes (estimated by the largest batch so far) join the budget.
    batch_reserved_[job.slot] = batch_bytes_;
    inflight_bytes_ += batch_bytes_;
    batch_bytes_ahead_ += batch_bytes_;
    UpdatePeak(&counters_->peak_inflight_bytes, inflight_bytes_);
  }
  ++outstanding_batches_;
  ++assembling_;
  counters_->sequence.items += 1;
  const bool awaited = job.slot == next_output_;
  jobs_.push_back(std::move(job));
  lock.unlock();
  work_cv_.notify_one();
  if (awaited) output_cv_.notify_all();  // the consumer may assemble it (Next)
  return Status::OK();
}

void Pipeline::SequencerLoop() {
  const Status status = RunSequencer();
  std::lock_guard<std::mutex> lock(mutex_);
  // Every batch submitted before the end (or the failure) is still delivered.
  const int64_t submitted = next_output_ + outstanding_batches_;
  if (status.ok()) {
    end_batch_ = submitted;
  } else if (!status.IsCancelled() && submitted < error_batch_) {
    error_ = status;
    error_batch_ = submitted;
  }
  output_cv_.notify_all();
}

Status Pipeline::RunSequencer() {
  const Plan& plan = *plan_;
  const int64_t batch_size = plan.options.batch_size;
  int64_t batch_index = start_batch_;
  const int64_t skip = start_batch_ * batch_size;  // rows of the rank stream already delivered
  AssemblyJob job;
  int64_t job_rows = 0;
  std::vector<std::shared_ptr<DecodedItem>> window_items;

  for (int w = first_window_; w < static_cast<int>(plan.windows.size()); ++w) {
    const Window& window = plan.windows[w];
    auto rows = std::make_shared<WindowRows>();
    window_items.clear();
    int64_t start = 0;
    for (int s = window.segment_begin; s < window.segment_end; ++s) {
      STOKER_ASSIGN_OR_RAISE(auto item, TakeSegment(s));
      rows->items.push_back(item.get());
      rows->starts.push_back(start);
      window_items.push_back(std::move(item));
      start += plan.segments[s].num_rows;
    }
    int64_t busy_start = NowNs();
    WindowOrder(plan, w, &rows->order);
    job.items.insert(job.items.end(), window_items.begin(), window_items.end());
    // Batches are stretches of the window's order: the workers resolve their rows.
    for (int64_t position = std::max<int64_t>(0, skip - window.row_begin);
         position < window.num_rows;) {
      const int64_t take = std::min(window.num_rows - position, batch_size - job_rows);
      job.rows.push_back({rows, position, position + take});
      job_rows += take;
      position += take;
      if (job_rows == batch_size) {
        job.index = batch_index++;
        counters_->sequence.busy_ns += NowNs() - busy_start;
        STOKER_RETURN_NOT_OK(SubmitIfSelected(std::move(job)));
        busy_start = NowNs();
        job = AssemblyJob{};
        job.items = window_items;
        job_rows = 0;
      }
    }
    counters_->sequence.busy_ns += NowNs() - busy_start;
  }
  if (job_rows > 0) {
    job.index = batch_index++;
    STOKER_RETURN_NOT_OK(SubmitIfSelected(std::move(job)));
  }
  return Status::OK();
}

Status Pipeline::SubmitIfSelected(AssemblyJob job) {
  const int64_t offset = job.index - start_batch_;
  if (offset % batch_step_ != 0) return Status::OK();  // another stride's batch
  job.slot = offset / batch_step_;
  return Submit(std::move(job));
}

Status Pipeline::Next(int64_t timeout_ms, std::shared_ptr<Batch>* out, bool* done) {
  *done = false;
  out->reset();
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t wait_start = NowNs();
  auto queued = [&] { return !jobs_.empty() && jobs_.front().slot == next_output_; };
  output_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    return stopping_ || ready_.contains(next_output_) || next_output_ == end_batch_ ||
           next_output_ >= error_batch_ || queued();
  });
  if (!stopping_ && queued()) {
    // The batch waited for is queued while every worker decodes (the epoch's first batch, right
    // after its head): the consumer's thread, idle until it comes, assembles it.
    ++consumer_assembling_;
    consumer_thread_ = std::this_thread::get_id();
    RunAssemblyJob(&lock);
    --consumer_assembling_;
    output_cv_.notify_all();  // Stop() waits for this assembly
  }
  counters_->consumer_wait_ns += NowNs() - wait_start;
  auto it = ready_.find(next_output_);
  if (it != ready_.end()) {
    *out = std::move(it->second);
    ready_.erase(it);
    ReleaseBatchBytes(next_output_);
    ++next_output_;
    --outstanding_batches_;
    lock.unlock();
    output_cv_.notify_all();
    return Status::OK();
  }
  if (next_output_ >= error_batch_ || (next_output_ == end_batch_ && !error_.ok())) {
    return error_;
  }
  if (next_output_ == end_batch_) {
    *done = true;
  } else if (stopping_) {
    return MakeError(ErrorKind::kClosed,
                     "the loader was closed (or stopped) while this iteration was running");
  }
  return Status::OK();
}

}  // namespace stoker
