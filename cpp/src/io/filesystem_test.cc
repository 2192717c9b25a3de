#include "io/filesystem.h"

#include <arrow/filesystem/localfs.h>
#include <arrow/io/interfaces.h>
#include <arrow/util/cancel.h>
#include <arrow/util/io_util.h>
#include <arrow/util/thread_pool.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

#include "util/recycling_pool.h"
#include "util/test_status_internal.h"

namespace stoker {
namespace {

Status Aws(const std::string& what) {
  return Status::IOError("When reading information for key 'k' in bucket 'b': AWS Error ", what,
                         " during HeadObject operation: ...");
}

TEST(ClassifyStorageError, SortsArrowS3Messages) {
  EXPECT_EQ(ClassifyStorageError(Aws("SLOW_DOWN")), StorageFailure::kTransient);
  EXPECT_EQ(ClassifyStorageError(Aws("UNKNOWN (HTTP status 503)")), StorageFailure::kTransient);
  EXPECT_EQ(ClassifyStorageError(Aws("UNKNOWN (HTTP status 500)")), StorageFailure::kTransient);
  EXPECT_EQ(ClassifyStorageError(Aws("INTERNAL_FAILURE")), StorageFailure::kTransient);
  EXPECT_EQ(ClassifyStorageError(Aws("NETWORK_CONNECTION")), StorageFailure::kTransient);
  EXPECT_EQ(ClassifyStorageError(Aws("THROTTLING")), StorageFailure::kTransient);
  EXPECT_EQ(ClassifyStorageError(Aws("ACCESS_DENIED")), StorageFailure::kDenied);
  EXPECT_EQ(ClassifyStorageError(Aws("INVALID_ACCESS_KEY_ID")), StorageFailure::kDenied);
  EXPECT_EQ(ClassifyStorageError(Aws("NO_SUCH_BUCKET")), StorageFailure::kNotFound);
  EXPECT_EQ(ClassifyStorageError(Aws("NO_SUCH_KEY")), StorageFailure::kNotFound);
  EXPECT_EQ(ClassifyStorageError(Status::Invalid("bad range")), StorageFailure::kPermanent);
}

TEST(ClassifyStorageError, UsesErrno) {
  EXPECT_EQ(ClassifyStorageError(arrow::internal::IOErrorFromErrno(ENOENT, "gone")),
            StorageFailure::kNotFound);
  EXPECT_EQ(ClassifyStorageError(arrow::internal::IOErrorFromErrno(ECONNRESET, "reset")),
            StorageFailure::kTransient);
  EXPECT_EQ(ClassifyStorageError(arrow::internal::IOErrorFromErrno(EACCES, "no")),
            StorageFailure::kDenied);
}

TEST(BackoffDelay, DoublesWithJitterAndCap) {
  RetryPolicy policy;
  policy.base_delay_s = 0.1;
  policy.max_delay_s = 1.0;
  EXPECT_DOUBLE_EQ(BackoffDelay(policy, 0, 0.0), 0.05);
  EXPECT_NEAR(BackoffDelay(policy, 0, 0.999999), 0.1, 1e-6);
  EXPECT_DOUBLE_EQ(BackoffDelay(policy, 2, 0.0), 0.2);
  EXPECT_DOUBLE_EQ(BackoffDelay(policy, 10, 0.0), 0.5);  // capped at 1.0 before jitter
  EXPECT_DOUBLE_EQ(BackoffDelay(policy, 1000, 1.0), 1.0);
}

TEST(Redaction, DropsUserInfoAndQuery) {
  EXPECT_EQ(RedactUri("s3://AKIA:secret@bucket/key?endpoint_override=h:1"), "s3://bucket/key");
  EXPECT_EQ(RedactUri("s3://bucket/a@b/c"), "s3://bucket/a@b/c");
  EXPECT_EQ(RedactUri("abfs://container@account.dfs.core.windows.net/p"),
            "abfs://container@account.dfs.core.windows.net/p");
  EXPECT_EQ(RedactUri("/local/path?x"), "/local/path?x");
  EXPECT_EQ(RedactSecrets("a sekret and sekret", {"sekret", ""}), "a *** and ***");
}

// A filesystem whose files fail `failures` times before working, to count attempts. While
// `gate` is closed an attempt waits before answering (a request under way); `entered` counts
// attempts that started.
struct Gate {
  std::atomic<bool> open{true};
  std::atomic<int> entered{0};
  void Pass() {
    ++entered;
    while (!open.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Waits (bounded) until `n` attempts started.
  bool WaitEntered(int n) {
    for (int i = 0; i < 10000 && entered.load() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return entered.load() >= n;
  }
};

class FlakyFile : public arrow::io::RandomAccessFile {
 public:
  FlakyFile(std::shared_ptr<std::atomic<int>> failures, Status error,
            std::shared_ptr<Gate> gate = std::make_shared<Gate>())
      : failures_(std::move(failures)), error_(std::move(error)), gate_(std::move(gate)) {}
  Status Close() override { return Status::OK(); }
  bool closed() const override { return false; }
  Result<int64_t> Tell() const override { return 0; }
  Status Seek(int64_t) override { return Status::OK(); }
  Result<int64_t> GetSize() override { return 4; }
  Result<int64_t> Read(int64_t n, void* out) override { return ReadAt(0, n, out); }
  Result<std::shared_ptr<arrow::Buffer>> Read(int64_t n) override { return ReadAt(0, n); }
  Result<int64_t> ReadAt(int64_t, int64_t n, void* out) override {
    gate_->Pass();
    if (failures_->fetch_sub(1) > 0) return error_;
    std::memset(out, 'x', n);
    return n;
  }
  Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t, int64_t n) override {
    gate_->Pass();
    if (failures_->fetch_sub(1) > 0) return error_;
    return arrow::Buffer::FromString(std::string(n, 'x'));
  }

 private:
  std::shared_ptr<std::atomic<int>> failures_;
  Status error_;
  std::shared_ptr<Gate> gate_;
};

class FlakyFs : public arrow::fs::LocalFileSystem {
 public:
  FlakyFs(int failures, Status error)
      : failures_(std::make_shared<std::atomic<int>>(failures)), error_(std::move(error)) {}
  std::string type_name() const override { return "flaky"; }
  Result<std::shared_ptr<arrow::io::RandomAccessFile>> OpenInputFile(const std::string&) override {
    return std::make_shared<FlakyFile>(failures_, error_, gate);
  }
  int remaining() const { return failures_->load(); }

  const std::shared_ptr<Gate> gate = std::make_shared<Gate>();

 private:
  std::shared_ptr<std::atomic<int>> failures_;
  Status error_;
};

bool Contains(const Status& status, const char* text) {
  return status.message().find(text) != std::string::npos;
}

// Waits until Arrow's I/O pool has run every task, before the test drops what they use.
void WaitForIoPool() {
  auto* pool =
      dynamic_cast<arrow::internal::ThreadPool*>(arrow::io::default_io_context().executor());
  if (pool != nullptr) pool->WaitForIdle();
}

TEST(RetryingFileSystem, RetriesTransientErrorsThenSucceeds) {
  auto base = std::make_shared<FlakyFs>(3, Aws("SLOW_DOWN"));
  RetryPolicy policy{5, 0.001, 0.01};
  auto fs = MakeRetryingFileSystem(base, policy, "s3://", {}, 0);
  ASSERT_OK_AND_ASSIGN(auto file, fs->OpenInputFile("b/k"));
  auto buffer = file->ReadAt(0, 4);
  ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
  EXPECT_EQ((*buffer)->ToString(), "xxxx");
  EXPECT_EQ(base->remaining(), -1);  // three failures and one success
  auto counters = GetStorageStats(*fs);
  ASSERT_TRUE(counters.has_value());
  EXPECT_EQ(counters->requests, 5);  // the open and four reads
  EXPECT_EQ(counters->retries, 3);
  EXPECT_EQ(counters->failures, 0);
  EXPECT_GT(counters->backoff_s, 0.0);
  EXPECT_FALSE(GetStorageStats(arrow::fs::LocalFileSystem()).has_value());
}

TEST(RetryingFileSystem, GivesUpAfterMaxRetriesNamingTheObject) {
  auto base = std::make_shared<FlakyFs>(100, Aws("SLOW_DOWN"));
  RetryPolicy policy{3, 0.001, 0.01};
  auto fs = MakeRetryingFileSystem(base, policy, "s3://", {}, 0);
  ASSERT_OK_AND_ASSIGN(auto file, fs->OpenInputFile("b/k"));
  auto buffer = file->ReadAt(10, 4);
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(GetErrorKind(buffer.status()), ErrorKind::kStorage);
  EXPECT_NE(buffer.status().message().find("'s3://b/k'"), std::string::npos);
  EXPECT_NE(buffer.status().message().find("bytes [10, 14)"), std::string::npos);
  EXPECT_NE(buffer.status().message().find("after 3 retries"), std::string::npos);
  EXPECT_EQ(base->remaining(), 100 - 4);
  EXPECT_EQ(GetStorageStats(*fs)->failures, 1);
  EXPECT_EQ(GetStorageStats(*fs)->retries, 3);
}

TEST(RetryingFileSystem, PermanentErrorsFailAtOnceWithoutSecrets) {
  auto base = std::make_shared<FlakyFs>(100, Aws("ACCESS_DENIED for key hunter2"));
  RetryPolicy policy{5, 1.0, 1.0};
  auto fs = MakeRetryingFileSystem(base, policy, "s3://", {"hunter2"}, 0);
  ASSERT_OK_AND_ASSIGN(auto file, fs->OpenInputFile("b/k"));
  const auto start = std::chrono::steady_clock::now();
  auto buffer = file->ReadAt(0, 4);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(base->remaining(), 99);
  EXPECT_NE(buffer.status().message().find("access denied"), std::string::npos);
  EXPECT_EQ(buffer.status().message().find("hunter2"), std::string::npos);
}

TEST(RetryingFileSystem, InterruptCutsABackoffShort) {
  auto base = std::make_shared<FlakyFs>(100, Aws("SLOW_DOWN"));
  RetryPolicy policy{1, 30.0, 30.0};  // the retry would sleep 15 to 30 s
  auto fs = MakeRetryingFileSystem(base, policy, "s3://", {}, 0);
  ASSERT_OK_AND_ASSIGN(auto file, fs->OpenInputFile("b/k"));
  const auto start = std::chrono::steady_clock::now();
  Status status;
  std::atomic<bool> done{false};
  std::thread reader([&] {
    status = file->ReadAt(0, 4).status();
    done = true;
  });
  // Interrupt until the reader is done: one call may land before it starts sleeping.
  for (int i = 0; i < 5000 && base->remaining() == 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (int i = 0; i < 200 && std::chrono::steady_clock::now() - start < std::chrono::seconds(5);
       ++i) {
    InterruptRetryWaits(*fs);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (done) break;
  }
  reader.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(GetErrorKind(status), ErrorKind::kStorage);
  EXPECT_NE(status.message().find("stopped while waiting to retry"), std::string::npos);
  InterruptRetryWaits(arrow::fs::LocalFileSystem());  // no effect, no crash
}

TEST(RetryingFileSystem, InterruptStopsACallWhoseRequestIsUnderWay) {
  // A loader that stops while its request waits for the store: that attempt ends on its own,
  // then the call gives up instead of retrying (issue 23.1).
  auto base = std::make_shared<FlakyFs>(100, Aws("SLOW_DOWN"));
  RetryPolicy policy{5, 0.001, 0.01};
  auto fs = MakeRetryingFileSystem(base, policy, "s3://", {}, 0);
  ASSERT_OK_AND_ASSIGN(auto file, fs->OpenInputFile("b/k"));
  base->gate->open = false;
  Status status;
  std::thread reader([&] { status = file->ReadAt(0, 4).status(); });
  ASSERT_TRUE(base->gate->WaitEntered(1));
  InterruptRetryWaits(*fs);
  base->gate->open = true;
  reader.join();
  EXPECT_EQ(base->remaining(), 99);  // one attempt, no retry
  EXPECT_EQ(GetErrorKind(status), ErrorKind::kStorage);
  EXPECT_TRUE(Contains(status, "stopped while waiting to retry")) << status.ToString();
  EXPECT_TRUE(Contains(status, "SLOW_DOWN")) << status.ToString();
  // A call started after the interrupt retries as usual.
  auto again = file->ReadAt(0, 4);
  EXPECT_TRUE(Contains(again.status(), "after 5 retries")) << again.status().ToString();
}

TEST(RetryingFileSystem, ReadAsyncStopsRetryingWithTheContextsStopToken) {
  // The fetch stage's reads run on Arrow's I/O pool with the pipeline's stop token: once it is
  // requested, a read whose attempt fails gives up instead of retrying.
  auto base = std::make_shared<FlakyFs>(100, Aws("SLOW_DOWN"));
  RetryPolicy policy{3, 0.001, 0.01};
  auto fs = MakeRetryingFileSystem(base, policy, "s3://", {}, 0);
  ASSERT_OK_AND_ASSIGN(auto file, fs->OpenInputFile("b/k"));
  arrow::StopSource stop;
  base->gate->open = false;
  auto read =
      file->ReadAsync(arrow::io::IOContext(arrow::default_memory_pool(), stop.token()), 0, 4);
  ASSERT_TRUE(base->gate->WaitEntered(1));
  stop.RequestStop();
  base->gate->open = true;
  const auto& result = read.result();
  EXPECT_EQ(base->remaining(), 99);
  EXPECT_TRUE(Contains(result.status(), "stopped while waiting to retry"))
      << result.status().ToString();
  WaitForIoPool();
}

TEST(RetryingFileSystem, FilesystemsOpenedInAStopScopeStopWithItsToken) {
  auto base = std::make_shared<FlakyFs>(100, Aws("SLOW_DOWN"));
  RetryPolicy policy{5, 30.0, 30.0};  // a retry would sleep 15 to 30 s
  arrow::StopSource stop;
  std::shared_ptr<arrow::fs::FileSystem> fs;
  {
    RemoteStopScope scope(stop.token());
    fs = MakeRetryingFileSystem(base, policy, "s3://", {}, 0);
  }
  auto unaffected = MakeRetryingFileSystem(base, RetryPolicy{0, 0.001, 0.01}, "s3://", {}, 0);
  ASSERT_OK_AND_ASSIGN(auto file, fs->OpenInputFile("b/k"));
  Status status;
  std::thread reader([&] { status = file->ReadAt(0, 4).status(); });  // on another thread
  ASSERT_TRUE(base->gate->WaitEntered(1));
  while (base->remaining() == 100) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop.RequestStop();  // during the backoff sleep
  reader.join();
  EXPECT_EQ(base->remaining(), 99);
  EXPECT_TRUE(Contains(status, "stopped while waiting to retry")) << status.ToString();
  // Later calls fail at once, without a request; other filesystems are not concerned.
  auto later = file->ReadAt(0, 4);
  EXPECT_TRUE(Contains(later.status(), "stopped before the request was sent"))
      << later.status().ToString();
  EXPECT_EQ(base->remaining(), 99);
  ASSERT_OK_AND_ASSIGN(auto other, unaffected->OpenInputFile("b/k"));
  EXPECT_TRUE(Contains(other->ReadAt(0, 4).status(), "SLOW_DOWN"));
  EXPECT_EQ(base->remaining(), 98);
}

TEST(StopRemoteRequestsDeathTest, StopsEveryCallAndWaitsForThoseUnderWay) {
  // It makes every remote filesystem of the process unusable: run it in a child process.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto child = [] {
    auto base = std::make_shared<FlakyFs>(100, Aws("SLOW_DOWN"));
    auto fs = MakeRetryingFileSystem(base, RetryPolicy{5, 30.0, 30.0}, "s3://", {}, 0);
    auto file = *fs->OpenInputFile("b/k");
    base->gate->open = false;
    // Two calls whose requests are under way; each would then sleep 15 to 30 s and retry.
    std::thread first([&] { (void)file->ReadAt(0, 4); });
    std::thread second([&] { (void)file->ReadAt(8, 4); });
    base->gate->WaitEntered(2);
    std::thread releaser([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      base->gate->open = true;  // the store answers (SLOW_DOWN)
    });
    const bool idle = StopRemoteRequests(20);  // returns once both gave up, not after 15 s
    first.join();
    second.join();
    releaser.join();
    const bool fails_at_once = !file->ReadAt(0, 4).ok() && base->remaining() == 98;
    std::_Exit(idle && fails_at_once && RemoteCallsInProgress() == 0 ? 0 : 1);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

TEST(ReaderProperties, PreBufferOnlyForRemote) {
  parquet::ArrowReaderProperties props;
  SetReaderProperties(arrow::fs::LocalFileSystem(), &props);
  EXPECT_FALSE(props.pre_buffer());
  auto remote =
      MakeRetryingFileSystem(std::make_shared<FlakyFs>(0, Status::OK()), {}, "x://", {}, 0);
  SetReaderProperties(*remote, &props);
  EXPECT_TRUE(props.pre_buffer());
  EXPECT_GE(props.cache_options().hole_size_limit, int64_t{1} << 20);
}

TEST(OpenFileSystem, LocalPathsStayLocal) {
  StorageOptions options;
  std::string path;
  ASSERT_OK_AND_ASSIGN(auto fs, OpenFileSystem("/tmp", options, &path));
  // Reads allocate from the recycling pool, for absolute paths too (Arrow gives those a
  // LocalFileSystem with the default pool whatever context it is passed).
  EXPECT_EQ(fs->io_context().pool(), RecyclingPool::Get());
  ASSERT_OK_AND_ASSIGN(auto file_uri_fs, OpenFileSystem("file:///tmp", options, &path));
  EXPECT_EQ(file_uri_fs->io_context().pool(), RecyclingPool::Get());
  EXPECT_EQ(fs->type_name(), "local");
  EXPECT_EQ(path, "/tmp");
  EXPECT_EQ(DisplayPrefix("/tmp", *fs), "");
}

}  // namespace
}  // namespace stoker
