#include "catalog/nested.h"

#include <arrow/api.h>
#include <arrow/json/from_string.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "catalog/catalog.h"

namespace stoker {
namespace {

std::shared_ptr<arrow::Array> Json(const std::shared_ptr<arrow::DataType>& type,
                                   const std::string& json) {
  auto array = arrow::json::ArrayFromJSONString(type, json);
  EXPECT_TRUE(array.ok()) << array.status().ToString();
  return *array;
}

void ExpectUnify(const std::shared_ptr<arrow::DataType>& a,
                 const std::shared_ptr<arrow::DataType>& b,
                 const std::shared_ptr<arrow::DataType>& want) {
  for (const auto& [x, y] : {std::pair{a, b}, std::pair{b, a}}) {  // symmetric
    auto got = UnifyTypes(x, y);
    if (want == nullptr) {
      EXPECT_EQ(got, nullptr) << x->ToString() << " + " << y->ToString() << " gave "
                              << got->ToString();
    } else {
      ASSERT_NE(got, nullptr) << x->ToString() << " + " << y->ToString();
      EXPECT_TRUE(got->Equals(*want))
          << x->ToString() << " + " << y->ToString() << " gave " << got->ToString();
    }
  }
}

TEST(UnifyTypes, WideningsArrowAccepts) {
  using namespace arrow;  // NOLINT: type factories
  ExpectUnify(int32(), int64(), int64());
  ExpectUnify(int8(), int16(), int16());
  ExpectUnify(uint8(), int8(), int16());
  ExpectUnify(uint32(), int64(), int64());
  ExpectUnify(uint16(), uint32(), uint32());
  ExpectUnify(float32(), float64(), float64());
  ExpectUnify(int16(), float32(), float32());
  ExpectUnify(int32(), float32(), float64());  // int32 does not fit float32's mantissa
  ExpectUnify(null(), utf8(), utf8());
  ExpectUnify(utf8(), large_utf8(), large_utf8());
  ExpectUnify(binary(), utf8(), large_binary());
  ExpectUnify(dictionary(int32(), utf8()), utf8(), large_utf8());
  ExpectUnify(dictionary(int8(), utf8()), dictionary(int32(), large_utf8()), large_utf8());
  ExpectUnify(dictionary(int32(), int32()), int64(), int64());
  ExpectUnify(list(int32()), large_list(int64()), large_list(int64()));
  ExpectUnify(list(int32()), list(int64()), list(int64()));
}

TEST(UnifyTypes, ConflictsThatWouldChangeValues) {
  using namespace arrow;  // NOLINT: type factories
  ExpectUnify(utf8(), float64(), nullptr);
  ExpectUnify(int64(), float64(), nullptr);  // not every int64 is a float64
  ExpectUnify(uint64(), int64(), nullptr);
  ExpectUnify(timestamp(arrow::TimeUnit::MILLI), timestamp(arrow::TimeUnit::MICRO), nullptr);
  ExpectUnify(list(utf8()), list(float32()), nullptr);
  ExpectUnify(fixed_size_list(float32(), 4), list(float32()), nullptr);
  ExpectUnify(boolean(), int8(), nullptr);
}

TEST(ConformArray, WidensNumbersKeepingNulls) {
  auto array = Json(arrow::int32(), "[1, null, -3, 2147483647]")->Slice(1);
  auto got = ConformArray(array, arrow::int64(), "x", "f, row group 0");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE((*got)->Equals(*Json(arrow::int64(), "[null, -3, 2147483647]")))
      << (*got)->ToString();
  got = ConformArray(Json(arrow::uint8(), "[0, 255]"), arrow::float32(), "x", "w");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE((*got)->Equals(*Json(arrow::float32(), "[0, 255]")));
}

TEST(ConformArray, StringsDictionariesNullsAndLists) {
  auto strings = Json(arrow::utf8(), R"(["a", null, "ccc", ""])")->Slice(1);
  auto got = ConformArray(strings, arrow::large_utf8(), "s", "w");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE((*got)->Equals(*Json(arrow::large_utf8(), R"([null, "ccc", ""])")));

  auto dict = std::make_shared<arrow::DictionaryArray>(
      arrow::dictionary(arrow::int8(), arrow::utf8()), Json(arrow::int8(), "[1, 0, null, 1]"),
      Json(arrow::utf8(), R"(["x", "yy"])"));
  got = ConformArray(dict, arrow::large_utf8(), "s", "w");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE((*got)->Equals(*Json(arrow::large_utf8(), R"(["yy", "x", null, "yy"])")));

  got = ConformArray(std::make_shared<arrow::NullArray>(3), arrow::float64(), "n", "w");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)->type_id(), arrow::Type::DOUBLE);
  EXPECT_EQ((*got)->null_count(), 3);

  auto lists = Json(arrow::list(arrow::int32()), "[[1, 2], null, [], [3]]")->Slice(1);
  got = ConformArray(lists, arrow::large_list(arrow::int64()), "l", "w");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE((*got)->Equals(*Json(arrow::large_list(arrow::int64()), "[null, [], [3]]")))
      << (*got)->ToString();

  got = ConformArray(Json(arrow::utf8(), R"(["a"])"), arrow::float64(), "c", "'f', row group 2");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("'c'"), std::string::npos);
  EXPECT_NE(got.status().message().find("row group 2"), std::string::npos);
}

TEST(ExtractPath, StructLeavesCarryTheirParentsNulls) {
  auto type =
      arrow::struct_({arrow::field("a", arrow::int32()),
                      arrow::field("b", arrow::struct_({arrow::field("c", arrow::utf8())}))});
  auto array = Json(type, R"([{"a": 1, "b": {"c": "x"}}, null, {"a": null, "b": null}, {"a": 4,
                     "b": {"c": "z"}}])")
                   ->Slice(1);
  auto a = ExtractPath(array, {{PathStep::kChild, "a"}});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE((*a)->Equals(*Json(arrow::int32(), "[null, null, 4]"))) << (*a)->ToString();
  auto c = ExtractPath(array, {{PathStep::kChild, "b"}, {PathStep::kChild, "c"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE((*c)->Equals(*Json(arrow::utf8(), R"([null, null, "z"])"))) << (*c)->ToString();
  EXPECT_FALSE(ExtractPath(array, {{PathStep::kChild, "nope"}}).ok());
}

TEST(ExtractPath, StructsInListsAndMaps) {
  auto item = arrow::struct_({arrow::field("x", arrow::int64()), arrow::field("y", arrow::utf8())});
  auto lists = Json(arrow::list(item),
                    R"([[{"x": 1, "y": "a"}], null, [], [{"x": 2, "y": "b"}, {"x": 3, "y": "c"}]])")
                   ->Slice(1);
  auto x = ExtractPath(lists, {{PathStep::kElements, ""}, {PathStep::kChild, "x"}});
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_TRUE((*x)->Equals(*Json(arrow::list(arrow::int64()), "[null, [], [2, 3]]")))
      << (*x)->ToString();

  auto map = Json(arrow::map(arrow::utf8(), arrow::int32()),
                  R"([[["k", 1], ["j", 2]], null, [["m", 3]]])");
  auto keys = ExtractPath(map, {{PathStep::kMapKeys, ""}});
  auto values = ExtractPath(map, {{PathStep::kMapItems, ""}});
  ASSERT_TRUE(keys.ok() && values.ok());
  EXPECT_TRUE((*keys)->Equals(*Json(arrow::list(arrow::utf8()), R"([["k", "j"], null, ["m"]])")))
      << (*keys)->ToString();
  EXPECT_TRUE((*values)->Equals(*Json(arrow::list(arrow::int32()), "[[1, 2], null, [3]]")))
      << (*values)->ToString();
}

}  // namespace
}  // namespace stoker
