// Stress tests of the loader's thread-safety contract (stoker/loader.h): Stop() from any thread at
// any time, concurrently with NextFor(), StartEpoch(), Stats() and other Stop()s. Written for the
// ThreadSanitizer build (make test-tsan), and run by every build. Randomness is seeded.
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <gtest/gtest.h>
#include <parquet/arrow/writer.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "exec/test_data_internal.h"
#include "stoker/loader.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

// Every wait in these tests is bounded: a hang fails the test (and ends the process, since a
// hung thread cannot be joined) instead of stalling the suite.
constexpr auto kHang = std::chrono::seconds(30);

template <typename T>
T WaitOrDie(std::future<T>* future, const char* what) {
  if (future->wait_for(kHang) != std::future_status::ready) {
    ADD_FAILURE() << what << " did not finish within 30 s";
    std::fprintf(stderr, "pipeline_stress_test: %s hangs\n", what);
    std::_Exit(3);
  }
  return future->get();
}

class PipelineStressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("stoker_stress_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    int64_t next_id = 0;
    for (int f = 0; f < 3; ++f) {
      WriteFile(dir_ / ("part-" + std::to_string(f) + ".parquet"), 1200 + 311 * f, &next_id);
    }
    // The undisturbed epoch: the ids of each batch.
    auto loader = Open();
    ASSERT_NE(loader, nullptr);
    reference_ = Drain(loader.get(), 0);
    ASSERT_GT(reference_.size(), 20u);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static void WriteFile(const fs::path& path, int64_t rows, int64_t* next_id) {
    test_data::WriteIdValueFile(path, rows, next_id, 0.25f, 200);
  }

  std::unique_ptr<Loader> Open() const {
    LoaderOptions options;
    options.source.sources = {dir_.string()};
    options.order.batch_size = 50;
    options.order.seed = 7;
    options.order.shuffle_window_rows = 500;
    options.order.drop_last = false;
    options.execution.num_threads = 3;
    options.execution.prefetch_bytes = 16 << 10;  // small: workers wait on the budget too
    options.execution.task_bytes = 1;             // one column per task
    auto loader = Loader::Open(options);
    EXPECT_TRUE(loader.ok()) << loader.status().ToString();
    return loader.ok() ? std::move(*loader) : nullptr;
  }

  static std::vector<int64_t> Ids(const Batch& batch) {
    const auto* data = reinterpret_cast<const int64_t*>(batch.columns[0].values.data);
    return std::vector<int64_t>(data, data + batch.num_rows);
  }

  static std::vector<std::vector<int64_t>> Drain(Loader* loader, int64_t epoch) {
    std::vector<std::vector<int64_t>> out;
    EXPECT_TRUE(loader->StartEpoch(epoch, 0).ok());
    while (true) {
      auto batch = loader->Next();
      EXPECT_TRUE(batch.ok()) << batch.status().ToString();
      if (!batch.ok() || *batch == nullptr) break;
      out.push_back(Ids(**batch));
    }
    return out;
  }

  // How one consumer's iteration ended.
  struct Consumed {
    std::vector<std::vector<int64_t>> batches;
    bool done = false;
    Status error;
  };

  // Consumes the running epoch with NextFor() until it ends or fails.
  static Consumed Consume(Loader* loader, int64_t timeout_ms) {
    Consumed result;
    while (true) {
      std::shared_ptr<Batch> batch;
      bool done = false;
      const Status status = loader->NextFor(timeout_ms, &batch, &done);
      if (!status.ok()) {
        result.error = status;
        return result;
      }
      if (done) {
        result.done = true;
        return result;
      }
      if (batch) result.batches.push_back(Ids(*batch));
    }
  }

  static bool IsClosed(const Status& status) {
    const auto kind = GetErrorKind(status);
    return kind && *kind == ErrorKind::kClosed;
  }

  fs::path dir_;
  std::vector<std::vector<int64_t>> reference_;
};

TEST_F(PipelineStressTest, StopsFromSeveralThreadsWhileOneConsumes) {
  auto loader = Open();
  ASSERT_NE(loader, nullptr);
  std::mt19937 random(20261130);
  int closed = 0, completed = 0;
  for (int round = 0; round < 40; ++round) {
    ASSERT_TRUE(loader->StartEpoch(0, 0).ok());
    auto consumer = std::async(std::launch::async, [&] { return Consume(loader.get(), 20); });
    // Three stoppers and a stats reader, each after its own random delay; two stoppers stop twice.
    std::vector<std::future<void>> others;
    for (int s = 0; s < 3; ++s) {
      const int delay_us = static_cast<int>(random() % 3000);
      others.push_back(std::async(std::launch::async, [&, delay_us, s] {
        std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
        loader->Stop();
        if (s > 0) loader->Stop();
      }));
    }
    others.push_back(std::async(std::launch::async, [&] {
      for (int i = 0; i < 20; ++i) {
        const LoaderStats stats = loader->Stats();
        EXPECT_GE(stats.batches, 0);
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }));
    const Consumed result = WaitOrDie(&consumer, "the consumer");
    for (auto& other : others) WaitOrDie(&other, "a stopper");
    // Delivered batches are a prefix of the undisturbed epoch; the end is the whole epoch or a
    // kClosed error, never a silently short epoch.
    ASSERT_LE(result.batches.size(), reference_.size());
    for (size_t i = 0; i < result.batches.size(); ++i) {
      ASSERT_EQ(result.batches[i], reference_[i]) << "round " << round << " batch " << i;
    }
    if (result.done) {
      EXPECT_EQ(result.batches.size(), reference_.size()) << "round " << round;
      ++completed;
    } else {
      EXPECT_TRUE(IsClosed(result.error)) << result.error.ToString();
      ++closed;
    }
  }
  EXPECT_GT(closed, 0);
  // The loader is still usable after all that: the next epoch 0 is the same.
  EXPECT_EQ(Drain(loader.get(), 0), reference_);
  std::printf("rounds: %d closed, %d completed\n", closed, completed);
}

TEST_F(PipelineStressTest, SeveralThreadsCallingNextForShareTheEpochOnce) {
  // NextFor() hands each batch to exactly one caller, whatever the callers' timing.
  auto loader = Open();
  ASSERT_NE(loader, nullptr);
  for (int round = 0; round < 5; ++round) {
    ASSERT_TRUE(loader->StartEpoch(0, 0).ok());
    std::mutex mutex;
    std::map<int64_t, std::vector<int64_t>> by_index;
    std::vector<std::future<int>> consumers;
    for (int c = 0; c < 4; ++c) {
      consumers.push_back(std::async(std::launch::async, [&] {
        int taken = 0;
        while (true) {
          std::shared_ptr<Batch> batch;
          bool done = false;
          const Status status = loader->NextFor(5, &batch, &done);
          EXPECT_TRUE(status.ok()) << status.ToString();
          if (!status.ok() || done) return taken;
          if (!batch) continue;
          std::lock_guard<std::mutex> lock(mutex);
          EXPECT_TRUE(by_index.emplace(batch->index, Ids(*batch)).second) << batch->index;
          ++taken;
        }
      }));
    }
    int total = 0;
    for (auto& consumer : consumers) total += WaitOrDie(&consumer, "a consumer");
    EXPECT_EQ(total, static_cast<int>(reference_.size()));
    ASSERT_EQ(by_index.size(), reference_.size());
    for (const auto& [index, ids] : by_index) EXPECT_EQ(ids, reference_[index]) << index;
  }
}

TEST_F(PipelineStressTest, StartEpochRacingWithStopNeverHangsOrMixesEpochs) {
  // One thread restarts epochs (0 and 1 alternately) and takes a few batches of each; another
  // stops the loader over and over. Every call returns; every batch taken belongs to the epoch
  // that was started, at its position.
  auto loader = Open();
  ASSERT_NE(loader, nullptr);
  const auto epoch1 = Drain(loader.get(), 1);
  ASSERT_NE(epoch1, reference_);
  std::atomic<bool> finished{false};
  auto stopper = std::async(std::launch::async, [&] {
    std::mt19937 random(5);
    int stops = 0;
    while (!finished.load()) {
      std::this_thread::sleep_for(std::chrono::microseconds(random() % 2000));
      loader->Stop();
      ++stops;
    }
    return stops;
  });
  auto consumer = std::async(std::launch::async, [&] {
    int batches = 0;
    for (int round = 0; round < 60; ++round) {
      const int64_t epoch = round % 2;
      const auto& expected = epoch == 0 ? reference_ : epoch1;
      EXPECT_TRUE(loader->StartEpoch(epoch, 0).ok());
      size_t taken = 0;
      for (int polls = 0; taken < 6 && polls < 1000; ++polls) {
        std::shared_ptr<Batch> batch;
        bool done = false;
        const Status status = loader->NextFor(20, &batch, &done);
        if (!status.ok()) {
          EXPECT_TRUE(IsClosed(status)) << status.ToString();
          break;
        }
        if (done) break;
        if (!batch) continue;
        EXPECT_EQ(batch->index, static_cast<int64_t>(taken));
        EXPECT_EQ(Ids(*batch), expected[taken]) << "epoch " << epoch << " batch " << taken;
        ++taken;
        ++batches;
      }
    }
    finished = true;
    return batches;
  });
  const int batches = WaitOrDie(&consumer, "the consumer");
  const int stops = WaitOrDie(&stopper, "the stopper");
  EXPECT_GT(stops, 0);
  EXPECT_GT(batches, 0);
  loader->Stop();
  EXPECT_EQ(Drain(loader.get(), 1), epoch1);
}

}  // namespace
}  // namespace stoker
