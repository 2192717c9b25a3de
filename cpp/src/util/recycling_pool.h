// A process-wide Arrow memory pool that keeps freed blocks for reuse: the decoders' column
// buffers (Parquet pages, decoded arrays, transformed rows) are the same few sizes row group
// after row group, and the default allocator hands such memory back to the kernel shortly after
// it is freed. Touching it again then costs a page fault and the kernel zeroing the page (5-10%
// of a cold epoch on a small VM, more with a shuffle window keeping items alive longer). Kept
// blocks are bounded by the open loaders' budgets: a quarter of the sum of their
// prefetch_bytes. When the last loader closes, the blocks kept then stay for the next loader
// (no more are kept until one opens); ReleaseUnused() frees them.
//
// Thread safety: every member may be called from any thread; fork() is safe (the lock is taken
// around it).
#pragma once

#include <arrow/memory_pool.h>

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

  /// Bytes of freed blocks held for reuse, and how many allocations reused one (for tests).
  int64_t cached_bytes() const;
  int64_t reused() const;

 private:
  RecyclingPool();
  void TrimLocked(int64_t limit);  // frees kept blocks until at most `limit` bytes remain

  arrow::MemoryPool* const base_;
  mutable std::mutex mutex_;
  std::unordered_map<int64_t, std::vector<uint8_t*>> free_;  // by size class
  std::unordered_map<uint8_t*, int64_t> shrunk_;  // live blocks trimmed in place: their class
  int64_t cached_ = 0;
  int64_t budget_ = 0;  // sum of the live Budgets
  int64_t in_use_ = 0;
  int64_t total_ = 0;
  int64_t allocations_ = 0;
  int64_t reused_ = 0;
};

}  // namespace stoker
