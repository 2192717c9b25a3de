#include "decode/decoder.h"

#include <arrow/array/concatenate.h>
#include <arrow/buffer.h>
#include <arrow/extension_type.h>
#include <arrow/table.h>
#include <arrow/util/byte_size.h>
#include <arrow/util/logging.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>

#include <cstring>
#include <sstream>
#include <vector>

namespace stoker {
namespace {

// Row i's index into the dictionary, or -1 where the row is null (a null index, or an index
// that points at a null dictionary entry).
template <typename Index>
Status ResolveIndices(const arrow::Array& indices, const arrow::Array& values,
                      std::vector<int64_t>* rows) {
  const Index* raw = indices.data()->GetValues<Index>(1);
  const int64_t dict_length = values.length();
  for (int64_t i = 0; i < indices.length(); ++i) {
    if (indices.IsNull(i)) {
      (*rows)[i] = -1;
      continue;
    }
    const int64_t index = static_cast<int64_t>(raw[i]);
    if (index < 0 || index >= dict_length) {
      return Status::IndexError("dictionary index ", index, " at row ", i, " is outside [0, ",
                                dict_length, ")");
    }
    (*rows)[i] = values.IsNull(index) ? -1 : index;
  }
  return Status::OK();
}

template <typename Offset>
void GatherStrings(const arrow::ArrayData& values, const std::vector<int64_t>& rows,
                   int64_t* offsets, std::vector<uint8_t>* bytes) {
  const Offset* value_offsets = values.GetValues<Offset>(1);
  const uint8_t* data = values.buffers[2] ? values.buffers[2]->data() : nullptr;
  offsets[0] = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] >= 0) {
      const int64_t begin = value_offsets[rows[i]];
      const int64_t end = value_offsets[rows[i] + 1];
      bytes->insert(bytes->end(), data + begin, data + end);
    }
    offsets[i + 1] = static_cast<int64_t>(bytes->size());
  }
}

// Dictionary arrays become plain arrays of their value type: fixed-width values, or strings and
// binary (always with 64-bit offsets, so a slice can hold more than 2 GiB of text).
Result<std::shared_ptr<arrow::Array>> MaterializeDictionary(const arrow::DictionaryArray& dict,
                                                            const std::string& column,
                                                            const std::string& where) {
  const arrow::Array& values = *dict.dictionary();
  const arrow::Array& indices = *dict.indices();
  const int64_t n = indices.length();
  std::vector<int64_t> rows(n);
  Status status;
  switch (indices.type_id()) {
    case arrow::Type::INT8:
      status = ResolveIndices<int8_t>(indices, values, &rows);
      break;
    case arrow::Type::UINT8:
      status = ResolveIndices<uint8_t>(indices, values, &rows);
      break;
    case arrow::Type::INT16:
      status = ResolveIndices<int16_t>(indices, values, &rows);
      break;
    case arrow::Type::UINT16:
      status = ResolveIndices<uint16_t>(indices, values, &rows);
      break;
    case arrow::Type::INT32:
      status = ResolveIndices<int32_t>(indices, values, &rows);
      break;
    case arrow::Type::UINT32:
      status = ResolveIndices<uint32_t>(indices, values, &rows);
      break;
    case arrow::Type::INT64:
      status = ResolveIndices<int64_t>(indices, values, &rows);
      break;
    case arrow::Type::UINT64:
      status = ResolveIndices<uint64_t>(indices, values, &rows);
      break;
    default:
      status = Status::TypeError("index type ", indices.type()->ToString());
      break;
  }
  if (!status.ok()) {
    return MakeError(ErrorKind::kCorruptFile,
                     "column '" + column + "' in " + where + ": " + status.message());
  }
  int64_t null_count = 0;
  for (int64_t row : rows) null_count += row < 0;
  std::shared_ptr<arrow::Buffer> validity;
  if (null_count > 0) {
    ARROW_ASSIGN_OR_RAISE(auto bitmap, arrow::AllocateBitmap(n));
    uint8_t* bits = bitmap->mutable_data();
    std::memset(bits, 0, bitmap->size());
    for (int64_t i = 0; i < n; ++i) {
      if (rows[i] >= 0) bits[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
    }
    validity = std::move(bitmap);
  }

  const arrow::ArrayData& value_data = *values.data();
  const auto* fixed = dynamic_cast<const arrow::FixedWidthType*>(values.type().get());
  if (fixed != nullptr && values.type_id() != arrow::Type::BOOL && fixed->bit_width() % 8 == 0 &&
      values.type_id() != arrow::Type::FIXED_SIZE_BINARY) {
    const int width = fixed->bit_width() / 8;
    ARROW_ASSIGN_OR_RAISE(auto buffer, arrow::AllocateBuffer(n * width));
    const uint8_t* from = value_data.buffers[1]->data() + value_data.offset * width;
    uint8_t* out = buffer->mutable_data();
    for (int64_t i = 0; i < n; ++i) {
      // Null rows are zero so that null_mask delivers zeros, as for plain columns.
      if (rows[i] >= 0) {
        std::memcpy(out + i * width, from + rows[i] * width, width);
      } else {
        std::memset(out + i * width, 0, width);
      }
    }
    return arrow::MakeArray(arrow::ArrayData::Make(
        values.type(), n, {std::move(validity), std::move(buffer)}, null_count));
  }
  std::shared_ptr<arrow::DataType> type;
  switch (values.type_id()) {
    case arrow::Type::STRING:
    case arrow::Type::LARGE_STRING:
      type = arrow::large_utf8();
      break;
    case arrow::Type::BINARY:
    case arrow::Type::LARGE_BINARY:
      type = arrow::large_binary();
      break;
    default:
      return MakeError(ErrorKind::kUnsupportedType,
                       "column '" + column + "' in " + where + ": dictionary of " +
                           values.type()->ToString() + " is not supported");
  }
  ARROW_ASSIGN_OR_RAISE(auto offsets, arrow::AllocateBuffer((n + 1) * sizeof(int64_t)));
  std::vector<uint8_t> bytes;
  auto* offsets_out = reinterpret_cast<int64_t*>(offsets->mutable_data());
  if (values.type_id() == arrow::Type::STRING || values.type_id() == arrow::Type::BINARY) {
    GatherStrings<int32_t>(value_data, rows, offsets_out, &bytes);
  } else {
    GatherStrings<int64_t>(value_data, rows, offsets_out, &bytes);
  }
  ARROW_ASSIGN_OR_RAISE(auto data, arrow::AllocateBuffer(static_cast<int64_t>(bytes.size())));
  if (!bytes.empty()) std::memcpy(data->mutable_data(), bytes.data(), bytes.size());
  return arrow::MakeArray(arrow::ArrayData::Make(
      type, n, {std::move(validity), std::move(offsets), std::move(data)}, null_count));
}

std::string NullAdvice(const std::string& column) {
  return "; pass fill_null={'" + column + "': value} to replace them or null_mask=['" + column +
         "'] to get a validity mask";
}

}  // namespace

Decoder::Decoder(std::shared_ptr<const Catalog> catalog, std::shared_ptr<const OutputSpec> spec)
    : catalog_(std::move(catalog)), spec_(std::move(spec)) {}

std::vector<DecodeTask> Decoder::MakeTasks(const Plan& plan, int segment,
                                           int64_t task_bytes) const {
  const Segment& seg = plan.segments[segment];
  const RowGroupRef& rg = catalog_->row_groups()[seg.row_group];
  const double fraction = static_cast<double>(seg.num_rows) / static_cast<double>(rg.num_rows);
  std::vector<DecodeTask> tasks;
  DecodeTask current;
  current.segment = segment;
  for (const auto& field : spec_->file_fields) {
    // The whole row group is decoded even for a slice; its size is what the task costs.
    const int64_t bytes = catalog_->FieldBytes(rg, field);
    if (!current.fields.empty() && current.estimated_bytes + bytes > task_bytes) {
      tasks.push_back(std::move(current));
      current = DecodeTask{};
      current.segment = segment;
    }
    current.fields.push_back(field);
    current.estimated_bytes += static_cast<int64_t>(bytes * std::max(fraction, 0.0) + 0.5);
  }
  tasks.push_back(std::move(current));  // may be empty when only partition columns are read
  return tasks;
}

Result<DecodedColumns> Decoder::Decode(const Plan& plan, const DecodeTask& task) const {
  DecodedColumns out;
  if (task.fields.empty()) return out;
  const Segment& seg = plan.segments[task.segment];
  const RowGroupRef& rg = catalog_->row_groups()[seg.row_group];
  const CatalogFile& file = catalog_->files()[rg.file];

  std::vector<int> leaves;
  for (const auto& field : task.fields) {
    const auto& field_leaves = file.fields.at(field).leaves;
    leaves.insert(leaves.end(), field_leaves.begin(), field_leaves.end());
  }
  std::sort(leaves.begin(), leaves.end());

  auto input = file.fs->OpenInputFile(file.path);
  if (!input.ok()) {
    return MakeError(ErrorKind::kStorage,
                     "cannot open " + catalog_->Where(rg) + ": " + input.status().message());
  }
  std::shared_ptr<arrow::Table> table;
  std::string failure;
  try {
    parquet::ArrowReaderProperties arrow_props;
    arrow_props.set_use_threads(false);  // our workers are the parallelism
    arrow_props.set_pre_buffer(false);   // else reads go through Arrow's global I/O pool
    auto reader = parquet::ParquetFileReader::Open(*input, parquet::default_reader_properties(),
                                                   file.metadata);
    auto arrow_reader = parquet::arrow::FileReader::Make(arrow::default_memory_pool(),
                                                         std::move(reader), arrow_props);
    if (!arrow_reader.ok()) {
      failure = arrow_reader.status().message();
    } else {
      auto result = (*arrow_reader)->ReadRowGroup(rg.row_group, leaves);
      if (result.ok()) {
        table = *result;
      } else {
        failure = result.status().message();
      }
    }
  } catch (const parquet::ParquetException& e) {
    failure = e.what();
  }
  if (!table) {
    std::string columns;
    for (const auto& f : task.fields) columns += (columns.empty() ? "'" : ", '") + f + "'";
    return MakeError(ErrorKind::kCorruptFile, "cannot decode column(s) " + columns + " of " +
                                                  catalog_->Where(rg) + ": " + failure);
  }
  for (const auto& field : task.fields) {
    auto chunked = table->GetColumnByName(field);
    if (!chunked) {
      return MakeError(ErrorKind::kCorruptFile,
                       "column '" + field + "' missing after decoding " + catalog_->Where(rg));
    }
    if (chunked->length() != rg.num_rows) {
      return MakeError(ErrorKind::kCorruptFile, "column '" + field + "' of " + catalog_->Where(rg) +
                                                    " has " + std::to_string(chunked->length()) +
                                                    " values, the footer says " +
                                                    std::to_string(rg.num_rows));
    }
    // Slice first so dictionaries are resolved for the segment's rows only; dictionaries and
    // extensions are unwrapped chunk by chunk (chunks may carry different dictionaries).
    const std::shared_ptr<arrow::ChunkedArray> sliced = chunked->Slice(seg.row_begin, seg.num_rows);
    std::vector<std::shared_ptr<arrow::Array>> chunks;
    for (auto chunk : sliced->chunks()) {
      if (chunk->type_id() == arrow::Type::EXTENSION) {
        chunk = static_cast<const arrow::ExtensionArray&>(*chunk).storage();
      }
      if (chunk->type_id() == arrow::Type::DICTIONARY) {
        ARROW_ASSIGN_OR_RAISE(
            chunk, MaterializeDictionary(static_cast<const arrow::DictionaryArray&>(*chunk), field,
                                         catalog_->Where(rg)));
      }
      chunks.push_back(std::move(chunk));
    }
    std::shared_ptr<arrow::Array> array;
    if (chunks.size() == 1) {
      array = std::move(chunks[0]);
    } else if (chunks.empty()) {
      ARROW_ASSIGN_OR_RAISE(array, arrow::MakeEmptyArray(chunked->type()));
    } else {
      ARROW_ASSIGN_OR_RAISE(array, arrow::Concatenate(chunks));
    }
    out.bytes += arrow::util::TotalBufferSize(*array->data());
    out.arrays.emplace_back(field, std::move(array));
  }
  return out;
}

Status Decoder::PrepareSource(const ColumnSpec& spec, const Segment& segment,
                              const std::shared_ptr<arrow::Array>& array, ColumnSource* out) const {
  const RowGroupRef& rg = catalog_->row_groups()[segment.row_group];
  // A numeric fill value cannot stand for a missing string or list: those need the mask.
  const bool variable_length =
      spec.layout == SourceLayout::kString || spec.layout == SourceLayout::kList;
  const bool nulls_allowed =
      spec.options.null_mask || (spec.options.has_fill_null && !variable_length);
  if (array->null_count() > 0 && !nulls_allowed) {
    const std::string advice =
        variable_length ? "; pass null_mask=['" + spec.name +
                              "'] to get a validity mask (fill_null does not apply to strings "
                              "and lists)"
                        : NullAdvice(spec.name);
    return MakeError(ErrorKind::kNullValues, "column '" + spec.name + "' has " +
                                                 std::to_string(array->null_count()) +
                                                 " null(s) in " + catalog_->Where(rg) + advice);
  }
  if (array->null_count() > 0 && FillNullApplies(spec) &&
      !IsRepresentable(spec.options.fill_null, spec.dtype)) {
    std::ostringstream value;
    value.precision(17);
    value << spec.options.fill_null;
    return MakeError(ErrorKind::kInvalidOption,
                     "column '" + spec.name + "' has nulls in " + catalog_->Where(rg) +
                         " and fill_null=" + value.str() + " cannot be stored exactly as " +
                         DTypeName(spec.dtype) + "; pass fill_null={'" + spec.name +
                         "': value} with a value it holds");
  }
  out->array = array;
  const arrow::ArrayData& data = *array->data();
  if (array->null_count() > 0) {
    out->validity = data.buffers[0]->data();
    out->validity_offset = data.offset;
  }
  switch (spec.layout) {
    case SourceLayout::kFixed: {
      // Descend through fixed_size_list levels to the flat values.
      const arrow::ArrayData* level = &data;
      int64_t index = data.offset;
      while (level->type->id() == arrow::Type::FIXED_SIZE_LIST) {
        const int size = static_cast<const arrow::FixedSizeListType&>(*level->type).list_size();
        level = level->child_data[0].get();
        index = level->offset + index * size;
        if (level->GetNullCount() > 0) {
          return MakeError(ErrorKind::kNullValues,
                           "column '" + spec.name + "' has null elements inside its lists in " +
                               catalog_->Where(rg) + "; element nulls are not supported");
        }
      }
      out->values = level->buffers[1]->data() + index * DTypeSize(spec.source_dtype);
      break;
    }
    case SourceLayout::kBool:
      out->values = data.buffers[1]->data();
      out->bit_offset = data.offset;
      break;
    case SourceLayout::kList:
    case SourceLayout::kString: {
      const bool large = data.type->id() == arrow::Type::LARGE_LIST ||
                         data.type->id() == arrow::Type::LARGE_STRING ||
                         data.type->id() == arrow::Type::LARGE_BINARY;
      if (large) {
        out->offsets64 = data.GetValues<int64_t>(1);
      } else {
        out->offsets32 = data.GetValues<int32_t>(1);
      }
      if (spec.layout == SourceLayout::kString) {
        out->values = data.buffers[2] ? data.buffers[2]->data() : nullptr;
      } else {
        const arrow::ArrayData& child = *data.child_data[0];
        if (child.GetNullCount() > 0) {
          return MakeError(ErrorKind::kNullValues,
                           "column '" + spec.name + "' has null elements inside its lists in " +
                               catalog_->Where(rg) + "; element nulls are not supported");
        }
        out->values = child.buffers[1]->data() + child.offset * DTypeSize(spec.source_dtype);
      }
      break;
    }
    case SourceLayout::kPartition:
      break;
  }
  return Status::OK();
}

Result<std::shared_ptr<DecodedItem>> Decoder::Assemble(const Plan& plan, int segment,
                                                       std::vector<DecodedColumns> parts) const {
  const Segment& seg = plan.segments[segment];
  const RowGroupRef& rg = catalog_->row_groups()[seg.row_group];
  auto item = std::make_shared<DecodedItem>();
  item->segment = segment;
  item->num_rows = seg.num_rows;
  item->padding = seg.padding;
  auto find = [&](const std::string& name) -> std::shared_ptr<arrow::Array> {
    for (const auto& part : parts) {
      for (const auto& [field, array] : part.arrays) {
        if (field == name) return array;
      }
    }
    return nullptr;
  };
  for (const auto& part : parts) item->bytes += part.bytes;
  auto add = [&](const ColumnSpec& spec) -> Status {
    ColumnSource source;
    if (spec.layout == SourceLayout::kPartition) {
      const int key = spec.field_index - catalog_->num_file_fields();
      const std::string& value = catalog_->files()[rg.file].partition_values[key];
      source.partition_text = value;
      if (spec.kind == ColumnKind::kDense) source.partition_int = std::stoll(value);
    } else {
      auto array = find(spec.name);
      ARROW_DCHECK(array);
      STOKER_RETURN_NOT_OK(PrepareSource(spec, seg, array, &source));
    }
    item->sources.push_back(std::move(source));
    return Status::OK();
  };
  for (const auto& spec : spec_->columns) STOKER_RETURN_NOT_OK(add(spec));
  for (const auto& spec : spec_->features) STOKER_RETURN_NOT_OK(add(spec));
  return item;
}

}  // namespace stoker
