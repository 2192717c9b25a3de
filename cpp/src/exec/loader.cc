#include "stoker/loader.h"

#include <arrow/io/type_fwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "batch/assembler.h"
#include "cache/disk_cache.h"
#include "catalog/catalog.h"
#include "decode/cached_decoder.h"
#include "decode/decoder.h"
#include "exec/pipeline.h"
#include "io/filesystem.h"
#include "plan/planner.h"
#include "resolve/output_names.h"
#include "resolve/resolve_columns.h"
#include "stoker/system.h"
#include "util/cuda_host.h"
#include "util/hash.h"
#include "util/recycling_pool.h"

namespace stoker {

class Loader::Impl {
 public:
  // What the caller asked for; the fingerprint, column resolution and assembly read it.
  LoaderOptions options;
  // Resolved once in Open: defaults filled in, the shuffle window in rows.
  PlanOptions plan_options;
  PipelineOptions pipeline_options;
  /// A tensor cache without entries cannot hit, so the fetch stage starts with the epoch instead
  /// of at the first miss (whose task would otherwise race the fetched ones for the link). Only
  /// a hint: either way the batches are the same.
  PipelineOptions EpochPipelineOptions() const {
    PipelineOptions epoch_options = pipeline_options;
    if (cached_decoder) epoch_options.cache_empty = !cached_decoder->HoldsEntries();
    return epoch_options;
  }
  int num_io_threads = 0;

  std::shared_ptr<const Catalog> catalog;
  std::shared_ptr<const OutputSpec> spec;
  std::shared_ptr<const Decoder> decoder;
  std::shared_ptr<SlabPool> pool;
  std::shared_ptr<const BatchAssembler> assembler;
  std::shared_ptr<DiskCache> disk_cache;          // null without cache_dir
  std::shared_ptr<CachedDecoder> cached_decoder;  // null without cache_dir
  std::shared_ptr<PipelineCounters> counters;
  // Lets the decoders' freed buffers be kept for reuse while this loader is open.
  std::unique_ptr<RecyclingPool::Budget> recycling;
  RankShape shape;
  std::vector<std::shared_ptr<arrow::fs::FileSystem>> filesystems;  // distinct, of all files
  const pid_t owner_pid = getpid();

  std::mutex mutex;
  std::shared_ptr<Pipeline> pipeline;  // GUARDED_BY(mutex)
  bool stopped = false;                // GUARDED_BY(mutex) Stop() ended a running epoch
  bool closed = false;                 // GUARDED_BY(mutex) Close() was called

  // A loader inherited through fork() has no threads in the child; its locks may be held by
  // threads that do not exist there. It must not be touched beyond reporting that.
  bool Inherited() const { return getpid() != owner_pid; }
};

namespace {

constexpr int64_t kNextTimeoutMs = 1000LL * 60 * 60 * 24 * 365;

Status ClosedError() {
  return MakeError(ErrorKind::kClosed,
                   "the loader was closed (or stopped) while this iteration was running");
}

Status BatchStepError(int64_t batch_step) {
  return MakeError(ErrorKind::kInvalidOption,
                   "batch_step must be >= 1, got " + std::to_string(batch_step));
}

Status InheritedError() {
  return MakeError(ErrorKind::kClosed,
                   "this loader was created in another process and inherited through fork(); "
                   "its threads do not exist here: create the loader in this process (for "
                   "DataLoader workers: in the dataset's __iter__ or a worker_init_fn)");
}

// Uncompressed bytes per row of the selected columns, from the footers' statistics.
int64_t RowBytes(const Catalog& catalog, const OutputSpec& spec) {
  int64_t bytes = 0;
  for (const auto& rg : catalog.row_groups()) {
    for (int64_t field_bytes : catalog.FieldBytes(rg, spec.file_fields)) bytes += field_bytes;
  }
  return std::max<int64_t>(1, bytes / std::max<int64_t>(1, catalog.total_rows()));
}

// Bytes a shuffle window holds per row, estimated at open: RowBytes plus the output of each
// transform chain whose per-row shape is fixed (a decoded image is many times its JPEG bytes).
int64_t DecodedRowBytes(const Catalog& catalog, const OutputSpec& spec) {
  int64_t row_bytes = RowBytes(catalog, spec);
  for (const ColumnSpec& column : spec.columns) {
    if (!column.chain || column.output_shape.empty()) continue;
    int64_t elements = 1;
    for (int64_t dim : column.output_shape) elements = dim > 0 ? elements * dim : 0;
    row_bytes += elements * DTypeSize(column.dtype);
  }
  return row_bytes;
}

// The shuffle window in rows: the rows given, a byte size converted with RowBytes (as since 0.1:
// a byte window's rows, and so its resume states, stay what they were), or the default:
// kAutoShuffleWindowRows, or the rows kAutoShuffleWindowBytes holds decoded where fewer.
int64_t ResolveWindowRows(const OrderOptions& order, const Catalog& catalog,
                          const OutputSpec& spec) {
  if (order.shuffle_window_bytes > 0) {
    return std::max<int64_t>(1, order.shuffle_window_bytes / RowBytes(catalog, spec));
  }
  if (order.shuffle_window_rows == kAutoShuffleWindow) {
    return std::clamp<int64_t>(kAutoShuffleWindowBytes / DecodedRowBytes(catalog, spec), 1,
                               kAutoShuffleWindowRows);
  }
  return order.shuffle_window_rows;
}

PlanOptions MakePlanOptions(const OrderOptions& order, int64_t shuffle_window_rows) {
  PlanOptions plan;
  plan.batch_size = order.batch_size;
  plan.shuffle = order.shuffle;
  plan.seed = order.seed;
  plan.shuffle_window_rows = shuffle_window_rows;
  plan.drop_last = order.drop_last;
  plan.rank = order.rank;
  plan.world_size = order.world_size;
  return plan;
}

// What the column writers need: the padding flag, whether a batch may borrow an item's buffer
// (not with a tensor cache, whose entries are mapped, nor with pinned slabs), and whether plain
// columns are packed by rows: when rows are shuffled and a tensor cache stores them packed (a warm
// epoch gathers rows from its mapped entries). Unshuffled batches copy runs of rows from columns,
// 1.3-1.6x faster than from packed rows; without a cache, packing each decoded row group cost
// more than the column gathers (128 rows ahead) it spared.
WriterOptions MakeWriterOptions(const LoaderOptions& options, const PlanOptions& plan) {
  WriterOptions writer;
  writer.padding_mask = options.order.padding_mask;
  writer.padding_name = options.order.padding_name;
  writer.lend = options.cache.dir.empty() && !options.execution.pin_memory;
  writer.pack = plan.shuffle && plan.shuffle_window_rows > 1;
  return writer;
}

}  // namespace

Result<std::unique_ptr<Loader>> Loader::Open(const LoaderOptions& options) {
  return Open(options, arrow::StopToken::Unstoppable());
}

Result<std::unique_ptr<Loader>> Loader::Open(const LoaderOptions& options,
                                             const arrow::StopToken& stop) {
  // Remote filesystems opened here (listing, footers, auto vocabularies) give up once `stop` is
  // requested, also on the catalog's footer threads.
  const RemoteStopScope stop_scope(stop);
  STOKER_RETURN_NOT_OK(options.Validate());
  if (options.execution.pin_memory) STOKER_RETURN_NOT_OK(CudaHostAvailable());
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->pipeline_options.num_workers =
      options.execution.num_threads > 0 ? options.execution.num_threads : UsableCpus();
  impl->pipeline_options.prefetch_bytes = options.execution.prefetch_bytes;
  impl->pipeline_options.task_bytes = options.execution.task_bytes;
  impl->num_io_threads = options.execution.num_io_threads > 0
                             ? options.execution.num_io_threads
                             : std::max(4, impl->pipeline_options.num_workers);
  impl->counters = std::make_shared<PipelineCounters>(impl->pipeline_options.num_workers);
  impl->recycling = std::make_unique<RecyclingPool::Budget>(options.execution.prefetch_bytes);
  if (!options.cache.dir.empty()) {
    DiskCacheOptions cache_options;
    cache_options.dir = options.cache.dir;
    cache_options.max_bytes = options.cache.bytes;
    cache_options.min_free_bytes = options.cache.min_free_bytes;
    // Entries mapped in one epoch stay mapped for the next, within a quarter of the cache's
    // budget (kept entries are not evicted while kept; DiskCache::Open lowers it to a quarter of
    // what the disk holds for the cache). Not within prefetch_bytes: a mapping's pages are the
    // page cache's, not the loader's memory, and with entries beyond that bound every warm epoch
    // mapped nearly every entry again (least recently used dropped first, in an order that
    // changes each epoch).
    cache_options.kept_mapping_bytes = options.cache.bytes / 4;
    STOKER_ASSIGN_OR_RAISE(impl->disk_cache, DiskCache::Open(cache_options));
  }
  STOKER_ASSIGN_OR_RAISE(auto catalog, Catalog::Open(options.source.sources, impl->num_io_threads,
                                                     options.storage, impl->disk_cache));
  // Remote column chunks are pre-buffered as concurrent range reads on Arrow's (process-wide)
  // I/O pool: that pool is stoker's I/O pool, sized by num_io_threads; the CPU workers decode.
  const bool remote = std::any_of(catalog->files().begin(), catalog->files().end(),
                                  [](const CatalogFile& file) { return IsRemote(*file.fs); });
  impl->pipeline_options.catalog = catalog;
  impl->pipeline_options.io_requests = impl->num_io_threads;
  // A diagnostic switch (bench and tests compare with and without the fetch stage).
  if (const char* fetch = std::getenv("STOKER_FETCH_AHEAD"); fetch && std::string(fetch) == "0") {
    impl->pipeline_options.fetch_ahead = false;
  }
  if (remote && options.execution.num_io_threads > 0) {
    STOKER_RETURN_NOT_OK(arrow::io::SetIOThreadPoolCapacity(options.execution.num_io_threads));
  }
  if (catalog->total_rows() == 0) {
    return MakeError(ErrorKind::kEmptyDataset, "the dataset has no rows");
  }
  STOKER_ASSIGN_OR_RAISE(
      auto spec, ResolveColumns(*catalog, options.columns, !options.cache.dir.empty(), nullptr,
                                options.order.padding_mask ? options.order.padding_name : "",
                                impl->pipeline_options.num_workers));
  impl->plan_options =
      MakePlanOptions(options.order, ResolveWindowRows(options.order, *catalog, spec));
  // The default window as resolved is what Fingerprint() hashes: a resume state saved where it
  // came out at other rows (another dataset, or before its byte bound) must not match.
  if (impl->options.order.shuffle_window_rows == kAutoShuffleWindow &&
      impl->options.order.shuffle_window_bytes == 0) {
    impl->options.order.shuffle_window_rows = impl->plan_options.shuffle_window_rows;
  }
  for (const auto& file : catalog->files()) {
    if (std::find(impl->filesystems.begin(), impl->filesystems.end(), file.fs) ==
        impl->filesystems.end()) {
      impl->filesystems.push_back(file.fs);
    }
  }
  impl->catalog = catalog;
  impl->spec = std::make_shared<OutputSpec>(std::move(spec));
  const WriterOptions writer_options = MakeWriterOptions(options, impl->plan_options);
  impl->decoder = std::make_shared<Decoder>(impl->catalog, impl->spec,
                                            writer_options.pack && !impl->disk_cache);
  if (impl->disk_cache) {
    // The write-behind queue may hold half as much again as the decoded data in flight.
    impl->cached_decoder = std::make_shared<CachedDecoder>(
        impl->disk_cache, impl->decoder, std::max<int64_t>(1, options.execution.prefetch_bytes / 2),
        writer_options.pack);
  }
  // Freed slabs kept up to a quarter of the budget: the finished batches a slow consumer lets
  // pile up (up to half of it) reuse them epoch after epoch (batch/slab_pool.h).
  impl->pool =
      SlabPool::Make(8, options.execution.pin_memory, options.execution.prefetch_bytes / 4);
  impl->assembler = std::make_shared<BatchAssembler>(impl->spec, writer_options, impl->pool);
  impl->shape = ComputeRankShape(catalog->total_rows(), impl->plan_options);
  if (impl->shape.num_batches == 0) {
    return MakeError(ErrorKind::kInvalidOption,
                     "the dataset has " + std::to_string(catalog->total_rows()) +
                         " rows, too few for one batch of batch_size=" +
                         std::to_string(options.order.batch_size) +
                         " on each of world_size=" + std::to_string(options.order.world_size) +
                         " ranks with drop_last=True; lower batch_size or set drop_last=False");
  }
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Loader::~Loader() {
  if (impl_ && impl_->Inherited()) {
    // In a fork()ed child: the parent's threads, locks and storage clients are not ours to
    // tear down (the AWS SDK is not fork-safe). Leak them; the child's exit reclaims the memory.
    (void)impl_.release();
    return;
  }
  Stop();
}

void Loader::SetSeed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->plan_options.seed = seed;
}

uint64_t Loader::Seed() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->plan_options.seed;
}

Status Loader::StartEpoch(int64_t epoch, int64_t start_batch, int64_t batch_step) {
  if (impl_->Inherited()) return InheritedError();
  Stop();
  if (epoch < 0) return MakeError(ErrorKind::kInvalidOption, "epoch must be >= 0");
  if (batch_step < 1) return BatchStepError(batch_step);
  if (start_batch < 0 || start_batch > impl_->shape.num_batches) {
    return MakeError(ErrorKind::kStateMismatch,
                     "resume position batch=" + std::to_string(start_batch) +
                         " is outside the epoch's " + std::to_string(impl_->shape.num_batches) +
                         " batches");
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->closed) return ClosedError();
  auto plan = std::make_shared<const Plan>(
      MakePlan(impl_->catalog->row_groups(), impl_->plan_options, epoch));
  impl_->pipeline = std::make_shared<Pipeline>(plan, impl_->decoder, impl_->assembler,
                                               impl_->cached_decoder, impl_->EpochPipelineOptions(),
                                               start_batch, batch_step, impl_->counters);
  impl_->stopped = false;
  impl_->pipeline->Start();
  return Status::OK();
}

Result<int64_t> Loader::StartElasticEpoch(int64_t epoch, int old_world_size, int64_t old_batches,
                                          int64_t start_batch, int64_t batch_step) {
  if (impl_->Inherited()) return InheritedError();
  Stop();
  if (batch_step < 1) return BatchStepError(batch_step);
  if (epoch < 0 || old_world_size < 1 || old_batches < 0) {
    return MakeError(ErrorKind::kStateMismatch,
                     "elastic resume needs epoch >= 0, an old world_size >= 1 and a batch >= 0");
  }
  // More batches than an old rank had would skip every row (and overflow old_batches * rows).
  if (old_batches > NumBatchesAt(old_world_size)) {
    return MakeError(ErrorKind::kStateMismatch,
                     "elastic resume: old_batches=" + std::to_string(old_batches) +
                         " is outside the " + std::to_string(NumBatchesAt(old_world_size)) +
                         " batches per rank at world_size=" + std::to_string(old_world_size));
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->closed) return ClosedError();
  auto plan = std::make_shared<const Plan>(MakeElasticPlan(
      impl_->catalog->row_groups(), impl_->plan_options, epoch, old_world_size, old_batches));
  if (start_batch < 0 || start_batch > plan->num_batches) {
    return MakeError(ErrorKind::kStateMismatch,
                     "resume position batch=" + std::to_string(start_batch) +
                         " is outside the elastic epoch's " + std::to_string(plan->num_batches) +
                         " batches");
  }
  impl_->pipeline = std::make_shared<Pipeline>(plan, impl_->decoder, impl_->assembler,
                                               impl_->cached_decoder, impl_->EpochPipelineOptions(),
                                               start_batch, batch_step, impl_->counters);
  impl_->stopped = false;
  impl_->pipeline->Start();
  return plan->num_batches;
}

Result<std::shared_ptr<Batch>> Loader::Next() {
  std::shared_ptr<Batch> batch;
  bool done = false;
  STOKER_RETURN_NOT_OK(NextFor(kNextTimeoutMs, &batch, &done));
  return batch;
}

Status Loader::NextFor(int64_t timeout_ms, std::shared_ptr<Batch>* out, bool* done) {
  out->reset();
  *done = false;
  if (impl_->Inherited()) return InheritedError();
  std::shared_ptr<Pipeline> pipeline;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->stopped || impl_->closed) return ClosedError();
    pipeline = impl_->pipeline;
  }
  if (!pipeline) {
    *done = true;
    return Status::OK();
  }
  // The epoch ends with its last batch: cache entries still queued keep being written behind
  // the next epoch (which takes them from the queue meanwhile). FlushCache() waits for them.
  return pipeline->Next(timeout_ms, out, done);
}

void Loader::FlushCache() {
  if (impl_ && !impl_->Inherited() && impl_->cached_decoder) impl_->cached_decoder->Flush();
}

void Loader::Close() {
  if (impl_ && !impl_->Inherited()) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->closed = true;
  }
  Stop();
  if (impl_ && !impl_->Inherited() && impl_->cached_decoder) impl_->cached_decoder->Close();
}

void Loader::Stop() {
  if (!impl_) return;
  if (impl_->Inherited()) {
    // The threads belong to the parent: never join or destroy them here. The pipeline is
    // leaked on purpose (its std::thread objects would terminate the child if destroyed).
    std::shared_ptr<Pipeline>* leaked = new std::shared_ptr<Pipeline>(std::move(impl_->pipeline));
    (void)leaked;
    return;
  }
  std::shared_ptr<Pipeline> pipeline;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    pipeline = std::move(impl_->pipeline);
    if (pipeline) impl_->stopped = true;
  }
  if (!pipeline) return;
  // Workers sleeping between storage retries give up at once instead of finishing the sleep.
  for (const auto& fs : impl_->filesystems) InterruptRetryWaits(*fs);
  pipeline->Stop();
}

int64_t Loader::ShuffleWindowRows() const { return impl_->plan_options.shuffle_window_rows; }
int64_t Loader::NumBatches() const { return impl_->shape.num_batches; }
int64_t Loader::NumBatchesAt(int world_size) const {
  PlanOptions options = impl_->plan_options;
  options.world_size = std::max(world_size, 1);
  return ComputeRankShape(impl_->catalog->total_rows(), options).num_batches;
}
int64_t Loader::NumRows() const { return impl_->shape.rank_rows; }
int64_t Loader::DatasetRows() const { return impl_->catalog->total_rows(); }
int64_t Loader::NumFiles() const { return static_cast<int64_t>(impl_->catalog->files().size()); }
int64_t Loader::NumRowGroups() const {
  return static_cast<int64_t>(impl_->catalog->row_groups().size());
}

uint64_t Loader::DatasetFingerprint() const { return impl_->catalog->fingerprint(); }

uint64_t Loader::Fingerprint(bool with_shard) const {
  Fnv1a hash;
  hash.AddInt(impl_->options.Fingerprint(with_shard));
  hash.AddInt(impl_->catalog->fingerprint());
  // The vocabularies actually used ("auto" ones are built from the data).
  for (const auto& [column, vocabulary] : impl_->spec->vocabularies) {
    hash.Add(column);
    hash.AddInt(vocabulary->hash());
  }
  return hash.digest();
}

std::vector<ColumnInfo> Loader::Columns() const { return ToColumnInfos(*impl_->spec); }

Result<std::vector<std::string>> Loader::Vocabulary(const std::string& column) const {
  auto it = impl_->spec->vocabularies.find(column);
  if (it == impl_->spec->vocabularies.end()) {
    std::string known;
    for (const auto& [name, vocabulary] : impl_->spec->vocabularies) {
      known += (known.empty() ? "'" : ", '") + name + "'";
    }
    return MakeError(ErrorKind::kInvalidOption,
                     "column '" + column + "' is not categorical (categories= names " +
                         (known.empty() ? std::string("no column") : known) + ")");
  }
  return it->second->values();
}

LoaderStats Loader::Stats() const {
  const PipelineCounters& c = *impl_->counters;
  LoaderStats stats;
  stats.stages = c.Stages();
  if (impl_->disk_cache) stats.cache = impl_->disk_cache->stats();
  if (impl_->cached_decoder) impl_->cached_decoder->AddStats(&stats.cache);
  for (const auto& fs : impl_->filesystems) {
    if (auto storage = GetStorageStats(*fs)) {
      stats.storage.requests += storage->requests;
      stats.storage.retries += storage->retries;
      stats.storage.failures += storage->failures;
      stats.storage.backoff_s += storage->backoff_s;
    }
  }
  const TransformCounters& t = *impl_->spec->transform_counters;
  stats.transforms.prefix_rows = t.prefix_rows;
  stats.transforms.batch_rows = t.batch_rows;
  stats.transforms.substituted_rows = t.substituted_rows;
  stats.batches = c.batches;
  stats.rows = c.rows;
  stats.consumer_wait_s = static_cast<double>(c.consumer_wait_ns.load()) * 1e-9;
  stats.peak_inflight_bytes = c.peak_inflight_bytes;
  return stats;
}

bool StopRemoteRequestsForExit(double timeout_s) {
  return StopRemoteRequests(timeout_s < 0 ? RemoteRequestDrainSeconds() : timeout_s);
}

}  // namespace stoker
