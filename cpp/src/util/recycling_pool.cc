#include "util/recycling_pool.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace stoker {
namespace {

// Smaller blocks are the allocator's own business (it keeps them in its pages).
constexpr int64_t kMinKept = 32 << 10;
// Kept blocks are 64-byte aligned: Arrow's default, and what its buffers ask for.
constexpr int64_t kAlignment = 64;
constexpr int kBudgetShare = 4;  // keep at most budget / kBudgetShare
// A block stays in place when resized to at least 1 - 1/kMaxSlack of it (the classes' slack).
constexpr int64_t kMaxSlack = 8;

// Sizes rounded up to one of 8 classes per power of two (at most 12.5% larger), so that
// buffers of nearly the same size share blocks.
int64_t SizeClass(int64_t size) {
  int shift = 0;
  while ((size >> shift) > 15) ++shift;  // size >> shift in [8, 15]
  const int64_t step = int64_t{1} << shift;
  return (size + step - 1) / step * step;
}

bool Kept(int64_t size, int64_t alignment) { return size >= kMinKept && alignment <= kAlignment; }

// Growth to less than this is copied (a few pages); from here on the buffer moves to a mapping.
constexpr int64_t kMapMin = 256 << 10;

int64_t MappedSize(int64_t size) {
  static const int64_t page = sysconf(_SC_PAGESIZE);
  return std::max<int64_t>(page, (SizeClass(size) + page - 1) / page * page);
}

}  // namespace

RecyclingPool* RecyclingPool::Get() {
  static RecyclingPool* pool = [] {
    auto* created = new RecyclingPool();
    // A fork while a worker holds the lock would leave it held in the child.
    pthread_atfork([] { Get()->mutex_.lock(); }, [] { Get()->mutex_.unlock(); },
                   [] { Get()->mutex_.unlock(); });
    return created;
  }();
  return pool;
}

// The system allocator, not Arrow's default (mimalloc in pyarrow's wheels): mimalloc reserves
// 1 GiB arenas as transparent huge pages and hands freed pages back soon after, so a decoder
// touching fresh memory made the kernel zero 2 MiB at a time (half a cold epoch's CPU samples in
// clear_page_erms). On a loaded 2-core machine, epochs of the shape matrix's sets ran 2-3x
// slower with it and first batches took up to 1.8 s (issue 26; the note has the numbers).
RecyclingPool::RecyclingPool() : base_(arrow::system_memory_pool()) {}

RecyclingPool::Budget::Budget(int64_t bytes) : bytes_(std::max<int64_t>(0, bytes)) {
  RecyclingPool* pool = Get();
  std::lock_guard<std::mutex> lock(pool->mutex_);
  pool->budget_ += bytes_;
}

RecyclingPool::Budget::~Budget() {
  RecyclingPool* pool = Get();
  std::lock_guard<std::mutex> lock(pool->mutex_);
  pool->budget_ -= bytes_;
  // The last loader gone, the kept blocks stay for the next one (a reader opened per epoch,
  // as Petastorm's examples do, would otherwise fault in fresh pages every epoch); nothing more
  // is kept until a loader opens, and ReleaseUnused() frees them.
  if (pool->budget_ > 0) pool->TrimLocked(pool->budget_ / kBudgetShare);
}

arrow::Status RecyclingPool::Allocate(int64_t size, int64_t alignment, uint8_t** out) {
  if (!Kept(size, alignment)) {
    ARROW_RETURN_NOT_OK(base_->Allocate(size, alignment, out));
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ += size;
    total_ += size;
    ++allocations_;
    return arrow::Status::OK();
  }
  const int64_t size_class = SizeClass(size);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ += size;
    total_ += size;
    ++allocations_;
    auto it = free_.find(size_class);
    if (it != free_.end() && !it->second.empty()) {
      *out = it->second.back();
      it->second.pop_back();
      cached_ -= size_class;
      ++reused_;
      return arrow::Status::OK();
    }
  }
  arrow::Status status = base_->Allocate(size_class, kAlignment, out);
  if (!status.ok()) {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ -= size;
    total_ -= size;
    --allocations_;
  }
  return status;
}

arrow::Status RecyclingPool::Reallocate(int64_t old_size, int64_t new_size, int64_t alignment,
                                        uint8_t** ptr) {
  arrow::Status status;
  if (ResizeMapping(old_size, new_size, ptr, &status)) return status;
  const bool kept_old = Kept(old_size, alignment), kept_new = Kept(new_size, alignment);
  if (!kept_old && !kept_new) {
    ARROW_RETURN_NOT_OK(base_->Reallocate(old_size, new_size, alignment, ptr));
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ += new_size - old_size;
    if (new_size > old_size) total_ += new_size - old_size;
    return arrow::Status::OK();
  }
  if (kept_old && kept_new) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = shrunk_.find(*ptr);
    const int64_t block = it != shrunk_.end() ? it->second : SizeClass(old_size);
    // Within the block, down to an eighth less, it stays where it is: no copy, and no more
    // slack than a size class already has. Not lower: loaders count decoded arrays by their
    // sizes (TotalBufferSize), so a trimmed array left in a block twice its size would hold
    // memory prefetch_bytes does not see (glibc and jemalloc hand such a tail back). The block's
    // size is remembered so that it is kept for its own class when freed.
    if (new_size <= block && new_size >= block - block / kMaxSlack) {
      in_use_ += new_size - old_size;
      if (new_size > old_size) total_ += new_size - old_size;
      if (SizeClass(new_size) == block) {
        if (it != shrunk_.end()) shrunk_.erase(it);
      } else if (it == shrunk_.end()) {
        shrunk_.emplace(*ptr, block);
      }
      return arrow::Status::OK();
    }
  }
  if (kept_new && new_size > old_size && new_size >= kMapMin) {
    return MoveToMapping(old_size, new_size, alignment, ptr);
  }
  uint8_t* moved = nullptr;
  ARROW_RETURN_NOT_OK(Allocate(new_size, alignment, &moved));
  std::memcpy(moved, *ptr, static_cast<size_t>(std::min(old_size, new_size)));
  Free(*ptr, old_size, alignment);
  *ptr = moved;
  copied_.fetch_add(std::min(old_size, new_size), std::memory_order_relaxed);
  return arrow::Status::OK();
}

bool RecyclingPool::ResizeMapping(int64_t old_size, int64_t new_size, uint8_t** ptr,
                                  arrow::Status* status) {
  Mapping mapping;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (mapped_.empty()) return false;
    auto it = mapped_.find(*ptr);
    if (it == mapped_.end()) return false;
    mapping = it->second;
    // Growing within the mapping (one kept from a larger buffer) or trimming by at most an
    // eighth of it stays in place.
    const int64_t block = mapping.size;
    if (new_size <= block && (new_size >= old_size || new_size >= block - block / kMaxSlack)) {
      in_use_ += new_size - old_size;
      if (new_size > old_size) total_ += new_size - old_size;
      return true;
    }
  }
  // The buffer's owner is the only one to resize or free it: the syscall runs unlocked.
  const int64_t size = MappedSize(new_size);
  void* moved = mremap(*ptr, static_cast<size_t>(mapping.size), static_cast<size_t>(size),
                       size > mapping.size ? MREMAP_MAYMOVE : 0);
  if (moved == MAP_FAILED) {
    *status = arrow::Status::OutOfMemory("mremap of ", mapping.size, " to ", size,
                                         " bytes failed: ", std::strerror(errno));
    return true;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  mapped_.erase(*ptr);
  *ptr = static_cast<uint8_t*>(moved);
  mapped_.emplace(*ptr, Mapping{size, mapping.origin});
  in_use_ += new_size - old_size;
  if (new_size > old_size) total_ += new_size - old_size;
  return true;
}

arrow::Status RecyclingPool::MoveToMapping(int64_t old_size, int64_t new_size, int64_t alignment,
                                           uint8_t** ptr) {
  uint8_t* block = nullptr;
  Mapping mapping{0, SizeClass(old_size)};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = shrunk_.find(*ptr); it != shrunk_.end()) mapping.origin = it->second;
    if (auto it = grown_.find(mapping.origin); it != grown_.end() && !it->second.empty()) {
      block = it->second.back().first;
      mapping = it->second.back().second;
      it->second.pop_back();
      cached_ -= mapping.size;
      ++reused_;
    }
  }
  const int64_t size = MappedSize(new_size);
  void* moved = nullptr;
  if (block == nullptr) {
    moved = mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  } else if (mapping.size < size) {
    moved =
        mremap(block, static_cast<size_t>(mapping.size), static_cast<size_t>(size), MREMAP_MAYMOVE);
  } else {
    moved = block;  // whole: the buffer will likely grow as far as the last one did
  }
  if (moved == MAP_FAILED) {
    if (block != nullptr) munmap(block, static_cast<size_t>(mapping.size));
    return arrow::Status::OutOfMemory("cannot map ", size, " bytes: ", std::strerror(errno));
  }
  if (moved != block) mapping.size = size;
  std::memcpy(moved, *ptr, static_cast<size_t>(old_size));
  Free(*ptr, old_size, alignment);
  *ptr = static_cast<uint8_t*>(moved);
  std::lock_guard<std::mutex> lock(mutex_);
  mapped_.emplace(*ptr, mapping);
  in_use_ += new_size;
  total_ += new_size;
  ++allocations_;
  copied_.fetch_add(old_size, std::memory_order_relaxed);
  return arrow::Status::OK();
}

void RecyclingPool::Free(uint8_t* buffer, int64_t size, int64_t alignment) {
  int64_t size_class = SizeClass(size);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    in_use_ -= size;
    if (auto it = mapped_.find(buffer); it != mapped_.end()) {
      const Mapping mapping = it->second;
      mapped_.erase(it);
      if (cached_ + mapping.size <= budget_ / kBudgetShare) {
        grown_[mapping.origin].emplace_back(buffer, mapping);
        cached_ += mapping.size;
        return;
      }
      lock.unlock();
      munmap(buffer, static_cast<size_t>(mapping.size));
      return;
    }
    if (!Kept(size, alignment)) {
      lock.unlock();
      base_->Free(buffer, size, alignment);
      return;
    }
    if (auto it = shrunk_.find(buffer); it != shrunk_.end()) {
      size_class = it->second;
      shrunk_.erase(it);
    }
    if (cached_ + size_class <= budget_ / kBudgetShare) {
      free_[size_class].push_back(buffer);
      cached_ += size_class;
      return;
    }
  }
  base_->Free(buffer, size_class, kAlignment);
}

void RecyclingPool::TrimLocked(int64_t limit) {
  for (auto it = grown_.begin(); it != grown_.end() && cached_ > limit;) {
    while (!it->second.empty() && cached_ > limit) {
      munmap(it->second.back().first, static_cast<size_t>(it->second.back().second.size));
      cached_ -= it->second.back().second.size;
      it->second.pop_back();
    }
    it = it->second.empty() ? grown_.erase(it) : std::next(it);
  }
  for (auto it = free_.begin(); it != free_.end() && cached_ > limit;) {
    while (!it->second.empty() && cached_ > limit) {
      base_->Free(it->second.back(), it->first, kAlignment);
      it->second.pop_back();
      cached_ -= it->first;
    }
    it = it->second.empty() ? free_.erase(it) : std::next(it);
  }
}

void RecyclingPool::ReleaseUnused() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TrimLocked(0);
  }
  base_->ReleaseUnused();
}

int64_t RecyclingPool::bytes_allocated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

int64_t RecyclingPool::total_bytes_allocated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return total_;
}

int64_t RecyclingPool::num_allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocations_;
}

std::string RecyclingPool::backend_name() const {
  return "recycling(" + base_->backend_name() + ")";
}

int64_t RecyclingPool::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

int64_t RecyclingPool::reused() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reused_;
}

int64_t RecyclingPool::copied_bytes() const { return copied_.load(std::memory_order_relaxed); }

}  // namespace stoker
