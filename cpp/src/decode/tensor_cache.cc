#include "decode/tensor_cache.h"

#include <arrow/buffer.h>
#include <arrow/io/memory.h>
#include <arrow/ipc/reader.h>
#include <arrow/ipc/writer.h>
#include <arrow/record_batch.h>
#include <arrow/util/byte_size.h>

#include <deque>
#include <string>
#include <vector>

#include "util/hash.h"

namespace stoker {
namespace {

constexpr const char* kNamespace = "tensors";
constexpr const char* kFormat = "stoker-tensors-v1";

// An Arrow buffer over a cache entry's mapping; keeps the mapping alive.
class EntryBuffer : public arrow::Buffer {
 public:
  explicit EntryBuffer(std::shared_ptr<CacheEntry> entry)
      : arrow::Buffer(entry->data(), entry->size()), entry_(std::move(entry)) {}

 private:
  std::shared_ptr<CacheEntry> entry_;
};

using NamedArrays = std::vector<std::pair<std::string, std::shared_ptr<arrow::Array>>>;

// An OutputStream that records what the IPC writer writes instead of copying it into one buffer:
// body buffers by reference (the decoded arrays own them), small writes (framing, metadata,
// padding) copied. The payload reaches the disk with one writev() and no intermediate copy, grown
// buffer or fresh pages.
class PartsStream : public arrow::io::OutputStream {
 public:
  Status Close() override {
    closed_ = true;
    return Status::OK();
  }
  bool closed() const override { return closed_; }
  Result<int64_t> Tell() const override { return position_; }

  Status Write(const void* data, int64_t nbytes) override {
    if (nbytes == 0) return Status::OK();
    // A deque never moves its strings, so the parts' pointers stay valid.
    copies_.emplace_back(static_cast<const char*>(data), static_cast<size_t>(nbytes));
    parts_.emplace_back(copies_.back().data(), static_cast<size_t>(nbytes));
    position_ += nbytes;
    return Status::OK();
  }

  Status Write(const std::shared_ptr<arrow::Buffer>& data) override {
    if (data->size() < kCopyBelow) return Write(data->data(), data->size());
    buffers_.push_back(data);
    parts_.emplace_back(data->data(), static_cast<size_t>(data->size()));
    position_ += data->size();
    return Status::OK();
  }

  const DiskCache::Parts& parts() const { return parts_; }

 private:
  static constexpr int64_t kCopyBelow = 4096;
  bool closed_ = false;
  int64_t position_ = 0;
  DiskCache::Parts parts_;
  std::deque<std::string> copies_;
  std::vector<std::shared_ptr<arrow::Buffer>> buffers_;
};

// The entry's payload: one record batch as an Arrow IPC stream, its buffers 64-byte aligned.
Result<std::shared_ptr<PartsStream>> Serialize(const NamedArrays& arrays, int64_t rows) {
  std::vector<std::shared_ptr<arrow::Field>> fields;
  std::vector<std::shared_ptr<arrow::Array>> columns;
  for (const auto& [name, array] : arrays) {
    fields.push_back(arrow::field(name, array->type()));
    columns.push_back(array);
  }
  auto batch = arrow::RecordBatch::Make(arrow::schema(fields), rows, columns);
  auto options = arrow::ipc::IpcWriteOptions::Defaults();
  options.alignment = 64;  // every buffer lands 64-byte aligned in the mapping
  options.allow_64bit = true;
  options.use_threads = false;
  auto sink = std::make_shared<PartsStream>();
  ARROW_ASSIGN_OR_RAISE(auto writer, arrow::ipc::MakeStreamWriter(sink, batch->schema(), options));
  ARROW_RETURN_NOT_OK(writer->WriteRecordBatch(*batch));
  ARROW_RETURN_NOT_OK(writer->Close());
  return sink;
}

Result<NamedArrays> Deserialize(std::shared_ptr<CacheEntry> entry,
                                const std::vector<std::string>& fields) {
  auto buffer = std::make_shared<EntryBuffer>(std::move(entry));
  auto input = std::make_shared<arrow::io::BufferReader>(buffer);
  auto options = arrow::ipc::IpcReadOptions::Defaults();
  options.use_threads = false;
  ARROW_ASSIGN_OR_RAISE(auto reader, arrow::ipc::RecordBatchStreamReader::Open(input, options));
  std::shared_ptr<arrow::RecordBatch> batch;
  ARROW_RETURN_NOT_OK(reader->ReadNext(&batch));
  if (!batch || batch->num_columns() != static_cast<int>(fields.size())) {
    return Status::Invalid("cache entry holds other columns");
  }
  NamedArrays out;
  for (int i = 0; i < batch->num_columns(); ++i) {
    if (batch->schema()->field(i)->name() != fields[i]) {
      return Status::Invalid("cache entry holds other columns");
    }
    out.emplace_back(fields[i], batch->column(i));
  }
  return out;
}

}  // namespace

TensorCache::TensorCache(std::shared_ptr<DiskCache> cache, std::shared_ptr<const Catalog> catalog)
    : cache_(std::move(cache)), catalog_(std::move(catalog)) {
  for (const auto& file : catalog_->files()) {
    Fnv1a footer;
    footer.Add(file.metadata->SerializeToString());
    file_identity_.push_back(file.display_path + '\n' + std::to_string(file.size) + '\n' +
                             std::to_string(footer.digest()));
  }
}

std::string TensorCache::Key(const RowGroupRef& rg, const std::vector<std::string>& fields) const {
  std::string key = kFormat;
  key += '\n' + file_identity_[rg.file] + '\n' + std::to_string(rg.row_group);
  for (const auto& field : fields) key += '\n' + field;
  return key;
}

Result<DecodedColumns> TensorCache::Decode(const Decoder& decoder, const Plan& plan,
                                           const DecodeTask& task, bool* hit) const {
  *hit = false;
  if (task.fields.empty()) return decoder.Decode(plan, task);
  const Segment& segment = plan.segments[task.segment];
  const RowGroupRef& rg = catalog_->row_groups()[segment.row_group];

  // The whole row group is cached, then sliced to the segment.
  auto decode_whole = [&] {
    return decoder.DecodeRows(segment.row_group, task.fields, 0, rg.num_rows);
  };

  NamedArrays arrays;
  bool filled = false;
  auto fill = [&](DiskCache::Parts* parts, std::shared_ptr<void>* keep_alive) -> Status {
    filled = true;
    STOKER_ASSIGN_OR_RAISE(auto decoded, decode_whole());
    arrays = std::move(decoded.arrays);
    STOKER_ASSIGN_OR_RAISE(auto serialized, Serialize(arrays, rg.num_rows));
    *parts = serialized->parts();
    *keep_alive = serialized;
    return Status::OK();
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
  STOKER_ASSIGN_OR_RAISE(auto entry, cache_->GetOrFill(kNamespace, Key(rg, names), fill));
  if (!filled) {
    auto cached = Deserialize(std::move(entry), stored);
    if (cached.ok()) {
      *hit = true;
      arrays = std::move(*cached);
    } else {
      // Verified bytes that do not parse (another build's layout): decode instead.
      STOKER_ASSIGN_OR_RAISE(auto decoded, decode_whole());
      arrays = std::move(decoded.arrays);
    }
  }
  DecodedColumns out;
  for (auto& [name, array] : arrays) {
    auto slice = segment.row_begin == 0 && segment.num_rows == array->length()
                     ? array
                     : array->Slice(segment.row_begin, segment.num_rows);
    out.bytes += arrow::util::TotalBufferSize(*slice->data());
    out.arrays.emplace_back(name, std::move(slice));
  }
  return out;
}

}  // namespace stoker
