#include "decode/vocabulary_ids.h"

#include <arrow/array/builder_primitive.h>
#include <arrow/buffer.h>
#include <arrow/util/bit_util.h>

#include <vector>

#include "util/recycling_pool.h"

namespace stoker {
namespace {

// `Id` holds every id of the vocabulary (Vocabulary::IdDType), so the casts below are exact.
template <typename Id, typename StringArray>
void LookupAll(const Vocabulary& vocabulary, const StringArray& array, Id* out, uint8_t* valid) {
  for (int64_t i = 0; i < array.length(); ++i) {
    valid[i] = array.IsValid(i);
    out[i] = valid[i] ? static_cast<Id>(vocabulary.Lookup(array.GetView(i))) : 0;
  }
}

// The ids of one chunk's values, and whether each row is valid (one byte per row). A row whose
// dictionary index points at a null entry is null, as MaterializeDictionary makes it.
template <typename Id>
Status LookupChunk(const Vocabulary& vocabulary, const arrow::Array& chunk,
                   const std::string& field, const std::string& where, Id* out, uint8_t* valid) {
  switch (chunk.type_id()) {
    case arrow::Type::STRING:
    case arrow::Type::BINARY:
      LookupAll(vocabulary, static_cast<const arrow::BinaryArray&>(chunk), out, valid);
      return Status::OK();
    case arrow::Type::LARGE_STRING:
    case arrow::Type::LARGE_BINARY:
      LookupAll(vocabulary, static_cast<const arrow::LargeBinaryArray&>(chunk), out, valid);
      return Status::OK();
    case arrow::Type::DICTIONARY: {
      // Each dictionary entry is looked up once; rows then only index.
      const auto& dict = static_cast<const arrow::DictionaryArray&>(chunk);
      const int64_t entries = dict.dictionary()->length();
      std::vector<Id> ids(entries);
      std::vector<uint8_t> entry_valid(entries);
      STOKER_RETURN_NOT_OK(LookupChunk(vocabulary, *dict.dictionary(), field, where, ids.data(),
                                       entry_valid.data()));
      // Typed once per chunk (GetValueIndex switches on the index type for every row: a tenth
      // of the strings set's later epochs).
      int64_t bad = -1;
      auto map = [&](const auto* indices) {
        const bool any_nulls = dict.null_count() > 0;
        for (int64_t i = 0; i < dict.length(); ++i) {
          const auto index = indices[i];
          if (any_nulls && dict.IsNull(i)) {
            out[i] = 0;
            valid[i] = 0;
            continue;
          }
          if (static_cast<uint64_t>(index) >= static_cast<uint64_t>(entries)) {
            bad = i;
            return;
          }
          out[i] = ids[index];
          valid[i] = entry_valid[index];
        }
      };
      const arrow::ArrayData& indices = *dict.indices()->data();
      switch (indices.type->id()) {
        case arrow::Type::INT8:
          map(indices.GetValues<int8_t>(1));
          break;
        case arrow::Type::INT16:
          map(indices.GetValues<int16_t>(1));
          break;
        case arrow::Type::INT32:
          map(indices.GetValues<int32_t>(1));
          break;
        case arrow::Type::INT64:
          map(indices.GetValues<int64_t>(1));
          break;
        case arrow::Type::UINT8:
          map(indices.GetValues<uint8_t>(1));
          break;
        case arrow::Type::UINT16:
          map(indices.GetValues<uint16_t>(1));
          break;
        case arrow::Type::UINT32:
          map(indices.GetValues<uint32_t>(1));
          break;
        default:  // Arrow's dictionaries take integer indices only
          map(indices.GetValues<uint64_t>(1));
      }
      if (bad >= 0) {
        return MakeError(ErrorKind::kCorruptFile,
                         "column '" + field + "' of " + where + " has a dictionary index " +
                             std::to_string(dict.GetValueIndex(bad)) + " outside its " +
                             std::to_string(entries) + " entries");
      }
      return Status::OK();
    }
    default:
      return MakeError(ErrorKind::kUnsupportedType, "categories: column '" + field + "' of " +
                                                        where + " holds " +
                                                        chunk.type()->ToString() + ", not strings");
  }
}

template <typename ArrowType>
Result<std::shared_ptr<arrow::Array>> ApplyAs(const Vocabulary& vocabulary,
                                              const arrow::ChunkedArray& column,
                                              const std::string& field, const std::string& where) {
  using Id = typename ArrowType::c_type;
  const int64_t rows = column.length();
  ARROW_ASSIGN_OR_RAISE(
      std::shared_ptr<arrow::Buffer> ids,
      arrow::AllocateBuffer(rows * static_cast<int64_t>(sizeof(Id)), RecyclingPool::Get()));
  std::vector<uint8_t> valid(rows);
  auto* out = reinterpret_cast<Id*>(ids->mutable_data());
  int64_t at = 0;
  for (const auto& chunk : column.chunks()) {
    STOKER_RETURN_NOT_OK(LookupChunk(vocabulary, *chunk, field, where, out + at, &valid[at]));
    at += chunk->length();
  }
  int64_t nulls = 0;
  for (uint8_t v : valid) nulls += v == 0;
  std::shared_ptr<arrow::Buffer> validity;
  if (nulls > 0) {
    ARROW_ASSIGN_OR_RAISE(validity, arrow::AllocateBitmap(rows, RecyclingPool::Get()));
    for (int64_t i = 0; i < rows; ++i) {
      arrow::bit_util::SetBitTo(validity->mutable_data(), i, valid[i] != 0);
    }
  }
  return std::static_pointer_cast<arrow::Array>(
      std::make_shared<arrow::NumericArray<ArrowType>>(rows, ids, validity, nulls));
}

}  // namespace

Result<std::shared_ptr<arrow::Array>> ApplyVocabulary(const Vocabulary& vocabulary,
                                                      const arrow::ChunkedArray& column,
                                                      const std::string& field,
                                                      const std::string& where) {
  switch (vocabulary.IdDType()) {
    case DType::kUInt8:
      return ApplyAs<arrow::UInt8Type>(vocabulary, column, field, where);
    case DType::kUInt16:
      return ApplyAs<arrow::UInt16Type>(vocabulary, column, field, where);
    case DType::kUInt32:
      return ApplyAs<arrow::UInt32Type>(vocabulary, column, field, where);
    default:
      return ApplyAs<arrow::Int64Type>(vocabulary, column, field, where);
  }
}

}  // namespace stoker
