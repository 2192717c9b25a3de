#include "resolve/resolve_columns.h"

#include <arrow/api.h>
#include <arrow/extension/fixed_shape_tensor.h>
#include <arrow/io/file.h>
#include <gtest/gtest.h>
#include <parquet/arrow/writer.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>

#include "util/test_status_internal.h"

namespace stoker {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(IsLosslessCast, SameTypeAndBoolAlwaysFit) {
  for (DType t : {DType::kInt8, DType::kUInt64, DType::kFloat16, DType::kFloat64}) {
    EXPECT_TRUE(IsLosslessCast(t, t));
    EXPECT_TRUE(IsLosslessCast(DType::kBool, t));
  }
  EXPECT_FALSE(IsLosslessCast(DType::kInt8, DType::kBool));
}

TEST(IsLosslessCast, IntegersToFloatsNeedTheMantissa) {
  EXPECT_TRUE(IsLosslessCast(DType::kInt8, DType::kFloat16));    // 7 bits <= 11
  EXPECT_TRUE(IsLosslessCast(DType::kUInt8, DType::kFloat16));   // 8 bits <= 11
  EXPECT_FALSE(IsLosslessCast(DType::kInt16, DType::kFloat16));  // 15 bits > 11
  EXPECT_TRUE(IsLosslessCast(DType::kInt16, DType::kFloat32));
  EXPECT_TRUE(IsLosslessCast(DType::kUInt16, DType::kFloat32));
  EXPECT_FALSE(IsLosslessCast(DType::kInt32, DType::kFloat32));  // 31 bits > 24
  EXPECT_FALSE(IsLosslessCast(DType::kUInt32, DType::kFloat32));
  EXPECT_TRUE(IsLosslessCast(DType::kInt32, DType::kFloat64));
  EXPECT_TRUE(IsLosslessCast(DType::kUInt32, DType::kFloat64));
  EXPECT_FALSE(IsLosslessCast(DType::kInt64, DType::kFloat32));
  EXPECT_FALSE(IsLosslessCast(DType::kInt64, DType::kFloat64));  // 63 bits > 53
  EXPECT_FALSE(IsLosslessCast(DType::kUInt64, DType::kFloat64));
}

TEST(IsLosslessCast, FloatsOnlyWiden) {
  EXPECT_TRUE(IsLosslessCast(DType::kFloat16, DType::kFloat32));
  EXPECT_TRUE(IsLosslessCast(DType::kFloat16, DType::kFloat64));
  EXPECT_TRUE(IsLosslessCast(DType::kFloat32, DType::kFloat64));
  EXPECT_FALSE(IsLosslessCast(DType::kFloat64, DType::kFloat32));
  EXPECT_FALSE(IsLosslessCast(DType::kFloat32, DType::kFloat16));
  EXPECT_FALSE(IsLosslessCast(DType::kFloat16, DType::kInt64));
  EXPECT_FALSE(IsLosslessCast(DType::kFloat32, DType::kInt64));
}

TEST(IsLosslessCast, IntegerWidthAndSign) {
  EXPECT_TRUE(IsLosslessCast(DType::kInt8, DType::kInt16));
  EXPECT_TRUE(IsLosslessCast(DType::kUInt8, DType::kInt16));
  EXPECT_TRUE(IsLosslessCast(DType::kUInt32, DType::kInt64));
  EXPECT_TRUE(IsLosslessCast(DType::kUInt16, DType::kUInt64));
  EXPECT_FALSE(IsLosslessCast(DType::kUInt8, DType::kInt8));
  EXPECT_FALSE(IsLosslessCast(DType::kUInt64, DType::kInt64));
  EXPECT_FALSE(IsLosslessCast(DType::kInt8, DType::kUInt64));  // negatives
  EXPECT_FALSE(IsLosslessCast(DType::kInt64, DType::kInt32));
  EXPECT_FALSE(IsLosslessCast(DType::kUInt16, DType::kUInt8));
}

TEST(IsRepresentable, Integers) {
  EXPECT_TRUE(IsRepresentable(-128, DType::kInt8));
  EXPECT_TRUE(IsRepresentable(127, DType::kInt8));
  EXPECT_FALSE(IsRepresentable(128, DType::kInt8));
  EXPECT_FALSE(IsRepresentable(-129, DType::kInt8));
  EXPECT_FALSE(IsRepresentable(0.5, DType::kInt32));
  EXPECT_FALSE(IsRepresentable(-1, DType::kUInt64));
  EXPECT_TRUE(IsRepresentable(65535, DType::kUInt16));
  EXPECT_TRUE(IsRepresentable(-0x1p63, DType::kInt64));
  EXPECT_FALSE(IsRepresentable(0x1p63, DType::kInt64));
  EXPECT_FALSE(IsRepresentable(0x1p64, DType::kUInt64));
  EXPECT_FALSE(IsRepresentable(kNaN, DType::kInt64));
  EXPECT_FALSE(IsRepresentable(kInf, DType::kInt32));
}

TEST(IsRepresentable, BoolIsZeroOrOne) {
  EXPECT_TRUE(IsRepresentable(0, DType::kBool));
  EXPECT_TRUE(IsRepresentable(1, DType::kBool));
  EXPECT_FALSE(IsRepresentable(2, DType::kBool));
  EXPECT_FALSE(IsRepresentable(0.5, DType::kBool));
}

TEST(IsRepresentable, Floats) {
  EXPECT_TRUE(IsRepresentable(0.1, DType::kFloat64));
  EXPECT_FALSE(IsRepresentable(0.1, DType::kFloat32));
  EXPECT_TRUE(IsRepresentable(0.5, DType::kFloat32));
  EXPECT_TRUE(IsRepresentable(kNaN, DType::kFloat32));
  EXPECT_TRUE(IsRepresentable(-kInf, DType::kFloat16));
  EXPECT_TRUE(IsRepresentable(65504, DType::kFloat16));
  EXPECT_FALSE(IsRepresentable(65505, DType::kFloat16));
  EXPECT_TRUE(IsRepresentable(2049 - 1, DType::kFloat16));  // 11 significant bits
  EXPECT_FALSE(IsRepresentable(2049, DType::kFloat16));     // 12
  EXPECT_TRUE(IsRepresentable(0x1p-24, DType::kFloat16));   // smallest subnormal
  EXPECT_FALSE(IsRepresentable(0x1p-25, DType::kFloat16));
  EXPECT_TRUE(IsRepresentable(3 * 0x1p-24, DType::kFloat16));
}

// ResolveColumns against a real file's schema (written with Arrow's Parquet writer).
class ResolveColumnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("stoker_column_spec_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "types.parquet").string();

    arrow::Int8Builder int8;
    ASSERT_OK(int8.AppendValues({1, 2}));
    arrow::ListBuilder list(arrow::default_memory_pool(), std::make_shared<arrow::Int32Builder>());
    ASSERT_OK(list.Append());
    ASSERT_OK(static_cast<arrow::Int32Builder*>(list.value_builder())->Append(7));
    ASSERT_OK(list.Append());
    arrow::StringBuilder words;
    ASSERT_OK(words.AppendValues({"a", "b"}));
    arrow::FloatBuilder floats;
    ASSERT_OK(floats.AppendValues(std::vector<float>(12, 1.0f)));
    arrow::TimestampBuilder stamps(arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"),
                                   arrow::default_memory_pool());
    ASSERT_OK(stamps.AppendValues({1, 2}));

    std::shared_ptr<arrow::Array> a_int8, a_list, a_words, a_floats, a_stamps;
    ASSERT_OK(int8.Finish(&a_int8));
    ASSERT_OK(list.Finish(&a_list));
    ASSERT_OK(words.Finish(&a_words));
    ASSERT_OK(floats.Finish(&a_floats));
    ASSERT_OK(stamps.Finish(&a_stamps));
    auto dict = arrow::DictionaryArray::FromArrays(
        arrow::dictionary(arrow::int32(), arrow::utf8()),
        *arrow::MakeArrayFromScalar(arrow::Int32Scalar(0), 2), a_words);
    ASSERT_TRUE(dict.ok()) << dict.status().ToString();
    auto storage = arrow::FixedSizeListArray::FromArrays(a_floats, 6);
    ASSERT_TRUE(storage.ok());
    auto tensor_type = arrow::extension::fixed_shape_tensor(arrow::float32(), {2, 3}, {0, 1});
    auto tensor = arrow::ExtensionType::WrapArray(tensor_type, *storage);
    arrow::BooleanBuilder bits;
    ASSERT_OK(
        bits.AppendValues(std::vector<bool>{true, false, true, true, false, false, true, false}));
    std::shared_ptr<arrow::Array> a_bits;
    ASSERT_OK(bits.Finish(&a_bits));
    auto bool_fsl = arrow::FixedSizeListArray::FromArrays(a_bits, 4);
    ASSERT_TRUE(bool_fsl.ok());
    arrow::Int32Builder bool_offsets;
    ASSERT_OK(bool_offsets.AppendValues({0, 3, 8}));
    std::shared_ptr<arrow::Array> a_bool_offsets;
    ASSERT_OK(bool_offsets.Finish(&a_bool_offsets));
    auto bool_list = arrow::ListArray::FromArrays(*a_bool_offsets, *a_bits);
    ASSERT_TRUE(bool_list.ok());

    auto table = arrow::Table::Make(
        arrow::schema({arrow::field("i8", arrow::int8()), arrow::field("l", a_list->type()),
                       arrow::field("s", arrow::utf8()), arrow::field("d", (*dict)->type()),
                       arrow::field("t", tensor_type), arrow::field("ts", a_stamps->type()),
                       arrow::field("fb", (*bool_fsl)->type()),
                       arrow::field("lb", (*bool_list)->type())}),
        {a_int8, a_list, a_words, *dict, tensor, a_stamps, *bool_fsl, *bool_list});
    auto sink = arrow::io::FileOutputStream::Open(path_);
    ASSERT_TRUE(sink.ok());
    auto props = parquet::ArrowWriterProperties::Builder().store_schema()->build();
    ASSERT_OK(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), *sink, 2,
                                         parquet::default_writer_properties(), props));
    ASSERT_OK((*sink)->Close());
    auto catalog = Catalog::Open({path_}, 1);
    ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
    catalog_ = *catalog;
  }

  void TearDown() override { std::filesystem::remove_all(dir_); }

  Result<OutputSpec> Resolve(std::vector<std::string> columns, ColumnOptions defaults = {}) {
    LoaderOptions options;
    options.source.sources = {path_};
    options.columns.columns = std::move(columns);
    options.columns.default_column_options = defaults;
    return ResolveColumns(*catalog_, options.columns);
  }

  std::filesystem::path dir_;
  std::string path_;
  std::shared_ptr<Catalog> catalog_;
};

TEST_F(ResolveColumnsTest, ListWithoutModeNamesColumnAndBothOptions) {
  auto spec = Resolve({"l"});
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(GetErrorKind(spec.status()), ErrorKind::kUnsupportedType);
  const std::string message = spec.status().message();
  EXPECT_NE(message.find("'l'"), std::string::npos) << message;
  EXPECT_NE(message.find("padded"), std::string::npos) << message;
  EXPECT_NE(message.find("ragged"), std::string::npos) << message;
}

TEST_F(ResolveColumnsTest, EveryProblemIsReportedOnceInOneError) {
  // Two missing columns and a list without a mode: one error, a line each, the first's kind.
  auto spec = Resolve({"nope", "l", "i8", "missing"});
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(GetErrorKind(spec.status()), ErrorKind::kColumnNotFound);
  const std::string message = spec.status().message();
  EXPECT_EQ(message.rfind("3 problems", 0), 0u) << message;
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 3) << message;
  const size_t nope = message.find("'nope'");
  const size_t list = message.find("lists={'l'");
  const size_t missing = message.find("'missing'");
  EXPECT_TRUE(nope < list && list < missing) << message;
  EXPECT_EQ(message.find("'i8'"), std::string::npos) << message;
}

TEST_F(ResolveColumnsTest, TimeUnitMakesTimestampsFloat64Counts) {
  ColumnOptions seconds;
  seconds.time_unit = TimeUnit::kSecond;
  auto spec = Resolve({"ts", "i8"}, seconds);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const ColumnSpec& ts = spec->columns[0];
  EXPECT_EQ(ts.dtype, DType::kFloat64);
  EXPECT_EQ(ts.source_dtype, DType::kFloat64);
  EXPECT_TRUE(ts.conversion.active());
  EXPECT_EQ(ts.conversion.divide, 1000000);  // stored microseconds
  EXPECT_EQ(ts.annotation, "timestamp[us, tz=UTC] in s since 1970-01-01");
  EXPECT_FALSE(spec->columns[1].conversion.active());  // only temporal columns convert
  EXPECT_EQ(spec->columns[1].dtype, DType::kInt8);
}

TEST_F(ResolveColumnsTest, ListWithModeAndPadValue) {
  ColumnOptions padded;
  padded.list_mode = ListMode::kPadded;
  auto spec = Resolve({"l"}, padded);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->columns[0].kind, ColumnKind::kPadded);
  EXPECT_EQ(spec->columns[0].dtype, DType::kInt32);
  padded.pad_value = 0.25;  // not an int32
  spec = Resolve({"l"}, padded);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(GetErrorKind(spec.status()), ErrorKind::kInvalidOption);
}

TEST_F(ResolveColumnsTest, TensorWithIdentityPermutation) {
  auto spec = Resolve({"t"});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const ColumnSpec& column = spec->columns[0];
  EXPECT_EQ(column.kind, ColumnKind::kDense);
  EXPECT_EQ(column.dtype, DType::kFloat32);
  EXPECT_EQ(column.inner, 6);
  EXPECT_EQ(column.inner_shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(column.annotation, "arrow.fixed_shape_tensor");
}

TEST_F(ResolveColumnsTest, BoolListsAreUnpackedBits) {
  ColumnOptions ragged;
  ragged.list_mode = ListMode::kRagged;
  auto spec = Resolve({"fb", "lb"}, ragged);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->columns[0].layout, SourceLayout::kBool);
  EXPECT_EQ(spec->columns[0].kind, ColumnKind::kDense);
  EXPECT_EQ(spec->columns[0].inner, 4);
  EXPECT_EQ(spec->columns[0].dtype, DType::kBool);
  EXPECT_EQ(spec->columns[1].layout, SourceLayout::kList);
  EXPECT_EQ(spec->columns[1].kind, ColumnKind::kRagged);
  EXPECT_EQ(spec->columns[1].source_dtype, DType::kBool);
  // A bool fixed-size list is no scalar feature.
  LoaderOptions options;
  options.source.sources = {path_};
  options.columns.features = {"fb"};
  auto features = ResolveColumns(*catalog_, options.columns);
  ASSERT_FALSE(features.ok());
  EXPECT_EQ(GetErrorKind(features.status()), ErrorKind::kUnsupportedType);
}

TEST_F(ResolveColumnsTest, DictionaryStringsAreStrings) {
  auto spec = Resolve({"d", "s"});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->columns[0].dictionary);
  EXPECT_EQ(spec->columns[0].kind, ColumnKind::kStrings);
  EXPECT_EQ(spec->columns[0].annotation, "utf8");
  EXPECT_EQ(spec->columns[1].kind, ColumnKind::kStrings);
}

TEST_F(ResolveColumnsTest, TimestampKeepsItsUnit) {
  auto spec = Resolve({"ts"});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->columns[0].dtype, DType::kInt64);
  EXPECT_EQ(spec->columns[0].annotation, "timestamp[us, tz=UTC]");
}

TEST_F(ResolveColumnsTest, FillNullMustFitTheColumn) {
  LoaderOptions options;
  options.source.sources = {path_};
  options.columns.columns = {"i8", "s"};
  ColumnOptions fill;
  fill.has_fill_null = true;
  fill.fill_null = 200;  // not an int8
  options.columns.column_options["i8"] = fill;
  auto spec = ResolveColumns(*catalog_, options.columns);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(GetErrorKind(spec.status()), ErrorKind::kInvalidOption);
  EXPECT_NE(spec.status().message().find("'i8'"), std::string::npos);
  options.columns.column_options["i8"].fill_null = -5;
  EXPECT_TRUE(ResolveColumns(*catalog_, options.columns).ok());
  // Strings ignore a numeric fill value (their nulls need the mask), so it is no error there.
  options.columns.column_options.clear();
  options.columns.column_options["s"] = fill;
  EXPECT_TRUE(ResolveColumns(*catalog_, options.columns).ok());
}

TEST_F(ResolveColumnsTest, DefaultFillNullIsCheckedOnlyWhereNullsAre) {
  ColumnOptions fill;
  fill.has_fill_null = true;
  fill.fill_null = std::numeric_limits<double>::quiet_NaN();  // for every column
  auto spec = Resolve({"i8"}, fill);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_FALSE(spec->columns[0].explicit_options);
  EXPECT_TRUE(FillNullApplies(spec->columns[0]));
}

// int8 and a timestamp whose footer statistics stay within 2^24 stack into float32 exactly
// (categories_test.cc covers the lossy side, with its message).
TEST_F(ResolveColumnsTest, FeatureCastsUseTheFooterStatistics) {
  LoaderOptions options;
  options.source.sources = {path_};
  options.columns.features = {"i8", "ts"};
  options.columns.features_dtype = DType::kFloat32;
  auto spec = ResolveColumns(*catalog_, options.columns);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->features.size(), 2u);
  EXPECT_EQ(spec->features[1].dtype, DType::kFloat32);
  ASSERT_EQ(spec->feature_groups.size(), 1u);
  EXPECT_EQ(spec->feature_groups[0].name, "features");
  EXPECT_EQ(spec->feature_groups[0].count, 2u);
}

TEST(IsRepresentable, BFloat16HasEightSignificantBits) {
  EXPECT_TRUE(IsRepresentable(255, DType::kBFloat16));
  EXPECT_FALSE(IsRepresentable(257, DType::kBFloat16));
  EXPECT_TRUE(IsRepresentable(1e30 - std::fmod(1e30, 0x1p92), DType::kBFloat16));
  EXPECT_TRUE(IsLosslessCast(DType::kUInt8, DType::kBFloat16));
  EXPECT_FALSE(IsLosslessCast(DType::kInt16, DType::kBFloat16));
  EXPECT_FALSE(IsLosslessCast(DType::kFloat16, DType::kBFloat16));
  EXPECT_TRUE(IsLosslessCast(DType::kBFloat16, DType::kFloat32));
}

TEST_F(ResolveColumnsTest, ChainsOnListsFeaturesAndSeveralOutputs) {
  LoaderOptions options;
  options.source.sources = {path_};
  options.columns.columns = {"l", "s"};
  options.columns.features = {"s"};
  options.columns.default_column_options.list_mode = ListMode::kPadded;
  options.columns.transforms["l"] = {OpSpec{"log1p", {}}};
  options.columns.transforms["s"] = {OpSpec{"hash_bucket", {{"num_buckets", ParamValue(10)}}},
                                     OpSpec{"cast", {{"dtype", ParamValue("float32")}}}};
  auto spec = ResolveColumns(*catalog_, options.columns);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const ColumnSpec& list = spec->columns[0];
  EXPECT_EQ(list.layout, SourceLayout::kList);  // still a list, of the chain's output
  EXPECT_EQ(list.kind, ColumnKind::kPadded);
  EXPECT_EQ(list.dtype, DType::kFloat32);
  EXPECT_EQ(list.cached_ops, 1u);
  const ColumnSpec& feature = spec->features[0];
  EXPECT_EQ(feature.layout, SourceLayout::kFixed);  // the cached float32 ids
  EXPECT_EQ(feature.source_dtype, DType::kFloat32);
  EXPECT_EQ(feature.cached_ops, 2u);

  // A feature chain must give one number per row.
  options.columns.columns = {};
  options.columns.features = {"t"};
  options.columns.transforms = {{"t", {OpSpec{"log1p", {}}}}};
  spec = ResolveColumns(*catalog_, options.columns);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("feature column 't'"), std::string::npos)
      << spec.status().message();

  // Several outputs of one column: adjacent specs of one group reading it, sharing log1p.
  options.columns.features = {};
  options.columns.columns = {"i8", "t"};
  options.columns.transforms.clear();
  options.columns.transform_outputs["t"] = {
      {"t_log", {OpSpec{"log1p", {}}}},
      {"t_log_std",
       {OpSpec{"log1p", {}},
        OpSpec{"standardize", {{"mean", ParamValue(1.0)}, {"std", ParamValue(2.0)}}}}}};
  spec = ResolveColumns(*catalog_, options.columns);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->columns.size(), 3u);
  EXPECT_EQ(spec->columns[1].name, "t_log");
  EXPECT_EQ(spec->columns[2].Field(), "t");
  EXPECT_EQ(spec->columns[1].group, spec->columns[2].group);
  EXPECT_EQ(spec->columns[2].shared_ops, 1u);
  EXPECT_EQ(spec->columns[2].cached_ops, 0u);  // no cache_dir: the chains run per batch
  spec = ResolveColumns(*catalog_, options.columns, /*cached=*/true);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->columns[2].cached_ops, 1u);  // with one, the shared prefix is cached

  options.columns.transform_outputs["t"].push_back({"i8", {OpSpec{"log1p", {}}}});
  spec = ResolveColumns(*catalog_, options.columns);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("'i8'"), std::string::npos) << spec.status().message();
}

TEST_F(ResolveColumnsTest, OnErrorZeroOnlyForColumnsWithTransforms) {
  LoaderOptions options;
  options.source.sources = {path_};
  options.columns.columns = {"i8"};
  ColumnOptions zero;
  zero.on_error_zero = true;
  options.columns.column_options["i8"] = zero;
  auto spec = ResolveColumns(*catalog_, options.columns);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(GetErrorKind(spec.status()), ErrorKind::kInvalidOption);
  EXPECT_NE(spec.status().message().find("on_error"), std::string::npos);
  options.columns.transforms["i8"] = {OpSpec{"cast", {{"dtype", ParamValue("uint8")}}}};
  spec = ResolveColumns(*catalog_, options.columns);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->columns[0].options.on_error_zero);
}

// A HuggingFace Image() column, struct<bytes: binary, path: string>, and a struct without bytes.
class StructBytesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("stoker_struct_bytes_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "images.parquet").string();
    arrow::BinaryBuilder bytes;
    ASSERT_OK(bytes.AppendValues({"\x89PNG", "\x89PNG"}));
    arrow::StringBuilder paths;
    ASSERT_OK(paths.AppendValues({"a.png", "b.png"}));
    arrow::Int64Builder numbers;
    ASSERT_OK(numbers.AppendValues({1, 2}));
    std::shared_ptr<arrow::Array> a_bytes, a_paths, a_numbers;
    ASSERT_OK(bytes.Finish(&a_bytes));
    ASSERT_OK(paths.Finish(&a_paths));
    ASSERT_OK(numbers.Finish(&a_numbers));
    using Arrays = std::vector<std::shared_ptr<arrow::Array>>;
    using Names = std::vector<std::string>;
    auto image = arrow::StructArray::Make(Arrays{a_bytes, a_paths}, Names{"bytes", "path"});
    auto meta = arrow::StructArray::Make(Arrays{a_paths, a_numbers}, Names{"name", "size"});
    ASSERT_TRUE(image.ok() && meta.ok());
    auto table =
        arrow::Table::Make(arrow::schema(arrow::FieldVector{arrow::field("image", (*image)->type()),
                                                            arrow::field("meta", (*meta)->type()),
                                                            arrow::field("label", arrow::int64())}),
                           Arrays{*image, *meta, a_numbers});
    auto sink = arrow::io::FileOutputStream::Open(path_);
    ASSERT_TRUE(sink.ok());
    ASSERT_OK(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), *sink, 2));
    ASSERT_OK((*sink)->Close());
    auto catalog = Catalog::Open({path_}, 1);
    ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
    catalog_ = *catalog;
  }

  void TearDown() override { std::filesystem::remove_all(dir_); }

  LoaderOptions Options(std::vector<std::string> columns, const std::string& transformed) {
    LoaderOptions options;
    options.source.sources = {path_};
    options.columns.columns = std::move(columns);
    options.columns.transforms[transformed] = {
        OpSpec{"decode_image", {}},
        OpSpec{"resize", {{"size", ParamValue(ParamValue::List{4, 4})}}}};
    return options;
  }

  std::filesystem::path dir_;
  std::string path_;
  std::shared_ptr<Catalog> catalog_;
};

TEST_F(StructBytesTest, TheStructsChainReadsItsBytesUnderItsName) {
  auto spec = ResolveColumns(*catalog_, Options({"image", "label"}, "image").columns);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->columns.size(), 2u);  // no image.path
  const ColumnSpec& image = spec->columns[0];
  EXPECT_EQ(image.name, "image");
  EXPECT_EQ(image.Field(), "image.bytes");
  ASSERT_NE(image.chain, nullptr);
  EXPECT_EQ(image.output_shape, (std::vector<int64_t>{4, 4, 3}));
  EXPECT_EQ(spec->file_fields, (std::vector<std::string>{"image.bytes", "label"}));

  // The path when named; every column when none is: the struct is one column.
  spec = ResolveColumns(*catalog_, Options({"image", "image.path"}, "image").columns);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->columns.size(), 2u);
  EXPECT_EQ(spec->columns[1].name, "image.path");
  spec = ResolveColumns(*catalog_, Options({}, "image").columns);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  std::vector<std::string> names;
  for (const ColumnSpec& column : spec->columns) names.push_back(column.name);
  EXPECT_EQ(names, (std::vector<std::string>{"image", "meta.name", "meta.size", "label"}));

  // Describe's per-field resolution agrees: the bytes field is the struct's column, the path
  // nothing.
  auto alone = ResolveColumnAlone(*catalog_, Options({"image"}, "image").columns, false, nullptr,
                                  "image.bytes", false);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  ASSERT_EQ(alone->size(), 1u);
  EXPECT_EQ((*alone)[0].name, "image");
  alone = ResolveColumnAlone(*catalog_, Options({"image"}, "image").columns, false, nullptr,
                             "image.path", false);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_TRUE(alone->empty());
}

TEST_F(StructBytesTest, OtherStructsNameTheFieldToTransform) {
  auto spec = ResolveColumns(*catalog_, Options({"meta"}, "meta").columns);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(GetErrorKind(spec.status()), ErrorKind::kInvalidOption);
  const std::string message = spec.status().message();
  EXPECT_NE(message.find("'meta.name', 'meta.size'"), std::string::npos) << message;
  EXPECT_NE(message.find("transforms={'meta.name': [...]}"), std::string::npos) << message;
  EXPECT_EQ(message.find("problems"), std::string::npos) << message;  // one problem only

  LoaderOptions both = Options({"image"}, "image");
  both.columns.transforms["image.bytes"] = both.columns.transforms["image"];
  spec = ResolveColumns(*catalog_, both.columns);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("both 'image' and 'image.bytes'"), std::string::npos)
      << spec.status().message();
}

}  // namespace
}  // namespace stoker
