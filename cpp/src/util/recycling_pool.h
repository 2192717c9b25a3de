// A process-wide Arrow memory pool that keeps freed blocks for reuse: the decoders' column
// buffers (Parquet pages, decoded arrays, transformed rows) are the same few sizes row group
// after row group, and the default allocator hands such memory back to the kernel shortly after
// it is freed. Touching it again then costs a page fault and the kernel zeroing the page (5-10%
// of a cold epoch on a small VM, more with a shuffle window keeping items alive longer).
//
// Kept blocks are bounded by the open loaders' budgets (the sum of their prefetch_bytes): kept
// and in-use bytes together stay within it, and at least a quarter of it may be kept. A freed
// block that does not fit makes room by handing back the blocks kept longest (least recently
// freed): blocks freed together at an epoch's end would otherwise hold the room for good while
// those freed every row group were refused and faulted in afresh. When the last loader closes,
// up to a quarter of its budget stays kept for the next loader (no more are kept until one
// opens); ReleaseUnused() frees them.
//
// Buffers that grow past their block (Arrow's record reader doubles a list column's value and
// level buffers as it reads, then trims them to size) move into anonymous mappings, which
// mremap grows and trims without copying; a freed mapping waits for the next buffer that grows
// from the same size class (that column's buffer in the next row group), its pages faulted in.
//
// Thread safety: every member may be called from any thread; fork() is safe (the lock is taken
// around it).
#pragma once

#include <arrow/memory_pool.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace stoker {

class RecyclingPool final : public arrow::MemoryPool {
 public:
  /// The process's pool (never destroyed: buffers may outlive any loader).
  static RecyclingPool* Get();

  /// While alive, allows the pool to keep up to `bytes` / 4 more of freed memory.
  class Budget {
   public:
    explicit Budget(int64_t bytes);
    ~Budget();
    Budget(const Budget&) = delete;
    Budget& operator=(const Budget&) = delete;

   private:
    const int64_t bytes_;
  };

  arrow::Status Allocate(int64_t size, int64_t alignment, uint8_t** out) override;
  arrow::Status Reallocate(int64_t old_size, int64_t new_size, int64_t alignment,
                           uint8_t** ptr) override;
  void Free(uint8_t* buffer, int64_t size, int64_t alignment) override;
  void ReleaseUnused() override;
  int64_t bytes_allocated() const override;
  int64_t total_bytes_allocated() const override;
  int64_t num_allocations() const override;
  std::string backend_name() const override;

  /// Bytes of freed blocks held for reuse, how many allocations reused one, and the bytes
  /// copied by Reallocate (for tests).
  int64_t cached_bytes() const;
  int64_t reused() const;
  int64_t copied_bytes() const;

 private:
  struct Mapping {
    int64_t size;    // bytes mapped (whole pages)
    int64_t origin;  // the size class of the block its buffer grew from
  };

  // A freed block or mapping held for reuse.
  struct Kept {
    uint8_t* ptr;
    int64_t bytes;  // of cached_: the block's size class, or the mapping's size
    int64_t key;    // the size class (a block) or the origin class (a mapping)
    bool mapping;
  };
  using KeptList = std::list<Kept>;
  using ByKey = std::unordered_map<int64_t, std::deque<KeptList::iterator>>;  // newest last

  RecyclingPool();
  // The most kept bytes: what the open loaders' budgets leave beside the bytes in use, and at
  // least a quarter of the budgets.
  int64_t LimitLocked() const;
  // Keeps `kept`, handing back the oldest kept blocks to make room; returns what the caller
  // releases (after unlocking): those blocks, or `kept` itself if it exceeds `limit` alone.
  std::vector<Kept> KeepLocked(const Kept& kept, int64_t limit);
  // The newest kept entry of `key` in `by_key`, taken out; false if there is none.
  bool TakeLocked(ByKey* by_key, int64_t key, Kept* out);
  // Takes out the least recently freed entries until at most `limit` bytes stay kept; the
  // caller releases them after unlocking.
  std::vector<Kept> EvictLocked(int64_t limit);
  void Release(const Kept& kept);  // to the allocator, or munmap
  // Resizes the live mapping at *ptr (growing may move it); false if not a mapping.
  bool ResizeMapping(int64_t old_size, int64_t new_size, uint8_t** ptr, arrow::Status* status);
  // Moves a buffer that outgrew its block into a mapping: a kept one grown from the same class
  // if there is one, else a fresh one.
  arrow::Status MoveToMapping(int64_t old_size, int64_t new_size, int64_t alignment, uint8_t** ptr);

  arrow::MemoryPool* const base_;
  mutable std::mutex mutex_;
  KeptList kept_;  // every kept block and mapping, least recently freed first
  ByKey free_;     // kept blocks by size class
  ByKey grown_;    // kept mappings by origin class
  std::unordered_map<uint8_t*, int64_t> shrunk_;  // live blocks trimmed in place: their class
  std::unordered_map<uint8_t*, Mapping> mapped_;  // live mappings
  int64_t cached_ = 0;
  int64_t budget_ = 0;  // sum of the live Budgets
  int64_t in_use_ = 0;
  int64_t total_ = 0;
  int64_t allocations_ = 0;
  int64_t reused_ = 0;
  std::atomic<int64_t> copied_{0};  // counted outside the lock
};

}  // namespace stoker
