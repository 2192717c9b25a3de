// Fetch-ahead for remote files: the byte ranges a decode task will read are requested on Arrow's
// I/O pool (sized by num_io_threads) before a CPU worker takes the task, so workers decode while
// the next tasks download instead of alternating between fetching and decoding.
//
// FetchRanges() coalesces the ranges (gaps under 1 MiB are read through, ranges are cut at
// 4 MiB so several requests of one task run at once) and issues them at once; it returns a
// PrefetchedFile, a RandomAccessFile whose reads inside a requested range wait for that
// request's bytes (checking a stop token so a closing pipeline never waits out a slow download) and
// whose other reads go to the base file. A failed request fails the reads it covers with the
// storage error (the decoder then names the file, row group and columns).
//
// The decoder opens files through CatalogFile::Open; a worker makes the prefetched file the
// answer for its task's file with a PrefetchScope (thread-local), so no layer between needs to
// know. While a scope is active SetReaderProperties turns Arrow's own pre-buffering off: the
// bytes are already requested, and each column chunk is then one read inside one range.
// Thread safety: a PrefetchedFile may be read from any thread; scopes are per thread.
#pragma once

#include <arrow/buffer.h>
#include <arrow/io/interfaces.h>
#include <arrow/util/cancel.h>
#include <arrow/util/future.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace stoker {

/// Starts queued range reads in the order they were queued, at most `max_requests` at once, on
/// `context`'s executor (Arrow's I/O pool). More requests than the link needs would only split
/// its bandwidth between tasks, so the next task's bytes would arrive later; in order, the task
/// a worker needs next is always the one downloading. Never blocks the caller.
class RequestQueue : public std::enable_shared_from_this<RequestQueue> {
 public:
  RequestQueue(int max_requests, arrow::io::IOContext context)
      : max_(std::max(1, max_requests)), context_(std::move(context)) {}
  arrow::Future<std::shared_ptr<arrow::Buffer>> Enqueue(
      std::shared_ptr<arrow::io::RandomAccessFile> file, int64_t offset, int64_t length);
  /// Fails every request not started yet with a Cancelled status.
  void Cancel();
  /// Waits until no request is running (every read started has finished, successfully or not),
  /// at most `timeout_s`; returns whether none is. Requests give up at their next retry once the
  /// context's stop token is requested, but one already sent runs until the store answers or
  /// its request_timeout passes.
  bool WaitIdle(double timeout_s);
  const arrow::io::IOContext& context() const { return context_; }

 private:
  struct Pending {
    std::shared_ptr<arrow::io::RandomAccessFile> file;
    int64_t offset = 0;
    int64_t length = 0;
    arrow::Future<std::shared_ptr<arrow::Buffer>> out;
  };
  void StartMore(std::unique_lock<std::mutex>* lock);

  const int max_;
  const arrow::io::IOContext context_;
  std::mutex mutex_;
  std::condition_variable idle_cv_;  // running_ dropped to 0
  std::deque<Pending> queue_;        // GUARDED_BY(mutex_)
  int running_ = 0;                  // GUARDED_BY(mutex_)
};

/// Queues `ranges` of `base` (any order, may overlap) on `queue`. Once the queue's stop token is
/// triggered, reads waiting for a request give up with a Cancelled status. Sets
/// `*requested_bytes` to the bytes requested (after coalescing). `on_arrived` runs once every
/// request has finished, successfully or not (at once when there is none), on any thread.
std::shared_ptr<arrow::io::RandomAccessFile> FetchRanges(
    std::shared_ptr<arrow::io::RandomAccessFile> base, std::vector<arrow::io::ReadRange> ranges,
    const std::shared_ptr<RequestQueue>& queue, int64_t* requested_bytes,
    std::function<void()> on_arrived);

/// Makes `file` what CatalogFile::Open returns on this thread for the catalog file `key` until
/// the scope ends. Scopes do not nest.
class PrefetchScope {
 public:
  PrefetchScope(const void* key, std::shared_ptr<arrow::io::RandomAccessFile> file);
  ~PrefetchScope();
  PrefetchScope(const PrefetchScope&) = delete;
  PrefetchScope& operator=(const PrefetchScope&) = delete;
};

/// The file of this thread's scope if it is for `key`, else null.
std::shared_ptr<arrow::io::RandomAccessFile> ScopedPrefetchedFile(const void* key);

/// Whether this thread is inside a PrefetchScope.
bool InPrefetchScope();

}  // namespace stoker
