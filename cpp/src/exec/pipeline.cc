#include "exec/pipeline.h"

#include <algorithm>
#include <chrono>

namespace stoker {
namespace {

constexpr size_t kOutputQueueBatches = 2;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class ScopedTimer {
 public:
  explicit ScopedTimer(std::atomic<int64_t>* sink) : sink_(sink), start_(NowNs()) {}
  ~ScopedTimer() { *sink_ += NowNs() - start_; }

 private:
  std::atomic<int64_t>* sink_;
  int64_t start_;
};

}  // namespace

Pipeline::Pipeline(std::shared_ptr<const Plan> plan, std::shared_ptr<const Decoder> decoder,
                   std::shared_ptr<const BatchAssembler> assembler, const LoaderOptions& options,
                   int64_t start_batch, std::shared_ptr<PipelineCounters> counters)
    : plan_(std::move(plan)),
      decoder_(std::move(decoder)),
      assembler_(std::move(assembler)),
      options_(options),
      start_batch_(start_batch),
      counters_(std::move(counters)) {
  const int64_t start_row = std::min(start_batch_ * options_.batch_size, plan_->rank_rows);
  if (start_row >= plan_->rank_rows) {
    first_window_ = static_cast<int>(plan_->windows.size());
  } else {
    first_window_ = FindWindow(*plan_, start_row);
  }
  const int first_segment = first_window_ < static_cast<int>(plan_->windows.size())
                                ? plan_->windows[first_window_].segment_begin
                                : static_cast<int>(plan_->segments.size());
  for (int s = first_segment; s < static_cast<int>(plan_->segments.size()); ++s) {
    SegmentState& state = segments_[s];
    state.first_task = static_cast<int>(tasks_.size());
    for (auto& task : decoder_->MakeTasks(*plan_, s, options_.task_bytes)) {
      tasks_.push_back(std::move(task));
      task_segment_.push_back(s);
    }
    state.num_tasks = static_cast<int>(tasks_.size()) - state.first_task;
    state.parts.resize(state.num_tasks);
  }
}

Pipeline::~Pipeline() { Stop(); }

void Pipeline::Start() {
  int workers = options_.num_threads;
  if (workers <= 0) workers = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { WorkerLoop(); });
  threads_.emplace_back([this] { BatcherLoop(); });
}

void Pipeline::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  item_cv_.notify_all();
  output_cv_.notify_all();
  for (auto& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
}

void Pipeline::Fail(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_.ok()) error_ = status;
  }
  work_cv_.notify_all();
  item_cv_.notify_all();
  output_cv_.notify_all();
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
}

void Pipeline::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  auto finished = [&] {
    return stopping_ || !error_.ok() || next_task_ >= tasks_.size() || next_task_ > fail_task_;
  };
  while (true) {
    {
      const int64_t wait_start = NowNs();
      work_cv_.wait(lock, [&] {
        if (finished()) return true;
        return inflight_bytes_ == 0 ||
               inflight_bytes_ + tasks_[next_task_].estimated_bytes <= options_.prefetch_bytes;
      });
      counters_->decode_wait_ns += NowNs() - wait_start;
    }
    if (finished()) return;
    const size_t task_index = next_task_++;
    const DecodeTask& task = tasks_[task_index];
    const int segment = task_segment_[task_index];
    inflight_bytes_ += task.estimated_bytes;
    segments_[segment].accounted_bytes += task.estimated_bytes;
    counters_->peak_inflight_bytes =
        std::max(counters_->peak_inflight_bytes.load(), inflight_bytes_);
    lock.unlock();

    Result<DecodedColumns> decoded;
    {
      ScopedTimer timer(&counters_->decode_busy_ns);
      decoded = decoder_->Decode(*plan_, task);
    }
    if (!decoded.ok()) {
      FailSegment(segment, task_index, decoded.status());
      lock.lock();
      continue;
    }
    counters_->decode_tasks += 1;
    counters_->decode_bytes += decoded->bytes;

    lock.lock();
    SegmentState& state = segments_[segment];
    // Replace the estimate with what the task really holds.
    const int64_t delta = decoded->bytes - task.estimated_bytes;
    inflight_bytes_ += delta;
    state.accounted_bytes += delta;
    counters_->peak_inflight_bytes =
        std::max(counters_->peak_inflight_bytes.load(), inflight_bytes_);
    state.parts[task_index - state.first_task] = std::move(*decoded);
    if (++state.finished < state.num_tasks) continue;

    // Last part of the segment: build the item here, off the batcher's thread.
    const size_t last_task = state.first_task + state.num_tasks - 1;
    std::vector<DecodedColumns> parts = std::move(state.parts);
    lock.unlock();
    Result<std::shared_ptr<DecodedItem>> item;
    {
      ScopedTimer timer(&counters_->decode_busy_ns);
      item = decoder_->Assemble(*plan_, segment, std::move(parts));
    }
    if (!item.ok()) {
      FailSegment(segment, last_task, item.status());
      lock.lock();
      continue;
    }
    lock.lock();
    segments_[segment].item = std::move(*item);
    item_cv_.notify_all();
  }
}

Result<std::shared_ptr<DecodedItem>> Pipeline::TakeSegment(int s) {
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t wait_start = NowNs();
  SegmentState& state = segments_.at(s);
  item_cv_.wait(lock, [&] {
    return stopping_ || !error_.ok() || state.item != nullptr || !state.error.ok();
  });
  counters_->batch_wait_input_ns += NowNs() - wait_start;
  if (!state.error.ok()) return state.error;
  if (!error_.ok()) return error_;
  if (stopping_) return Status::Cancelled("stopped");
  std::shared_ptr<DecodedItem> item = std::move(state.item);
  inflight_bytes_ -= state.accounted_bytes;
  segments_.erase(s);
  lock.unlock();
  work_cv_.notify_all();
  return item;
}

Status Pipeline::Emit(std::shared_ptr<Batch> batch) {
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t wait_start = NowNs();
  output_cv_.wait(lock, [&] {
    return stopping_ || !error_.ok() || output_.size() < kOutputQueueBatches;
  });
  counters_->batch_wait_output_ns += NowNs() - wait_start;
  if (!error_.ok()) return error_;
  if (stopping_) return Status::Cancelled("stopped");
  output_.push_back(std::move(batch));
  lock.unlock();
  output_cv_.notify_all();
  return Status::OK();
}

void Pipeline::BatcherLoop() {
  const Status status = RunBatcher();
  if (!status.ok() && !status.IsCancelled()) {
    Fail(status);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    batcher_done_ = true;
  }
  output_cv_.notify_all();
}

Status Pipeline::RunBatcher() {
  const Plan& plan = *plan_;
  const int64_t batch_size = options_.batch_size;
  int64_t batch_index = start_batch_;
  int64_t skip = start_batch_ * batch_size;  // rows of the rank stream already delivered
  std::vector<RowRef> rows;
  rows.reserve(batch_size);
  // Items referenced by `rows`; a batch can span windows.
  std::vector<std::shared_ptr<DecodedItem>> keep_alive;
  std::vector<uint32_t> order;
  std::vector<int64_t> segment_starts;
  std::vector<std::shared_ptr<DecodedItem>> window_items;

  auto flush = [&]() -> Status {
    std::shared_ptr<Batch> batch;
    {
      ScopedTimer timer(&counters_->batch_busy_ns);
      STOKER_ASSIGN_OR_RAISE(batch, assembler_->Assemble(batch_index++, rows));
    }
    for (const auto& column : batch->columns) {
      counters_->batch_bytes += column.values.num_bytes();
    }
    counters_->rows += batch->num_rows;
    counters_->batches += 1;
    rows.clear();
    keep_alive.clear();
    return Emit(std::move(batch));
  };

  for (int w = first_window_; w < static_cast<int>(plan.windows.size()); ++w) {
    const Window& window = plan.windows[w];
    window_items.clear();
    segment_starts.clear();
    int64_t start = 0;
    for (int s = window.segment_begin; s < window.segment_end; ++s) {
      STOKER_ASSIGN_OR_RAISE(auto item, TakeSegment(s));
      window_items.push_back(std::move(item));
      segment_starts.push_back(start);
      start += plan.segments[s].num_rows;
    }
    {
      ScopedTimer timer(&counters_->batch_busy_ns);
      WindowOrder(plan, options_, w, &order);
    }
    int64_t position = 0;
    if (skip > window.row_begin) position = skip - window.row_begin;
    keep_alive.insert(keep_alive.end(), window_items.begin(), window_items.end());
    for (; position < window.num_rows; ++position) {
      const int64_t row = order[position];
      const int k = static_cast<int>(
          std::upper_bound(segment_starts.begin(), segment_starts.end(), row) -
          segment_starts.begin() - 1);
      rows.push_back({window_items[k].get(), row - segment_starts[k]});
      if (static_cast<int64_t>(rows.size()) == batch_size) {
        STOKER_RETURN_NOT_OK(flush());
        keep_alive = window_items;
      }
    }
  }
  if (!rows.empty()) STOKER_RETURN_NOT_OK(flush());
  return Status::OK();
}

Status Pipeline::Next(int64_t timeout_ms, std::shared_ptr<Batch>* out, bool* done) {
  *done = false;
  out->reset();
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t wait_start = NowNs();
  output_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    return !output_.empty() || batcher_done_ || !error_.ok() || stopping_;
  });
  counters_->consumer_wait_ns += NowNs() - wait_start;
  if (!output_.empty()) {
    *out = std::move(output_.front());
    output_.pop_front();
    lock.unlock();
    output_cv_.notify_all();
    return Status::OK();
  }
  if (!error_.ok()) return error_;
  if (batcher_done_ || stopping_) *done = true;
  return Status::OK();
}

}  // namespace stoker
