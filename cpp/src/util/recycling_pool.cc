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
// Kept blocks may fill what the budget's decoded data leaves unused, and at least
// budget / kBudgetShare (where decoding uses it all, or more).
constexpr int kBudgetShare = 4;
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

bool Keepable(int64_t size, int64_t alignment) {
  return size >= kMinKept && alignment <= kAlignment;
}

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
  std::vector<Kept> released;
  {
    std::lock_guard<std::mutex> lock(pool->mutex_);
    pool->budget_ -= bytes_;
    // The last loader gone, a quarter of its budget stays kept for the next one (a reader opened
    // per epoch, as Petastorm's examples do, would otherwise fault in fresh pages every epoch);
    // nothing more is kept until a loader opens, and ReleaseUnused() frees them.
    released = pool->EvictLocked(pool->budget_ > 0 ? pool->LimitLocked() : bytes_ / kBudgetShare);
  }
  for (const Kept& kept : released) pool->Release(kept);
}

int64_t RecyclingPool::LimitLocked() const {
  return std::max(budget_ / kBudgetShare, budget_ - in_use_);
}

arrow::Status RecyclingPool::Allocate(int64_t size, int64_t alignment, uint8_t** out) {
  if (!Keepable(size, alignment)) {
    ARROW_RETURN_NOT_OK(base_->Allocate(size, alignment, out));
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ += size;
    total_ += size;
    ++allocations_;
    return arrow::Status::OK();
  }
  const int64_t size_class = SizeClass(size);
  std::vector<Kept> released;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ += size;
    total_ += size;
    ++allocations_;
    Kept kept;
    if (TakeLocked(&free_, size_class, &kept)) {
      *out = kept.ptr;
      ++reused_;
      return arrow::Status::OK();
    }
    // Fresh memory: what is kept shrinks as the data in use grows (with no loader open, what
    // the last one left stays for the next).
    if (budget_ > 0) released = EvictLocked(LimitLocked());
  }
  for (const Kept& kept : released) Release(kept);
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
  const bool kept_old = Keepable(old_size, alignment), kept_new = Keepable(new_size, alignment);
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
    // Out of the table while the syscall runs unlocked (the buffer's owner is the only one to
    // resize or free it): a moving mremap frees the old address, which another thread's mmap
    // may get before this one relocks. Erasing the old entry only then dropped that thread's
    // record of its new mapping, which was later freed as a malloc block (free() crashed).
    mapped_.erase(it);
  }
  const int64_t size = MappedSize(new_size);
  void* moved = mremap(*ptr, static_cast<size_t>(mapping.size), static_cast<size_t>(size),
                       size > mapping.size ? MREMAP_MAYMOVE : 0);
  const int error = errno;
  std::lock_guard<std::mutex> lock(mutex_);
  if (moved == MAP_FAILED) {
    mapped_.emplace(*ptr, mapping);  // still mapped where it was
    *status = arrow::Status::OutOfMemory("mremap of ", mapping.size, " to ", size,
                                         " bytes failed: ", std::strerror(error));
    return true;
  }
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
    Kept kept;
    if (TakeLocked(&grown_, mapping.origin, &kept)) {
      block = kept.ptr;
      mapping.size = kept.bytes;
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
  // A fresh mapping, or the kept one grown (mremap may grow it in place: then `moved == block`,
  // and the mapping is `size` bytes all the same). Recording the kept size there lost data: the
  // buffer's next growth moved only that many bytes (the many-outputs set's int64 columns read
  // zeros from row 26,624 of some row groups).
  if (block == nullptr || mapping.size < size) mapping.size = size;
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
  std::vector<Kept> released;
  bool to_base = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ -= size;
    const int64_t limit = LimitLocked();
    if (auto it = mapped_.find(buffer); it != mapped_.end()) {
      const Mapping mapping = it->second;
      mapped_.erase(it);
      released = KeepLocked({buffer, mapping.size, mapping.origin, true}, limit);
    } else if (Keepable(size, alignment)) {
      int64_t size_class = SizeClass(size);
      if (auto it = shrunk_.find(buffer); it != shrunk_.end()) {
        size_class = it->second;
        shrunk_.erase(it);
      }
      released = KeepLocked({buffer, size_class, size_class, false}, limit);
    } else {
      to_base = true;
    }
  }
  if (to_base) base_->Free(buffer, size, alignment);
  for (const Kept& kept : released) Release(kept);
}

std::vector<RecyclingPool::Kept> RecyclingPool::KeepLocked(const Kept& kept, int64_t limit) {
  if (kept.bytes > limit) return {kept};
  std::vector<Kept> released = EvictLocked(limit - kept.bytes);
  kept_.push_back(kept);
  (kept.mapping ? grown_ : free_)[kept.key].push_back(std::prev(kept_.end()));
  cached_ += kept.bytes;
  return released;
}

bool RecyclingPool::TakeLocked(ByKey* by_key, int64_t key, Kept* out) {
  auto it = by_key->find(key);
  if (it == by_key->end()) return false;
  *out = *it->second.back();
  kept_.erase(it->second.back());
  it->second.pop_back();
  if (it->second.empty()) by_key->erase(it);
  cached_ -= out->bytes;
  return true;
}

void RecyclingPool::Release(const Kept& kept) {
  if (kept.mapping) {
    munmap(kept.ptr, static_cast<size_t>(kept.bytes));
  } else {
    base_->Free(kept.ptr, kept.key, kAlignment);
  }
}

std::vector<RecyclingPool::Kept> RecyclingPool::EvictLocked(int64_t limit) {
  std::vector<Kept> released;
  while (cached_ > limit) {
    const Kept oldest = kept_.front();
    // The oldest entry is also the oldest of its key: the front of that key's queue.
    ByKey& by_key = oldest.mapping ? grown_ : free_;
    auto it = by_key.find(oldest.key);
    it->second.pop_front();
    if (it->second.empty()) by_key.erase(it);
    kept_.pop_front();
    cached_ -= oldest.bytes;
    released.push_back(oldest);
  }
  return released;
}

void RecyclingPool::ReleaseUnused() {
  std::vector<Kept> released;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    released = EvictLocked(0);
  }
  for (const Kept& kept : released) Release(kept);
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
