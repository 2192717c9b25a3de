// Test data for the exec/ tests: Parquet files written with Arrow's writer.
#pragma once

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <gtest/gtest.h>
#include <parquet/arrow/writer.h>

#include <filesystem>
#include <memory>

namespace stoker::test_data {

/// Writes `rows` rows to `path`: a non-null int64 `id` counting on from *next_id and a float32
/// `v` = id * value_scale, in row groups of `row_group_rows`.
inline void WriteIdValueFile(const std::filesystem::path& path, int64_t rows, int64_t* next_id,
                             float value_scale, int64_t row_group_rows) {
  arrow::Int64Builder ids;
  arrow::FloatBuilder values;
  for (int64_t i = 0; i < rows; ++i) {
    ASSERT_TRUE(ids.Append(*next_id).ok());
    ASSERT_TRUE(values.Append(static_cast<float>(*next_id) * value_scale).ok());
    ++*next_id;
  }
  std::shared_ptr<arrow::Array> id_array, value_array;
  ASSERT_TRUE(ids.Finish(&id_array).ok());
  ASSERT_TRUE(values.Finish(&value_array).ok());
  auto table = arrow::Table::Make(arrow::schema({arrow::field("id", arrow::int64(), false),
                                                 arrow::field("v", arrow::float32(), false)}),
                                  {id_array, value_array});
  auto out = arrow::io::FileOutputStream::Open(path.string());
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(
      parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), *out, row_group_rows).ok());
  ASSERT_TRUE((*out)->Close().ok());
}

}  // namespace stoker::test_data
