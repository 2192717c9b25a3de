#include "batch/slab_pool.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace stoker {
namespace {

TEST(SlabPool, ReusesTheSmallestFreedSlabThatHoldsTheBatch) {
  auto pool = SlabPool::Make(8);
  auto small = pool->Acquire(1000);
  auto large = pool->Acquire(100000);
  uint8_t* small_data = small->data();
  uint8_t* large_data = large->data();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small_data) % 64, 0u);
  EXPECT_GE(small->capacity(), 1000);
  small.reset();
  large.reset();
  const int64_t allocated = pool->allocated_bytes();
  // 900 bytes fit both: the smaller one; 50,000 fit only the larger one.
  auto a = pool->Acquire(900);
  EXPECT_EQ(a->data(), small_data);
  auto b = pool->Acquire(50000);
  EXPECT_EQ(b->data(), large_data);
  EXPECT_EQ(pool->allocated_bytes(), allocated);  // nothing new
}

TEST(SlabPool, KeepsFreedSlabsUpToTheCountOrTheBytesWhicheverIsMore) {
  constexpr int64_t kBatch = 64 << 10;
  // By count alone: 2 kept, the third freed.
  auto by_count = SlabPool::Make(2);
  std::vector<std::shared_ptr<Slab>> held;
  for (int i = 0; i < 3; ++i) held.push_back(by_count->Acquire(kBatch));
  const int64_t one = held[0]->capacity();
  EXPECT_EQ(by_count->allocated_bytes(), 3 * one);
  held.clear();
  EXPECT_EQ(by_count->allocated_bytes(), 2 * one);

  // With a byte bound of 10 slabs: a pile of 12 drained keeps 10, and the next pile of 10
  // allocates nothing.
  auto by_bytes = SlabPool::Make(2, /*pin=*/false, /*max_free_bytes=*/10 * one);
  for (int i = 0; i < 12; ++i) held.push_back(by_bytes->Acquire(kBatch));
  EXPECT_EQ(by_bytes->allocated_bytes(), 12 * one);
  held.clear();
  EXPECT_EQ(by_bytes->allocated_bytes(), 10 * one);
  for (int i = 0; i < 10; ++i) held.push_back(by_bytes->Acquire(kBatch));
  EXPECT_EQ(by_bytes->allocated_bytes(), 10 * one);
  held.clear();
}

TEST(SlabPool, SlabsOutliveThePool) {
  auto pool = SlabPool::Make(8, /*pin=*/false, /*max_free_bytes=*/1 << 20);
  auto slab = pool->Acquire(4096);
  auto kept = pool->Acquire(4096);
  kept.reset();  // in the pool's free list when the pool goes
  pool.reset();
  slab->data()[0] = 1;  // still valid; freed when released (ASan checks both)
  slab.reset();
}

}  // namespace
}  // namespace stoker
