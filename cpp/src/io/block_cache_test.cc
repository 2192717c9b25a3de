#include "io/block_cache.h"

#include <arrow/buffer.h>
#include <arrow/io/memory.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <numeric>

#include "io/test_file_internal.h"

namespace stoker {
namespace {

// A base file that counts the reads reaching it.
class CountingFile : public test_file::BufferFile {
 public:
  using BufferFile::BufferFile;
  Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position, int64_t nbytes) override {
    ++reads;
    return BufferFile::ReadAt(position, nbytes);
  }
  std::atomic<int> reads{0};
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
  auto file = MakeBlockCachedFile(base, cache_, "obj|10000|1", 10000, 1024);
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
  auto second = MakeBlockCachedFile(second_base, cache_, "obj|10000|1", 10000, 1024);
  std::vector<uint8_t> all(10000);
  auto n = second->ReadAt(0, 10000, all.data());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 10000);
  EXPECT_EQ(all, bytes_);
  EXPECT_EQ(second_base->reads.load(), 0);
}

TEST_F(BlockCacheTest, AnotherIdentityIsAnotherObject) {
  auto base = Base();
  auto file = MakeBlockCachedFile(base, cache_, "obj|10000|1", 10000, 4096);
  ASSERT_TRUE(file->ReadAt(0, 10).ok());
  auto changed_base = Base();
  auto changed = MakeBlockCachedFile(changed_base, cache_, "obj|10000|2", 10000, 4096);
  ASSERT_TRUE(changed->ReadAt(0, 10).ok());
  EXPECT_EQ(changed_base->reads.load(), 1);
}

TEST_F(BlockCacheTest, SequentialReadsAndPastTheEnd) {
  auto file = MakeBlockCachedFile(Base(), cache_, "obj", 10000, 1000);
  ASSERT_TRUE(file->Seek(9995).ok());
  auto buffer = file->Read(100);
  ASSERT_TRUE(buffer.ok());
  EXPECT_EQ((*buffer)->size(), 5);
  auto empty = file->ReadAt(20000, 10);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->size(), 0);
}

}  // namespace
}  // namespace stoker
