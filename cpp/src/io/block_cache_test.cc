#include "io/block_cache.h"

#include <arrow/buffer.h>
#include <arrow/io/memory.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <thread>
#include <vector>

#include "io/test_file_internal.h"
#include "util/test_status_internal.h"

namespace stoker {
namespace {

// A base file that counts the reads reaching it.
class CountingFile : public test_file::BufferFile {
 public:
  using BufferFile::BufferFile;
  Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position, int64_t nbytes) override {
    ++reads;
    bytes += nbytes;
    return BufferFile::ReadAt(position, nbytes);
  }
  std::atomic<int> reads{0};
  std::atomic<int64_t> bytes{0};
};

class BlockCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("stoker_block_cache_test_" + std::to_string(getpid()));
    DiskCacheOptions options;
    options.dir = dir_.string();
    options.min_free_bytes = 0;
    auto cache = DiskCache::Open(options);
    ASSERT_TRUE(cache.ok()) << cache.status().ToString();
    cache_ = *cache;
    bytes_.resize(10000);
    std::iota(bytes_.begin(), bytes_.end(), 0);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::shared_ptr<CountingFile> Base() {
    return std::make_shared<CountingFile>(std::make_shared<arrow::Buffer>(
        reinterpret_cast<const uint8_t*>(bytes_.data()), static_cast<int64_t>(bytes_.size())));
  }

  std::filesystem::path dir_;
  std::shared_ptr<DiskCache> cache_;
  std::vector<uint8_t> bytes_;
};

TEST_F(BlockCacheTest, ReadsMatchTheBaseAndEachBlockIsFetchedOnce) {
  auto base = Base();
  auto file = MakeBlockCachedFile(base, cache_, "obj|10000|1", 10000, nullptr, 1024);
  for (int round = 0; round < 2; ++round) {
    for (int64_t position : {0, 1000, 1023, 1024, 5000, 9990}) {
      for (int64_t length : {1, 24, 1500, 4000}) {
        auto buffer = file->ReadAt(position, length);
        ASSERT_TRUE(buffer.ok());
        const int64_t expected = std::min<int64_t>(length, 10000 - position);
        ASSERT_EQ((*buffer)->size(), expected);
        EXPECT_EQ(std::memcmp((*buffer)->data(), bytes_.data() + position, expected), 0)
            << position << "+" << length;
      }
    }
  }
  EXPECT_EQ(base->reads.load(), 10);  // ceil(10000 / 1024) blocks, each read once

  // Another file object (another process would look the same) reads from the cache only.
  auto second_base = Base();
  auto second = MakeBlockCachedFile(second_base, cache_, "obj|10000|1", 10000, nullptr, 1024);
  std::vector<uint8_t> all(10000);
  auto n = second->ReadAt(0, 10000, all.data());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 10000);
  EXPECT_EQ(all, bytes_);
  EXPECT_EQ(second_base->reads.load(), 0);
}

// A footer's reads, cached as they are asked: a cold open fetched the file's last blocks whole
// (up to 8 MiB per file on S3) before the first batch could start.
TEST_F(BlockCacheTest, ExactRangesFetchOnlyTheBytesAskedAndServeTheNextOpen) {
  auto base = Base();
  auto file = MakeBlockCachedFile(base, cache_, "obj|10000|1", 10000, nullptr, 4096,
                                  /*exact_ranges=*/true);
  std::vector<uint8_t> tail(100);
  ASSERT_OK_AND_ASSIGN(const int64_t n, file->ReadAt(9900, 100, tail.data()));
  EXPECT_EQ(n, 100);
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), bytes_.begin() + 9900));
  ASSERT_OK_AND_ASSIGN(auto view, file->ReadAt(9950, 50));  // (the zero-copy overload)
  EXPECT_EQ(std::memcmp(view->data(), bytes_.data() + 9950, 50), 0);
  EXPECT_EQ(base->reads.load(), 2);
  EXPECT_EQ(base->bytes.load(), 150);  // not the last block's 1,808 bytes
  // A read of more than a quarter of the blocks it touches is read as blocks.
  ASSERT_OK_AND_ASSIGN(auto most, file->ReadAt(8192, 1000));
  EXPECT_EQ(std::memcmp(most->data(), bytes_.data() + 8192, 1000), 0);
  EXPECT_EQ(base->bytes.load(), 150 + 1808);
  // The next open (another process alike) reads the same ranges from the cache only.
  auto again_base = Base();
  auto again = MakeBlockCachedFile(again_base, cache_, "obj|10000|1", 10000, nullptr, 4096,
                                   /*exact_ranges=*/true);
  ASSERT_TRUE(again->ReadAt(9900, 100, tail.data()).ok());
  ASSERT_TRUE(again->ReadAt(9950, 50).ok());
  EXPECT_EQ(again_base->reads.load(), 0);
}

TEST_F(BlockCacheTest, AnotherIdentityIsAnotherObject) {
  auto base = Base();
  auto file = MakeBlockCachedFile(base, cache_, "obj|10000|1", 10000, nullptr, 4096);
  ASSERT_TRUE(file->ReadAt(0, 10).ok());
  auto changed_base = Base();
  auto changed = MakeBlockCachedFile(changed_base, cache_, "obj|10000|2", 10000, nullptr, 4096);
  ASSERT_TRUE(changed->ReadAt(0, 10).ok());
  EXPECT_EQ(changed_base->reads.load(), 1);
}

TEST_F(BlockCacheTest, SequentialReadsAndPastTheEnd) {
  auto file = MakeBlockCachedFile(Base(), cache_, "obj", 10000, nullptr, 1000);
  ASSERT_TRUE(file->Seek(9995).ok());
  auto buffer = file->Read(100);
  ASSERT_TRUE(buffer.ok());
  EXPECT_EQ((*buffer)->size(), 5);
  auto empty = file->ReadAt(20000, 10);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->size(), 0);
}

TEST_F(BlockCacheTest, ABlockIsStoredOnlyOnceItsObjectIsConfirmedUnchanged) {
  // The object was replaced during the download: the check fails, nothing is stored.
  auto replaced = std::make_shared<VersionCheck>(
      [] { return MakeError(ErrorKind::kStorage, "'obj' changed since the loader opened it"); });
  auto file = MakeBlockCachedFile(Base(), cache_, "obj|v1", 10000, replaced, 4096);
  auto failed = file->ReadAt(0, 10);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("changed since"), std::string::npos);
  EXPECT_EQ(cache_->stats().writes, 0);
  // Confirmed: stored, and a later reader reads it from the cache.
  std::atomic<int> checks{0};
  auto unchanged = std::make_shared<VersionCheck>([&] {
    ++checks;
    return Status::OK();
  });
  auto base = Base();
  auto confirmed = MakeBlockCachedFile(base, cache_, "obj|v1", 10000, unchanged, 4096);
  ASSERT_TRUE(confirmed->ReadAt(0, 10).ok());
  EXPECT_EQ(checks.load(), 1);
  EXPECT_EQ(cache_->stats().writes, 1);
  auto again = MakeBlockCachedFile(Base(), cache_, "obj|v1", 10000, replaced, 4096);
  EXPECT_TRUE(again->ReadAt(0, 10).ok());  // a hit asks nobody
}

TEST(VersionCheck, AConfirmationCoversOnlyReadsThatEndedBeforeItStarted) {
  std::atomic<int> checks{0};
  VersionCheck check([&] {
    ++checks;
    return Status::OK();
  });
  const auto read_end = std::chrono::steady_clock::now();
  ASSERT_TRUE(check.ConfirmAfter(read_end).ok());
  EXPECT_EQ(checks.load(), 1);
  ASSERT_TRUE(check.ConfirmAfter(read_end).ok());  // the check above started after this read
  EXPECT_EQ(checks.load(), 1);
  ASSERT_TRUE(check.ConfirmAfter(std::chrono::steady_clock::now()).ok());  // a later read
  EXPECT_EQ(checks.load(), 2);
  // Reads that end together share one check.
  const auto together = std::chrono::steady_clock::now();
  std::vector<std::thread> readers;
  for (int i = 0; i < 8; ++i) {
    readers.emplace_back([&] { EXPECT_TRUE(check.ConfirmAfter(together).ok()); });
  }
  for (auto& reader : readers) reader.join();
  // The first one to ask starts a check after `together`: it covers every other one, whether
  // they wait for it or come after it.
  EXPECT_EQ(checks.load(), 3);
}

}  // namespace
}  // namespace stoker
