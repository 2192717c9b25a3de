#include "cache/tensor_cache.h"

#include <arrow/buffer.h>
#include <arrow/io/memory.h>
#include <arrow/ipc/reader.h>
#include <arrow/ipc/writer.h>
#include <arrow/record_batch.h>

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

Result<std::shared_ptr<arrow::Buffer>> Serialize(const NamedArrays& arrays) {
  std::vector<std::shared_ptr<arrow::Field>> fields;
  std::vector<std::shared_ptr<arrow::Array>> columns;
  int64_t rows = arrays.empty() ? 0 : arrays[0].second->length();
  for (const auto& [name, array] : arrays) {
    fields.push_back(arrow::field(name, array->type()));
    columns.push_back(array);
  }
  auto batch = arrow::RecordBatch::Make(arrow::schema(fields), rows, columns);
  auto options = arrow::ipc::IpcWriteOptions::Defaults();
  options.alignment = 64;  // every buffer lands 64-byte aligned in the mapping
  options.allow_64bit = true;
  ARROW_ASSIGN_OR_RAISE(auto sink, arrow::io::BufferOutputStream::Create());
  ARROW_ASSIGN_OR_RAISE(auto writer, arrow::ipc::MakeStreamWriter(sink, batch->schema(), options));
  ARROW_RETURN_NOT_OK(writer->WriteRecordBatch(*batch));
  ARROW_RETURN_NOT_OK(writer->Close());
  return sink->Finish();
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

std::string TensorCache::Key(const FileIdentity& file, int row_group,
                             const std::vector<std::string>& fields) {
  std::string key = kFormat;
  key += '\n' + file.path + '\n' + std::to_string(file.size) + '\n' +
         std::to_string(file.mtime_ns) + '\n' + std::to_string(row_group);
  for (const auto& field : fields) key += '\n' + field;
  return key;
}

Result<NamedArrays> TensorCache::GetOrDecode(const FileIdentity& file, int row_group,
                                             const std::vector<std::string>& fields,
                                             const std::function<Result<NamedArrays>()>& decode,
                                             bool* hit) {
  const std::string key = Key(file, row_group, fields);
  *hit = true;
  NamedArrays decoded;
  auto fill = [&](DiskCache::Parts* parts, std::shared_ptr<void>* keep_alive) -> Status {
    *hit = false;
    ARROW_ASSIGN_OR_RAISE(decoded, decode());
    ARROW_ASSIGN_OR_RAISE(auto serialized, Serialize(decoded));
    parts->emplace_back(serialized->data(), static_cast<size_t>(serialized->size()));
    *keep_alive = serialized;
    return Status::OK();
  };
  STOKER_ASSIGN_OR_RAISE(auto entry, cache_->GetOrFill(kNamespace, key, fill));
  if (!*hit) return decoded;  // just decoded here: no need to read back what was written
  auto cached = Deserialize(std::move(entry), fields);
  if (cached.ok()) return cached;
  // An entry that verifies but does not parse (another build's format): decode instead.
  *hit = false;
  return decode();
}

}  // namespace stoker
