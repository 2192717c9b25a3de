// A user transform from open to decode, with a C++ UserTransform standing in for Python: the
// output schema learned at open (resolve/user_transform.h) feeds column resolution, later
// outputs are checked against it, and Decoder::DecodeRows runs it on whole row groups.
#include "resolve/user_transform.h"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <gtest/gtest.h>
#include <parquet/arrow/writer.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <string>

#include "decode/decoder.h"
#include "resolve/resolve_columns.h"
#include "util/test_status_internal.h"

namespace stoker {
namespace {

// Doubles column "v" into "w" (int64 -> the type `out_type` picks per call).
class FakeTransform : public UserTransform {
 public:
  std::function<std::shared_ptr<arrow::DataType>(int64_t first_value)> out_type = [](int64_t) {
    return arrow::int64();
  };
  std::atomic<int> calls{0};
  std::atomic<int64_t> rows_seen{0};

  Result<std::shared_ptr<arrow::RecordBatch>> Apply(const std::shared_ptr<arrow::RecordBatch>& in,
                                                    const std::string& where) override {
    ++calls;
    rows_seen += in->num_rows();
    auto v = std::static_pointer_cast<arrow::Int64Array>(in->GetColumnByName("v"));
    if (!v) return MakeError(ErrorKind::kTransform, where + ": no input 'v'");
    std::shared_ptr<arrow::Array> w;
    if (out_type(v->Value(0))->id() == arrow::Type::DOUBLE) {
      arrow::DoubleBuilder doubled;
      for (int64_t i = 0; i < v->length(); ++i) {
        ARROW_RETURN_NOT_OK(doubled.Append(2.0 * static_cast<double>(v->Value(i))));
      }
      ARROW_RETURN_NOT_OK(doubled.Finish(&w));
    } else {
      arrow::Int64Builder doubled;
      for (int64_t i = 0; i < v->length(); ++i)
        ARROW_RETURN_NOT_OK(doubled.Append(2 * v->Value(i)));
      ARROW_RETURN_NOT_OK(doubled.Finish(&w));
    }
    return arrow::RecordBatch::Make(arrow::schema({arrow::field("w", w->type())}), in->num_rows(),
                                    {w});
  }
  std::string Fingerprint() const override { return "fake-v1"; }
};

class UserCodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("stoker_user_code_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "data.parquet").string();
    arrow::Int64Builder v;
    arrow::StringBuilder s;
    for (int64_t i = 0; i < 100; ++i) {
      ASSERT_OK(v.Append(i));
      ASSERT_OK(s.Append(std::to_string(i)));
    }
    std::shared_ptr<arrow::Array> a_v, a_s;
    ASSERT_OK(v.Finish(&a_v));
    ASSERT_OK(s.Finish(&a_s));
    auto table = arrow::Table::Make(
        arrow::schema({arrow::field("v", arrow::int64()), arrow::field("s", arrow::utf8())}),
        {a_v, a_s});
    auto sink = arrow::io::FileOutputStream::Open(path_);
    ASSERT_TRUE(sink.ok());
    ASSERT_OK(
        parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), *sink, /*chunk=*/40));
    ASSERT_OK((*sink)->Close());
    auto catalog = Catalog::Open({path_}, 1);
    ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
    catalog_ = *catalog;
    options_.source.sources = {path_};
    options_.columns.user_transform = transform_;
    options_.columns.transform_columns = {"v"};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  std::string path_;
  std::shared_ptr<Catalog> catalog_;
  std::shared_ptr<FakeTransform> transform_ = std::make_shared<FakeTransform>();
  LoaderOptions options_;
};

TEST_F(UserCodeTest, ResolveSeesTheOutputSchemaLearnedFromTheFirstRows) {
  auto spec = ResolveColumns(*catalog_, options_.columns);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(transform_->calls, 1);
  EXPECT_EQ(transform_->rows_seen, std::min<int64_t>(kTransformProbeRows, 40));  // row group 0
  ASSERT_EQ(spec->columns.size(), 1u);
  EXPECT_EQ(spec->columns[0].name, "w");
  EXPECT_EQ(spec->file_fields, std::vector<std::string>{"v"});
  EXPECT_EQ(spec->decoded_fields, std::vector<std::string>{"w"});

  LoaderOptions raw_name = options_;
  raw_name.columns.columns = {"v"};
  auto missing = ResolveColumns(*catalog_, raw_name.columns);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(GetErrorKind(missing.status()), ErrorKind::kColumnNotFound);
  EXPECT_NE(missing.status().message().find("available columns: w"), std::string::npos)
      << missing.status().message();
}

TEST_F(UserCodeTest, DecodeRowsRunsOnTheWholeRowGroupThenSlices) {
  auto spec = ResolveColumns(*catalog_, options_.columns);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  Decoder decoder(catalog_, std::make_shared<OutputSpec>(std::move(*spec)));
  transform_->rows_seen = 0;
  // Row group 1 holds rows 40..79; ask for 10 of them.
  auto decoded = decoder.DecodeRows(1, {"v"}, 5, 10);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(transform_->rows_seen, 40);
  ASSERT_EQ(decoded->arrays.size(), 1u);
  EXPECT_EQ(decoded->arrays[0].first, "w");
  auto w = std::static_pointer_cast<arrow::Int64Array>(decoded->arrays[0].second);
  ASSERT_EQ(w->length(), 10);
  EXPECT_EQ(w->Value(0), 2 * 45);
  EXPECT_EQ(w->Value(9), 2 * 54);
  EXPECT_NE(decoder.CachePrefix().find("fake-v1"), std::string::npos);
}

TEST_F(UserCodeTest, ALaterTypeChangeNamesKeyBothTypesAndRowGroup) {
  transform_->out_type = [](int64_t first) {
    return first >= 80 ? arrow::float64() : arrow::int64();
  };
  auto spec = ResolveColumns(*catalog_, options_.columns);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  Decoder decoder(catalog_, std::make_shared<OutputSpec>(std::move(*spec)));
  ASSERT_TRUE(decoder.DecodeRows(1, {"v"}, 0, 40).ok());
  auto changed = decoder.DecodeRows(2, {"v"}, 0, 20);
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(GetErrorKind(changed.status()), ErrorKind::kTransform);
  const std::string message = changed.status().message();
  for (const char* part : {"'w'", "float64", "int64", "row group 2"}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << " in " << message;
  }
}

TEST_F(UserCodeTest, TransformColumnsMustBeFileColumns) {
  options_.columns.transform_columns = {"nope"};
  auto spec = ResolveColumns(*catalog_, options_.columns);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(GetErrorKind(spec.status()), ErrorKind::kColumnNotFound);
  EXPECT_EQ(transform_->calls, 0);  // checked before the transform runs
}

}  // namespace
}  // namespace stoker
