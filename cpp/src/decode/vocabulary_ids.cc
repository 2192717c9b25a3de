#include "decode/vocabulary_ids.h"

#include <arrow/array/builder_primitive.h>
#include <arrow/buffer.h>
#include <arrow/util/bit_util.h>
#include <xxhash.h>

#include <cstring>
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

template <typename Id>
Status LookupChunk(const Vocabulary& vocabulary, const arrow::Array& chunk,
                   const std::string& field, const std::string& where, Id* out, uint8_t* valid,
                   DictionaryIdsMemo* memo);

// A dictionary's entries as ids (looked up once each).
Result<std::shared_ptr<const DictionaryIdsMemo::EntryIds>> LookupEntries(
    const Vocabulary& vocabulary, const arrow::Array& dictionary, const std::string& field,
    const std::string& where) {
  auto entries = std::make_shared<DictionaryIdsMemo::EntryIds>();
  entries->ids.resize(dictionary.length());
  entries->valid.resize(dictionary.length());
  STOKER_RETURN_NOT_OK(LookupChunk<int64_t>(vocabulary, dictionary, field, where,
                                            entries->ids.data(), entries->valid.data(),
                                            /*memo=*/nullptr));
  return std::shared_ptr<const DictionaryIdsMemo::EntryIds>(std::move(entries));
}

// The ids of one chunk's values, and whether each row is valid (one byte per row). A row whose
// dictionary index points at a null entry is null, as MaterializeDictionary makes it.
template <typename Id>
Status LookupChunk(const Vocabulary& vocabulary, const arrow::Array& chunk,
                   const std::string& field, const std::string& where, Id* out, uint8_t* valid,
                   DictionaryIdsMemo* memo) {
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
      // Each dictionary entry is looked up once (once per loader with the memo); rows then only
      // index.
      const auto& dict = static_cast<const arrow::DictionaryArray&>(chunk);
      const int64_t entries = dict.dictionary()->length();
      std::shared_ptr<const DictionaryIdsMemo::EntryIds> entry_ids;
      if (memo != nullptr) {
        STOKER_ASSIGN_OR_RAISE(entry_ids, memo->Get(vocabulary, dict.dictionary(), field, where));
      } else {
        STOKER_ASSIGN_OR_RAISE(entry_ids,
                               LookupEntries(vocabulary, *dict.dictionary(), field, where));
      }
      const int64_t* ids = entry_ids->ids.data();
      const uint8_t* entry_valid = entry_ids->valid.data();
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
          out[i] = static_cast<Id>(ids[index]);
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
                                              const std::string& field, const std::string& where,
                                              DictionaryIdsMemo* memo) {
  using Id = typename ArrowType::c_type;
  const int64_t rows = column.length();
  ARROW_ASSIGN_OR_RAISE(
      std::shared_ptr<arrow::Buffer> ids,
      arrow::AllocateBuffer(rows * static_cast<int64_t>(sizeof(Id)), RecyclingPool::Get()));
  std::vector<uint8_t> valid(rows);
  auto* out = reinterpret_cast<Id*>(ids->mutable_data());
  int64_t at = 0;
  for (const auto& chunk : column.chunks()) {
    STOKER_RETURN_NOT_OK(
        LookupChunk(vocabulary, *chunk, field, where, out + at, valid.data() + at, memo));
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

// A dictionary's content as it is compared: its offsets (from 0) and the bytes they span. Null
// when it cannot be compared that way (empty, nulls, a slice: looked up, not kept).
struct Content {
  const uint8_t* offsets = nullptr;
  size_t offsets_bytes = 0;
  const uint8_t* data = nullptr;
  size_t data_bytes = 0;
};

template <typename ArrayType>
Content ContentOf(const ArrayType& array) {
  if (array.length() == 0 || array.offset() != 0 || array.null_count() != 0 ||
      array.value_offset(0) != 0) {
    return {};
  }
  return {reinterpret_cast<const uint8_t*>(array.raw_value_offsets()),
          sizeof(array.value_offset(0)) * static_cast<size_t>(array.length() + 1),
          array.value_data() ? array.value_data()->data() : nullptr,
          static_cast<size_t>(array.value_offset(array.length()))};
}

Content ContentOf(const arrow::Array& array) {
  switch (array.type_id()) {
    case arrow::Type::STRING:
    case arrow::Type::BINARY:
      return ContentOf(static_cast<const arrow::BinaryArray&>(array));
    case arrow::Type::LARGE_STRING:
    case arrow::Type::LARGE_BINARY:
      return ContentOf(static_cast<const arrow::LargeBinaryArray&>(array));
    default:
      return {};
  }
}

bool SameContent(const arrow::Array& a, const Content& ca, const arrow::Array& b,
                 const Content& cb) {
  return a.type_id() == b.type_id() && a.length() == b.length() &&
         ca.offsets_bytes == cb.offsets_bytes && ca.data_bytes == cb.data_bytes &&
         std::memcmp(ca.offsets, cb.offsets, ca.offsets_bytes) == 0 &&
         (ca.data_bytes == 0 || std::memcmp(ca.data, cb.data, ca.data_bytes) == 0);
}

int64_t BufferBytes(const arrow::Array& array) {
  int64_t bytes = 0;
  for (const auto& buffer : array.data()->buffers) {
    if (buffer) bytes += buffer->capacity();
  }
  return bytes;
}

}  // namespace

Result<std::shared_ptr<const DictionaryIdsMemo::EntryIds>> DictionaryIdsMemo::Get(
    const Vocabulary& vocabulary, const std::shared_ptr<arrow::Array>& dictionary,
    const std::string& field, const std::string& where) {
  const Content content = ContentOf(*dictionary);
  if (content.offsets == nullptr) return LookupEntries(vocabulary, *dictionary, field, where);
  uint64_t hash = XXH3_64bits_withSeed(content.offsets, content.offsets_bytes,
                                       static_cast<uint64_t>(dictionary->type_id()));
  if (content.data_bytes > 0) hash = XXH3_64bits_withSeed(content.data, content.data_bytes, hash);
  hash &= hash_mask_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [begin, end] = kept_.equal_range(hash);
    for (auto it = begin; it != end; ++it) {
      const Kept& kept = it->second;
      if (kept.vocabulary == &vocabulary &&
          SameContent(*kept.dictionary, ContentOf(*kept.dictionary), *dictionary, content)) {
        ++hits_;
        return kept.ids;
      }
    }
  }
  STOKER_ASSIGN_OR_RAISE(auto ids, LookupEntries(vocabulary, *dictionary, field, where));
  const int64_t bytes = BufferBytes(*dictionary) +
                        static_cast<int64_t>(ids->ids.size() * sizeof(int64_t) + ids->valid.size());
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes_ + bytes <= max_bytes_) {  // another thread may have kept an equal one: harmless
    kept_.emplace(hash, Kept{&vocabulary, dictionary, ids});
    bytes_ += bytes;
  }
  return ids;
}

int64_t DictionaryIdsMemo::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

int64_t DictionaryIdsMemo::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

Result<std::shared_ptr<arrow::Array>> ApplyVocabulary(const Vocabulary& vocabulary,
                                                      const arrow::ChunkedArray& column,
                                                      const std::string& field,
                                                      const std::string& where,
                                                      DictionaryIdsMemo* memo) {
  switch (vocabulary.IdDType()) {
    case DType::kUInt8:
      return ApplyAs<arrow::UInt8Type>(vocabulary, column, field, where, memo);
    case DType::kUInt16:
      return ApplyAs<arrow::UInt16Type>(vocabulary, column, field, where, memo);
    case DType::kUInt32:
      return ApplyAs<arrow::UInt32Type>(vocabulary, column, field, where, memo);
    default:
      return ApplyAs<arrow::Int64Type>(vocabulary, column, field, where, memo);
  }
}

}  // namespace stoker
