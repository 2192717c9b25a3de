// The keys a column adds beside its own in a batch (util/output_keys.h), as resolution lists
// them (ColumnInfo::added_keys), and the clash checks at open (CheckOutputNames).
#include "resolve/output_names.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "resolve/resolve_columns.h"
#include "util/output_keys.h"
#include "util/test_parquet_internal.h"
#include "util/test_status_internal.h"

namespace stoker {
namespace {

using Keys = std::vector<std::string>;

TEST(OutputKeys, NamesPerLevel) {
  EXPECT_EQ(LengthsKey("ll"), "ll_lengths");
  EXPECT_EQ(LengthsKey("ll", 1), "ll_lengths_1");
  EXPECT_EQ(LengthsKey("ll", 12), "ll_lengths_12");
  EXPECT_EQ(MaskKey("g"), "g_mask");
  EXPECT_EQ(MaskKey("g", 2), "g_mask_2");
  EXPECT_EQ(ValidKey("img"), "img_valid");
}

TEST(OutputKeys, AddedKeysInBatchOrder) {
  EXPECT_EQ(AddedKeys("x", 0, false, 0, false), Keys{});
  EXPECT_EQ(AddedKeys("x", 2, true, 2, false),
            (Keys{"x_lengths", "x_lengths_1", "x_mask", "x_mask_1", "x_mask_2"}));
  // Element masks only with the row mask (null_mask).
  EXPECT_EQ(AddedKeys("x", 1, false, 3, true), (Keys{"x_lengths", "x_valid"}));
  EXPECT_EQ(AddedKeys("x", 0, true, 0, true), (Keys{"x_mask", "x_valid"}));
}

// A small file: a list of lists, a list, a number and columns named like their added keys.
class OutputNames : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("stoker_output_names_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "keys.parquet").string();
    using test_parquet::ArrayFromJson;
    auto list_of_lists = arrow::list(arrow::list(arrow::int8()));
    auto list = arrow::list(arrow::int8());
    auto table = arrow::Table::Make(
        arrow::schema({arrow::field("ll", list_of_lists), arrow::field("l", list),
                       arrow::field("x", arrow::int32()),
                       arrow::field("ll_lengths_1", arrow::int32()),
                       arrow::field("l_mask_1", arrow::int32())}),
        {ArrayFromJson(list_of_lists, "[[[1, 2], [3]], [[4]]]"),
         ArrayFromJson(list, "[[1], [2, 3]]"), ArrayFromJson(arrow::int32(), "[1, 2]"),
         ArrayFromJson(arrow::int32(), "[1, 2]"), ArrayFromJson(arrow::int32(), "[1, 2]")});
    test_parquet::WriteTable(path_, *table, 2);
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_OK_AND_ASSIGN(catalog_, Catalog::Open({path_}, 1));
  }

  void TearDown() override { std::filesystem::remove_all(dir_); }

  LoaderOptions Options(std::vector<std::string> columns, ListMode lists) const {
    LoaderOptions options;
    options.source.sources = {path_};
    options.columns.columns = std::move(columns);
    options.columns.default_column_options.list_mode = lists;
    return options;
  }

  // ResolveColumns as Loader::Open calls it: the columns options and the padding flag's name.
  Result<OutputSpec> Resolve(const LoaderOptions& options) const {
    return ResolveColumns(*catalog_, options.columns, false, nullptr,
                          options.order.padding_mask ? options.order.padding_name : "");
  }

  // The message of the error resolving `options`, which must be kInvalidOption.
  std::string Refused(const LoaderOptions& options) const {
    auto spec = Resolve(options);
    EXPECT_FALSE(spec.ok());
    if (spec.ok()) return "";
    EXPECT_EQ(GetErrorKind(spec.status()), ErrorKind::kInvalidOption) << spec.status().ToString();
    return spec.status().message();
  }

  std::filesystem::path dir_;
  std::string path_;
  std::shared_ptr<Catalog> catalog_;
};

TEST_F(OutputNames, ColumnInfosListTheKeysTheBatchesCarry) {
  LoaderOptions options = Options({"ll", "l", "x"}, ListMode::kPadded);
  options.columns.column_options["ll"] = options.columns.default_column_options;
  options.columns.column_options["ll"].null_mask = true;
  ASSERT_OK_AND_ASSIGN(OutputSpec spec, Resolve(options));
  const std::vector<ColumnInfo> infos = ToColumnInfos(spec);
  ASSERT_EQ(infos.size(), 3u);
  // A padded list of lists: the rows' lengths, then level 1's; masks of the rows, the inner
  // lists and the elements.
  EXPECT_EQ(infos[0].added_keys,
            (Keys{"ll_lengths", "ll_lengths_1", "ll_mask", "ll_mask_1", "ll_mask_2"}));
  EXPECT_EQ(infos[1].added_keys, Keys{"l_lengths"});
  EXPECT_EQ(infos[2].added_keys, Keys{});

  options = Options({"ll", "l"}, ListMode::kRagged);
  options.columns.default_column_options.null_mask = true;
  ASSERT_OK_AND_ASSIGN(spec, Resolve(options));
  EXPECT_EQ(ToColumnInfos(spec)[0].added_keys, (Keys{"ll_mask", "ll_mask_1", "ll_mask_2"}));
  EXPECT_EQ(ToColumnInfos(spec)[1].added_keys, (Keys{"l_mask", "l_mask_1"}));
}

TEST_F(OutputNames, FeatureGroupsAddTheirMask) {
  LoaderOptions options = Options({"l"}, ListMode::kRagged);
  options.columns.feature_groups = {FeatureGroup{"g", {"x"}, DType::kFloat32, /*null_mask=*/true}};
  ASSERT_OK_AND_ASSIGN(OutputSpec spec, Resolve(options));
  const std::vector<ColumnInfo> infos = ToColumnInfos(spec);
  ASSERT_EQ(infos.size(), 2u);
  EXPECT_EQ(infos[1].name, "g");
  EXPECT_EQ(infos[1].arrow_type, "stacked features");
  EXPECT_EQ(infos[1].added_keys, Keys{"g_mask"});
}

TEST_F(OutputNames, InnerLengthsClashWithAColumn) {
  EXPECT_EQ(Refused(Options({"ll", "ll_lengths_1"}, ListMode::kPadded)),
            "output key 'll_lengths_1' for column 'll' clashes with a column of that name; leave "
            "'ll_lengths_1' out of columns, or lists={'ll': 'ragged'}");
  // Ragged: no lengths, no clash.
  ASSERT_OK(Resolve(Options({"ll", "ll_lengths_1"}, ListMode::kRagged)).status());
}

TEST_F(OutputNames, ElementMaskClashesWithAColumn) {
  LoaderOptions options = Options({"l", "l_mask_1"}, ListMode::kRagged);
  ASSERT_OK(Resolve(options).status());
  options.columns.column_options["l"] = options.columns.default_column_options;
  options.columns.column_options["l"].null_mask = true;
  EXPECT_EQ(Refused(options),
            "output key 'l_mask_1' for column 'l' clashes with a column of that name; leave "
            "'l_mask_1' out of columns, or leave 'l' out of null_mask");
}

TEST_F(OutputNames, PaddingFlagClashesWithAColumn) {
  LoaderOptions options = Options({"x"}, ListMode::kUnset);
  options.order.padding_mask = true;
  ASSERT_OK(Resolve(options).status());
  options.order.padding_name = "x";
  EXPECT_EQ(Refused(options), "padding_mask=True adds 'x', which is also a column");
  options.order.padding_mask = false;  // no flag, no clash
  ASSERT_OK(Resolve(options).status());
}

TEST_F(OutputNames, PerColumnOptionsNameColumnsTheLoaderReads) {
  LoaderOptions options = Options({"x"}, ListMode::kUnset);
  options.columns.column_options["nope"] = ColumnOptions{};
  EXPECT_EQ(Refused(options),
            "a per-column option names column 'nope', which the loader does not read");
  // A feature is read too.
  options = Options({"l"}, ListMode::kRagged);
  options.columns.features = {"x"};
  options.columns.column_options["x"] = ColumnOptions{};
  ASSERT_OK(Resolve(options).status());
}

TEST(CheckOutputNames, ValidFlagsAndAddedKeysOfTwoColumns) {
  ColumnInfo image;
  image.name = "img";
  image.added_keys = {ValidKey("img")};
  ColumnInfo valid;
  valid.name = "img_valid";
  Status status = CheckOutputNames(ColumnsOptions{}, "", {image, valid});
  EXPECT_EQ(status.message(),
            "output key 'img_valid' for column 'img' clashes with a column of that name; leave "
            "'img_valid' out of columns, or leave 'img' out of on_error");
  // An added key is taken for the columns after it.
  ColumnInfo other;
  other.name = "b";
  other.added_keys = {"img_valid"};
  status = CheckOutputNames(ColumnsOptions{}, "", {image, other});
  EXPECT_EQ(GetErrorKind(status), ErrorKind::kInvalidOption);
  EXPECT_NE(status.message().find("output key 'img_valid' for column 'b'"), std::string::npos);
  ASSERT_OK(CheckOutputNames(ColumnsOptions{}, "", {image}));
  // Names are quoted as Python's repr() quotes them.
  ColumnInfo quoted;
  quoted.name = "it's";
  EXPECT_EQ(CheckOutputNames(ColumnsOptions{}, "it's", {quoted}).message(),
            "padding_mask=True adds \"it's\", which is also a column");
}

}  // namespace
}  // namespace stoker
