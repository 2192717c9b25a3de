// Categories (vocabularies, "auto" from dictionary pages or a column scan) and the feature
// groups' resolution: dtypes, masks, and casts decided from the footer statistics. The ids
// themselves: decode/vocabulary_ids_test.cc.
#include "resolve/categories.h"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <gtest/gtest.h>
#include <parquet/arrow/writer.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <set>
#include <string>

#include "resolve/resolve_columns.h"
#include "resolve/vocabulary.h"
#include "util/test_status_internal.h"

namespace stoker {
namespace {

std::shared_ptr<arrow::Array> Strings(const std::vector<std::optional<std::string>>& values) {
  arrow::StringBuilder builder;
  for (const auto& value : values) {
    EXPECT_TRUE((value ? builder.Append(*value) : builder.AppendNull()).ok());
  }
  return builder.Finish().ValueOrDie();
}

template <typename Builder, typename T>
std::shared_ptr<arrow::Array> Numbers(const std::vector<std::optional<T>>& values) {
  Builder builder;
  for (const auto& value : values) {
    EXPECT_TRUE((value ? builder.Append(*value) : builder.AppendNull()).ok());
  }
  return builder.Finish().ValueOrDie();
}
std::shared_ptr<arrow::Array> Int64s(const std::vector<std::optional<int64_t>>& values) {
  return Numbers<arrow::Int64Builder>(values);
}
std::shared_ptr<arrow::Array> Int32s(const std::vector<std::optional<int32_t>>& values) {
  return Numbers<arrow::Int32Builder>(values);
}
std::shared_ptr<arrow::Array> Doubles(const std::vector<std::optional<double>>& values) {
  return Numbers<arrow::DoubleBuilder>(values);
}

TEST(Vocabulary, IdsStartAtOneAndZeroIsOutOfVocabulary) {
  auto vocabulary = Vocabulary::Make({"b", "a"}, Vocabulary::Origin::kGiven, "c");
  ASSERT_TRUE(vocabulary.ok());
  EXPECT_EQ((*vocabulary)->Lookup("b"), 1);
  EXPECT_EQ((*vocabulary)->Lookup("a"), 2);
  EXPECT_EQ((*vocabulary)->Lookup("z"), 0);
  auto reordered = Vocabulary::Make({"a", "b"}, Vocabulary::Origin::kGiven, "c");
  EXPECT_NE((*vocabulary)->hash(), (*reordered)->hash());
  auto twice = Vocabulary::Make({"a", "a"}, Vocabulary::Origin::kGiven, "col");
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(GetErrorKind(twice.status()), ErrorKind::kInvalidOption);
  EXPECT_NE(twice.status().message().find("categories['col']"), std::string::npos);
}

TEST(Vocabulary, HashIsPinnedWhicheverWayTheVocabularyWasMade) {
  // FNV-1a of "vocabulary-v1", then each value's size, bytes and size again (little-endian
  // 64-bit sizes): part of resume fingerprints and cache entry names, so it must not drift.
  // Computed on the first hash() call; the same from Make() and from an "auto" build.
  auto made = Vocabulary::Make({"apple", "fig"}, Vocabulary::Origin::kGiven, "c");
  ASSERT_TRUE(made.ok());
  EXPECT_EQ((*made)->hash(), 0xc00f235ddc171f92ULL);
  ViewIndex ids;
  const std::vector<std::string> values = {"apple", "fig"};
  for (const auto& value : values) ids.Insert(value, [&](int64_t i) { return values[i]; });
  auto built =
      Vocabulary::FromIndexed(values, std::move(ids), Vocabulary::Origin::kDictionaryPages);
  EXPECT_EQ(built->hash(), 0xc00f235ddc171f92ULL);
  EXPECT_EQ(built->Lookup("fig"), 2);
  EXPECT_EQ(built->Lookup("kiwi"), 0);
}

TEST(LoaderOptions, GroupsAndCategoriesAreFingerprinted) {
  LoaderOptions base;
  base.source.sources = {"/data"};
  const uint64_t plain = base.Fingerprint();
  LoaderOptions grouped = base;
  grouped.columns.feature_groups = {{"dense", {"a", "b"}, DType::kFloat32, false}};
  LoaderOptions other_dtype = grouped;
  other_dtype.columns.feature_groups[0].dtype = DType::kFloat64;
  LoaderOptions masked = grouped;
  masked.columns.feature_groups[0].null_mask = true;
  LoaderOptions auto_vocabulary = base;
  auto_vocabulary.columns.categories["c"] = {};
  LoaderOptions given = base;
  given.columns.categories["c"] = {"x", "y"};
  LoaderOptions reordered = base;
  reordered.columns.categories["c"] = {"y", "x"};
  const std::vector<uint64_t> prints = {plain,
                                        grouped.Fingerprint(),
                                        other_dtype.Fingerprint(),
                                        masked.Fingerprint(),
                                        auto_vocabulary.Fingerprint(),
                                        given.Fingerprint(),
                                        reordered.Fingerprint()};
  for (size_t i = 0; i < prints.size(); ++i) {
    for (size_t j = i + 1; j < prints.size(); ++j) EXPECT_NE(prints[i], prints[j]) << i << j;
  }
  EXPECT_TRUE(given.Validate().ok());
  LoaderOptions twice = base;
  twice.columns.categories["c"] = {"x", "x"};
  EXPECT_EQ(GetErrorKind(twice.Validate()), ErrorKind::kInvalidOption);
  LoaderOptions both = grouped;
  both.columns.features = {"a"};
  EXPECT_EQ(GetErrorKind(both.Validate()), ErrorKind::kInvalidOption);
}

class FeaturesAndCategoriesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("stoker_categories_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes `table` in row groups of 2 rows; `dictionary`: dictionary-encode the pages.
  std::shared_ptr<Catalog> Write(const std::shared_ptr<arrow::Table>& table, bool dictionary,
                                 bool statistics = true) {
    const std::string path = (dir_ / "data.parquet").string();
    auto sink = *arrow::io::FileOutputStream::Open(path);
    parquet::WriterProperties::Builder builder;
    if (!dictionary) builder.disable_dictionary();
    if (!statistics) builder.disable_statistics();
    auto props = parquet::ArrowWriterProperties::Builder().store_schema()->build();
    EXPECT_TRUE(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), sink, 2,
                                           builder.build(), props)
                    .ok());
    EXPECT_TRUE(sink->Close().ok());
    path_ = path;
    return *Catalog::Open({path}, 1);
  }

  LoaderOptions Options() {
    LoaderOptions options;
    options.source.sources = {path_};
    return options;
  }

  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(FeaturesAndCategoriesTest, AutoVocabularyFromDictionaryPagesOrAScan) {
  auto values = Strings({"pear", "fig", std::nullopt, "apple", "fig", "kiwi"});
  auto table = arrow::Table::Make(arrow::schema({arrow::field("fruit", arrow::utf8())}), {values});
  for (bool dictionary : {true, false}) {
    auto catalog = Write(table, dictionary);
    auto vocabulary = BuildVocabulary(*catalog, "fruit");
    ASSERT_TRUE(vocabulary.ok()) << vocabulary.status().ToString();
    EXPECT_EQ((*vocabulary)->values(), (std::vector<std::string>{"apple", "fig", "kiwi", "pear"}));
    EXPECT_EQ((*vocabulary)->origin(),
              dictionary ? Vocabulary::Origin::kDictionaryPages : Vocabulary::Origin::kColumnScan);
  }
}

TEST_F(FeaturesAndCategoriesTest, AutoVocabulariesAreInByteOrderWhateverTheThreadCount) {
  // Values that order by bytes, not by their first 8 bytes past a shared prefix: a value that is
  // another's prefix, embedded and trailing NULs, bytes above 0x7f, the empty string, and long
  // values that differ only past the 8 bytes after the prefix they share.
  const std::vector<std::string> tricky = {"pre",
                                           "pre" + std::string(1, '\0'),
                                           "pre" + std::string(1, '\0') + "b",
                                           "pre\x7f",
                                           "pre\x80",
                                           "pre\xff",
                                           "preab",
                                           "preabcdefgh1",
                                           "preabcdefgh0",
                                           "preabcdefgh",
                                           "prf"};
  std::vector<std::optional<std::string>> a, b, c;
  for (int i = 0; i < 44; ++i) {
    a.push_back(tricky[(i * 7) % tricky.size()]);
    b.push_back(i % 5 == 0 ? std::optional<std::string>() : "v" + std::to_string((i * 37) % 23));
    c.push_back(i % 3 == 0 ? std::string() : std::string(i % 4, 'z'));
  }
  auto table = arrow::Table::Make(
      arrow::schema({arrow::field("a", arrow::utf8()), arrow::field("b", arrow::utf8()),
                     arrow::field("c", arrow::utf8())}),
      {Strings(a), Strings(b), Strings(c)});
  const std::vector<std::string> fields = {"a", "b", "c"};
  for (bool dictionary : {true, false}) {
    auto catalog = Write(table, dictionary);
    const auto one = BuildVocabularies(*catalog, fields, 1);
    for (int threads : {2, 3, 8}) {
      const auto several = BuildVocabularies(*catalog, fields, threads);
      ASSERT_EQ(several.size(), fields.size());
      for (size_t i = 0; i < fields.size(); ++i) {
        ASSERT_TRUE(one[i].ok() && several[i].ok());
        EXPECT_EQ((*several[i])->values(), (*one[i])->values()) << fields[i] << threads;
        EXPECT_EQ((*several[i])->hash(), (*one[i])->hash());
      }
    }
    for (size_t i = 0; i < fields.size(); ++i) {
      std::set<std::string> expected;
      for (const auto& value : (i == 0 ? a : i == 1 ? b : c)) {
        if (value) expected.insert(*value);
      }
      EXPECT_EQ((*one[i])->values(), std::vector<std::string>(expected.begin(), expected.end()))
          << fields[i] << " dictionary=" << dictionary;
      auto alone = BuildVocabulary(*catalog, fields[i]);
      ASSERT_TRUE(alone.ok());
      EXPECT_EQ((*alone)->hash(), (*one[i])->hash());
      for (int64_t id = 1; id <= (*one[i])->size(); ++id) {
        EXPECT_EQ((*one[i])->Lookup((*one[i])->values()[id - 1]), id);
      }
      // The built index (renumbered from the collecting one) and hash are what Make() gives
      // the same values: ids, out-of-vocabulary and cache names do not depend on the route.
      auto made = Vocabulary::Make((*one[i])->values(), Vocabulary::Origin::kGiven, fields[i]);
      ASSERT_TRUE(made.ok());
      EXPECT_EQ((*made)->hash(), (*one[i])->hash());
      for (const std::string& probe : {std::string("pre\x81"), std::string("v99"),
                                       std::string("zzzz"), std::string("absent")}) {
        EXPECT_EQ((*one[i])->Lookup(probe), (*made)->Lookup(probe)) << probe;
      }
    }
  }
}

TEST_F(FeaturesAndCategoriesTest, CategoricalColumnsResolveToInt64Ids) {
  auto table = arrow::Table::Make(
      arrow::schema({arrow::field("fruit", arrow::utf8()), arrow::field("n", arrow::int32())}),
      {Strings({"b", "a"}), Int32s({1, 2})});
  auto catalog = Write(table, true);
  LoaderOptions options = Options();
  options.columns.columns = {"fruit"};
  options.columns.categories["fruit"] = {};
  auto spec = ResolveColumns(*catalog, options.columns);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->columns[0].dtype, DType::kInt64);
  // Read as the vocabulary's narrow ids (2 values: uint8), delivered as int64.
  EXPECT_EQ(spec->columns[0].source_dtype, DType::kUInt8);
  EXPECT_EQ(spec->columns[0].kind, ColumnKind::kDense);
  EXPECT_EQ(spec->columns[0].annotation, "category");
  ASSERT_EQ(spec->vocabularies.count("fruit"), 1u);
  EXPECT_EQ(spec->vocabularies.at("fruit")->values(), (std::vector<std::string>{"a", "b"}));
  options.columns.categories = {{"n", {}}};
  options.columns.columns = {"n"};
  auto numbers = ResolveColumns(*catalog, options.columns);
  ASSERT_FALSE(numbers.ok());
  EXPECT_EQ(GetErrorKind(numbers.status()), ErrorKind::kUnsupportedType);
  options.columns.categories = {{"other", {}}};
  auto unknown = ResolveColumns(*catalog, options.columns);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(GetErrorKind(unknown.status()), ErrorKind::kInvalidOption);
}

TEST_F(FeaturesAndCategoriesTest, GroupsKeepTheirDtypesAndMasks) {
  auto table = arrow::Table::Make(
      arrow::schema({arrow::field("a", arrow::float64()), arrow::field("b", arrow::int64()),
                     arrow::field("s", arrow::utf8())}),
      {Doubles({1.5, std::nullopt}), Int64s({3, 4}), Strings({"u", "v"})});
  auto catalog = Write(table, true);
  LoaderOptions options = Options();
  options.columns.feature_groups = {{"dense", {"a"}, DType::kFloat64, true},
                                    {"ids", {"b", "s"}, DType::kInt64, false}};
  options.columns.categories["s"] = {"v"};
  auto spec = ResolveColumns(*catalog, options.columns);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->feature_groups.size(), 2u);
  EXPECT_EQ(spec->feature_groups[0].first, 0u);
  EXPECT_EQ(spec->feature_groups[0].count, 1u);
  EXPECT_TRUE(spec->feature_groups[0].null_mask);
  EXPECT_TRUE(spec->features[0].options.null_mask);  // the group's mask lets nulls through
  EXPECT_EQ(spec->feature_groups[1].first, 1u);
  EXPECT_EQ(spec->feature_groups[1].dtype, DType::kInt64);
  EXPECT_EQ(spec->features[2].dtype, DType::kInt64);
  ASSERT_NE(spec->features[2].vocabulary, nullptr);

  options.columns.feature_groups[1].name = "a";  // a column's name
  auto clash = ResolveColumns(*catalog, options.columns);
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(GetErrorKind(clash.status()), ErrorKind::kInvalidOption);
  EXPECT_NE(clash.status().message().find("clashes"), std::string::npos);
}

TEST_F(FeaturesAndCategoriesTest, IntegerToFloatCastsUseStatistics) {
  auto table = arrow::Table::Make(
      arrow::schema({arrow::field("small", arrow::int64()), arrow::field("big", arrow::int64())}),
      {Int64s({-9007199254740992, 5, 16777216}), Int64s({9007199254740993, 1, 2})});
  auto catalog = Write(table, false);
  LoaderOptions options = Options();
  options.columns.features = {"small"};
  options.columns.features_dtype = DType::kFloat64;
  EXPECT_TRUE(ResolveColumns(*catalog, options.columns).ok());  // |v| <= 2^53
  options.columns.features_dtype = DType::kFloat32;
  auto beyond_float32 = ResolveColumns(*catalog, options.columns);
  ASSERT_FALSE(beyond_float32.ok());  // 2^53 > 2^24
  EXPECT_NE(beyond_float32.status().message().find("features_dtype='float64'"), std::string::npos)
      << beyond_float32.status().message();
  options.columns.features = {"big"};
  options.columns.features_dtype = DType::kFloat64;
  auto big = ResolveColumns(*catalog, options.columns);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(GetErrorKind(big.status()), ErrorKind::kLossyCast);
  const std::string message = big.status().message();
  EXPECT_NE(message.find("'big'"), std::string::npos) << message;
  EXPECT_NE(message.find("statistics reach"), std::string::npos) << message;
  EXPECT_NE(message.find("features_dtype='int64'"), std::string::npos) << message;
  EXPECT_NE(message.find("allow_lossy_cast=True"), std::string::npos) << message;
  options.columns.features_dtype = DType::kInt64;  // the suggested fix
  EXPECT_TRUE(ResolveColumns(*catalog, options.columns).ok());

  auto unproven = Write(table, false, /*statistics=*/false);
  options.columns.features = {"small"};
  options.columns.features_dtype = DType::kFloat64;
  auto no_stats = ResolveColumns(*unproven, options.columns);
  ASSERT_FALSE(no_stats.ok());
  EXPECT_NE(no_stats.status().message().find("no min/max statistics"), std::string::npos);
  options.columns.allow_lossy_cast = true;
  EXPECT_TRUE(ResolveColumns(*unproven, options.columns).ok());
}

}  // namespace
}  // namespace stoker
