#include "catalog/row_group_reader.h"

#include <arrow/array/concatenate.h>
#include <arrow/extension_type.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>

#include <algorithm>

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
  for (const auto& field : fields) {
    auto it = file.fields.find(field);
    if (it == file.fields.end()) continue;
    if (partial) present.push_back(field);
    leaves.insert(leaves.end(), it->second.leaves.begin(), it->second.leaves.end());
    // Only plain string and binary columns whose type is the dataset's: their dictionary then
    // needs no conforming (a dictionary-typed column is read as one anyway).
    const auto unified = catalog.schema()->GetFieldByName(field);
    const auto& type = it->second.type;
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
  std::sort(leaves.begin(), leaves.end());
  leaves.erase(std::unique(leaves.begin(), leaves.end()), leaves.end());

  std::shared_ptr<arrow::Table> table;
  Status failure;
  if (!leaves.empty()) {
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
      if (partial && !IsRemote(*file.fs) &&
          partial_bytes >= kPagedChunkBytes * static_cast<int64_t>(leaves.size())) {
        // The head decodes its first rows only: its column chunks are read page by page, as far
        // as those rows, instead of whole (unbuffered, Arrow reads a chunk in one call).
        reader_props.enable_buffered_stream();
        reader_props.set_buffer_size(kPartialReadBuffer);
      }
      auto reader = parquet::ParquetFileReader::Open(*input, reader_props, file.metadata);
      auto arrow_reader =
          parquet::arrow::FileReader::Make(RecyclingPool::Get(), std::move(reader), arrow_props);
      if (!arrow_reader.ok()) {
        failure = arrow_reader.status();
      } else if (partial) {
        // The row group's first batch of `rows` rows, read page by page; the rest stays undecoded.
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
    } catch (const parquet::ParquetStatusException& e) {
      failure = e.status();
    } catch (const parquet::ParquetException& e) {
      failure = Status::IOError(e.what());
    }
    if (!table) {
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
