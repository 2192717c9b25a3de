// Test-only: one Parquet file written in the test, its catalog, and a Decoder of the columns a
// test asks for (the decode/ tests).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "decode/decoder.h"
#include "plan/planner.h"
#include "resolve/resolve_columns.h"
#include "util/test_parquet_internal.h"
#include "util/test_status_internal.h"

namespace stoker::test_dataset {

/// 100 rows in row groups of 40, 40 and 20: `id` int64 (the row number), `x` float64 (id / 4,
/// null where id % 7 == 3), `s` dictionary<int32, utf8> ("red", "green", "blue" by id % 3),
/// `l` list<int32> (id % 4 elements, each id * 10 + k).
class DatasetTest : public ::testing::Test {
 protected:
  static constexpr int64_t kRows = 100;
  static constexpr int64_t kRowGroupRows = 40;

  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("stoker_decode_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "data.parquet").string();
    // JSON text of the columns (a stream: GCC 12 warns falsely on some string concatenations).
    std::ostringstream ids, xs, colors, lists;
    for (int64_t i = 0; i < kRows; ++i) {
      const char* sep = i ? "," : "[";
      ids << sep << i;
      xs << sep;
      if (i % 7 == 3) {
        xs << "null";
      } else {
        xs << i * 0.25;
      }
      colors << sep << i % 3;
      lists << sep << "[";
      for (int64_t k = 0; k < i % 4; ++k) lists << (k ? "," : "") << i * 10 + k;
      lists << "]";
    }
    for (auto* text : {&ids, &xs, &colors, &lists}) *text << "]";
    auto dictionary = arrow::DictionaryArray::FromArrays(
        arrow::dictionary(arrow::int32(), arrow::utf8()),
        test_parquet::ArrayFromJson(arrow::int32(), colors.str()),
        test_parquet::ArrayFromJson(arrow::utf8(), R"(["red", "green", "blue"])"));
    ASSERT_OK(dictionary.status());
    auto table = arrow::Table::Make(
        arrow::schema({arrow::field("id", arrow::int64()), arrow::field("x", arrow::float64()),
                       arrow::field("s", (*dictionary)->type()),
                       arrow::field("l", arrow::list(arrow::int32()))}),
        {test_parquet::ArrayFromJson(arrow::int64(), ids.str()),
         test_parquet::ArrayFromJson(arrow::float64(), xs.str()), *dictionary,
         test_parquet::ArrayFromJson(arrow::list(arrow::int32()), lists.str())});
    test_parquet::WriteTable(path_, *table, kRowGroupRows);
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_OK_AND_ASSIGN(catalog_, Catalog::Open({path_}, 1));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// Options reading `columns` of the file.
  LoaderOptions Options(std::vector<std::string> columns) const {
    LoaderOptions options;
    options.source.sources = {path_};
    options.columns.columns = std::move(columns);
    return options;
  }

  /// The decoder of `options` (resolved against the catalog), or null after a failed assertion.
  std::shared_ptr<const Decoder> MakeDecoder(const LoaderOptions& options) {
    auto spec = ResolveColumns(*catalog_, options.columns);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    if (!spec.ok()) return nullptr;
    return std::make_shared<Decoder>(catalog_, std::make_shared<OutputSpec>(std::move(*spec)));
  }

  /// A plan of the given segments (row group, first row, rows), unshuffled.
  static Plan PlanOf(const std::vector<Segment>& segments) {
    Plan plan;
    plan.segments = segments;
    return plan;
  }

  std::filesystem::path dir_;
  std::string path_;
  std::shared_ptr<Catalog> catalog_;
};

}  // namespace stoker::test_dataset
