#include "catalog/dictionary.h"

#include <arrow/array.h>
#include <arrow/buffer.h>
#include <arrow/type.h>

#include <cstring>
#include <vector>

#include "util/recycling_pool.h"

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
    // int8 indices are signed in Arrow: a negative one is rejected below.
    const int64_t index = static_cast<int64_t>(raw[i]);  // NOLINT(bugprone-signed-char-misuse)
    if (index < 0 || index >= dict_length) {
      return Status::IndexError("dictionary index ", index, " at row ", i, " is outside [0, ",
                                dict_length, ")");
    }
    (*rows)[i] = values.IsNull(index) ? -1 : index;
  }
  return Status::OK();
}

// Two passes: offsets (and so the total size) first, then one copy per row into the buffer.
template <typename Offset>
Result<std::shared_ptr<arrow::Buffer>> GatherStrings(const arrow::ArrayData& values,
                                                     const std::vector<int64_t>& rows,
                                                     int64_t* offsets) {
  const Offset* value_offsets = values.GetValues<Offset>(1);
  const uint8_t* data = values.buffers[2] ? values.buffers[2]->data() : nullptr;
  offsets[0] = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t length =
        rows[i] >= 0 ? value_offsets[rows[i] + 1] - value_offsets[rows[i]] : int64_t{0};
    offsets[i + 1] = offsets[i] + length;
  }
  ARROW_ASSIGN_OR_RAISE(auto buffer,
                        arrow::AllocateBuffer(offsets[rows.size()], RecyclingPool::Get()));
  uint8_t* out = buffer->mutable_data();
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t length = offsets[i + 1] - offsets[i];
    if (length > 0) std::memcpy(out + offsets[i], data + value_offsets[rows[i]], length);
  }
  return std::shared_ptr<arrow::Buffer>(std::move(buffer));
}

}  // namespace

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
    ARROW_ASSIGN_OR_RAISE(auto bitmap, arrow::AllocateBitmap(n, RecyclingPool::Get()));
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
    ARROW_ASSIGN_OR_RAISE(auto buffer, arrow::AllocateBuffer(n * width, RecyclingPool::Get()));
    // An empty dictionary (every row null) may have no value buffer at all.
    const uint8_t* from =
        value_data.buffers[1] ? value_data.buffers[1]->data() + value_data.offset * width : nullptr;
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
  ARROW_ASSIGN_OR_RAISE(auto offsets,
                        arrow::AllocateBuffer((n + 1) * sizeof(int64_t), RecyclingPool::Get()));
  auto* offsets_out = reinterpret_cast<int64_t*>(offsets->mutable_data());
  std::shared_ptr<arrow::Buffer> data;
  if (values.type_id() == arrow::Type::STRING || values.type_id() == arrow::Type::BINARY) {
    ARROW_ASSIGN_OR_RAISE(data, GatherStrings<int32_t>(value_data, rows, offsets_out));
  } else {
    ARROW_ASSIGN_OR_RAISE(data, GatherStrings<int64_t>(value_data, rows, offsets_out));
  }
  return arrow::MakeArray(arrow::ArrayData::Make(
      type, n, {std::move(validity), std::move(offsets), std::move(data)}, null_count));
}

}  // namespace stoker
