#include "io/prefetched_file.h"

#include <arrow/buffer.h>
#include <arrow/io/caching.h>
#include <arrow/util/cancel.h>
#include <arrow/util/future.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "io/block_cache.h"

namespace stoker {
namespace {

// Requests are cut at this size so one task's bytes arrive over several connections at once,
// aligned with the block cache's blocks; a gap under kHoleBytes costs less to read through than
// another round trip.
constexpr int64_t kRangeBytes = kCacheBlockBytes;
constexpr int64_t kHoleBytes = int64_t{1} << 20;
// How often a read waiting for its request checks for a stop.
constexpr double kStopPollSeconds = 0.05;

struct Scope {
  const void* key = nullptr;
  std::shared_ptr<arrow::io::RandomAccessFile> file;
};
thread_local Scope current_scope;

}  // namespace

// See FetchRanges.
class PrefetchedFile : public arrow::io::RandomAccessFile {
 public:
  struct Request {
    int64_t offset = 0;
    int64_t length = 0;
    arrow::Future<std::shared_ptr<arrow::Buffer>> data;
  };

  PrefetchedFile(std::shared_ptr<arrow::io::RandomAccessFile> base, std::vector<Request> requests,
                 arrow::StopToken stop)
      : base_(std::move(base)), requests_(std::move(requests)), stop_(std::move(stop)) {}

  // Never touches the base file: requests still running keep it alive themselves.
  ~PrefetchedFile() override = default;

  arrow::Status Close() override {
    closed_ = true;
    return arrow::Status::OK();
  }
  bool closed() const override { return closed_; }
  arrow::Result<int64_t> Tell() const override { return position_; }
  arrow::Status Seek(int64_t position) override {
    position_ = position;
    return arrow::Status::OK();
  }
  arrow::Result<int64_t> GetSize() override { return base_->GetSize(); }
  arrow::Result<int64_t> Read(int64_t nbytes, void* out) override {
    ARROW_ASSIGN_OR_RAISE(const int64_t n, ReadAt(position_, nbytes, out));
    position_ += n;
    return n;
  }
  arrow::Result<std::shared_ptr<arrow::Buffer>> Read(int64_t nbytes) override {
    ARROW_ASSIGN_OR_RAISE(auto buffer, ReadAt(position_, nbytes));
    position_ += buffer->size();
    return buffer;
  }

  arrow::Result<int64_t> ReadAt(int64_t position, int64_t nbytes, void* out) override {
    ARROW_ASSIGN_OR_RAISE(auto buffer, ReadAt(position, nbytes));
    std::memcpy(out, buffer->data(), static_cast<size_t>(buffer->size()));
    return buffer->size();
  }

  arrow::Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position, int64_t nbytes) override {
    const Request* request = Covering(position, nbytes);
    if (request != nullptr) {
      ARROW_ASSIGN_OR_RAISE(auto data, Wait(*request));
      const int64_t begin = position - request->offset;
      // A short object (the request ran past its end) serves what it has.
      const int64_t n = std::max<int64_t>(0, std::min(nbytes, data->size() - begin));
      return arrow::SliceBuffer(data, std::min(begin, data->size()), n);
    }
    // A column chunk cut into several requests: wait for each, copy them together.
    const size_t first = FirstOverlapping(position);
    if (first >= requests_.size()) return base_->ReadAt(position, nbytes);
    size_t last = first;
    while (requests_[last].offset + requests_[last].length < position + nbytes &&
           last + 1 < requests_.size() &&
           requests_[last + 1].offset == requests_[last].offset + requests_[last].length) {
      ++last;
    }
    if (requests_[first].offset > position ||
        requests_[last].offset + requests_[last].length < position + nbytes) {
      return base_->ReadAt(position, nbytes);
    }
    ARROW_ASSIGN_OR_RAISE(auto out, arrow::AllocateResizableBuffer(nbytes));
    int64_t filled = 0;
    for (size_t i = first; i <= last && filled < nbytes; ++i) {
      ARROW_ASSIGN_OR_RAISE(auto data, Wait(requests_[i]));
      const int64_t begin = position + filled - requests_[i].offset;
      const int64_t n = std::min(nbytes - filled, data->size() - begin);
      if (n <= 0) break;  // a short object
      std::memcpy(out->mutable_data() + filled, data->data() + begin, static_cast<size_t>(n));
      filled += n;
    }
    ARROW_RETURN_NOT_OK(out->Resize(filled));
    return std::shared_ptr<arrow::Buffer>(std::move(out));
  }

  arrow::Future<std::shared_ptr<arrow::Buffer>> ReadAsync(const arrow::io::IOContext& context,
                                                          int64_t position,
                                                          int64_t nbytes) override {
    const Request* request = Covering(position, nbytes);
    if (request == nullptr) {
      return arrow::Future<std::shared_ptr<arrow::Buffer>>::MakeFinished(ReadAt(position, nbytes));
    }
    return request->data.Then(
        [position, nbytes, offset = request->offset](const std::shared_ptr<arrow::Buffer>& data)
            -> arrow::Result<std::shared_ptr<arrow::Buffer>> {
          const int64_t begin = std::min(position - offset, data->size());
          return arrow::SliceBuffer(data, begin,
                                    std::max<int64_t>(0, std::min(nbytes, data->size() - begin)));
        });
  }

 private:
  // Requests are sorted by offset and do not overlap.
  size_t FirstOverlapping(int64_t position) const {
    size_t i = 0;
    while (i < requests_.size() && requests_[i].offset + requests_[i].length <= position) ++i;
    return i;
  }

  const Request* Covering(int64_t position, int64_t nbytes) const {
    for (const auto& request : requests_) {
      if (position >= request.offset && position + nbytes <= request.offset + request.length) {
        return &request;
      }
    }
    return nullptr;
  }

  arrow::Result<std::shared_ptr<arrow::Buffer>> Wait(const Request& request) const {
    while (!request.data.Wait(kStopPollSeconds)) {
      if (stop_.IsStopRequested()) return arrow::Status::Cancelled("the loader is stopping");
    }
    return request.data.result();
  }

  const std::shared_ptr<arrow::io::RandomAccessFile> base_;
  const std::vector<Request> requests_;
  const arrow::StopToken stop_;
  int64_t position_ = 0;
  bool closed_ = false;
};

std::shared_ptr<arrow::io::RandomAccessFile> FetchRanges(
    std::shared_ptr<arrow::io::RandomAccessFile> base, std::vector<arrow::io::ReadRange> ranges,
    const std::shared_ptr<RequestQueue>& queue, int64_t* requested_bytes,
    std::function<void()> on_arrived) {
  *requested_bytes = 0;
  ranges.erase(std::remove_if(ranges.begin(), ranges.end(),
                              [](const arrow::io::ReadRange& r) { return r.length <= 0; }),
               ranges.end());
  std::vector<PrefetchedFile::Request> requests;
  if (!ranges.empty()) {
    std::sort(ranges.begin(), ranges.end(),
              [](const arrow::io::ReadRange& a, const arrow::io::ReadRange& b) {
                return a.offset < b.offset;
              });
    // Merge overlaps and small holes, then cut at multiples of kRangeBytes in the file (so a
    // block cache in between sees whole blocks); a read spanning cuts is put together again.
    std::vector<arrow::io::ReadRange> merged{ranges[0]};
    for (size_t i = 1; i < ranges.size(); ++i) {
      arrow::io::ReadRange& last = merged.back();
      const int64_t end = std::max(last.offset + last.length, ranges[i].offset + ranges[i].length);
      if (ranges[i].offset <= last.offset + last.length + kHoleBytes) {
        last.length = end - last.offset;
      } else {
        merged.push_back(ranges[i]);
      }
    }
    std::vector<arrow::io::ReadRange> cut;
    for (const auto& range : merged) {
      int64_t offset = range.offset;
      const int64_t end = range.offset + range.length;
      while (offset < end) {
        const int64_t boundary = (offset / kRangeBytes + 1) * kRangeBytes;
        const int64_t piece_end = std::min(end, boundary);
        cut.push_back({offset, piece_end - offset});
        offset = piece_end;
      }
    }
    merged = std::move(cut);
    for (const auto& range : merged) {
      auto data = queue->Enqueue(base, range.offset, range.length);
      requests.push_back({range.offset, range.length, std::move(data)});
      *requested_bytes += range.length;
    }
  }
  // Counts the requests still running; the last to finish reports the arrival.
  auto remaining =
      std::make_shared<std::atomic<int64_t>>(static_cast<int64_t>(requests.size()) + 1);
  auto arrived = std::make_shared<std::function<void()>>(std::move(on_arrived));
  auto finish_one = [remaining, arrived] {
    if (remaining->fetch_sub(1) == 1 && *arrived) (*arrived)();
  };
  for (auto& request : requests) {
    request.data.AddCallback(
        [finish_one](const arrow::Result<std::shared_ptr<arrow::Buffer>>&) { finish_one(); });
  }
  finish_one();
  return std::make_shared<PrefetchedFile>(std::move(base), std::move(requests),
                                          queue->context().stop_token());
}

arrow::Future<std::shared_ptr<arrow::Buffer>> RequestQueue::Enqueue(
    std::shared_ptr<arrow::io::RandomAccessFile> file, int64_t offset, int64_t length) {
  auto out = arrow::Future<std::shared_ptr<arrow::Buffer>>::Make();
  std::unique_lock<std::mutex> lock(mutex_);
  queue_.push_back({std::move(file), offset, length, out});
  StartMore(&lock);
  return out;
}

void RequestQueue::StartMore(std::unique_lock<std::mutex>* lock) {
  while (running_ < max_ && !queue_.empty()) {
    Pending next = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock->unlock();
    auto data = context_.stop_token().IsStopRequested()
                    ? arrow::Future<std::shared_ptr<arrow::Buffer>>::MakeFinished(
                          arrow::Status::Cancelled("the loader is stopping"))
                    : next.file->ReadAsync(context_, next.offset, next.length);
    // The callback may run here at once (a finished read): StartMore re-locks for itself.
    data.AddCallback([self = shared_from_this(), out = std::move(next.out)](
                         const arrow::Result<std::shared_ptr<arrow::Buffer>>& result) mutable {
      {
        std::unique_lock<std::mutex> relock(self->mutex_);
        --self->running_;
        self->StartMore(&relock);
        if (self->running_ == 0) self->idle_cv_.notify_all();
      }
      out.MarkFinished(result);
    });
    lock->lock();
  }
}

void RequestQueue::Cancel() {
  std::deque<Pending> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    dropped.swap(queue_);
  }
  for (auto& pending : dropped) {
    pending.out.MarkFinished(arrow::Status::Cancelled("the loader is stopping"));
  }
}

bool RequestQueue::WaitIdle(double timeout_s) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_cv_.wait_for(lock, std::chrono::duration<double>(std::max(0.0, timeout_s)),
                           [&] { return running_ == 0; });
}

PrefetchScope::PrefetchScope(const void* key, std::shared_ptr<arrow::io::RandomAccessFile> file) {
  current_scope = Scope{key, std::move(file)};
}

PrefetchScope::~PrefetchScope() { current_scope = Scope{}; }

std::shared_ptr<arrow::io::RandomAccessFile> ScopedPrefetchedFile(const void* key) {
  return key != nullptr && current_scope.key == key ? current_scope.file : nullptr;
}

bool InPrefetchScope() { return current_scope.key != nullptr; }

}  // namespace stoker
