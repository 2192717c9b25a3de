// A process-wide Arrow memory pool that keeps freed blocks for reuse: the decoders' column
// buffers (Parquet pages, decoded arrays, transformed rows) are the same few sizes row group
// after row group, and the default allocator hands such memory back to the kernel shortly after
// it is freed. Touching it again then costs a page fault and the kernel zeroing the page (5-10%
// of a cold epoch on a small VM, more with a shuffle window keeping items alive longer). Kept
// blocks are bounded by the open loaders' budgets: a quarter of the sum of their
// prefetch_bytes. When the last loader closes, the blocks kept then stay for the next loader
// (no more are kept until one opens); ReleaseUnused() frees them.
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

  RecyclingPool();
  void TrimLocked(int64_t limit);  // frees kept blocks until at most `limit` bytes remain
  // Resizes the live mapping at *ptr (growing may move it); false if not a mapping.
  bool ResizeMapping(int64_t old_size, int64_t new_size, uint8_t** ptr, arrow::Status* status);
  // Moves a buffer that outgrew its block into a mapping: a kept one grown from the same class
  // if there is one, else a fresh one.
  arrow::Status MoveToMapping(int64_t old_size, int64_t new_size, int64_t alignment, uint8_t** ptr);

  arrow::MemoryPool* const base_;
  mutable std::mutex mutex_;
  std::unordered_map<int64_t, std::vector<uint8_t*>> free_;  // by size class
  std::unordered_map<uint8_t*, int64_t> shrunk_;  // live blocks trimmed in place: their class
  std::unordered_map<uint8_t*, Mapping> mapped_;  // live mappings
  std::unordered_map<int64_t, std::vector<std::pair<uint8_t*, Mapping>>> grown_;  // by origin
  int64_t cached_ = 0;
  int64_t budget_ = 0;  // sum of the live Budgets
  int64_t in_use_ = 0;
  int64_t total_ = 0;
  int64_t allocations_ = 0;
  int64_t reused_ = 0;
  std::atomic<int64_t> copied_{0};  // counted outside the lock
};

}  // namespace stoker
