#include "io/filesystem.h"

#include <arrow/filesystem/localfs.h>
#include <arrow/util/io_util.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <thread>

namespace stoker {
namespace {

// Arrow's testing macros are not in the wheel.
#define STOKER_TEST_ASSIGN(lhs, rexpr)                                \
  auto lhs##_result = (rexpr);                                        \
  ASSERT_TRUE(lhs##_result.ok()) << lhs##_result.status().ToString(); \
  auto lhs = std::move(lhs##_result).ValueOrDie()

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

// A filesystem whose files fail `failures` times before working, to count attempts.
class FlakyFile : public arrow::io::RandomAccessFile {
 public:
  FlakyFile(std::shared_ptr<std::atomic<int>> failures, Status error)
      : failures_(std::move(failures)), error_(std::move(error)) {}
  Status Close() override { return Status::OK(); }
  bool closed() const override { return false; }
  Result<int64_t> Tell() const override { return 0; }
  Status Seek(int64_t) override { return Status::OK(); }
  Result<int64_t> GetSize() override { return 4; }
  Result<int64_t> Read(int64_t n, void* out) override { return ReadAt(0, n, out); }
  Result<std::shared_ptr<arrow::Buffer>> Read(int64_t n) override { return ReadAt(0, n); }
  Result<int64_t> ReadAt(int64_t, int64_t n, void* out) override {
    if (failures_->fetch_sub(1) > 0) return error_;
    std::memset(out, 'x', n);
    return n;
  }
  Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t, int64_t n) override {
    if (failures_->fetch_sub(1) > 0) return error_;
    return arrow::Buffer::FromString(std::string(n, 'x'));
  }

 private:
  std::shared_ptr<std::atomic<int>> failures_;
  Status error_;
};

class FlakyFs : public arrow::fs::LocalFileSystem {
 public:
  FlakyFs(int failures, Status error)
      : failures_(std::make_shared<std::atomic<int>>(failures)), error_(std::move(error)) {}
  std::string type_name() const override { return "flaky"; }
  Result<std::shared_ptr<arrow::io::RandomAccessFile>> OpenInputFile(const std::string&) override {
    return std::make_shared<FlakyFile>(failures_, error_);
  }
  int remaining() const { return failures_->load(); }

 private:
  std::shared_ptr<std::atomic<int>> failures_;
  Status error_;
};

TEST(RetryingFileSystem, RetriesTransientErrorsThenSucceeds) {
  auto base = std::make_shared<FlakyFs>(3, Aws("SLOW_DOWN"));
  RetryPolicy policy{5, 0.001, 0.01};
  auto fs = MakeRetryingFileSystem(base, policy, "s3://", {}, 0);
  STOKER_TEST_ASSIGN(file, fs->OpenInputFile("b/k"));
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
  STOKER_TEST_ASSIGN(file, fs->OpenInputFile("b/k"));
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
  STOKER_TEST_ASSIGN(file, fs->OpenInputFile("b/k"));
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
  STOKER_TEST_ASSIGN(file, fs->OpenInputFile("b/k"));
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
  LoaderOptions options;
  std::string path;
  STOKER_TEST_ASSIGN(fs, OpenFileSystem("/tmp", options, &path));
  EXPECT_EQ(fs->type_name(), "local");
  EXPECT_EQ(path, "/tmp");
  EXPECT_EQ(DisplayPrefix("/tmp", *fs), "");
}

}  // namespace
}  // namespace stoker
