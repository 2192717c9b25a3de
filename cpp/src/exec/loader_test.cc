// End-to-end tests of the engine from C++, so the sanitizer build covers the threaded pipeline.
#include "stoker/loader.h"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <gtest/gtest.h>
#include <parquet/arrow/writer.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <set>

#include "exec/test_data_internal.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("stoker_loader_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    int64_t next_id = 0;
    for (int f = 0; f < 3; ++f)
      WriteFile(dir_ / ("part-" + std::to_string(f) + ".parquet"), 1000 + 377 * f, &next_id);
    total_rows_ = next_id;
  }
  void TearDown() override { fs::remove_all(dir_); }

  static void WriteFile(const fs::path& path, int64_t rows, int64_t* next_id) {
    test_data::WriteIdValueFile(path, rows, next_id, 0.5f, 250);
  }

  LoaderOptions Options(int threads) const {
    LoaderOptions options;
    options.source.sources = {dir_.string()};
    options.order.batch_size = 64;
    options.order.seed = 42;
    options.order.shuffle_window_rows = 600;
    options.order.drop_last = false;
    options.execution.num_threads = threads;
    options.execution.prefetch_bytes = 8 << 10;  // tiny: exercises the budget
    options.execution.task_bytes = 1;            // one column per task
    return options;
  }

  // Every id of the epoch, in delivery order.
  static std::vector<int64_t> Drain(Loader* loader, int64_t epoch, int64_t start = 0) {
    std::vector<int64_t> ids;
    for (const auto& batch : DrainBatches(loader, epoch, start, 1)) {
      ids.insert(ids.end(), batch.begin(), batch.end());
    }
    return ids;
  }

  // The ids of each batch delivered from `start` on, every `step`-th batch.
  static std::vector<std::vector<int64_t>> DrainBatches(Loader* loader, int64_t epoch,
                                                        int64_t start, int64_t step) {
    EXPECT_TRUE(loader->StartEpoch(epoch, start, step).ok());
    std::vector<std::vector<int64_t>> batches;
    while (true) {
      auto batch = loader->Next();
      EXPECT_TRUE(batch.ok()) << batch.status().ToString();
      if (!batch.ok() || *batch == nullptr) break;
      const OutputColumn& id = (*batch)->columns[0];
      const OutputColumn& v = (*batch)->columns[1];
      EXPECT_EQ(id.name, "id");
      const auto* id_data = reinterpret_cast<const int64_t*>(id.values.data);
      const auto* v_data = reinterpret_cast<const float*>(v.values.data);
      std::vector<int64_t>& ids = batches.emplace_back();
      for (int64_t i = 0; i < (*batch)->num_rows; ++i) {
        EXPECT_EQ(v_data[i], static_cast<float>(id_data[i]) * 0.5f);  // rows stay whole
        ids.push_back(id_data[i]);
      }
    }
    return batches;
  }

  fs::path dir_;
  int64_t total_rows_ = 0;
};

TEST_F(LoaderTest, EveryRowOnceAndSameOrderForAnyThreadCount) {
  std::vector<int64_t> reference;
  for (int threads : {1, 2, 4}) {
    auto loader = Loader::Open(Options(threads));
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    std::vector<int64_t> ids = Drain(loader->get(), 3);
    if (reference.empty()) {
      reference = ids;
      std::vector<int64_t> sorted = ids;
      std::sort(sorted.begin(), sorted.end());
      std::vector<int64_t> expected(total_rows_);
      std::iota(expected.begin(), expected.end(), 0);
      EXPECT_EQ(sorted, expected);
    } else {
      EXPECT_EQ(ids, reference) << threads << " threads";
    }
  }
}

TEST_F(LoaderTest, ResumeMatchesTheTail) {
  auto loader = Loader::Open(Options(3));
  ASSERT_TRUE(loader.ok());
  const std::vector<int64_t> full = Drain(loader->get(), 1);
  const std::vector<int64_t> tail = Drain(loader->get(), 1, 7);
  ASSERT_EQ(tail.size(), full.size() - 7 * 64);
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), full.begin() + 7 * 64));
}

// stoker.ray's actors: loaders with step N and starts j deliver batches j, j + N, ... of the
// whole stream, byte for byte, including from a resume position inside the stride.
TEST_F(LoaderTest, StridedEpochsDeliverEveryStepthBatchOfTheWholeStream) {
  auto loader = Loader::Open(Options(2));
  ASSERT_TRUE(loader.ok());
  const auto full = DrainBatches(loader->get(), 2, 0, 1);
  ASSERT_GT(full.size(), 20u);
  for (int64_t step : {2, 3}) {
    for (int64_t j = 0; j < step; ++j) {
      const auto part = DrainBatches(loader->get(), 2, j, step);
      ASSERT_EQ(static_cast<int64_t>(part.size()),
                (static_cast<int64_t>(full.size()) - j + step - 1) / step);
      for (size_t k = 0; k < part.size(); ++k) EXPECT_EQ(part[k], full[j + k * step]);
    }
  }
  const auto late = DrainBatches(loader->get(), 2, 11, 3);  // a replacement starting mid-epoch
  ASSERT_EQ(late.size(), (full.size() - 11 + 2) / 3);
  for (size_t k = 0; k < late.size(); ++k) EXPECT_EQ(late[k], full[11 + k * 3]);
  const Status bad = (*loader)->StartEpoch(2, 0, 0);
  EXPECT_EQ(GetErrorKind(bad), ErrorKind::kInvalidOption);
  EXPECT_NE(bad.message().find("batch_step must be >= 1, got 0"), std::string::npos);
}

// Consumer overlap (issue 26): while the consumer is away (a GPU step), the workers keep
// finishing batches beyond num_threads + 2 as long as they fit in prefetch_bytes; with a budget
// smaller than one batch they stop at num_threads + 2. The delivered order is the same.
TEST_F(LoaderTest, PausedConsumerFindsBatchesFinishedAheadWithinTheBudget) {
  const int threads = 2;
  const int64_t base = threads + 2;
  std::vector<int64_t> reference;
  {
    auto loader = Loader::Open(Options(threads));
    ASSERT_TRUE(loader.ok());
    reference = Drain(loader->get(), 5);
  }
  for (const int64_t prefetch : {int64_t{64} << 20, int64_t{256}}) {  // a batch is 768 bytes
    LoaderOptions options = Options(threads);
    options.execution.prefetch_bytes = prefetch;
    auto loader = Loader::Open(options);
    ASSERT_TRUE(loader.ok());
    ASSERT_TRUE((*loader)->StartEpoch(5, 0).ok());
    auto first = (*loader)->Next();
    ASSERT_TRUE(first.ok() && *first != nullptr);
    std::vector<int64_t> ids;
    const auto* id = reinterpret_cast<const int64_t*>((*first)->columns[0].values.data);
    ids.insert(ids.end(), id, id + (*first)->num_rows);
    // The pause: wait until the count of finished batches stops growing.
    int64_t finished = 0;
    for (int stable = 0, i = 0; stable < 10 && i < 500; ++i) {
      usleep(10'000);
      const int64_t now = (*loader)->Stats().batches;
      stable = now == finished ? stable + 1 : 0;
      finished = now;
    }
    const int64_t ahead = finished - 1;
    if (prefetch > (1 << 20)) {
      EXPECT_GT(ahead, base) << "finished batches ahead with a 64 MiB budget";
    } else {
      EXPECT_LE(ahead, base) << "a budget smaller than one batch admits none beyond the base";
    }
    while (true) {
      auto batch = (*loader)->Next();
      ASSERT_TRUE(batch.ok());
      if (*batch == nullptr) break;
      id = reinterpret_cast<const int64_t*>((*batch)->columns[0].values.data);
      ids.insert(ids.end(), id, id + (*batch)->num_rows);
    }
    EXPECT_EQ(ids, reference) << "prefetch_bytes " << prefetch;
    EXPECT_LE((*loader)->Stats().peak_inflight_bytes, std::max<int64_t>(prefetch, 8 << 10) * 4);
  }
}

TEST_F(LoaderTest, StopMidEpochAndRestart) {
  auto loader = Loader::Open(Options(4));
  ASSERT_TRUE(loader.ok());
  for (int round = 0; round < 5; ++round) {
    ASSERT_TRUE((*loader)->StartEpoch(round, 0).ok());
    auto batch = (*loader)->Next();
    ASSERT_TRUE(batch.ok());
    ASSERT_NE(*batch, nullptr);
    (*loader)->Stop();
  }
  // Batches outlive the loader: their slabs are owned by the batch.
  ASSERT_TRUE((*loader)->StartEpoch(0, 0).ok());
  auto batch = (*loader)->Next();
  ASSERT_TRUE(batch.ok());
  loader->reset();
  const auto* ids = reinterpret_cast<const int64_t*>((*batch)->columns[0].values.data);
  EXPECT_GE(ids[0], 0);
}

TEST_F(LoaderTest, ErrorsArriveAfterEarlierBatchesAndNameTheFile) {
  auto loader = Loader::Open(Options(2));
  ASSERT_TRUE(loader.ok());
  fs::remove(dir_ / "part-1.parquet");
  ASSERT_TRUE((*loader)->StartEpoch(0, 0).ok());
  Status status;
  int batches = 0;
  while (true) {
    auto batch = (*loader)->Next();
    if (!batch.ok()) {
      status = batch.status();
      break;
    }
    if (*batch == nullptr) break;
    ++batches;
  }
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("part-1.parquet"), std::string::npos) << status.ToString();
  EXPECT_EQ(GetErrorKind(status), ErrorKind::kStorage);
}

TEST_F(LoaderTest, UnknownColumnIsAnError) {
  LoaderOptions options = Options(1);
  options.columns.columns = {"id", "nope"};
  auto loader = Loader::Open(options);
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(GetErrorKind(loader.status()), ErrorKind::kColumnNotFound);
  EXPECT_NE(loader.status().message().find("id, v"), std::string::npos);
}

}  // namespace
}  // namespace stoker
