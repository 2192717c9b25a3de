#include "stoker/loader.h"

#include <algorithm>
#include <thread>

#include <arrow/io/type_fwd.h>

#include "batch/assembler.h"
#include "cache/disk_cache.h"
#include "cache/tensor_cache.h"
#include "catalog/catalog.h"
#include "decode/column_spec.h"
#include "decode/decoder.h"
#include "exec/pipeline.h"
#include "io/filesystem.h"
#include "plan/planner.h"
#include "util/hash.h"

namespace stoker {

class Loader::Impl {
 public:
  LoaderOptions options;
  std::shared_ptr<const Catalog> catalog;
  std::shared_ptr<const OutputSpec> spec;
  std::shared_ptr<const Decoder> decoder;
  std::shared_ptr<SlabPool> pool;
  std::shared_ptr<const BatchAssembler> assembler;
  std::shared_ptr<DiskCache> disk_cache;  // null without cache_dir
  std::shared_ptr<TensorCache> tensor_cache;
  std::shared_ptr<PipelineCounters> counters = std::make_shared<PipelineCounters>();
  std::unique_ptr<Pipeline> pipeline;
  RankShape shape;
  std::vector<std::shared_ptr<arrow::fs::FileSystem>> filesystems;  // distinct, of all files
};

namespace {
constexpr int64_t kNextTimeoutMs = 1000LL * 60 * 60 * 24 * 365;
}  // namespace

Result<std::unique_ptr<Loader>> Loader::Open(const LoaderOptions& options) {
  STOKER_RETURN_NOT_OK(options.Validate());
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (impl->options.num_threads == 0) {
    impl->options.num_threads = std::max(1u, std::thread::hardware_concurrency());
  }
  if (impl->options.num_io_threads == 0) {
    impl->options.num_io_threads = std::max(4, impl->options.num_threads);
  }
  if (!options.cache_dir.empty()) {
    DiskCacheOptions cache_options;
    cache_options.dir = options.cache_dir;
    cache_options.max_bytes = options.cache_bytes;
    cache_options.min_free_bytes = options.cache_min_free_bytes;
    STOKER_ASSIGN_OR_RAISE(impl->disk_cache, DiskCache::Open(cache_options));
  }
  STOKER_ASSIGN_OR_RAISE(auto catalog, Catalog::Open(options.sources, impl->options.num_io_threads,
                                                     options, impl->disk_cache));
  if (impl->disk_cache) {
    impl->tensor_cache = std::make_shared<TensorCache>(impl->disk_cache, catalog);
  }
  // Remote column chunks are pre-buffered as concurrent range reads on Arrow's (process-wide)
  // I/O pool: that pool is stoker's I/O pool, sized by num_io_threads; the CPU workers decode.
  const bool remote = std::any_of(catalog->files().begin(), catalog->files().end(),
                                  [](const CatalogFile& file) { return IsRemote(*file.fs); });
  if (remote && options.num_io_threads > 0) {
    STOKER_RETURN_NOT_OK(arrow::io::SetIOThreadPoolCapacity(options.num_io_threads));
  }
  if (catalog->total_rows() == 0) {
    return MakeError(ErrorKind::kEmptyDataset, "the dataset has no rows");
  }
  STOKER_ASSIGN_OR_RAISE(auto spec, ResolveColumns(*catalog, options));
  if (options.shuffle_window_bytes > 0) {
    int64_t bytes = 0;
    for (const auto& rg : catalog->row_groups()) {
      for (const auto& field : spec.file_fields) bytes += catalog->FieldBytes(rg, field);
    }
    const int64_t row_bytes = std::max<int64_t>(1, bytes / catalog->total_rows());
    impl->options.shuffle_window_rows =
        std::max<int64_t>(1, options.shuffle_window_bytes / row_bytes);
  }
  for (const auto& file : catalog->files()) {
    if (std::find(impl->filesystems.begin(), impl->filesystems.end(), file.fs) ==
        impl->filesystems.end()) {
      impl->filesystems.push_back(file.fs);
    }
  }
  impl->catalog = catalog;
  impl->spec = std::make_shared<OutputSpec>(std::move(spec));
  impl->decoder = std::make_shared<Decoder>(impl->catalog, impl->spec);
  impl->pool = SlabPool::Make(8);
  impl->assembler = std::make_shared<BatchAssembler>(impl->spec, impl->options, impl->pool);
  impl->shape = ComputeRankShape(catalog->total_rows(), options);
  if (impl->shape.num_batches == 0) {
    return MakeError(
        ErrorKind::kInvalidOption,
        "the dataset has " + std::to_string(catalog->total_rows()) +
            " rows, too few for one batch of batch_size=" + std::to_string(options.batch_size) +
            " on each of world_size=" + std::to_string(options.world_size) +
            " ranks with drop_last=True; lower batch_size or set drop_last=False");
  }
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Loader::~Loader() { Stop(); }

Status Loader::StartEpoch(int64_t epoch, int64_t start_batch) {
  Stop();
  if (epoch < 0) return MakeError(ErrorKind::kInvalidOption, "epoch must be >= 0");
  if (start_batch < 0 || start_batch > impl_->shape.num_batches) {
    return MakeError(ErrorKind::kStateMismatch,
                     "resume position batch=" + std::to_string(start_batch) +
                         " is outside the epoch's " + std::to_string(impl_->shape.num_batches) +
                         " batches");
  }
  auto plan =
      std::make_shared<const Plan>(MakePlan(impl_->catalog->row_groups(), impl_->options, epoch));
  impl_->pipeline =
      std::make_unique<Pipeline>(plan, impl_->decoder, impl_->assembler, impl_->tensor_cache,
                                 impl_->options, start_batch, impl_->counters);
  impl_->pipeline->Start();
  return Status::OK();
}

Result<std::shared_ptr<Batch>> Loader::Next() {
  std::shared_ptr<Batch> batch;
  bool done = false;
  STOKER_RETURN_NOT_OK(NextFor(kNextTimeoutMs, &batch, &done));
  return batch;
}

Status Loader::NextFor(int64_t timeout_ms, std::shared_ptr<Batch>* out, bool* done) {
  if (!impl_->pipeline) {
    *done = true;
    out->reset();
    return Status::OK();
  }
  return impl_->pipeline->Next(timeout_ms, out, done);
}

void Loader::Stop() {
  if (impl_ && impl_->pipeline) {
    // Workers sleeping between storage retries give up at once instead of finishing the sleep.
    for (const auto& fs : impl_->filesystems) InterruptRetryWaits(*fs);
    impl_->pipeline->Stop();
    impl_->pipeline.reset();
  }
}

int64_t Loader::ShuffleWindowRows() const { return impl_->options.shuffle_window_rows; }
int64_t Loader::NumBatches() const { return impl_->shape.num_batches; }
int64_t Loader::NumRows() const { return impl_->shape.rank_rows; }
int64_t Loader::DatasetRows() const { return impl_->catalog->total_rows(); }
int64_t Loader::NumFiles() const { return static_cast<int64_t>(impl_->catalog->files().size()); }
int64_t Loader::NumRowGroups() const {
  return static_cast<int64_t>(impl_->catalog->row_groups().size());
}

uint64_t Loader::Fingerprint() const {
  Fnv1a hash;
  hash.AddInt(impl_->options.Fingerprint());
  hash.AddInt(impl_->catalog->fingerprint());
  return hash.digest();
}

std::vector<ColumnInfo> Loader::Columns() const {
  std::vector<ColumnInfo> out;
  for (const auto& spec : impl_->spec->columns) out.push_back(ToColumnInfo(spec));
  if (!impl_->spec->features.empty()) {
    ColumnInfo info;
    info.name = impl_->options.features_name;
    info.arrow_type = "stacked features";
    info.kind = ColumnKind::kDense;
    info.dtype = impl_->options.features_dtype;
    info.inner_shape = {static_cast<int64_t>(impl_->spec->features.size())};
    out.push_back(std::move(info));
  }
  return out;
}

LoaderStats Loader::Stats() const {
  const PipelineCounters& c = *impl_->counters;
  auto s = [](int64_t ns) { return static_cast<double>(ns) * 1e-9; };
  LoaderStats stats;
  StageStats decode;
  decode.name = "decode";
  decode.busy_s = s(c.decode_busy_ns);
  decode.wait_input_s = s(c.decode_wait_ns);
  decode.items = c.decode_tasks;
  decode.bytes = c.decode_bytes;
  StageStats sequence;
  sequence.name = "sequence";
  sequence.busy_s = s(c.sequence_busy_ns);
  sequence.wait_input_s = s(c.sequence_wait_input_ns);
  sequence.wait_output_s = s(c.sequence_wait_output_ns);
  StageStats batch;
  batch.name = "batch";
  batch.busy_s = s(c.batch_busy_ns);
  batch.items = c.batches;
  batch.bytes = c.batch_bytes;
  stats.stages = {decode, sequence, batch};
  if (impl_->disk_cache) {
    const DiskCacheStats cache = impl_->disk_cache->stats();
    stats.cache = {cache.hits,       cache.misses,        cache.writes,
                   cache.not_stored, cache.corrupt,       cache.evictions,
                   cache.bytes_read, cache.bytes_written, cache.waits};
  }
  for (const auto& fs : impl_->filesystems) {
    if (auto storage = GetStorageCounters(*fs)) {
      stats.storage.requests += storage->requests;
      stats.storage.retries += storage->retries;
      stats.storage.failures += storage->failures;
      stats.storage.backoff_s += storage->backoff_s;
    }
  }
  stats.batches = c.batches;
  stats.rows = c.rows;
  stats.consumer_wait_s = s(c.consumer_wait_ns);
  stats.peak_inflight_bytes = c.peak_inflight_bytes;
  return stats;
}

}  // namespace stoker
