// SlabPool: reusable 64-byte aligned allocations for batches.
//
// Acquire() hands out a shared_ptr whose deleter returns the slab to the pool (or frees it when
// the pool is gone or already holds `max_free` slabs). Python arrays keep the shared_ptr alive
// through their capsule owner, so a slab is reused only after the last array made from it dies.
// Thread safety: all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "stoker/tensor.h"

namespace stoker {

class SlabPool : public std::enable_shared_from_this<SlabPool> {
 public:
  /// `pin`: page-lock every slab through the CUDA runtime (util/cuda_host.h) when it is
  /// allocated, so torch copies batches to a GPU asynchronously; a slab that cannot be pinned
  /// stays pageable (the copy is then synchronous, never wrong).
  static std::shared_ptr<SlabPool> Make(int max_free, bool pin = false);
  ~SlabPool();

  /// A slab with capacity() >= bytes. Never fails except by std::bad_alloc.
  std::shared_ptr<Slab> Acquire(int64_t bytes);

  int64_t allocated_bytes() const;

 private:
  class AlignedSlab;
  SlabPool(int max_free, bool pin) : max_free_(max_free), pin_(pin) {}
  void Release(AlignedSlab* slab);

  const int max_free_;
  const bool pin_;
  mutable std::mutex mutex_;
  std::vector<AlignedSlab*> free_;  // GUARDED_BY(mutex_)
  int64_t allocated_bytes_ = 0;     // GUARDED_BY(mutex_)
};

}  // namespace stoker
