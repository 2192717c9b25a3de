// Category ids (ApplyVocabulary): the decoder's side of LoaderOptions::categories.
#include "decode/vocabulary_ids.h"

#include <arrow/api.h>
#include <arrow/json/from_string.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <thread>
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

// The memo serves a dictionary's ids only for the same bytes under the same vocabulary: the
// same strings in another order, the same dictionary under another vocabulary, a large_string
// copy, a dictionary with a null entry and a slice each get their own (right) ids.
TEST(DictionaryIdsMemo, ServesOnlyEqualDictionariesUnderTheSameVocabulary) {
  auto first = *Vocabulary::Make({"x", "y", "z"}, Vocabulary::Origin::kGiven, "c");
  auto second = *Vocabulary::Make({"z", "y", "x"}, Vocabulary::Origin::kGiven, "d");
  DictionaryIdsMemo memo(int64_t{1} << 20);
  auto apply = [&](const Vocabulary& vocabulary, const std::shared_ptr<arrow::Array>& chunk) {
    auto ids = ApplyVocabulary(vocabulary, arrow::ChunkedArray(chunk), "c", "here", &memo);
    EXPECT_TRUE(ids.ok()) << ids.status().message();
    return ids.ok() ? Ids(**ids) : std::vector<int64_t>{};
  };
  const std::string indices = "[0, 1, 2, 1]";
  EXPECT_EQ(apply(*first, Dictionary(indices, R"(["x", "y", "q"])")),
            (std::vector<int64_t>{1, 2, 0, 2}));
  EXPECT_EQ(memo.hits(), 0);
  EXPECT_GT(memo.bytes(), 0);
  // Built again (new buffers), the same bytes: served.
  EXPECT_EQ(apply(*first, Dictionary(indices, R"(["x", "y", "q"])")),
            (std::vector<int64_t>{1, 2, 0, 2}));
  EXPECT_EQ(memo.hits(), 1);
  // Same strings, another order; same length and bytes but one character; another vocabulary.
  EXPECT_EQ(apply(*first, Dictionary(indices, R"(["q", "y", "x"])")),
            (std::vector<int64_t>{0, 2, 1, 2}));
  EXPECT_EQ(apply(*first, Dictionary(indices, R"(["x", "z", "q"])")),
            (std::vector<int64_t>{1, 3, 0, 3}));
  EXPECT_EQ(apply(*second, Dictionary(indices, R"(["x", "y", "q"])")),
            (std::vector<int64_t>{3, 2, 0, 2}));
  // The offsets tell "xy", "" from "x", "y".
  EXPECT_EQ(apply(*first, Dictionary("[0, 1]", R"(["xy", ""])")), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(apply(*first, Dictionary("[0, 1]", R"(["x", "y"])")), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(memo.hits(), 1);
  // large_string dictionaries are kept too.
  auto large = [&](const std::string& values) {
    return arrow::DictionaryArray::FromArrays(
               arrow::dictionary(arrow::int32(), arrow::large_utf8()),
               FromJson(arrow::int32(), "[2, 0]"), FromJson(arrow::large_utf8(), values))
        .ValueOrDie();
  };
  EXPECT_EQ(apply(*first, large(R"(["y", "q", "z"])")), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(apply(*first, large(R"(["y", "q", "z"])")), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(memo.hits(), 2);
  // Not kept: a null entry (its row stays null), a sliced dictionary, an empty one.
  const int64_t kept = memo.bytes();
  for (int round = 0; round < 2; ++round) {
    auto null_entry = Dictionary("[0, 1]", R"(["z", null])");
    ASSERT_OK_AND_ASSIGN(
        auto ids, ApplyVocabulary(*first, arrow::ChunkedArray(null_entry), "c", "here", &memo));
    EXPECT_EQ(Ids(*ids), (std::vector<int64_t>{3, 0}));
    EXPECT_TRUE(ids->IsNull(1));
    auto sliced = std::make_shared<arrow::DictionaryArray>(
        arrow::dictionary(arrow::int32(), arrow::utf8()), FromJson(arrow::int32(), "[1, 0]"),
        FromJson(arrow::utf8(), R"(["q", "x", "y"])")->Slice(1));
    EXPECT_EQ(apply(*first, sliced), (std::vector<int64_t>{2, 1}));
    auto empty = Dictionary("[]", "[]");
    EXPECT_EQ(apply(*first, empty), (std::vector<int64_t>{}));
  }
  EXPECT_EQ(memo.bytes(), kept);
  EXPECT_EQ(memo.hits(), 2);
}

// With every dictionary hashed alike, only the byte comparison tells them apart.
TEST(DictionaryIdsMemo, DictionariesThatHashAlikeAreComparedByTheirBytes) {
  auto vocabulary = *Vocabulary::Make({"x", "y", "z"}, Vocabulary::Origin::kGiven, "c");
  DictionaryIdsMemo memo(int64_t{1} << 20, /*hash_bits=*/0);
  for (int round = 0; round < 2; ++round) {
    for (const auto& [values, want] :
         {std::pair<std::string, std::vector<int64_t>>{R"(["x", "y"])", {1, 2}},
          {R"(["x", "z"])", {1, 3}},
          {R"(["z", "x"])", {3, 1}},
          {R"(["xz", ""])", {0, 0}}}) {
      SCOPED_TRACE(values);
      ASSERT_OK_AND_ASSIGN(
          auto ids, ApplyVocabulary(*vocabulary, arrow::ChunkedArray(Dictionary("[0, 1]", values)),
                                    "c", "here", &memo));
      EXPECT_EQ(Ids(*ids), want);
    }
  }
  EXPECT_EQ(memo.hits(), 4);
}

// Past its bound the memo keeps nothing more and every dictionary is still looked up right.
TEST(DictionaryIdsMemo, KeepsNothingPastItsBound) {
  auto vocabulary = Numbered(300);
  DictionaryIdsMemo memo(0);
  for (int round = 0; round < 3; ++round) {
    auto dict = Dictionary("[1, 0]", R"(["v00299", "v00007"])");
    ASSERT_OK_AND_ASSIGN(
        auto ids, ApplyVocabulary(*vocabulary, arrow::ChunkedArray(dict), "c", "here", &memo));
    EXPECT_EQ(ids->type_id(), arrow::Type::UINT16);
    EXPECT_EQ(Ids(*ids), (std::vector<int64_t>{8, 300}));
  }
  EXPECT_EQ(memo.bytes(), 0);
  EXPECT_EQ(memo.hits(), 0);
}

// Workers decode row groups at once: threads sharing one memo get the same ids as without it
// (ThreadSanitizer checks the memo's locking in the tsan shard).
TEST(DictionaryIdsMemo, ThreadsSharingOneMemoGetTheIdsOfTheirOwnDictionaries) {
  auto vocabulary = Numbered(1000);
  std::vector<std::shared_ptr<arrow::Array>> chunks;
  std::vector<std::vector<int64_t>> expected;
  for (int k = 0; k < 8; ++k) {
    std::string values = "[";
    std::string indices = "[";
    std::vector<int64_t> want;
    for (int v = 0; v < 50; ++v) {
      char text[16];
      std::snprintf(text, sizeof(text), "v%05d", (v * 37 + k * 101) % 1000);
      values += (v ? ", \"" : "\"") + std::string(text) + "\"";
      indices += (v ? ", " : "") + std::to_string(49 - v);
    }
    for (int v = 0; v < 50; ++v) want.push_back((((49 - v) * 37 + k * 101) % 1000) + 1);
    chunks.push_back(Dictionary(indices + "]", values + "]"));
    expected.push_back(want);
  }
  DictionaryIdsMemo memo(int64_t{1} << 20);
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 50; ++round) {
        const int k = (round + t) % 8;
        auto ids = ApplyVocabulary(*vocabulary, arrow::ChunkedArray(chunks[k]), "c", "here", &memo);
        if (!ids.ok() || Ids(**ids) != expected[k]) ++wrong[t];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
  EXPECT_GE(memo.hits(), 4 * 50 - 4 * 8);  // each thread misses each dictionary at most once
}

}  // namespace
}  // namespace stoker
