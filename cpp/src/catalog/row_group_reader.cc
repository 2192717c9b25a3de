#include "catalog/row_group_reader.h"

#include <arrow/array/concatenate.h>
#include <arrow/extension_type.h>
#include <parquet/arrow/reader.h>
#include <parquet/column_reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>

#include <algorithm>
#include <map>

#include "catalog/dictionary.h"
#include "catalog/nested.h"
#include "io/filesystem.h"
#include "util/recycling_pool.h"

namespace stoker {
namespace {

// A partial read (the epoch's head) reads its column chunks page by page, through a buffer of
// this size (a page header and small pages come in one read; a larger page is read on its own),
// when they average at least kPagedChunkBytes uncompressed (what writers' page size bounds): chunks
// of several pages, of which the first rows need the first. Smaller chunks are most often one page
// (writers' default page size is 1 MiB), and reading them through the buffer only cost an
// allocation and a copy more: the wide set's first batch (84 KB chunks) came 10% later.
constexpr int64_t kPartialReadBuffer = 64 << 10;
constexpr int64_t kPagedChunkBytes = 1 << 20;

// Definition levels checked per ReadBatch call of a direct read.
constexpr int64_t kDirectLevels = 16 << 10;

// Whether a leaf is read directly (ReadDirect): a top-level, non-repeated column whose Parquet
// physical type is `type` as it is, and whose chunk does not say it holds nulls.
bool DirectReadable(const parquet::ColumnDescriptor& column, bool chunk_counts_nulls,
                    const arrow::DataType& type) {
  if (column.max_repetition_level() != 0 || column.max_definition_level() > 1) return false;
  int bits = 0;
  switch (column.physical_type()) {
    case parquet::Type::INT32:
      if (type.id() != arrow::Type::INT32) return false;
      bits = 32;
      break;
    case parquet::Type::INT64:
      if (type.id() != arrow::Type::INT64) return false;
      bits = 64;
      break;
    case parquet::Type::FLOAT:
      if (type.id() != arrow::Type::FLOAT) return false;
      break;
    case parquet::Type::DOUBLE:
      if (type.id() != arrow::Type::DOUBLE) return false;
      break;
    default:
      return false;
  }
  const auto& logical = column.logical_type();
  if (logical && !logical->is_none()) {
    // Only an annotation that says what the physical type already is (a signed integer).
    if (bits == 0 || !logical->is_int()) return false;
    const auto& integer = static_cast<const parquet::IntLogicalType&>(*logical);
    if (integer.bit_width() != bits || !integer.is_signed()) return false;
  }
  return column.max_definition_level() == 0 || !chunk_counts_nulls;
}

// The first `rows` values of one leaf with no nulls, read by Parquet's column reader straight into
// one buffer: no Arrow record reader, no validity bitmap from the definition levels, no spaced
// decoding. Arrow's ReadRowGroup spent twice the time on 300 float columns (dictionary-encoded,
// optional, no nulls: 78 against 36 ms a file; 48 int64 and float32 columns 63 against 43 ms).
// nullptr when the levels show a null after all (the statistics left the count out): the caller
// reads the leaf through Arrow instead.
template <typename ParquetType>
Result<std::shared_ptr<arrow::Array>> ReadDirect(parquet::ColumnReader* column,
                                                 const std::shared_ptr<arrow::DataType>& type,
                                                 int64_t rows, std::vector<int16_t>* levels) {
  using T = typename ParquetType::c_type;
  auto* reader = static_cast<parquet::TypedColumnReader<ParquetType>*>(column);
  ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::Buffer> values,
                        arrow::AllocateBuffer(rows * sizeof(T), RecyclingPool::Get()));
  T* out = reinterpret_cast<T*>(values->mutable_data());
  levels->resize(kDirectLevels);
  int64_t done = 0;
  while (done < rows) {
    int64_t values_read = 0;
    const int64_t levels_read = reader->ReadBatch(
        std::min(rows - done, kDirectLevels), levels->data(), nullptr, out + done, &values_read);
    if (levels_read == 0) return Status::IOError("fewer rows than the footer says");
    if (values_read != levels_read) return nullptr;  // a null
    done += levels_read;
  }
  return arrow::MakeArray(arrow::ArrayData::Make(type, rows, {nullptr, std::move(values)}, 0));
}

Result<std::shared_ptr<arrow::Array>> ReadDirectLeaf(parquet::ColumnReader* column,
                                                     const std::shared_ptr<arrow::DataType>& type,
                                                     int64_t rows, std::vector<int16_t>* levels) {
  switch (column->type()) {
    case parquet::Type::INT32:
      return ReadDirect<parquet::Int32Type>(column, type, rows, levels);
    case parquet::Type::INT64:
      return ReadDirect<parquet::Int64Type>(column, type, rows, levels);
    case parquet::Type::FLOAT:
      return ReadDirect<parquet::FloatType>(column, type, rows, levels);
    case parquet::Type::DOUBLE:
      return ReadDirect<parquet::DoubleType>(column, type, rows, levels);
    default:
      return nullptr;
  }
}

}  // namespace

Result<std::shared_ptr<arrow::Table>> ReadRowGroupTable(const Catalog& catalog, int row_group,
                                                        const std::vector<std::string>& fields,
                                                        const std::set<std::string>& as_dictionary,
                                                        int64_t num_rows) {
  const RowGroupRef& rg = catalog.row_groups()[row_group];
  const CatalogFile& file = catalog.files()[rg.file];
  const bool partial = num_rows >= 0 && num_rows < rg.num_rows;
  const int64_t rows = partial ? num_rows : rg.num_rows;

  // A column this file lacks (added to the dataset later) is read as nulls.
  std::vector<int> leaves;
  std::vector<int> dictionary_leaves;
  std::vector<std::string> present;  // a partial read's fields that this file has
  // Fixed-width columns without nulls, read directly (ReadDirect); local files only (a remote
  // read pre-buffers the chunks through Arrow's reader).
  struct DirectField {
    const std::string* top;
    int leaf;
    std::shared_ptr<arrow::DataType> type;
  };
  std::vector<DirectField> direct;
  const bool remote = IsRemote(*file.fs);
  for (const auto& field : fields) {
    auto it = file.fields.find(field);
    if (it == file.fields.end()) continue;
    if (partial) present.push_back(field);
    const auto unified = catalog.schema()->GetFieldByName(field);
    const auto& type = it->second.type;
    if (!remote && it->second.path.empty() && it->second.leaves.size() == 1 && unified && type &&
        type->Equals(*unified->type())) {
      const int leaf = it->second.leaves[0];
      if (DirectReadable(*file.metadata->schema()->Column(leaf),
                         file.ChunkCountsNulls(rg.row_group, leaf), *type)) {
        direct.push_back({&it->second.top, leaf, type});
        continue;
      }
    }
    leaves.insert(leaves.end(), it->second.leaves.begin(), it->second.leaves.end());
    // Only plain string and binary columns whose type is the dataset's: their dictionary then
    // needs no conforming (a dictionary-typed column is read as one anyway).
    if (as_dictionary.contains(field) && it->second.path.empty() && unified && type &&
        (type->id() == arrow::Type::STRING || type->id() == arrow::Type::BINARY) &&
        type->Equals(*unified->type())) {
      dictionary_leaves.insert(dictionary_leaves.end(), it->second.leaves.begin(),
                               it->second.leaves.end());
    }
  }
  int64_t partial_bytes = 0;  // a partial read's column chunks, uncompressed
  if (partial) {
    for (int64_t field_bytes : catalog.FieldBytes(rg, present)) partial_bytes += field_bytes;
  }
  const int64_t num_leaves = static_cast<int64_t>(leaves.size() + direct.size());

  std::shared_ptr<arrow::Table> table;
  std::map<std::string, std::shared_ptr<arrow::ChunkedArray>> direct_columns;  // by top name
  Status failure;
  if (num_leaves > 0) {
    auto input = file.Open();
    if (!input.ok()) {
      return MakeError(ErrorKind::kStorage,
                       "cannot open " + catalog.Where(rg) + ": " + input.status().message());
    }
    try {
      parquet::ArrowReaderProperties arrow_props;
      arrow_props.set_use_threads(false);           // our workers are the parallelism
      SetReaderProperties(*file.fs, &arrow_props);  // pre-buffer coalesced ranges if remote
      for (int leaf : dictionary_leaves) arrow_props.set_read_dictionary(leaf, true);
      // Page buffers and arrays come from the recycling pool: the same sizes every row group.
      parquet::ReaderProperties reader_props(RecyclingPool::Get());
      if (partial && !remote && partial_bytes >= kPagedChunkBytes * num_leaves) {
        // The head decodes its first rows only: its column chunks are read page by page, as far
        // as those rows, instead of whole (unbuffered, Arrow reads a chunk in one call).
        reader_props.enable_buffered_stream();
        reader_props.set_buffer_size(kPartialReadBuffer);
      }
      auto reader = parquet::ParquetFileReader::Open(*input, reader_props, file.metadata);
      if (!direct.empty()) {
        auto row_group_reader = reader->RowGroup(rg.row_group);
        std::vector<int16_t> levels;
        for (const DirectField& d : direct) {
          auto array =
              ReadDirectLeaf(row_group_reader->Column(d.leaf).get(), d.type, rows, &levels);
          if (!array.ok()) {
            failure = array.status();
            break;
          }
          if (*array) {
            direct_columns[*d.top] = std::make_shared<arrow::ChunkedArray>(std::move(*array));
          } else {
            leaves.push_back(d.leaf);  // it has nulls: through Arrow's reader
          }
        }
      }
      std::sort(leaves.begin(), leaves.end());
      leaves.erase(std::unique(leaves.begin(), leaves.end()), leaves.end());
      if (failure.ok() && !leaves.empty()) {
        auto arrow_reader =
            parquet::arrow::FileReader::Make(RecyclingPool::Get(), std::move(reader), arrow_props);
        if (!arrow_reader.ok()) {
          failure = arrow_reader.status();
        } else if (partial) {
          // The row group's first batch of `rows` rows, read page by page; the rest stays
          // undecoded.
          (*arrow_reader)->set_batch_size(std::max<int64_t>(rows, 1));
          auto batches = (*arrow_reader)->GetRecordBatchReader({rg.row_group}, leaves);
          std::shared_ptr<arrow::RecordBatch> batch;
          failure = batches.ok() ? (*batches)->ReadNext(&batch) : batches.status();
          if (failure.ok() && (!batch || batch->num_rows() < rows)) {
            failure = Status::IOError("fewer rows than the footer says");
          }
          if (failure.ok()) {
            auto result = arrow::Table::FromRecordBatches({batch->Slice(0, rows)});
            if (result.ok()) {
              table = *result;
            } else {
              failure = result.status();
            }
          }
        } else {
          auto result = (*arrow_reader)->ReadRowGroup(rg.row_group, leaves);
          if (result.ok()) {
            table = *result;
          } else {
            failure = result.status();
          }
        }
      }
    } catch (const parquet::ParquetStatusException& e) {
      failure = e.status();
    } catch (const parquet::ParquetException& e) {
      failure = Status::IOError(e.what());
    }
    if (!failure.ok() || (!leaves.empty() && !table)) {
      std::string columns;
      for (const auto& f : fields) columns += (columns.empty() ? "'" : ", '") + f + "'";
      ErrorKind kind = ReadFailureKind(failure);
      std::string why = failure.message();
      if (kind == ErrorKind::kNotFound) {
        // The file was listed when the loader opened: it vanished since, a storage failure (as
        // when a local file cannot be opened any more), not a wrong source.
        kind = ErrorKind::kStorage;
        why = "the file no longer exists (deleted after the loader opened it?): " + why;
      } else if (kind == ErrorKind::kCorruptFile && !IsRemote(*file.fs)) {
        // Decoded against the footer read at open: a file rewritten in place since then fails
        // here. Say that it changed, as a loader with a cache does, not that it is corrupt.
        if (const Status changed = file.CheckUnchanged(); !changed.ok()) {
          kind = ErrorKind::kStorage;
          why = changed.message() + " (decoding it with the footer read at open: " + why + ")";
        }
      }
      return MakeError(
          kind, std::string(kind == ErrorKind::kCorruptFile ? "cannot decode" : "cannot read") +
                    " column(s) " + columns + " of " + catalog.Where(rg) + ": " + why);
    }
  }
  // One column per requested field: a nested leaf extracted from its top-level column, and
  // every file's type converted to the dataset's unified type.
  std::vector<std::shared_ptr<arrow::Field>> out_fields;
  std::vector<std::shared_ptr<arrow::ChunkedArray>> out_columns;
  const std::string where = catalog.Where(rg);
  for (const auto& field : fields) {
    auto unified = catalog.schema()->GetFieldByName(field);
    if (!unified) {
      return MakeError(ErrorKind::kColumnNotFound,
                       "column '" + field + "' is not in the dataset (" + where + ")");
    }
    const std::shared_ptr<arrow::DataType>& type = unified->type();
    auto it = file.fields.find(field);
    if (it == file.fields.end()) {
      STOKER_ASSIGN_OR_RAISE(auto nulls, arrow::MakeArrayOfNull(type, rows));
      out_fields.push_back(arrow::field(field, type));
      out_columns.push_back(std::make_shared<arrow::ChunkedArray>(std::move(nulls)));
      continue;
    }
    if (auto d = direct_columns.find(it->second.top); d != direct_columns.end()) {
      out_fields.push_back(arrow::field(field, type));
      out_columns.push_back(d->second);
      continue;
    }
    auto top = table ? table->GetColumnByName(it->second.top) : nullptr;
    if (!top) {
      return MakeError(ErrorKind::kCorruptFile,
                       "column '" + field + "' missing after decoding " + where);
    }
    if (it->second.path.empty() && top->type()->Equals(*type)) {
      out_fields.push_back(arrow::field(field, type));
      out_columns.push_back(std::move(top));
      continue;
    }
    // Read as a dictionary of the dataset's own value type: kept so (as_dictionary).
    if (it->second.path.empty() && top->type()->id() == arrow::Type::DICTIONARY &&
        static_cast<const arrow::DictionaryType&>(*top->type()).value_type()->Equals(*type)) {
      out_fields.push_back(arrow::field(field, top->type()));
      out_columns.push_back(std::move(top));
      continue;
    }
    std::vector<std::shared_ptr<arrow::Array>> chunks;
    for (const auto& chunk : top->chunks()) {
      auto leaf = ExtractPath(chunk, it->second.path);
      if (!leaf.ok()) {
        return MakeError(ErrorKind::kCorruptFile, "cannot read column '" + field + "' of " + where +
                                                      ": " + leaf.status().message());
      }
      STOKER_ASSIGN_OR_RAISE(auto conformed, ConformArray(*leaf, type, field, where));
      chunks.push_back(std::move(conformed));
    }
    out_fields.push_back(arrow::field(field, type));
    out_columns.push_back(std::make_shared<arrow::ChunkedArray>(std::move(chunks), type));
  }
  return arrow::Table::Make(arrow::schema(std::move(out_fields)), std::move(out_columns), rows);
}

Result<std::shared_ptr<arrow::Array>> FlattenColumn(const arrow::ChunkedArray& column,
                                                    bool keep_extensions, const std::string& field,
                                                    const std::string& where) {
  // Dictionaries and extensions are unwrapped chunk by chunk (chunks may carry different
  // dictionaries).
  std::vector<std::shared_ptr<arrow::Array>> chunks;
  for (auto chunk : column.chunks()) {
    if (chunk->type_id() == arrow::Type::EXTENSION && !keep_extensions) {
      chunk = static_cast<const arrow::ExtensionArray&>(*chunk).storage();
    }
    if (chunk->type_id() == arrow::Type::DICTIONARY) {
      ARROW_ASSIGN_OR_RAISE(
          chunk,
          MaterializeDictionary(static_cast<const arrow::DictionaryArray&>(*chunk), field, where));
    }
    chunks.push_back(std::move(chunk));
  }
  if (chunks.size() == 1) return std::move(chunks[0]);
  if (chunks.empty()) return arrow::MakeEmptyArray(column.type());
  return arrow::Concatenate(chunks);
}

Result<std::shared_ptr<arrow::RecordBatch>> ReadRowGroupBatch(
    const Catalog& catalog, int row_group, const std::vector<std::string>& fields) {
  const RowGroupRef& rg = catalog.row_groups()[row_group];
  const std::string where = catalog.Where(rg);
  STOKER_ASSIGN_OR_RAISE(auto table, ReadRowGroupTable(catalog, row_group, fields));
  std::vector<std::shared_ptr<arrow::Field>> out_fields;
  std::vector<std::shared_ptr<arrow::Array>> columns;
  for (const auto& field : fields) {
    auto chunked = table->GetColumnByName(field);
    if (!chunked || chunked->length() != rg.num_rows) {
      return MakeError(ErrorKind::kCorruptFile,
                       "column '" + field + "' of " + where + " does not have the " +
                           std::to_string(rg.num_rows) + " rows its footer says");
    }
    STOKER_ASSIGN_OR_RAISE(auto array,
                           FlattenColumn(*chunked, /*keep_extensions=*/true, field, where));
    out_fields.push_back(arrow::field(field, array->type()));
    columns.push_back(std::move(array));
  }
  return arrow::RecordBatch::Make(arrow::schema(std::move(out_fields)), rg.num_rows,
                                  std::move(columns));
}

}  // namespace stoker
