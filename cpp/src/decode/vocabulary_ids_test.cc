// Category ids (ApplyVocabulary): the decoder's side of LoaderOptions::categories.
#include "decode/vocabulary_ids.h"

#include <arrow/api.h>
#include <arrow/json/from_string.h>
#include <gtest/gtest.h>

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

std::vector<int64_t> Ids(const arrow::Array& array) {
  const auto& ids = static_cast<const arrow::Int64Array&>(array);
  return {ids.raw_values(), ids.raw_values() + ids.length()};
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

}  // namespace
}  // namespace stoker
