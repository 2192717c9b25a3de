#include "io/prefetched_file.h"

#include <arrow/buffer.h>
#include <arrow/io/memory.h>
#include <arrow/util/thread_pool.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <numeric>
#include <thread>

#include "io/test_file_internal.h"
#include "stoker/error.h"

namespace stoker {
namespace {

// A base file whose reads block until released, and which records the order they start in.
class GatedFile : public test_file::BufferFile {
 public:
  using BufferFile::BufferFile;
  Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position, int64_t nbytes) override {
    {
      std::lock_guard<std::mutex> lock(mutex);
      started.push_back(position);
      running_max = std::max(running_max, ++running);
    }
    while (!open.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    {
      std::lock_guard<std::mutex> lock(mutex);
      --running;
    }
    return BufferFile::ReadAt(position, nbytes);
  }

  std::atomic<bool> open{true};
  std::mutex mutex;
  std::vector<int64_t> started;  // GUARDED_BY(mutex)
  int running = 0;               // GUARDED_BY(mutex)
  int running_max = 0;           // GUARDED_BY(mutex)
};

class FileSystemPrefetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bytes_.resize(32 << 20);
    std::iota(bytes_.begin(), bytes_.end(), 0);
  }
  std::shared_ptr<GatedFile> Base() {
    return std::make_shared<GatedFile>(std::make_shared<arrow::Buffer>(
        reinterpret_cast<const uint8_t*>(bytes_.data()), static_cast<int64_t>(bytes_.size())));
  }
  // Waits until Arrow's I/O pool has run and dropped every task of the test, before the test
  // releases its own references. The tasks hold the base file and the stop token, and the pool
  // may drop the last reference: libarrow is not built with TSan, which cannot see that atomic
  // decrement and would report the free as a race with the test's earlier release.
  static void WaitForIoPool() {
    auto* pool =
        dynamic_cast<arrow::internal::ThreadPool*>(arrow::io::default_io_context().executor());
    if (pool != nullptr) pool->WaitForIdle();
  }
  std::vector<uint8_t> bytes_;
  arrow::StopSource stop_;
};

TEST_F(FileSystemPrefetchTest, ReadsInsideAndOutsideTheRangesReturnTheFileBytes) {
  auto base = Base();
  auto queue = std::make_shared<RequestQueue>(
      2, arrow::io::IOContext(arrow::default_memory_pool(), stop_.token()));
  std::atomic<int> arrived{0};
  int64_t requested = 0;
  // Two chunks 100 bytes apart are merged; the far one is its own request.
  // A 10 MiB chunk from 3 MiB is cut at 4, 8 and 12 MiB; reading it whole puts it together.
  auto file = FetchRanges(base, {{1000, 500}, {1600, 400}, {20 << 20, 300}, {3 << 20, 10 << 20}},
                          queue, &requested, [&] { ++arrived; });
  EXPECT_EQ(requested, 1000 + 300 + (10 << 20));
  for (const auto& [offset, length] :
       std::vector<std::pair<int64_t, int64_t>>{{1000, 500},
                                                {1600, 400},
                                                {1200, 10},
                                                {20 << 20, 300},
                                                {5000, 64},
                                                {3 << 20, 10 << 20},
                                                {(4 << 20) - 10, 20},
                                                {(12 << 20) + 5, (1 << 20) - 5},
                                                {(13 << 20) - 4, 8}}) {
    auto buffer = file->ReadAt(offset, length);
    ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
    ASSERT_EQ((*buffer)->size(), length);
    EXPECT_EQ(0, std::memcmp((*buffer)->data(), bytes_.data() + offset, length)) << offset;
  }
  // The arrival callback runs right after the last request's bytes are handed out.
  for (int i = 0; i < 5000 && arrived.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(arrived.load(), 1);
  WaitForIoPool();
}

TEST_F(FileSystemPrefetchTest, RequestsStartInQueueOrderAtMostMaxAtOnce) {
  auto base = Base();
  base->open = false;
  auto queue = std::make_shared<RequestQueue>(
      2, arrow::io::IOContext(arrow::default_memory_pool(), stop_.token()));
  std::vector<std::shared_ptr<arrow::io::RandomAccessFile>> files;
  int64_t requested = 0;
  // Far apart: one request each.
  for (int i = 0; i < 6; ++i) {
    files.push_back(FetchRanges(base, {{int64_t{i} * (4 << 20), 100}}, queue, &requested, {}));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  {
    std::lock_guard<std::mutex> lock(base->mutex);
    EXPECT_EQ(base->started.size(), 2u);  // the rest wait in the queue
  }
  base->open = true;
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(files[i]->ReadAt(int64_t{i} * (4 << 20), 100).ok());
  WaitForIoPool();
  std::lock_guard<std::mutex> lock(base->mutex);
  EXPECT_LE(base->running_max, 2);
  ASSERT_EQ(base->started.size(), 6u);
  // The first two queued went first.
  EXPECT_EQ(std::min(base->started[0], base->started[1]), 0);
  EXPECT_EQ(std::max(base->started[0], base->started[1]), 4 << 20);
}

TEST_F(FileSystemPrefetchTest, StopFailsQueuedRequestsAndWakesWaitingReads) {
  auto base = Base();
  base->open = false;
  auto queue = std::make_shared<RequestQueue>(
      1, arrow::io::IOContext(arrow::default_memory_pool(), stop_.token()));
  int64_t requested = 0;
  auto first = FetchRanges(base, {{0, 100}}, queue, &requested, {});
  auto second = FetchRanges(base, {{8 << 20, 100}}, queue, &requested, {});
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stop_.RequestStop();
    queue->Cancel();
  });
  auto waiting = second->ReadAt(8 << 20, 100);  // queued behind a blocked read
  stopper.join();
  EXPECT_TRUE(waiting.status().IsCancelled()) << waiting.status().ToString();
  EXPECT_TRUE(first->ReadAt(0, 100).status().IsCancelled());  // gives up waiting
  // A stopping pipeline then waits (bounded) for the request already sent, never the dropped.
  EXPECT_FALSE(queue->WaitIdle(0.05));
  base->open = true;
  EXPECT_TRUE(queue->WaitIdle(60));
  {
    std::lock_guard<std::mutex> lock(base->mutex);
    EXPECT_EQ(base->started.size(), 1u);
  }
  WaitForIoPool();  // the read's task may still hold the base file (bytes_ dies)
}

TEST_F(FileSystemPrefetchTest, ScopeAnswersOnlyForItsKeyOnItsThread) {
  auto base = Base();
  int key = 0;
  int other = 0;
  EXPECT_FALSE(InPrefetchScope());
  {
    PrefetchScope scope(&key, base);
    EXPECT_TRUE(InPrefetchScope());
    EXPECT_EQ(ScopedPrefetchedFile(&key), base);
    EXPECT_EQ(ScopedPrefetchedFile(&other), nullptr);
    std::thread([&] { EXPECT_EQ(ScopedPrefetchedFile(&key), nullptr); }).join();
  }
  EXPECT_FALSE(InPrefetchScope());
  EXPECT_EQ(ScopedPrefetchedFile(&key), nullptr);
}

}  // namespace
}  // namespace stoker
