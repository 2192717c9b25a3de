// SlabPool: reusable 64-byte aligned allocations for batches.
//
// Acquire() hands out a shared_ptr whose deleter returns the slab to the pool (or frees it when
// the pool is gone, or already holds `max_free` slabs and `max_free_bytes` of them). Python
// arrays keep the shared_ptr alive through their capsule owner, so a slab is reused only after
// the last array made from it dies.
//
// Why a byte bound beside the count: a consumer slower than the workers (a GPU step) lets
// finished batches pile up, one slab each (the pipeline allows half of prefetch_bytes of them).
// Kept to 8, the slabs freed as the pile drained were handed back (munmap in the consumer's
// next(): a median 0.15-0.26 ms against 0.04-0.07 ms a batch of the many-outputs set) and the
// next pile faulted fresh ones in.
// Slabs of one size are reused before any new one is allocated, so keeping them adds nothing to
// the peak; with varying sizes the kept ones add at most the bound.
// Thread safety: all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "stoker/tensor.h"

namespace stoker {

class SlabPool : public std::enable_shared_from_this<SlabPool> {
 public:
  /// `pin`: page-lock every slab through the CUDA runtime (util/cuda_host.h) when it is
  /// allocated, so torch copies batches to a GPU asynchronously; a slab that cannot be pinned
  /// stays pageable (the copy is then synchronous, never wrong).
  /// Keeps a freed slab while fewer than `max_free` are kept, or while the kept ones and it fit
  /// in `max_free_bytes`.
  static std::shared_ptr<SlabPool> Make(int max_free, bool pin = false, int64_t max_free_bytes = 0);
  ~SlabPool();

  /// A slab with capacity() >= bytes. Never fails except by std::bad_alloc.
  std::shared_ptr<Slab> Acquire(int64_t bytes);

  int64_t allocated_bytes() const;

 private:
  class AlignedSlab;
  SlabPool(int max_free, bool pin, int64_t max_free_bytes)
      : max_free_(max_free), max_free_bytes_(max_free_bytes), pin_(pin) {}
  void Release(AlignedSlab* slab);

  const int max_free_;
  const int64_t max_free_bytes_;
  const bool pin_;
  mutable std::mutex mutex_;
  std::multimap<int64_t, AlignedSlab*> free_;  // GUARDED_BY(mutex_) by capacity
  int64_t free_bytes_ = 0;                     // GUARDED_BY(mutex_)
  int64_t allocated_bytes_ = 0;                // GUARDED_BY(mutex_)
};

}  // namespace stoker
