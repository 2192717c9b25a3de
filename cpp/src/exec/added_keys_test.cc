// The arrays a batch carries beside each column's values are the ones its ColumnInfo names
// (added_keys, util/output_keys.h), in the same order: Python names the arrays from that list.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "stoker/loader.h"
#include "util/output_keys.h"
#include "util/test_parquet_internal.h"
#include "util/test_status_internal.h"

namespace stoker {
namespace {

// What a batch column carries beside its values, named as ColumnInfo names it.
std::vector<std::string> CarriedKeys(const OutputColumn& column) {
  const int lengths =
      column.kind == ColumnKind::kPadded ? 1 + static_cast<int>(column.inner_lengths.size()) : 0;
  return AddedKeys(column.name, lengths, column.has_mask,
                   static_cast<int>(column.element_masks.size()), column.has_valid);
}

class AddedKeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("stoker_added_keys_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "keys.parquet").string();
    using test_parquet::ArrayFromJson;
    auto list_of_lists = arrow::list(arrow::list(arrow::int8()));
    auto list = arrow::list(arrow::int8());
    auto words = arrow::list(arrow::utf8());
    auto fixed = arrow::fixed_size_list(arrow::float32(), 2);
    auto table = arrow::Table::Make(
        arrow::schema({arrow::field("ll", list_of_lists), arrow::field("l", list),
                       arrow::field("w", words), arrow::field("f", fixed),
                       arrow::field("x", arrow::float32()), arrow::field("y", arrow::int64())}),
        {ArrayFromJson(list_of_lists, "[[[1, 2], null], null, [], [[null]]]"),
         ArrayFromJson(list, "[[1], [2, null], null, []]"),
         ArrayFromJson(words, R"([["a", null], null, [], ["b"]])"),
         ArrayFromJson(fixed, "[[1, 2], [null, 3], [6, 7], [4, 5]]"),
         ArrayFromJson(arrow::float32(), "[1, 2, 3, 4]"),
         ArrayFromJson(arrow::int64(), "[1, null, 3, 4]")});
    test_parquet::WriteTable(path_, *table, 2);
  }

  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Every batch of one epoch: each column carries exactly the arrays Columns() names.
  void ExpectBatchesCarryTheNamedKeys(const LoaderOptions& options) {
    ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(options));
    std::map<std::string, std::vector<std::string>> named;
    for (const ColumnInfo& info : loader->Columns()) named[info.name] = info.added_keys;
    ASSERT_OK(loader->StartEpoch(0, 0));
    int batches = 0;
    while (true) {
      ASSERT_OK_AND_ASSIGN(auto batch, loader->Next());
      if (batch == nullptr) break;
      ++batches;
      for (const OutputColumn& column : batch->columns) {
        if (column.name == options.order.padding_name) continue;  // a flag, not a column
        ASSERT_TRUE(named.contains(column.name)) << column.name;
        EXPECT_EQ(CarriedKeys(column), named[column.name]) << column.name;
      }
    }
    EXPECT_EQ(batches, 2);
  }

  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(AddedKeysTest, PaddedListsWithMasks) {
  LoaderOptions options;
  options.source.sources = {path_};
  options.order.batch_size = 2;
  options.columns.columns = {"ll", "l", "f", "x"};
  options.columns.default_column_options.list_mode = ListMode::kPadded;
  options.columns.default_column_options.null_mask = true;
  options.order.padding_mask = true;
  ExpectBatchesCarryTheNamedKeys(options);
  ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(options));
  const std::vector<ColumnInfo> columns = loader->Columns();
  ASSERT_EQ(columns.size(), 4u);
  EXPECT_EQ(columns[0].added_keys, (std::vector<std::string>{"ll_lengths", "ll_lengths_1",
                                                             "ll_mask", "ll_mask_1", "ll_mask_2"}));
  EXPECT_EQ(columns[2].added_keys, (std::vector<std::string>{"f_mask", "f_mask_1"}));
}

TEST_F(AddedKeysTest, RaggedListsStringsAndFeatureGroups) {
  LoaderOptions options;
  options.source.sources = {path_};
  options.order.batch_size = 2;
  options.columns.columns = {"ll", "l", "w"};
  options.columns.default_column_options.list_mode = ListMode::kRagged;
  options.columns.default_column_options.null_mask = true;
  options.columns.feature_groups = {
      FeatureGroup{"g", {"x", "y"}, DType::kFloat32, /*null_mask=*/true}};
  ExpectBatchesCarryTheNamedKeys(options);
  // Without masks, nothing is added.
  options.columns.columns = {"x"};
  options.columns.feature_groups.clear();
  options.columns.default_column_options.null_mask = false;
  ExpectBatchesCarryTheNamedKeys(options);
}

}  // namespace
}  // namespace stoker
