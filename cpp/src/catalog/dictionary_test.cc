#include "catalog/dictionary.h"

#include <arrow/api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace stoker {
namespace {

// Indices with an explicit validity bitmap; the raw value of a null slot is arbitrary on purpose.
std::shared_ptr<arrow::Array> Indices(const std::vector<int32_t>& raw,
                                      const std::vector<bool>& valid) {
  auto values = *arrow::AllocateBuffer(raw.size() * sizeof(int32_t));
  std::memcpy(values->mutable_data(), raw.data(), raw.size() * sizeof(int32_t));
  auto bitmap = *arrow::AllocateBitmap(raw.size());
  std::memset(bitmap->mutable_data(), 0, bitmap->size());
  int64_t nulls = 0;
  for (size_t i = 0; i < valid.size(); ++i) {
    if (valid[i]) {
      bitmap->mutable_data()[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
    } else {
      ++nulls;
    }
  }
  return arrow::MakeArray(
      arrow::ArrayData::Make(arrow::int32(), static_cast<int64_t>(raw.size()),
                             {std::shared_ptr<arrow::Buffer>(std::move(bitmap)),
                              std::shared_ptr<arrow::Buffer>(std::move(values))},
                             nulls));
}

std::shared_ptr<arrow::DictionaryArray> Dictionary(const std::shared_ptr<arrow::Array>& indices,
                                                   const std::shared_ptr<arrow::Array>& values) {
  auto type = arrow::dictionary(indices->type(), values->type());
  return std::static_pointer_cast<arrow::DictionaryArray>(
      *arrow::DictionaryArray::FromArrays(type, indices, values));
}

TEST(MaterializeDictionary, FixedWidthValuesAndNullIndicesThatPointAnywhere) {
  arrow::Int64Builder builder;
  ASSERT_TRUE(builder.AppendValues({10, 20, 30}).ok());
  auto values = *builder.Finish();
  // Row 1 is null and its raw index (1000) is outside the dictionary: it must not be read.
  auto dict =
      std::make_shared<arrow::DictionaryArray>(arrow::dictionary(arrow::int32(), arrow::int64()),
                                               Indices({2, 1000, 0, 1}, {1, 0, 1, 1}), values);
  auto result = MaterializeDictionary(*dict, "c", "'f', row group 0");
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const auto& out = static_cast<const arrow::Int64Array&>(**result);
  ASSERT_EQ(out.length(), 4);
  EXPECT_EQ(out.null_count(), 1);
  EXPECT_EQ(out.Value(0), 30);
  EXPECT_TRUE(out.IsNull(1));
  EXPECT_EQ(out.Value(1), 0);  // null rows are zero bytes
  EXPECT_EQ(out.Value(2), 10);
  EXPECT_EQ(out.Value(3), 20);
}

TEST(MaterializeDictionary, StringsOfASlice) {
  arrow::StringBuilder words;
  ASSERT_TRUE(words.AppendValues({"", "héllo", "x"}).ok());
  ASSERT_TRUE(words.AppendNull().ok());  // a null dictionary entry makes its rows null
  auto values = *words.Finish();
  auto dict = Dictionary(Indices({0, 1, 2, 3, 1, 2}, {1, 1, 1, 1, 1, 1}), values);
  auto sliced = std::static_pointer_cast<arrow::DictionaryArray>(dict->Slice(1, 4));
  auto result = MaterializeDictionary(*sliced, "c", "'f', row group 0");
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_TRUE((*result)->type()->Equals(arrow::large_utf8()));
  const auto& out = static_cast<const arrow::LargeStringArray&>(**result);
  ASSERT_EQ(out.length(), 4);
  EXPECT_EQ(out.GetString(0), "héllo");
  EXPECT_EQ(out.GetString(1), "x");
  EXPECT_TRUE(out.IsNull(2));
  EXPECT_EQ(out.value_length(2), 0);
  EXPECT_EQ(out.GetString(3), "héllo");
  EXPECT_TRUE(out.ValidateFull().ok());
}

TEST(MaterializeDictionary, IndexOutsideTheDictionaryIsACorruptFile) {
  arrow::StringBuilder words;
  ASSERT_TRUE(words.AppendValues({"a", "b"}).ok());
  auto values = *words.Finish();
  auto dict = std::make_shared<arrow::DictionaryArray>(
      arrow::dictionary(arrow::int32(), arrow::utf8()), Indices({0, 5}, {1, 1}), values);
  auto result = MaterializeDictionary(*dict, "col", "'f.parquet', row group 3");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(GetErrorKind(result.status()), ErrorKind::kCorruptFile);
  const std::string message = result.status().message();
  EXPECT_NE(message.find("'col'"), std::string::npos) << message;
  EXPECT_NE(message.find("row group 3"), std::string::npos) << message;
}

TEST(MaterializeDictionary, BoolValuesAreUnsupported) {
  arrow::BooleanBuilder flags;
  ASSERT_TRUE(flags.AppendValues(std::vector<bool>{true, false}).ok());
  auto values = *flags.Finish();
  auto dict = Dictionary(Indices({0, 1}, {1, 1}), values);
  auto result = MaterializeDictionary(*dict, "b", "'f', row group 0");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(GetErrorKind(result.status()), ErrorKind::kUnsupportedType);
}

TEST(MaterializeDictionary, EmptyDictionaryAllNull) {
  arrow::Int32Builder builder;
  auto values = *builder.Finish();
  auto dict = std::make_shared<arrow::DictionaryArray>(
      arrow::dictionary(arrow::int32(), arrow::int32()), Indices({7, 7}, {0, 0}), values);
  auto result = MaterializeDictionary(*dict, "c", "'f', row group 0");
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ((*result)->null_count(), 2);
}

}  // namespace
}  // namespace stoker
