#include "io/block_cache.h"

#include <arrow/buffer.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>

namespace stoker {
namespace {

constexpr const char* kNamespace = "blocks";

// A buffer viewing part of a cache entry; keeps the entry's mapping alive.
class EntrySlice : public arrow::Buffer {
 public:
  EntrySlice(std::shared_ptr<CacheEntry> entry, int64_t offset, int64_t size)
      : arrow::Buffer(entry->data() + offset, size), entry_(std::move(entry)) {}

 private:
  std::shared_ptr<CacheEntry> entry_;
};

class BlockCachedFile : public arrow::io::RandomAccessFile {
 public:
  BlockCachedFile(std::shared_ptr<arrow::io::RandomAccessFile> base,
                  std::shared_ptr<DiskCache> cache, std::string identity, int64_t size,
                  std::shared_ptr<VersionCheck> version_check, int64_t block_bytes,
                  bool exact_ranges)
      : base_(std::move(base)),
        cache_(std::move(cache)),
        identity_(std::move(identity)),
        size_(size),
        version_check_(std::move(version_check)),
        block_bytes_(block_bytes),
        exact_ranges_(exact_ranges) {}

  Status Close() override {
    closed_ = true;
    return base_->Close();
  }
  bool closed() const override { return closed_; }
  Result<int64_t> Tell() const override {
    std::lock_guard<std::mutex> lock(position_mutex_);
    return position_;
  }
  Result<int64_t> GetSize() override { return size_; }
  Status Seek(int64_t position) override {
    std::lock_guard<std::mutex> lock(position_mutex_);
    position_ = position;
    return Status::OK();
  }
  Result<int64_t> Read(int64_t nbytes, void* out) override {
    std::lock_guard<std::mutex> lock(position_mutex_);
    ARROW_ASSIGN_OR_RAISE(const int64_t n, ReadAt(position_, nbytes, out));
    position_ += n;
    return n;
  }
  Result<std::shared_ptr<arrow::Buffer>> Read(int64_t nbytes) override {
    std::lock_guard<std::mutex> lock(position_mutex_);
    ARROW_ASSIGN_OR_RAISE(auto buffer, ReadAt(position_, nbytes));
    position_ += buffer->size();
    return buffer;
  }

  Result<int64_t> ReadAt(int64_t position, int64_t nbytes, void* out) override {
    nbytes = Clamp(position, nbytes);
    auto* dest = static_cast<uint8_t*>(out);
    if (ExactRange(position, nbytes)) {
      ARROW_ASSIGN_OR_RAISE(auto view, RangeView(position, nbytes));
      std::memcpy(dest, view->data(), nbytes);
      return nbytes;
    }
    int64_t done = 0;
    while (done < nbytes) {
      const int64_t at = position + done;
      const int64_t block = at / block_bytes_;
      ARROW_ASSIGN_OR_RAISE(auto entry, Block(block));
      const int64_t offset = at - block * block_bytes_;
      const int64_t take = std::min(nbytes - done, entry->size() - offset);
      if (take <= 0) return Status::IOError("cached block shorter than expected");
      std::memcpy(dest + done, entry->data() + offset, take);
      done += take;
    }
    return done;
  }

  Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position, int64_t nbytes) override {
    nbytes = Clamp(position, nbytes);
    if (ExactRange(position, nbytes)) return RangeView(position, nbytes);
    const int64_t first = position / block_bytes_;
    if (nbytes > 0 && (position + nbytes - 1) / block_bytes_ == first) {
      // Inside one block: a zero-copy view of the cached block.
      ARROW_ASSIGN_OR_RAISE(auto entry, Block(first));
      const int64_t offset = position - first * block_bytes_;
      if (offset + nbytes > entry->size()) {
        return Status::IOError("cached block shorter than expected");
      }
      return std::make_shared<EntrySlice>(std::move(entry), offset, nbytes);
    }
    ARROW_ASSIGN_OR_RAISE(auto buffer, arrow::AllocateResizableBuffer(nbytes));
    ARROW_ASSIGN_OR_RAISE(const int64_t n, ReadAt(position, nbytes, buffer->mutable_data()));
    ARROW_RETURN_NOT_OK(buffer->Resize(n));
    return std::shared_ptr<arrow::Buffer>(std::move(buffer));
  }

 private:
  int64_t Clamp(int64_t position, int64_t nbytes) const {
    if (position >= size_) return 0;
    return std::max<int64_t>(0, std::min(nbytes, size_ - position));
  }

  // Whether [position, position + nbytes) is cached as an exact range: with exact_ranges_, when
  // it is under a quarter of the blocks it touches (a whole small file stays one block, not a
  // block and a range of the same bytes).
  bool ExactRange(int64_t position, int64_t nbytes) const {
    if (!exact_ranges_ || nbytes <= 0) return false;
    const int64_t begin = position / block_bytes_ * block_bytes_;
    const int64_t end =
        std::min(size_, ((position + nbytes - 1) / block_bytes_ + 1) * block_bytes_);
    return 4 * nbytes < end - begin;
  }

  // An exact read as an entry of its own: a footer is read at the same offsets by every
  // process, and its file's last blocks need not come with it.
  Result<std::shared_ptr<arrow::Buffer>> RangeView(int64_t position, int64_t nbytes) {
    const std::string key = "stoker-ranges-v1\n" + identity_ + '\n' + std::to_string(position) +
                            '\n' + std::to_string(nbytes);
    ARROW_ASSIGN_OR_RAISE(auto entry, Fill(key, position, nbytes));
    if (entry->size() != nbytes) return Status::IOError("cached range shorter than expected");
    return std::make_shared<EntrySlice>(std::move(entry), 0, nbytes);
  }

  Result<std::shared_ptr<CacheEntry>> Block(int64_t index) {
    const std::string key = "stoker-blocks-v1\n" + identity_ + '\n' + std::to_string(block_bytes_) +
                            '\n' + std::to_string(index);
    const int64_t begin = index * block_bytes_;
    return Fill(key, begin, std::min(block_bytes_, size_ - begin));
  }

  // The entry `key`, or on a miss [begin, begin + length) of the base file, stored under `key`.
  Result<std::shared_ptr<CacheEntry>> Fill(const std::string& key, int64_t begin, int64_t length) {
    return cache_->GetOrFill(
        kNamespace, key, [&](DiskCache::Parts* parts, std::shared_ptr<void>* keep_alive) {
          ARROW_ASSIGN_OR_RAISE(auto data, base_->ReadAt(begin, length));
          if (data->size() != length) {
            return Status::IOError("short read of ", length, " bytes at offset ", begin);
          }
          // Stored under this identity only if the object still had it after the read.
          if (version_check_) {
            ARROW_RETURN_NOT_OK(version_check_->ConfirmAfter(std::chrono::steady_clock::now()));
          }
          parts->emplace_back(data->data(), static_cast<size_t>(data->size()));
          *keep_alive = data;
          return Status::OK();
        });
  }

  std::shared_ptr<arrow::io::RandomAccessFile> base_;
  std::shared_ptr<DiskCache> cache_;
  std::string identity_;
  int64_t size_;
  std::shared_ptr<VersionCheck> version_check_;
  int64_t block_bytes_;
  bool exact_ranges_;
  bool closed_ = false;
  mutable std::mutex position_mutex_;
  int64_t position_ = 0;  // GUARDED_BY(position_mutex_)
};

}  // namespace

Status VersionCheck::ConfirmAfter(Clock::time_point read_end) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (running_) {
    // A check under way that started after the read answers for it; another one does not.
    const bool covers = running_start_ >= read_end;
    const uint64_t round = rounds_;
    done_cv_.wait(lock, [&] { return rounds_ != round; });
    if (covers) return last_status_;
  }
  if (passed_any_ && passed_start_ >= read_end) return Status::OK();
  running_ = true;
  const Clock::time_point start = Clock::now();
  running_start_ = start;
  lock.unlock();
  Status status = check_();
  lock.lock();
  running_ = false;
  ++rounds_;
  last_status_ = status;
  if (status.ok() && (!passed_any_ || start > passed_start_)) {
    passed_any_ = true;
    passed_start_ = start;
  }
  lock.unlock();
  done_cv_.notify_all();
  return status;
}

std::shared_ptr<arrow::io::RandomAccessFile> MakeBlockCachedFile(
    std::shared_ptr<arrow::io::RandomAccessFile> base, std::shared_ptr<DiskCache> cache,
    std::string identity, int64_t size, std::shared_ptr<VersionCheck> version_check,
    int64_t block_bytes, bool exact_ranges) {
  return std::make_shared<BlockCachedFile>(std::move(base), std::move(cache), std::move(identity),
                                           size, std::move(version_check), block_bytes,
                                           exact_ranges);
}

}  // namespace stoker
