// Describe: one column's problem does not hide the others; facts come from the footers.
#include "stoker/describe.h"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <gtest/gtest.h>
#include <parquet/arrow/writer.h>
#include <unistd.h>

#include <filesystem>

#include "stoker/redact.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;

class DescribeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("stoker_describe_test_" + std::to_string(getpid()));
    fs::create_directories(dir_ / "year=2024");
    arrow::FloatBuilder x;
    arrow::ListBuilder tags(arrow::default_memory_pool(), std::make_shared<arrow::Int32Builder>());
    auto* tag_values = static_cast<arrow::Int32Builder*>(tags.value_builder());
    arrow::StructBuilder pair(arrow::struct_({arrow::field("q", arrow::int32())}),
                              arrow::default_memory_pool(),
                              {std::make_shared<arrow::Int32Builder>()});
    auto* q = static_cast<arrow::Int32Builder*>(pair.field_builder(0));
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(x.Append(static_cast<float>(i)).ok());
      ASSERT_TRUE(tags.Append().ok());
      ASSERT_TRUE(tag_values->Append(i).ok());
      ASSERT_TRUE(pair.Append().ok());
      ASSERT_TRUE(q->Append(i).ok());
    }
    std::shared_ptr<arrow::Array> xs, ts, ps;
    ASSERT_TRUE(x.Finish(&xs).ok());
    ASSERT_TRUE(tags.Finish(&ts).ok());
    ASSERT_TRUE(pair.Finish(&ps).ok());
    auto table = arrow::Table::Make(
        arrow::schema({arrow::field("x", arrow::float32()), arrow::field("tags", ts->type()),
                       arrow::field("pair", ps->type())}),
        {xs, ts, ps});
    auto out = arrow::io::FileOutputStream::Open((dir_ / "year=2024" / "a.parquet").string());
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), *out, 40).ok());
    ASSERT_TRUE((*out)->Close().ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
};

TEST_F(DescribeTest, EveryColumnGetsItsOwnVerdict) {
  LoaderOptions options;
  options.source.sources = {dir_.string()};
  auto described = Describe(options);
  ASSERT_TRUE(described.ok()) << described.status().ToString();
  const DatasetDescription& d = *described;
  ASSERT_EQ(d.files.size(), 1u);
  EXPECT_EQ(d.files[0].rows, 100);
  EXPECT_EQ(d.files[0].num_row_groups, 3);
  EXPECT_EQ(d.rows, 100);
  ASSERT_EQ(d.row_groups.size(), 3u);
  EXPECT_EQ(d.row_groups[2].rows, 20);
  ASSERT_EQ(d.columns.size(), 4u);  // x, tags, pair.q, and the hive column year

  const ColumnDescription& x = d.columns[0];
  EXPECT_TRUE(x.ok);
  EXPECT_EQ(x.dtype, DType::kFloat32);
  EXPECT_EQ(x.physical_types, std::vector<std::string>{"FLOAT"});
  EXPECT_GT(x.uncompressed_bytes, 400);
  EXPECT_TRUE(x.null_count_known);
  EXPECT_EQ(x.null_count, 0);

  const ColumnDescription& tags = d.columns[1];
  EXPECT_FALSE(tags.ok);
  EXPECT_TRUE(tags.needs_list_mode);
  EXPECT_EQ(tags.error_kind, "unsupported_type");
  EXPECT_EQ(tags.kind, ColumnKind::kRagged);
  EXPECT_EQ(tags.dtype, DType::kInt32);
  EXPECT_FALSE(tags.null_count_known);  // a nested leaf

  // A struct's leaves are columns of their own.
  const ColumnDescription& pair = d.columns[2];
  EXPECT_EQ(pair.name, "pair.q");
  EXPECT_TRUE(pair.ok) << pair.error;
  EXPECT_EQ(pair.dtype, DType::kInt32);
  EXPECT_GT(pair.uncompressed_bytes, 0);

  const ColumnDescription& year = d.columns[3];
  EXPECT_TRUE(year.partition);
  EXPECT_TRUE(year.ok);
  EXPECT_EQ(year.dtype, DType::kInt64);

  // With a list mode the list column resolves; an unknown column is an entry, not an error.
  options.columns.default_column_options.list_mode = ListMode::kPadded;
  options.columns.columns = {"tags", "nope"};
  described = Describe(options);
  ASSERT_TRUE(described.ok()) << described.status().ToString();
  ASSERT_EQ(described->columns.size(), 2u);
  EXPECT_TRUE(described->columns[0].ok);
  EXPECT_EQ(described->columns[0].kind, ColumnKind::kPadded);
  EXPECT_EQ(described->columns[1].error_kind, "column_not_found");
}

TEST_F(DescribeTest, DatasetErrorsAreTheLoaders) {
  LoaderOptions options;
  options.source.sources = {(dir_ / "missing").string()};
  auto described = Describe(options);
  ASSERT_FALSE(described.ok());
  EXPECT_EQ(GetErrorKind(described.status()), ErrorKind::kNotFound);
}

TEST(RedactUri, DropsUserInfoAndQuery) {
  EXPECT_EQ(RedactUri("s3://KEY:SECRET@bucket/ds?secret_key=x&region=y"), "s3://bucket/ds");
  EXPECT_EQ(RedactUri("/data/ds"), "/data/ds");
  EXPECT_EQ(RedactSecrets("a SECRET b", {"SECRET", ""}), "a *** b");
}

}  // namespace
}  // namespace stoker
