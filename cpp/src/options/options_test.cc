#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "options/options_internal.h"
#include "stoker/option_values.h"
#include "util/test_status_internal.h"

namespace stoker {
namespace {

OptionValue S(const std::string& text) { return OptionValue::String(text); }

OptionValue Values(std::vector<std::pair<std::string, OptionValue>> named) {
  std::vector<std::pair<OptionValue, OptionValue>> entries;
  for (auto& [name, value] : named) entries.emplace_back(S(name), std::move(value));
  return OptionValue::Dict(entries);
}

std::string Message(const Result<LoaderOptions>& built) { return built.status().message(); }

TEST(ParseSize, UnitsAndErrors) {
  EXPECT_EQ(*ParseSize(OptionValue::Int(12), "x"), 12);
  EXPECT_EQ(*ParseSize(S("64MiB"), "x"), int64_t{64} << 20);
  EXPECT_EQ(*ParseSize(S(" 1.5GB "), "x"), 1500000000);
  EXPECT_EQ(*ParseSize(S(".5kib"), "x"), 512);
  EXPECT_EQ(*ParseSize(S("100"), "x"), 100);
  for (const auto& bad : {S("1."), S("MiB"), S("5 parsecs"), S(""), OptionValue::Bool(true),
                          OptionValue::Float(1.5)}) {
    auto parsed = ParseSize(bad, "prefetch_bytes");
    ASSERT_FALSE(parsed.ok()) << bad.Repr();
    EXPECT_EQ(parsed.status().message(),
              "prefetch_bytes must be a byte count or a size like '64MiB', got " + bad.Repr());
  }
}

TEST(OptionValue, ReprIsPythons) {
  EXPECT_EQ(S("it's").Repr(), "\"it's\"");
  EXPECT_EQ(S("a\\b\n").Repr(), "'a\\\\b\\n'");
  EXPECT_EQ(OptionValue::Float(0).Repr(), "0.0");
  EXPECT_EQ(OptionValue::Float(-1).Repr(), "-1.0");
  EXPECT_EQ(OptionValue::Float(0.1).Repr(), "0.1");
  EXPECT_EQ(OptionValue::Float(1e-5).Repr(), "1e-05");
  EXPECT_EQ(OptionValue::Float(1e16).Repr(), "1e+16");
  EXPECT_EQ(OptionValue::Float(1e15).Repr(), "1000000000000000.0");
  EXPECT_EQ(OptionValue::Float(123.456).Repr(), "123.456");
  EXPECT_EQ(OptionValue::List({S("a")}, true).Repr(), "('a',)");
  EXPECT_EQ(OptionValue::List({OptionValue::Int(1), OptionValue::None()}).Repr(), "[1, None]");
  EXPECT_EQ(Values({{"k", OptionValue::Bool(false)}}).Repr(), "{'k': False}");
  EXPECT_EQ(Crc32("abc"), 891568578u);  // zlib.crc32(b"abc")
}

TEST(BuildLoaderOptions, TransformsShapeAndTransformColumns) {
  LoaderOptions base;
  const OptionValue op = Values({{"op", S("resize")}, {"size", OptionValue::Int(8)}});
  const auto list = [](std::vector<OptionValue> items) { return OptionValue::List(items); };
  // Accepted: a chain, one op alone, and several named outputs of one column.
  EXPECT_TRUE(
      BuildLoaderOptions(
          Values({{"transforms",
                   Values({{"a", list({op})}, {"b", op}, {"c", Values({{"x", list({op})}})}})}}),
          base, false)
          .ok());
  const std::vector<std::pair<OptionValue, std::string>> bad = {
      {list({op}), "transforms must be a dict {column: [op, ...]}"},
      {OptionValue::Dict({{OptionValue::Int(1), list({op})}}),
       "transforms keys are column names, got 1"},
      {Values({{"a", list({})}}), "transforms['a'] must be a non-empty list of ops (stoker.ops.*)"},
      {Values({{"a", S("resize")}}),
       "transforms['a'] must be a non-empty list of ops (stoker.ops.*)"},
      {Values({{"a", list({op, S("crop")})}}),
       "transforms['a'][1] is 'crop', not an op: use stoker.ops (e.g. stoker.ops.resize(224)) or "
       "a dict {'op': name, **params}"},
      {Values({{"a", Values({})}}), "transforms['a'] names no outputs"},
      {Values({{"a", Values({{"", list({op})}})}}),
       "transforms['a'] keys are output names, got ''"},
      {Values({{"a", Values({{"x", list({Values({{"op", OptionValue::Int(3)}})})}})}}),
       "transforms['a']['x'][0] is {'op': 3}, not an op: use stoker.ops (e.g. "
       "stoker.ops.resize(224)) or a dict {'op': name, **params}"},
  };
  for (const auto& [transforms, message] : bad) {
    auto built = BuildLoaderOptions(Values({{"transforms", transforms}}), base, false);
    ASSERT_FALSE(built.ok()) << transforms.Repr();
    EXPECT_EQ(Message(built), message);
  }
  auto named =
      BuildLoaderOptions(Values({{"transform_columns", list({S("a"), S("b")})}}), base, false);
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->columns.transform_columns, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(Message(BuildLoaderOptions(Values({{"transform_columns", S("a")}}), base, false)),
            "transform_columns takes a list of column names");
  EXPECT_EQ(Message(BuildLoaderOptions(Values({{"transform_columns", list({})}}), base, false)),
            "transform_columns is empty: name at least one column, or pass None for all");
}

TEST(BuildLoaderOptions, SetsAndChecksWithTheOptionsName) {
  LoaderOptions base;
  base.source.sources = {"/data"};
  base.columns.columns = {"a", "s"};
  auto built = BuildLoaderOptions(Values({{"batch_size", OptionValue::Int(7)},
                                          {"shuffle_window", S("1KiB")},
                                          {"lists", Values({{"a", S("ragged")}})},
                                          {"null_mask", OptionValue::List({S("s")})},
                                          {"time_unit", S("ms")}}),
                                  base, false);
  ASSERT_OK(built.status());
  EXPECT_EQ(built->order.batch_size, 7);
  EXPECT_EQ(built->order.shuffle_window_bytes, 1024);
  EXPECT_EQ(built->columns.column_options.at("a").list_mode, ListMode::kRagged);
  EXPECT_TRUE(built->columns.column_options.at("s").null_mask);
  EXPECT_EQ(built->columns.column_options.at("s").time_unit, TimeUnit::kMilli);
  EXPECT_EQ(built->columns.default_column_options.list_mode, ListMode::kUnset);

  EXPECT_EQ(
      Message(BuildLoaderOptions(Values({{"batch_size", OptionValue::Float(2.0)}}), base, false)),
      "batch_size must be an integer, got 2.0");
  EXPECT_EQ(
      Message(BuildLoaderOptions(Values({{"lists", Values({{"b", S("padded")}})}}), base, false)),
      "lists names column 'b', which is not in columns or features");
  EXPECT_EQ(
      Message(BuildLoaderOptions(Values({{"on_error", Values({{"a", S("skip")}})}}), base, false)),
      "on_error['a'] must be 'raise' or 'zero', got 'skip'");
  EXPECT_EQ(Message(BuildLoaderOptions(Values({{"time_unit", S("week")}}), base, false)),
            "time_unit must be one of 'D', 'h', 'm', 's', 'ms', 'us', 'ns', got 'week'");
  EXPECT_EQ(Message(BuildLoaderOptions(Values({{"null_mask", S("a")}}), base, false)),
            "null_mask takes True or a list of column names, not a string");
  EXPECT_EQ(Message(BuildLoaderOptions(Values({{"storage_options", Values({{"region", S("x")}})}}),
                                       base, false)),
            "storage_options (region) configure remote filesystems (s3://, gs://, hdfs://, "
            "...), but source '/data' is a local path, where they would be ignored: drop "
            "storage_options, or give the remote URI");
}

TEST(BuildLoaderOptions, FeatureGroupsMasksAndVocabularyFiles) {
  const auto dir = std::filesystem::temp_directory_path() / "stoker_options_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream file(dir / "vocab.txt", std::ios::binary);
    file << "b\r\na\n  \n\xe2\x80\xa8"
            "c\n";  // CRLF, a blank line, U+2028 splits too
  }
  LoaderOptions base;
  base.source.sources = {"/data"};
  auto built = BuildLoaderOptions(
      Values({{"features", Values({{"g", OptionValue::List({S("x"), S("y")})},
                                   {"h", OptionValue::List({S("z")})}})},
              {"features_dtype", Values({{"h", S("int64")}})},
              {"null_mask", OptionValue::List({S("h"), S("x")})},
              {"categories", Values({{"c", S((dir / "vocab.txt").string())}, {"d", S("auto")}})}}),
      base, false);
  ASSERT_OK(built.status());
  ASSERT_EQ(built->columns.feature_groups.size(), 2u);
  EXPECT_EQ(built->columns.feature_groups[0].dtype, DType::kFloat32);
  EXPECT_FALSE(built->columns.feature_groups[0].null_mask);
  EXPECT_EQ(built->columns.feature_groups[1].dtype, DType::kInt64);
  EXPECT_TRUE(built->columns.feature_groups[1].null_mask);
  EXPECT_TRUE(built->columns.column_options.at("x").null_mask);  // a column, not a group
  EXPECT_EQ(built->columns.categories.at("c"), (std::vector<std::string>{"b", "a", "c"}));
  EXPECT_TRUE(built->columns.categories.at("d").empty());

  EXPECT_EQ(Message(BuildLoaderOptions(
                Values({{"categories", Values({{"c", S((dir / "missing.txt").string())}})}}), base,
                false)),
            "categories['c']: cannot read the vocabulary file '" + (dir / "missing.txt").string() +
                "': No such file or directory");
  EXPECT_EQ(Message(BuildLoaderOptions(
                Values({{"categories", Values({{"c", OptionValue::List({S("a"), S("a")})}})}}),
                base, false)),
            "categories['c'] lists 'a' twice; each value gets one id");
  EXPECT_EQ(Message(BuildLoaderOptions(Values({{"features", OptionValue::List({S("x")})},
                                               {"features_dtype", S("float16x")}}),
                                       base, false))
                .rfind("features_dtype 'float16x' is not a known dtype; known dtypes: ", 0),
            0u);
  EXPECT_EQ(Message(BuildLoaderOptions(Values({{"features", OptionValue::List({S("x")})},
                                               {"features_dtype", Values({{"q", S("int8")}})}}),
                                       base, false)),
            "features_dtype names group(s) ['q'], which features does not define; groups: "
            "['features']");
  std::filesystem::remove_all(dir);
}

TEST(OptionSummary, DifferencesNameWhatDiffers) {
  LoaderOptions options;
  auto mine = OptionSummary(options, 5, 100, Values({}), "", false);
  EXPECT_EQ(mine.front().first, "dataset");
  std::vector<std::pair<OptionValue, OptionValue>> saved;
  for (const auto& [name, value] : mine) {
    saved.emplace_back(S(name), OptionValue::Int(static_cast<int64_t>(value)));
  }
  EXPECT_EQ(OptionDifferences(OptionValue::Dict(saved), mine),
            "the sources differ (the same files under other paths)");
  saved[1].second = OptionValue::Int(3);  // batch_size
  EXPECT_EQ(OptionDifferences(OptionValue::Dict(saved), mine),
            "these differ: batch_size (saved 3, now 1024)");
}

}  // namespace
}  // namespace stoker
