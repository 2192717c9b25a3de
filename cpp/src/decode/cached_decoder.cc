#include "decode/cached_decoder.h"

#include <arrow/buffer.h>
#include <arrow/util/byte_size.h>
#include <parquet/exception.h>
#include <parquet/metadata.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "decode/tensor_entry.h"
#include "io/filesystem.h"
#include "io/prefetched_file.h"
#include "util/hash.h"

namespace stoker {
namespace {

constexpr const char* kNamespace = "tensors";
// v2: feature groups stored in their final layout (FeatureBlock arrays), keyed by the block plan.
constexpr const char* kFormat = "stoker-tensors-v2";

// An Arrow buffer over a cache entry's mapping; keeps the mapping alive.
class EntryBuffer : public arrow::Buffer {
 public:
  explicit EntryBuffer(std::shared_ptr<CacheEntry> entry)
      : arrow::Buffer(entry->data(), entry->size()), entry_(std::move(entry)) {}

 private:
  std::shared_ptr<CacheEntry> entry_;
};
// Nice value of the write-behind thread (the workers run at 0): under contention it gets about a
// tenth of a core's share, so a saturated epoch loses little to the page-cache copy and skips what
// the writer cannot keep up with; with idle CPU (an accelerator step) it runs at full speed.
constexpr int kWriterNice = 10;
// Queued entries each hold their key's lock (a descriptor): a bound besides the bytes, for many
// tiny row groups.
constexpr size_t kMaxQueued = 256;

// CachedDecoder::SetWriteDelayForTesting: read by each writer when it is made.
std::atomic<int64_t> write_delay_ms_for_testing{0};

// ---- Entries keyed on content (files without a trusted identity, docs/cache.md) -------------

// The byte ranges of one row group's column chunks that the Parquet reader reads for `fields`
// (as parquet/file_reader.cc's ComputeColumnChunkRange computes them, padding included).
std::vector<arrow::io::ReadRange> ChunkRanges(const CatalogFile& file, int row_group,
                                              const std::vector<std::string>& fields) {
  std::set<int> leaves;
  for (const auto& field : fields) {
    auto it = file.fields.find(field);
    if (it != file.fields.end()) leaves.insert(it->second.leaves.begin(), it->second.leaves.end());
  }
  auto group = file.metadata->RowGroup(row_group);
  // PARQUET-816: old parquet-mr left the dictionary page header out of the chunk's size.
  const bool padded = file.metadata->writer_version().VersionLt(
      parquet::ApplicationVersion::PARQUET_816_FIXED_VERSION());
  constexpr int64_t kMaxDictHeaderSize = 100;
  std::vector<arrow::io::ReadRange> ranges;
  for (const int leaf : leaves) {
    auto chunk = group->ColumnChunk(leaf);
    int64_t start = chunk->data_page_offset();
    if (chunk->has_dictionary_page() && chunk->dictionary_page_offset() > 0 &&
        chunk->dictionary_page_offset() < start) {
      start = chunk->dictionary_page_offset();
    }
    int64_t length = chunk->total_compressed_size();
    if (padded) length += std::clamp<int64_t>(file.size - start - length, 0, kMaxDictHeaderSize);
    ranges.push_back({start, length});
  }
  return ranges;
}

// A file whose reads inside the snapshotted ranges return the bytes read (and hashed) once;
// other reads go to the base file. Decoding from it stores exactly the bytes the key names.
class ChunkSnapshot : public arrow::io::RandomAccessFile {
 public:
  // Reads `ranges` of `base`; `*digest` is the XXH64 of their offsets, lengths and bytes.
  static Result<std::shared_ptr<ChunkSnapshot>> Read(
      std::shared_ptr<arrow::io::RandomAccessFile> base,
      const std::vector<arrow::io::ReadRange>& ranges, uint64_t* digest) {
    auto snapshot = std::make_shared<ChunkSnapshot>(std::move(base));
    XXH64_state_t* state = XXH64_createState();
    if (state == nullptr) return Status::OutOfMemory("XXH64 state");
    XXH64_reset(state, 0);
    Status status;
    for (const auto& range : ranges) {
      auto read = snapshot->base_->ReadAt(range.offset, range.length);
      if (!read.ok()) {
        status = read.status();
        break;
      }
      const int64_t header[2] = {range.offset, (*read)->size()};
      XXH64_update(state, header, sizeof(header));
      XXH64_update(state, (*read)->data(), static_cast<size_t>((*read)->size()));
      snapshot->pieces_.emplace_back(range.offset, std::move(*read));
    }
    *digest = XXH64_digest(state);
    XXH64_freeState(state);
    STOKER_RETURN_NOT_OK(status);
    return snapshot;
  }

  explicit ChunkSnapshot(std::shared_ptr<arrow::io::RandomAccessFile> base)
      : base_(std::move(base)) {}

  Status Close() override { return base_->Close(); }
  bool closed() const override { return base_->closed(); }
  Result<int64_t> Tell() const override { return position_; }
  Status Seek(int64_t position) override {
    position_ = position;
    return Status::OK();
  }
  Result<int64_t> GetSize() override { return base_->GetSize(); }
  Result<int64_t> Read(int64_t nbytes, void* out) override {
    ARROW_ASSIGN_OR_RAISE(const int64_t n, ReadAt(position_, nbytes, out));
    position_ += n;
    return n;
  }
  Result<std::shared_ptr<arrow::Buffer>> Read(int64_t nbytes) override {
    ARROW_ASSIGN_OR_RAISE(auto buffer, ReadAt(position_, nbytes));
    position_ += buffer->size();
    return buffer;
  }
  Result<int64_t> ReadAt(int64_t position, int64_t nbytes, void* out) override {
    if (auto piece = Find(position, nbytes)) {
      std::memcpy(out, piece->data(), static_cast<size_t>(piece->size()));
      return piece->size();
    }
    return base_->ReadAt(position, nbytes, out);
  }
  Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position, int64_t nbytes) override {
    if (auto piece = Find(position, nbytes)) return piece;
    return base_->ReadAt(position, nbytes);
  }

 private:
  std::shared_ptr<arrow::Buffer> Find(int64_t position, int64_t nbytes) const {
    for (const auto& [offset, buffer] : pieces_) {
      if (position >= offset && position + nbytes <= offset + buffer->size()) {
        return arrow::SliceBuffer(buffer, position - offset, nbytes);
      }
    }
    return nullptr;
  }

  std::shared_ptr<arrow::io::RandomAccessFile> base_;
  std::vector<std::pair<int64_t, std::shared_ptr<arrow::Buffer>>> pieces_;
  int64_t position_ = 0;
};

// Ok while `input`'s footer is the one the catalog read: chunks found at the catalog's offsets
// then belong to the columns the loader expects. kStorage naming the file otherwise.
Status CheckFooter(const CatalogFile& file, arrow::io::RandomAccessFile* input) {
  auto changed = [&](const std::string& why) {
    return MakeError(ErrorKind::kStorage, "'" + file.display_path +
                                              "' changed since the loader opened it (" + why +
                                              "); open a new Loader to read its new contents");
  };
  ARROW_ASSIGN_OR_RAISE(const int64_t size, input->GetSize());
  if (size != file.size) {
    return changed("its size is now " + std::to_string(size) + " bytes, not " +
                   std::to_string(file.size));
  }
  if (size < 12) return changed("too short for a Parquet file");
  ARROW_ASSIGN_OR_RAISE(auto tail, input->ReadAt(size - 8, 8));
  if (tail->size() != 8 || std::memcmp(tail->data() + 4, "PAR1", 4) != 0) {
    return changed("its footer is not a plain Parquet footer any more");
  }
  uint32_t footer_bytes = 0;
  std::memcpy(&footer_bytes, tail->data(), 4);  // little-endian, as Parquet
  if (footer_bytes > size - 8) return changed("its footer length is out of range");
  ARROW_ASSIGN_OR_RAISE(auto footer, input->ReadAt(size - 8 - footer_bytes, footer_bytes));
  try {
    auto metadata = parquet::FileMetaData::Make(footer->data(), static_cast<int64_t>(footer_bytes));
    if (!metadata->Equals(*file.metadata)) return changed("its footer differs");
  } catch (const parquet::ParquetException& e) {
    return changed(std::string("its footer cannot be read: ") + e.what());
  }
  return Status::OK();
}

}  // namespace

// The write-behind writer: one thread, started on the first entry, and a queue bounded in bytes.
class CachedDecoder::Writer {
 public:
  Writer(std::shared_ptr<DiskCache> cache, int64_t budget)
      : cache_(std::move(cache)), budget_(budget), delay_ms_(write_delay_ms_for_testing.load()) {}

  ~Writer() {
    if (thread_ && getpid() != pid_) {
      // A forked child: the thread and any lock on mutex_ belong to the parent. Leak.
      (void)thread_.release();
      (void)new std::deque<std::shared_ptr<Job>>(std::move(queue_));
      return;
    }
    Close();
  }

  // The arrays of an entry still queued or being written, or null.
  std::shared_ptr<const NamedArrays> Pending(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pending_.find(key);
    if (it == pending_.end()) return nullptr;
    ++pending_hits_;
    return std::shared_ptr<const NamedArrays>(it->second, &it->second->arrays);
  }

  // Queues the entry (`arrays`, of `rows` rows, in their stored layout), or drops it (releasing
  // `key_lock`) when the queue is full or closed.
  void Submit(const std::string& key, NamedArrays arrays, int64_t rows,
              std::unique_ptr<DiskCache::KeyLock> key_lock) {
    auto job = std::make_shared<Job>();
    job->key = key;
    job->arrays = std::move(arrays);
    job->rows = rows;
    for (const auto& [name, array] : job->arrays) {
      job->bytes += arrow::util::TotalBufferSize(*array->data());
    }
    job->lock = std::move(key_lock);
    std::unique_lock<std::mutex> lock(mutex_);
    if (closed_ || (queued_bytes_ > 0 && queued_bytes_ + job->bytes > budget_) ||
        queue_.size() >= kMaxQueued) {
      ++skipped_;
      lock.unlock();
      return;  // `job` releases the key's lock: another filler may store it
    }
    queued_bytes_ += job->bytes;
    peak_bytes_ = std::max(peak_bytes_, queued_bytes_);
    pending_[key] = job;
    queue_.push_back(std::move(job));
    if (!thread_) {
      pid_ = getpid();
      thread_ = std::make_unique<std::thread>([this] { Run(); });
    }
    lock.unlock();
    work_cv_.notify_one();
  }

  // Waits for the queue to drain, writing entries on the calling thread too: at the end of an
  // epoch the workers are done, and the writer thread alone runs at a low priority.
  // While it runs, entries are written even when the disk is behind: a flush is asked for to have
  // them on disk now.
  void Flush() {
    std::unique_lock<std::mutex> lock(mutex_);
    ++flushing_;
    while (!closed_) {
      if (!queue_.empty()) {
        WriteOne(&lock);
      } else if (writing_ == 0) {
        break;
      } else {
        idle_cv_.wait(lock);
      }
    }
    --flushing_;
  }

  void Close() {
    std::deque<std::shared_ptr<Job>> dropped;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
      for (const auto& job : queue_) {
        pending_.erase(job->key);
        queued_bytes_ -= job->bytes;
        ++skipped_;
      }
      dropped.swap(queue_);
    }
    dropped.clear();  // releases their key locks
    work_cv_.notify_all();
    idle_cv_.notify_all();
    std::lock_guard<std::mutex> join_lock(join_mutex_);
    if (thread_ && thread_->joinable()) thread_->join();
  }

  void AddStats(CacheStats* stats) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats->hits += pending_hits_;
    stats->write_skipped += skipped_;
  }

 private:
  struct Job {
    std::string key;
    NamedArrays arrays;  // as decoded (Pending() hands them out)
    int64_t rows = 0;
    std::unique_ptr<DiskCache::KeyLock> lock;  // held until the entry is visible
    int64_t bytes = 0;
  };

  void Run() {
    // The writer runs on whatever CPU the workers leave (a low priority, per thread on Linux):
    // when decoding saturates the cores, the queue fills and entries are skipped instead of the
    // copy into the page cache slowing the epoch. It still gets a share, so it never starves.
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kWriterNice);
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      work_cv_.wait(lock, [&] { return closed_ || !queue_.empty(); });
      if (closed_) return;  // Close() dropped what was queued
      WriteOne(&lock);
    }
  }

  // Takes the queue's first entry and writes it; `lock` (on mutex_) is held on entry and exit.
  void WriteOne(std::unique_lock<std::mutex>* lock) {
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    ++writing_;
    bool write = true;
    if (delay_ms_ > 0) {
      write =
          !work_cv_.wait_for(*lock, std::chrono::milliseconds(delay_ms_), [&] { return closed_; });
    }
    const auto when_behind =
        flushing_ > 0 ? DiskCache::WhenDiskBehind::kWrite : DiskCache::WhenDiskBehind::kSkip;
    lock->unlock();
    // A failed write (kStorage) only costs the entry: the batch already has its rows. While the
    // disk is behind, the cache skips the entry (counting it in write_skipped) rather than let the
    // kernel put this thread to sleep in write(); a later epoch stores it.
    bool written = false;
    if (write) {
      auto payload = Serialize(job->arrays, job->rows);
      written =
          payload.ok() && cache_->Put(kNamespace, job->key, (*payload)->parts(), when_behind).ok();
    }
    job->lock.reset();  // after the entry is visible: waiters now read it
    lock->lock();
    if (!written) ++skipped_;
    pending_.erase(job->key);
    queued_bytes_ -= job->bytes;
    --writing_;
    lock->unlock();
    job.reset();  // frees the arrays outside the lock
    idle_cv_.notify_all();
    lock->lock();
  }

  const std::shared_ptr<DiskCache> cache_;
  const int64_t budget_;
  const int64_t delay_ms_;
  std::mutex mutex_;
  std::condition_variable work_cv_;         // the writer: a job, or closed
  std::condition_variable idle_cv_;         // Flush(): queue empty and nothing being written
  std::deque<std::shared_ptr<Job>> queue_;  // GUARDED_BY(mutex_)
  std::unordered_map<std::string, std::shared_ptr<Job>> pending_;  // GUARDED_BY(mutex_)
  int64_t queued_bytes_ = 0;                                       // GUARDED_BY(mutex_)
  int64_t peak_bytes_ = 0;                                         // GUARDED_BY(mutex_)
  int64_t skipped_ = 0;                                            // GUARDED_BY(mutex_)
  int64_t pending_hits_ = 0;                                       // GUARDED_BY(mutex_)
  int writing_ = 0;      // GUARDED_BY(mutex_) entries being written (writer thread, Flush())
  int flushing_ = 0;     // GUARDED_BY(mutex_) Flush() calls running
  bool closed_ = false;  // GUARDED_BY(mutex_)
  std::mutex join_mutex_;
  std::unique_ptr<std::thread> thread_;  // GUARDED_BY(mutex_) once started
  pid_t pid_ = 0;
};

CachedDecoder::CachedDecoder(std::shared_ptr<DiskCache> cache,
                             std::shared_ptr<const Decoder> decoder, int64_t write_buffer_bytes,
                             bool packed_runs)
    : packed_runs_(packed_runs),
      cache_(std::move(cache)),
      writer_(std::make_unique<Writer>(cache_, write_buffer_bytes)),
      decoder_(std::move(decoder)),
      catalog_(decoder_->catalog()),
      spec_(decoder_->spec()) {
  for (const auto& file : catalog_->files()) {
    Fnv1a footer;
    footer.Add(file.metadata->SerializeToString());
    const std::string footer_hash = std::to_string(footer.digest());
    file_identity_.push_back(file.display_path + '\n' + file.identity + '\n' + footer_hash);
    content_identity_.push_back("content\n" + file.display_path + '\n' + std::to_string(file.size) +
                                '\n' + footer_hash);
  }
  changed_ = std::make_unique<std::atomic<bool>[]>(catalog_->files().size());
}

CachedDecoder::~CachedDecoder() = default;

void CachedDecoder::SetWriteDelayForTesting(int64_t delay_ms) {
  write_delay_ms_for_testing.store(std::max<int64_t>(0, delay_ms));
}

bool CachedDecoder::HoldsEntries() const {
  std::error_code error;
  const std::filesystem::path folder = std::filesystem::path(cache_->options().dir) / kNamespace;
  return std::filesystem::exists(folder, error) && !std::filesystem::is_empty(folder, error);
}

bool CachedDecoder::DecodesHeadAlone() const { return spec_->user_transform == nullptr; }

void CachedDecoder::Flush() const { writer_->Flush(); }
void CachedDecoder::Close() const { writer_->Close(); }
void CachedDecoder::AddStats(CacheStats* stats) const {
  writer_->AddStats(stats);
  stats->content_checks += content_checks_.load(std::memory_order_relaxed);
}

std::string CachedDecoder::Key(const RowGroupRef& rg,
                               const std::vector<std::string>& fields) const {
  return KeyWith(file_identity_[rg.file], rg, fields);
}

std::string CachedDecoder::KeyWith(const std::string& identity, const RowGroupRef& rg,
                                   const std::vector<std::string>& fields) {
  std::string key = kFormat;
  key += '\n' + identity + '\n' + std::to_string(rg.row_group);
  for (const auto& field : fields) key += '\n' + field;
  return key;
}

Result<DecodedColumns> CachedDecoder::Decode(const Plan& plan, const DecodeTask& task,
                                             bool* hit) const {
  const Decoder& decoder = *decoder_;
  *hit = false;
  if (task.fields.empty()) return decoder.Decode(plan, task);
  const Segment& segment = plan.segments[task.segment];
  const RowGroupRef& rg = catalog_->row_groups()[segment.row_group];

  // The whole row group is cached, then sliced to the segment.
  auto decode_whole = [&] {
    return decoder.DecodeRows(segment.row_group, task.fields, 0, rg.num_rows);
  };

  // A transformed field is cached under its name and the fingerprint of the ops applied; with a
  // user transform, the entry holds its outputs, keyed also by its fingerprint and inputs.
  const std::vector<std::string> stored = decoder.DecodedNames(task.fields);
  std::vector<std::string> names;
  if (std::string prefix = decoder.CachePrefix(); !prefix.empty()) names.push_back(prefix);
  for (const auto& field : stored) names.push_back(decoder.CacheName(field));
  // A column converted to the dataset's unified type: keyed by that type too.
  for (const auto& field : task.fields) {
    if (std::string as = catalog_->ReadAs(rg.file, field); !as.empty()) {
      names.push_back(field + "|read as " + as);
    }
  }
  // Feature groups are stored in their final layout; the plan of blocks is part of the key.
  const std::shared_ptr<const std::vector<FeatureBlockPlan>> block_plans =
      decoder.BlockPlans(task.fields, packed_runs_);
  const std::vector<FeatureBlockPlan>& plans = *block_plans;
  if (std::string layout = BlocksLayout(plans); !layout.empty()) names.push_back(std::move(layout));
  const CatalogFile& file = catalog_->files()[rg.file];
  const bool local = !IsRemote(*file.fs);
  // Local files are stat()ed before an entry keyed on their identity is used: a loader opened
  // before the file was rewritten goes on by content from then on (remote blocks are confirmed
  // when read instead, io/block_cache.h).
  auto still_unchanged = [&] {
    if (!local || file.CheckUnchanged().ok()) return true;
    changed_[rg.file].store(true, std::memory_order_relaxed);
    return false;
  };
  // Blocks are built on the worker, as stored: its batches would transpose the features anyway,
  // and a packed run's rows cost a shuffled batch a few cache lines each instead of one miss per
  // column (packing on the writer's low priority left the filling epoch's batches the columns'
  // gathers: the many set's PackedWriter fell back to them, a third of a shuffled epoch's CPU).
  auto decode = [&]() -> Result<NamedArrays> {
    STOKER_ASSIGN_OR_RAISE(auto decoded, decode_whole());
    NamedArrays decoded_arrays = std::move(decoded.arrays);
    STOKER_RETURN_NOT_OK(BuildBlocks(plans, rg.num_rows, &decoded_arrays));
    return decoded_arrays;
  };
  // The epoch's head (its first batch's rows) waits for no whole row group: on a miss only its
  // rows are decoded (head_miss), and nothing is stored; the next segment, the rest of the same
  // row group, stores the entry. Decoding the whole row group first held the "many" set's
  // filling epoch's first batch ~4x longer than a cold epoch's.
  const bool head_alone = segment.head && DecodesHeadAlone();
  bool head_miss = false;
  // The entry under `key`, from this process's queue or the disk, else decoded. On a miss
  // `check` runs before decoding and again before storing: false gives up (nullopt), an error
  // is returned.
  auto serve =
      [&](const std::string& key, bool* counted_hit,
          const std::function<Result<bool>()>& check) -> Result<std::optional<NamedArrays>> {
    if (auto pending = writer_->Pending(key)) {
      // Decoded by this process and still on its way to the disk.
      *counted_hit = true;
      return *pending;
    }
    std::unique_ptr<DiskCache::KeyLock> key_lock;
    STOKER_ASSIGN_OR_RAISE(auto entry, head_alone ? cache_->Peek(kNamespace, key)
                                                  : cache_->GetOrLock(kNamespace, key, &key_lock));
    if (!entry && head_alone) {
      head_miss = true;
      return std::nullopt;
    }
    if (entry) {
      auto cached = Deserialize(std::make_shared<EntryBuffer>(std::move(entry)));
      if (cached.ok() && EntryMatches(*cached, stored, plans, rg.num_rows)) {
        *counted_hit = true;
        return std::move(*cached);
      }
      // Verified bytes that do not parse (another build's layout): decode instead.
      return decode();
    }
    // A miss, with the key's lock held: decode, then let the writer store it behind us.
    STOKER_ASSIGN_OR_RAISE(bool usable, check());
    if (!usable) return std::nullopt;  // releases the key's lock
    STOKER_ASSIGN_OR_RAISE(NamedArrays decoded, decode());
    STOKER_ASSIGN_OR_RAISE(usable, check());
    if (!usable) return std::nullopt;
    writer_->Submit(key, decoded, rg.num_rows, std::move(key_lock));
    return decoded;
  };

  NamedArrays arrays;
  std::optional<NamedArrays> served;
  if (file.identity_trusted && !changed_[rg.file].load(std::memory_order_relaxed) &&
      still_unchanged()) {
    // Unchanged before and after decoding: the bytes decoded are the ones the key names.
    STOKER_ASSIGN_OR_RAISE(
        served, serve(Key(rg, names), hit, [&]() -> Result<bool> { return still_unchanged(); }));
    if (head_miss) return decoder.Decode(plan, task);
  }
  if (!served) {
    // By content: the key names a hash of the column chunks, read now (a read, no decode), and a
    // miss decodes those very bytes.
    auto read_failure = [&](const Status& status) {
      const ErrorKind kind = ReadFailureKind(status);
      return MakeError(kind == ErrorKind::kNotFound ? ErrorKind::kStorage : kind,
                       "cannot read " + catalog_->Where(rg) + ": " + status.message());
    };
    auto input = file.Open();
    if (!input.ok()) return read_failure(input.status());
    uint64_t digest = 0;
    auto snapshot =
        ChunkSnapshot::Read(*input, ChunkRanges(file, rg.row_group, task.fields), &digest);
    if (!snapshot.ok()) return read_failure(snapshot.status());
    // The pipeline's fetched file, when there is one, already holds the bytes read.
    std::optional<PrefetchScope> scope;
    if (!InPrefetchScope()) scope.emplace(&file, *snapshot);
    const std::string key =
        KeyWith(content_identity_[rg.file] + '\n' + std::to_string(digest), rg, names);
    bool footer_checked = false;
    STOKER_ASSIGN_OR_RAISE(served, serve(key, hit, [&]() -> Result<bool> {
                             // Chunks at the catalog's offsets are the loader's columns only
                             // while its footer is the file's (checked once, before decoding).
                             if (!footer_checked)
                               STOKER_RETURN_NOT_OK(CheckFooter(file, input->get()));
                             footer_checked = true;
                             return true;
                           }));
    if (*hit) content_checks_.fetch_add(1, std::memory_order_relaxed);
    if (head_miss) return decoder.Decode(plan, task);  // the bytes of the snapshot (its scope)
  }
  arrays = std::move(*served);
  DecodedColumns out;
  for (auto& [name, array] : arrays) {
    auto slice = segment.row_begin == 0 && segment.num_rows == array->length()
                     ? array
                     : array->Slice(segment.row_begin, segment.num_rows);
    out.bytes += arrow::util::TotalBufferSize(*slice->data());
    AddNamed(name, std::move(slice), &out);
  }
  return out;
}

}  // namespace stoker
