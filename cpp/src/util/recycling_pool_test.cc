#include "util/recycling_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace stoker {
namespace {

TEST(RecyclingPool, KeepsFreedBlocksOnlyWithinTheBudgets) {
  RecyclingPool* pool = RecyclingPool::Get();
  pool->ReleaseUnused();
  uint8_t* block = nullptr;
  {
    // No open loader: nothing is kept.
    ASSERT_TRUE(pool->Allocate(1 << 20, 64, &block).ok());
    pool->Free(block, 1 << 20, 64);
    EXPECT_EQ(pool->cached_bytes(), 0);
  }
  {
    // Keeps what 16 MiB leave beside the bytes in use, and at least 4 MiB.
    RecyclingPool::Budget budget(16 << 20);
    const int64_t reused = pool->reused();
    ASSERT_TRUE(pool->Allocate(1 << 20, 64, &block).ok());
    std::memset(block, 7, 1 << 20);
    uint8_t* first = block;
    pool->Free(block, 1 << 20, 64);
    EXPECT_EQ(pool->cached_bytes(), 1 << 20);
    // A size of the same class gets the same block back.
    ASSERT_TRUE(pool->Allocate((1 << 20) - 1000, 64, &block).ok());
    EXPECT_EQ(block, first);
    EXPECT_EQ(pool->reused(), reused + 1);
    EXPECT_EQ(pool->cached_bytes(), 0);
    // Growing within the class keeps the block and its contents; beyond it, they move.
    ASSERT_TRUE(pool->Reallocate((1 << 20) - 1000, 1 << 20, 64, &block).ok());
    EXPECT_EQ(block, first);
    ASSERT_TRUE(pool->Reallocate(1 << 20, 3 << 20, 64, &block).ok());
    EXPECT_EQ(block[0], 7);
    EXPECT_EQ(block[(1 << 20) - 1], 7);
    pool->Free(block, 3 << 20, 64);
    EXPECT_EQ(pool->cached_bytes(), (1 << 20) + (3 << 20));
    // 12 MiB in use: a quarter of the budget is kept, and fresh memory hands back the oldest.
    std::vector<uint8_t*> held(3);
    for (auto& b : held) ASSERT_TRUE(pool->Allocate(4 << 20, 64, &b).ok());
    EXPECT_EQ(pool->cached_bytes(), 4 << 20);
    std::vector<uint8_t*> blocks(4);
    for (auto& b : blocks) ASSERT_TRUE(pool->Allocate(2 << 20, 64, &b).ok());
    EXPECT_EQ(pool->cached_bytes(), 4 << 20);  // 20 MiB in use: the quarter
    for (auto& b : blocks) pool->Free(b, 2 << 20, 64);
    EXPECT_EQ(pool->cached_bytes(), 4 << 20);
    // Freed, the held blocks fit what the budget leaves: kept and in use stay within 16 MiB.
    for (auto& b : held) {
      pool->Free(b, 4 << 20, 64);
      EXPECT_LE(pool->cached_bytes() + pool->bytes_allocated(), 16 << 20);
    }
    EXPECT_EQ(pool->cached_bytes(), 16 << 20);
    // Small blocks are never kept.
    ASSERT_TRUE(pool->Allocate(1000, 64, &block).ok());
    pool->Free(block, 1000, 64);
    EXPECT_EQ(pool->cached_bytes(), 16 << 20);
  }
  // The last budget gone: a quarter of it stays kept (the most recently freed) for the next
  // loader, but no more are kept; ReleaseUnused() frees them.
  EXPECT_EQ(pool->cached_bytes(), 4 << 20);
  ASSERT_TRUE(pool->Allocate(8 << 20, 64, &block).ok());
  pool->Free(block, 8 << 20, 64);
  EXPECT_EQ(pool->cached_bytes(), 4 << 20);
  {
    RecyclingPool::Budget next(16 << 20);
    const int64_t reused = pool->reused();
    ASSERT_TRUE(pool->Allocate(4 << 20, 64, &block).ok());  // a block the last loader freed
    EXPECT_EQ(pool->reused(), reused + 1);
    pool->Free(block, 4 << 20, 64);
  }
  pool->ReleaseUnused();
  EXPECT_EQ(pool->cached_bytes(), 0);
  EXPECT_EQ(pool->bytes_allocated(), 0);
}

// Blocks freed once in a burst (an epoch's end) must not hold the room against the blocks freed
// row group after row group: a freed block that does not fit hands back the least recently freed.
TEST(RecyclingPool, AFullBudgetHandsBackTheBlocksKeptLongest) {
  RecyclingPool* pool = RecyclingPool::Get();
  pool->ReleaseUnused();
  RecyclingPool::Budget budget(16 << 20);
  uint8_t* in_use = nullptr;  // 12 MiB in use: 4 MiB may be kept
  ASSERT_TRUE(pool->Allocate(12 << 20, 64, &in_use).ok());
  std::vector<uint8_t*> burst(4);
  for (auto& b : burst) ASSERT_TRUE(pool->Allocate(1 << 20, 64, &b).ok());
  for (auto& b : burst) pool->Free(b, 1 << 20, 64);
  EXPECT_EQ(pool->cached_bytes(), 4 << 20);
  // The recurring block (another class) is kept, in place of the two oldest of the burst...
  uint8_t* recurring = nullptr;
  ASSERT_TRUE(pool->Allocate(2 << 20, 64, &recurring).ok());
  uint8_t* const first = recurring;
  pool->Free(recurring, 2 << 20, 64);
  EXPECT_EQ(pool->cached_bytes(), 4 << 20);
  // ... and comes back each time it is asked for again.
  for (int round = 0; round < 3; ++round) {
    const int64_t reused = pool->reused();
    ASSERT_TRUE(pool->Allocate(2 << 20, 64, &recurring).ok());
    EXPECT_EQ(recurring, first);
    EXPECT_EQ(pool->reused(), reused + 1);
    pool->Free(recurring, 2 << 20, 64);
  }
  // The burst's two newest blocks are still kept (newest first), its two oldest were handed back.
  const int64_t reused = pool->reused();
  uint8_t* again[3];
  for (auto& b : again) ASSERT_TRUE(pool->Allocate(1 << 20, 64, &b).ok());
  EXPECT_EQ(again[0], burst[3]);
  EXPECT_EQ(again[1], burst[2]);
  EXPECT_EQ(pool->reused(), reused + 2);
  // Freed again, the three make room by handing back the recurring block, now the oldest.
  for (auto& b : again) pool->Free(b, 1 << 20, 64);
  EXPECT_EQ(pool->cached_bytes(), 3 << 20);
  // A block larger than the room is not kept, and hands nothing back.
  uint8_t* big = nullptr;
  ASSERT_TRUE(pool->Allocate(20 << 20, 64, &big).ok());
  pool->Free(big, 20 << 20, 64);
  EXPECT_EQ(pool->cached_bytes(), 3 << 20);
  pool->Free(in_use, 12 << 20, 64);
  EXPECT_EQ(pool->cached_bytes(), 15 << 20);  // nothing in use: the whole budget is room
  pool->ReleaseUnused();
  EXPECT_EQ(pool->cached_bytes(), 0);
  EXPECT_EQ(pool->bytes_allocated(), 0);
}

TEST(RecyclingPool, ResizesWithinAnEighthOfTheBlockStayInPlace) {
  RecyclingPool* pool = RecyclingPool::Get();
  pool->ReleaseUnused();
  RecyclingPool::Budget budget(16 << 20);
  const int64_t in_use = pool->bytes_allocated();
  uint8_t* block = nullptr;
  // Parquet's readers reserve a power of two and trim to the values read.
  ASSERT_TRUE(pool->Allocate(256 << 10, 64, &block).ok());
  std::memset(block, 5, 256 << 10);
  uint8_t* first = block;
  ASSERT_TRUE(pool->Reallocate(256 << 10, 240000, 64, &block).ok());
  EXPECT_EQ(block, first);  // no copy: 240000 is within an eighth of the block
  EXPECT_EQ(block[239999], 5);
  EXPECT_EQ(pool->bytes_allocated(), in_use + 240000);
  // Freed under its smaller size (another class), the block is kept for its own class: the
  // next reader's reservation gets it back.
  pool->Free(block, 240000, 64);
  EXPECT_EQ(pool->cached_bytes(), 256 << 10);
  ASSERT_TRUE(pool->Allocate(256 << 10, 64, &block).ok());
  EXPECT_EQ(block, first);
  ASSERT_TRUE(pool->Reallocate(256 << 10, 240000, 64, &block).ok());
  EXPECT_EQ(block, first);
  // Growing back within the block keeps it too.
  ASSERT_TRUE(pool->Reallocate(240000, 250000, 64, &block).ok());
  EXPECT_EQ(block, first);
  ASSERT_TRUE(pool->Reallocate(250000, 240000, 64, &block).ok());
  EXPECT_EQ(block, first);
  std::memset(block, 6, 240000);
  // Further down, the values move to a block of their size: a trimmed array never holds more
  // than a class's slack beyond its size (loaders count arrays by their sizes).
  ASSERT_TRUE(pool->Reallocate(240000, 200000, 64, &block).ok());
  EXPECT_NE(block, first);
  EXPECT_EQ(block[199999], 6);
  EXPECT_EQ(pool->bytes_allocated(), in_use + 200000);
  // The block it left, freed under the size it had then, went back to its own class.
  uint8_t* second = block;
  ASSERT_TRUE(pool->Allocate(256 << 10, 64, &block).ok());
  EXPECT_EQ(block, first);
  pool->Free(block, 256 << 10, 64);
  pool->Free(second, 200000, 64);
  EXPECT_EQ(pool->bytes_allocated(), in_use);
  pool->ReleaseUnused();
}

// Arrow's record reader grows a list column's buffers by doubling, then trims them to size.
uint8_t* GrowLikeARecordReader(RecyclingPool* pool, int64_t first, int64_t last, int64_t trimmed) {
  uint8_t* block = nullptr;
  EXPECT_TRUE(pool->Allocate(first, 64, &block).ok());
  std::memset(block, 1, static_cast<size_t>(first));
  for (int64_t size = first; size < last; size *= 2) {
    EXPECT_TRUE(pool->Reallocate(size, size * 2, 64, &block).ok());
    EXPECT_EQ(block[size - 1], 1);  // what was written is still there
    std::memset(block + size, 1, static_cast<size_t>(size));
  }
  EXPECT_TRUE(pool->Reallocate(last, trimmed, 64, &block).ok());
  EXPECT_EQ(block[0], 1);
  EXPECT_EQ(block[trimmed - 1], 1);
  return block;
}

TEST(RecyclingPool, GrowingBuffersMoveToMappingsThatGrowWithoutCopying) {
  RecyclingPool* pool = RecyclingPool::Get();
  pool->ReleaseUnused();
  RecyclingPool::Budget budget(256 << 20);
  const int64_t in_use = pool->bytes_allocated();
  const int64_t copied = pool->copied_bytes();
  // 256 KiB -> 8 MiB -> 7.5 MiB: the first block is copied once into a mapping; mremap does the
  // rest (no copy) and the trim stays in place (within an eighth).
  uint8_t* first = GrowLikeARecordReader(pool, 256 << 10, 8 << 20, (15 << 20) / 2);
  EXPECT_EQ(pool->copied_bytes(), copied + (256 << 10));
  EXPECT_EQ(pool->bytes_allocated(), in_use + (15 << 20) / 2);
  pool->Free(first, (15 << 20) / 2, 64);
  EXPECT_EQ(pool->bytes_allocated(), in_use);
  EXPECT_GE(pool->cached_bytes(), (8 << 20) + (256 << 10));
  // The next buffer growing from the same class gets that mapping whole: one copy of its first
  // block, then it grows in place, its pages already there.
  const int64_t reused = pool->reused();
  uint8_t* second = GrowLikeARecordReader(pool, 256 << 10, 8 << 20, 8 << 20);
  EXPECT_EQ(second, first);
  EXPECT_EQ(pool->reused(), reused + 2);  // the first block's class, then the mapping
  EXPECT_EQ(pool->copied_bytes(), copied + (512 << 10));
  // Trimmed by more than an eighth, the mapping shrinks (its tail's pages go back); trimmed
  // below what the pool keeps, it is still freed as a mapping.
  ASSERT_TRUE(pool->Reallocate(8 << 20, 3 << 20, 64, &second).ok());
  EXPECT_EQ(second, first);
  EXPECT_EQ(second[(3 << 20) - 1], 1);
  ASSERT_TRUE(pool->Reallocate(3 << 20, 100, 64, &second).ok());
  EXPECT_EQ(second[99], 1);
  EXPECT_EQ(pool->copied_bytes(), copied + (512 << 10));
  pool->Free(second, 100, 64);
  EXPECT_EQ(pool->bytes_allocated(), in_use);
  // A mapping grown from another class is not handed out for this one.
  uint8_t* third = GrowLikeARecordReader(pool, 128 << 10, 1 << 20, 1 << 20);
  EXPECT_NE(third, first);
  pool->Free(third, 1 << 20, 64);
  pool->ReleaseUnused();
  EXPECT_EQ(pool->cached_bytes(), 0);
  EXPECT_EQ(pool->bytes_allocated(), in_use);
}

bool AllOnes(const uint8_t* data, int64_t size) {
  return std::all_of(data, data + size, [](uint8_t b) { return b == 1; });
}

TEST(RecyclingPool, AKeptMappingGrownInPlaceKeepsEveryByteThroughLaterGrowth) {
  RecyclingPool* pool = RecyclingPool::Get();
  pool->ReleaseUnused();
  RecyclingPool::Budget budget(256 << 20);
  const int64_t in_use = pool->bytes_allocated();
  // A mapping trimmed from 2 MiB to 600 KB in place: the address space after it is free, so the
  // next buffer that takes it can grow it in place.
  uint8_t* first = GrowLikeARecordReader(pool, 256 << 10, 2 << 20, 600000);
  pool->Free(first, 600000, 64);
  // The next buffer of the class grows past it at once (256 KiB -> 1 MiB): it takes the kept
  // mapping and mremap grows it (in place, here).
  uint8_t* second = nullptr;
  ASSERT_TRUE(pool->Allocate(256 << 10, 64, &second).ok());
  std::memset(second, 1, 256 << 10);
  ASSERT_TRUE(pool->Reallocate(256 << 10, 1 << 20, 64, &second).ok());
  ASSERT_TRUE(AllOnes(second, 256 << 10));
  std::memset(second, 1, 1 << 20);
  // Grown again (moved: the old mapping's tail is in the way), then trimmed, then freed: every
  // byte written is still there at each step.
  ASSERT_TRUE(pool->Reallocate(1 << 20, 4 << 20, 64, &second).ok());
  EXPECT_TRUE(AllOnes(second, 1 << 20));
  std::memset(second, 1, 4 << 20);
  ASSERT_TRUE(pool->Reallocate(4 << 20, 3 << 20, 64, &second).ok());
  EXPECT_TRUE(AllOnes(second, 3 << 20));
  pool->Free(second, 3 << 20, 64);
  EXPECT_EQ(pool->bytes_allocated(), in_use);
  pool->ReleaseUnused();
  EXPECT_EQ(pool->cached_bytes(), 0);
}

TEST(RecyclingPool, ManyThreadsAllocateAndFree) {
  RecyclingPool* pool = RecyclingPool::Get();
  RecyclingPool::Budget budget(64 << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([pool, t] {
      for (int i = 0; i < 200; ++i) {
        const int64_t size = (64 << 10) * (1 + (i + t) % 5);
        uint8_t* block = nullptr;
        ASSERT_TRUE(pool->Allocate(size, 64, &block).ok());
        std::memset(block, t, static_cast<size_t>(size));
        EXPECT_EQ(block[size - 1], t);
        pool->Free(block, size, 64);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(pool->bytes_allocated(), 0);
  EXPECT_LE(pool->cached_bytes(), 16 << 20);
}

// Mappings resized on some threads while others map fresh ones: mremap frees a mapping's old
// address before the resizing thread records the new one, and the kernel may hand that address
// to another thread's mmap at once. Each mapping must stay recorded as one (freeing one as a
// malloc block crashed in free(): "invalid pointer", at a loader's close, 3 in ~580 runs of the
// shape matrix's narrow set). Nothing is kept (no budget), so every growth maps afresh.
TEST(RecyclingPool, MappingsResizedWhileOtherThreadsMapStayMappings) {
  RecyclingPool* pool = RecyclingPool::Get();
  pool->ReleaseUnused();
  const int64_t before = pool->bytes_allocated();
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer clears the shadow of every mapping it sees made or moved: 10,000 rounds
  // took 68 s of the CI's sanitizer shard; its race detection needs the overlap, not the count.
  constexpr int kRounds = 500;
#else
  constexpr int kRounds = 10000;
#endif
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([pool, t] {
      for (int i = 0; i < kRounds; ++i) {
        int64_t size = 64 << 10;
        uint8_t* buffer = nullptr;
        ASSERT_TRUE(pool->Allocate(size, 64, &buffer).ok());
        buffer[0] = buffer[size - 1] = static_cast<uint8_t>(t + 1);
        // A block grows into a mapping, which then moves (mremap) as it grows further; the
        // bytes written so far move with it.
        for (const int64_t next : {int64_t{320} << 10, int64_t{1} << 20, int64_t{3} << 20}) {
          ASSERT_TRUE(pool->Reallocate(size, next, 64, &buffer).ok());
          ASSERT_EQ(buffer[0], t + 1);
          ASSERT_EQ(buffer[size - 1], t + 1);
          size = next;
          buffer[size - 1] = static_cast<uint8_t>(t + 1);
        }
        pool->Free(buffer, size, 64);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(pool->bytes_allocated(), before);
}

}  // namespace
}  // namespace stoker
