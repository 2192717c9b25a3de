// Test-only: small Parquet files written with Arrow's writer, for the C++ tests of every layer
// (include from *_test.cc files only).
#pragma once

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/json/from_string.h>
#include <gtest/gtest.h>
#include <parquet/arrow/writer.h>

#include <memory>
#include <string>

#include "util/test_status_internal.h"

namespace stoker::test_parquet {

/// An array from JSON text (as pyarrow.array takes a list), for short test data.
inline std::shared_ptr<arrow::Array> ArrayFromJson(const std::shared_ptr<arrow::DataType>& type,
                                                   const std::string& json) {
  auto array = arrow::json::ArrayFromJSONString(type, json);
  EXPECT_TRUE(array.ok()) << array.status().ToString();
  return array.ok() ? *array : nullptr;
}

/// Writes `table` to `path` in row groups of `row_group_rows` rows, with the Arrow schema stored
/// (as pyarrow does); `dictionary`: dictionary-encode the pages. Check HasFatalFailure() after.
inline void WriteTable(const std::string& path, const arrow::Table& table, int64_t row_group_rows,
                       bool dictionary = true) {
  parquet::WriterProperties::Builder properties;
  if (!dictionary) properties.disable_dictionary();
  auto arrow_properties = parquet::ArrowWriterProperties::Builder().store_schema()->build();
  ASSERT_OK_AND_ASSIGN(auto sink, arrow::io::FileOutputStream::Open(path));
  ASSERT_OK(parquet::arrow::WriteTable(table, arrow::default_memory_pool(), sink, row_group_rows,
                                       properties.build(), arrow_properties));
  ASSERT_OK(sink->Close());
}

}  // namespace stoker::test_parquet
