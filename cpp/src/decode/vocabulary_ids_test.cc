// Category ids (ApplyVocabulary): the decoder's side of LoaderOptions::categories.
#include "decode/vocabulary_ids.h"

#include <arrow/api.h>
#include <arrow/json/from_string.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "util/test_status_internal.h"

namespace stoker {
namespace {

std::shared_ptr<arrow::Array> FromJson(const std::shared_ptr<arrow::DataType>& type,
                                       const std::string& json) {
  return arrow::json::ArrayFromJSONString(type, json).ValueOrDie();
}

std::shared_ptr<arrow::Array> Dictionary(const std::string& indices, const std::string& values) {
  return arrow::DictionaryArray::FromArrays(arrow::dictionary(arrow::int32(), arrow::utf8()),
                                            FromJson(arrow::int32(), indices),
                                            FromJson(arrow::utf8(), values))
      .ValueOrDie();
}

// The ids as int64, whatever their (unsigned) width.
std::vector<int64_t> Ids(const arrow::Array& array) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < array.length(); ++i) {
    switch (array.type_id()) {
      case arrow::Type::UINT8:
        out.push_back(static_cast<const arrow::UInt8Array&>(array).Value(i));
        break;
      case arrow::Type::UINT16:
        out.push_back(static_cast<const arrow::UInt16Array&>(array).Value(i));
        break;
      case arrow::Type::UINT32:
        out.push_back(static_cast<const arrow::UInt32Array&>(array).Value(i));
        break;
      default:
        out.push_back(static_cast<const arrow::Int64Array&>(array).Value(i));
    }
  }
  return out;
}

// A vocabulary of `size` values "v00000".."v<size-1>" (sorted, so value i has id i + 1).
std::shared_ptr<const Vocabulary> Numbered(int size) {
  std::vector<std::string> values;
  for (int i = 0; i < size; ++i) {
    char text[16];
    std::snprintf(text, sizeof(text), "v%05d", i);
    values.push_back(text);
  }
  return *Vocabulary::Make(values, Vocabulary::Origin::kGiven, "c");
}

TEST(ApplyVocabulary, PlainAndDictionaryChunksKeepTheirNulls) {
  auto vocabulary = *Vocabulary::Make({"x", "y"}, Vocabulary::Origin::kGiven, "c");
  auto plain = FromJson(arrow::utf8(), R"(["y", null, "q", "x"])");
  auto dict = Dictionary("[1, 0, null, 2]", R"(["x", "y", "w"])");
  arrow::ChunkedArray mixed(arrow::ArrayVector{dict}, dict->type());
  ASSERT_OK_AND_ASSIGN(auto ids,
                       ApplyVocabulary(*vocabulary, arrow::ChunkedArray(plain), "c", "here"));
  EXPECT_EQ(Ids(*ids), (std::vector<int64_t>{2, 0, 0, 1}));
  EXPECT_EQ(ids->null_count(), 1);
  EXPECT_TRUE(ids->IsNull(1));
  ASSERT_OK_AND_ASSIGN(auto dict_ids, ApplyVocabulary(*vocabulary, mixed, "c", "here"));
  EXPECT_EQ(Ids(*dict_ids), (std::vector<int64_t>{2, 1, 0, 0}));
  EXPECT_TRUE(dict_ids->IsNull(2));
  // An index to a null dictionary entry is a null row, as in MaterializeDictionary.
  auto null_entry = Dictionary("[0, 1]", R"(["y", null])");
  ASSERT_OK_AND_ASSIGN(auto entry_ids,
                       ApplyVocabulary(*vocabulary, arrow::ChunkedArray(null_entry), "c", "here"));
  EXPECT_EQ(Ids(*entry_ids), (std::vector<int64_t>{2, 0}));
  EXPECT_TRUE(entry_ids->IsValid(0));
  EXPECT_TRUE(entry_ids->IsNull(1));
  auto numbers = ApplyVocabulary(*vocabulary, arrow::ChunkedArray(FromJson(arrow::int32(), "[1]")),
                                 "c", "file 'f', row group 0");
  ASSERT_FALSE(numbers.ok());
  EXPECT_EQ(GetErrorKind(numbers.status()), ErrorKind::kUnsupportedType);
}

// Ids are as narrow as the vocabulary allows (id 0 is out of vocabulary, so 255 values fit a
// byte and 256 do not), and equal whatever their width.
TEST(ApplyVocabulary, IdsAreTheNarrowestUnsignedTypeThatHoldsTheVocabulary) {
  struct Case {
    int size;
    DType dtype;
    arrow::Type::type type;
  };
  for (const Case& c :
       {Case{4, DType::kUInt8, arrow::Type::UINT8}, Case{255, DType::kUInt8, arrow::Type::UINT8},
        Case{256, DType::kUInt16, arrow::Type::UINT16},
        Case{40000, DType::kUInt16, arrow::Type::UINT16},
        Case{65536, DType::kUInt32, arrow::Type::UINT32}}) {
    SCOPED_TRACE(c.size);
    auto vocabulary = Numbered(c.size);
    EXPECT_EQ(vocabulary->IdDType(), c.dtype);
    const std::string last = vocabulary->values().back();
    auto plain =
        FromJson(arrow::utf8(), R"(["v00000", null, "nope", ")" + last + R"(", "v00003"])");
    ASSERT_OK_AND_ASSIGN(auto ids,
                         ApplyVocabulary(*vocabulary, arrow::ChunkedArray(plain), "c", "here"));
    EXPECT_EQ(ids->type_id(), c.type);
    EXPECT_EQ(Ids(*ids), (std::vector<int64_t>{1, 0, 0, c.size, 4}));
    EXPECT_TRUE(ids->IsNull(1));
    EXPECT_EQ(ids->null_count(), 1);
    auto dict = Dictionary("[1, 0, null, 1]", R"(["nope", ")" + last + R"("])");
    ASSERT_OK_AND_ASSIGN(auto dict_ids,
                         ApplyVocabulary(*vocabulary, arrow::ChunkedArray(dict), "c", "here"));
    EXPECT_EQ(dict_ids->type_id(), c.type);
    EXPECT_EQ(Ids(*dict_ids), (std::vector<int64_t>{c.size, 0, 0, c.size}));
    EXPECT_TRUE(dict_ids->IsNull(2));
  }
}

// Dictionary chunks map every index type Arrow allows, offsets included, to the same ids; an
// index outside the dictionary (Arrow's readers check, but a chunk built another way may not)
// is a corrupt-file error naming the column, the place and the index.
TEST(ApplyVocabulary, EveryIndexTypeMapsTheSameAndAnIndexOutsideTheDictionaryIsAnError) {
  auto vocabulary = *Vocabulary::Make({"x", "y"}, Vocabulary::Origin::kGiven, "c");
  auto values = FromJson(arrow::utf8(), R"(["w", "y", "x"])");
  for (const auto& type : {arrow::int8(), arrow::uint8(), arrow::int16(), arrow::uint16(),
                           arrow::int32(), arrow::uint32(), arrow::int64(), arrow::uint64()}) {
    SCOPED_TRACE(type->ToString());
    auto dict_type = arrow::dictionary(type, arrow::utf8());
    // Sliced past its first row, so the indices' offset is not 0.
    auto indices = FromJson(type, "[0, 2, 1, null, 0, 2]")->Slice(1);
    auto dict = std::make_shared<arrow::DictionaryArray>(dict_type, indices, values);
    ASSERT_OK_AND_ASSIGN(auto ids,
                         ApplyVocabulary(*vocabulary, arrow::ChunkedArray(dict), "c", "here"));
    EXPECT_EQ(Ids(*ids), (std::vector<int64_t>{1, 2, 0, 0, 1}));
    EXPECT_TRUE(ids->IsNull(2));
    EXPECT_EQ(ids->null_count(), 1);
    for (const std::string& bad : {std::string("3"), std::string("100")}) {
      auto outside = std::make_shared<arrow::DictionaryArray>(
          dict_type, FromJson(type, "[1, " + bad + ", 0]"), values);
      auto result =
          ApplyVocabulary(*vocabulary, arrow::ChunkedArray(outside), "c", "file 'f', row group 4");
      ASSERT_FALSE(result.ok());
      EXPECT_EQ(GetErrorKind(result.status()), ErrorKind::kCorruptFile);
      EXPECT_NE(result.status().message().find("column 'c' of file 'f', row group 4 has a "
                                               "dictionary index " +
                                               bad + " outside its 3 entries"),
                std::string::npos)
          << result.status().message();
    }
    if (arrow::is_signed_integer(type->id())) {
      auto negative =
          std::make_shared<arrow::DictionaryArray>(dict_type, FromJson(type, "[-1]"), values);
      auto result = ApplyVocabulary(*vocabulary, arrow::ChunkedArray(negative), "c", "file 'f'");
      ASSERT_FALSE(result.ok());
      EXPECT_EQ(GetErrorKind(result.status()), ErrorKind::kCorruptFile);
      // Arrow reads a negative int8 index as its unsigned byte (255): outside either way.
      EXPECT_NE(result.status().message().find("outside its 3 entries"), std::string::npos)
          << result.status().message();
    }
  }
}

}  // namespace
}  // namespace stoker
