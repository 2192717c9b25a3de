#include "batch/slab_pool.h"

#include <algorithm>
#include <cstdlib>
#include <new>

#include "util/cuda_host.h"

namespace stoker {

class SlabPool::AlignedSlab : public Slab {
 public:
  AlignedSlab(int64_t capacity, bool pin) : capacity_(capacity) {
    data_ = static_cast<uint8_t*>(std::aligned_alloc(64, capacity));
    if (data_ == nullptr) throw std::bad_alloc();
    // A slab is pinned once and reused many times: registration stays off the per-batch path.
    pinned_ = pin && PinHostMemory(data_, static_cast<size_t>(capacity)).ok();
  }
  ~AlignedSlab() override {
    if (pinned_) UnpinHostMemory(data_);
    std::free(data_);
  }
  uint8_t* data() override { return data_; }
  int64_t capacity() const override { return capacity_; }

 private:
  uint8_t* data_;
  int64_t capacity_;
  bool pinned_ = false;
};

std::shared_ptr<SlabPool> SlabPool::Make(int max_free, bool pin, int64_t max_free_bytes) {
  return std::shared_ptr<SlabPool>(new SlabPool(max_free, pin, max_free_bytes));
}

SlabPool::~SlabPool() {
  for (const auto& [capacity, slab] : free_) delete slab;
}

std::shared_ptr<Slab> SlabPool::Acquire(int64_t bytes) {
  bytes = std::max<int64_t>(64, (bytes + 63) / 64 * 64);
  AlignedSlab* slab = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Best fit among free slabs: the smallest that holds the batch.
    if (auto best = free_.lower_bound(bytes); best != free_.end()) {
      slab = best->second;
      free_bytes_ -= best->first;
      free_.erase(best);
    }
  }
  if (slab == nullptr) {
    // Headroom so batches of varying size (ragged columns) can reuse slabs; aligned_alloc
    // needs a size that is a multiple of the alignment.
    slab = new AlignedSlab((bytes + bytes / 8 + 63) / 64 * 64, pin_);
    std::lock_guard<std::mutex> lock(mutex_);
    allocated_bytes_ += slab->capacity();
  }
  std::weak_ptr<SlabPool> weak = weak_from_this();
  return std::shared_ptr<Slab>(slab, [weak](Slab* raw) {
    auto* aligned = static_cast<AlignedSlab*>(raw);
    if (auto pool = weak.lock()) {
      pool->Release(aligned);
    } else {
      delete aligned;
    }
  });
}

void SlabPool::Release(AlignedSlab* slab) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (static_cast<int>(free_.size()) < max_free_ ||
      free_bytes_ + slab->capacity() <= max_free_bytes_) {
    free_.emplace(slab->capacity(), slab);
    free_bytes_ += slab->capacity();
    return;
  }
  allocated_bytes_ -= slab->capacity();
  delete slab;
}

int64_t SlabPool::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocated_bytes_;
}

}  // namespace stoker
