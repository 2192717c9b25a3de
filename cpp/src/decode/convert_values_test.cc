// Value conversions (time_unit, decimals): decided at open (resolve/value_conversion.h), run by
// the decoder (ConvertValues).
#include "decode/convert_values.h"

#include <arrow/api.h>
#include <arrow/util/decimal.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "resolve/value_conversion.h"
#include "util/test_status_internal.h"

namespace stoker {
namespace {

std::shared_ptr<arrow::Array> Decimals(const std::shared_ptr<arrow::DataType>& type,
                                       const std::vector<std::string>& values) {
  auto builder = arrow::MakeBuilder(type).ValueOrDie();
  for (const auto& text : values) {
    if (text.empty()) {
      EXPECT_TRUE(builder->AppendNull().ok());
    } else if (type->id() == arrow::Type::DECIMAL128) {
      EXPECT_TRUE(static_cast<arrow::Decimal128Builder&>(*builder)
                      .Append(arrow::Decimal128::FromString(text).ValueOrDie())
                      .ok());
    } else {
      EXPECT_TRUE(static_cast<arrow::Decimal256Builder&>(*builder)
                      .Append(arrow::Decimal256::FromString(text).ValueOrDie())
                      .ok());
    }
  }
  return builder->Finish().ValueOrDie();
}

Result<ValueConversion> Resolve(const arrow::DataType& type, ColumnOptions options,
                                bool lossy = false, DType* dtype = nullptr) {
  ValueConversion conversion;
  DType out = DType::kUInt8;
  std::string annotation;
  STOKER_RETURN_NOT_OK(
      ResolveConversion(nullptr, "c", type, options, lossy, &conversion, &out, &annotation));
  if (dtype) *dtype = out;
  return conversion;
}

TEST(ValueConvert, DecimalWithoutAChoiceNamesTheOption) {
  auto status = Resolve(*arrow::decimal128(12, 2), {}).status();
  EXPECT_EQ(GetErrorKind(status), ErrorKind::kUnsupportedType);
  EXPECT_NE(status.message().find("decimals={'c': 'float64'}"), std::string::npos);
}

TEST(ValueConvert, DecimalFloat64IsCorrectlyRoundedAndKeepsNulls) {
  ColumnOptions options;
  options.decimals = DecimalMode::kFloat64;
  auto type = arrow::decimal128(12, 3);
  auto conversion = Resolve(*type, options);
  ASSERT_TRUE(conversion.ok()) << conversion.status().ToString();
  // Sliced, so the offset is honoured.
  auto array = Decimals(type, {"7.000", "0.100", "", "-123456789.125", "999999999.999"})->Slice(1);
  auto converted = ConvertValues(*conversion, array);
  ASSERT_TRUE(converted.ok()) << converted.status().ToString();
  const auto& doubles = static_cast<const arrow::DoubleArray&>(**converted);
  ASSERT_EQ(doubles.length(), 4);
  EXPECT_EQ(doubles.Value(0), 0.1);
  EXPECT_TRUE(doubles.IsNull(1));
  EXPECT_EQ(doubles.Value(1), 0.0);
  EXPECT_EQ(doubles.Value(2), -123456789.125);
  EXPECT_EQ(doubles.Value(3), 999999999.999);
  EXPECT_EQ(doubles.null_count(), 1);
}

TEST(ValueConvert, DecimalPrecisionDecidesWhatIsLossy) {
  ColumnOptions options;
  options.decimals = DecimalMode::kFloat64;
  EXPECT_TRUE(Resolve(*arrow::decimal128(15, 4), options).ok());
  auto lossy = Resolve(*arrow::decimal128(16, 4), options).status();
  EXPECT_EQ(GetErrorKind(lossy), ErrorKind::kLossyCast);
  EXPECT_NE(lossy.message().find("scaled_int64"), std::string::npos) << lossy.message();
  EXPECT_TRUE(Resolve(*arrow::decimal128(16, 4), options, /*lossy=*/true).ok());
  options.decimals = DecimalMode::kFloat32;
  EXPECT_TRUE(Resolve(*arrow::decimal128(6, 2), options).ok());
  EXPECT_EQ(GetErrorKind(Resolve(*arrow::decimal128(7, 2), options).status()),
            ErrorKind::kLossyCast);
  options.decimals = DecimalMode::kScaledInt64;
  EXPECT_TRUE(Resolve(*arrow::decimal128(18, 2), options).ok());
  // Even allow_lossy_cast cannot make 19 digits fit int64.
  EXPECT_EQ(GetErrorKind(Resolve(*arrow::decimal128(19, 2), options, true).status()),
            ErrorKind::kInvalidOption);
}

TEST(ValueConvert, ScaledInt64IsTheUnscaledInteger) {
  ColumnOptions options;
  options.decimals = DecimalMode::kScaledInt64;
  auto type = arrow::decimal128(18, 4);
  auto conversion = Resolve(*type, options);
  ASSERT_TRUE(conversion.ok());
  auto array = Decimals(type, {"-99999999999999.9999", "1.2345", "0.0001"});
  auto converted = ConvertValues(*conversion, array);
  ASSERT_TRUE(converted.ok());
  const auto& ints = static_cast<const arrow::Int64Array&>(**converted);
  EXPECT_EQ(ints.Value(0), -999999999999999999);
  EXPECT_EQ(ints.Value(1), 12345);
  EXPECT_EQ(ints.Value(2), 1);
}

TEST(ValueConvert, Decimal256AndFloat32) {
  ColumnOptions options;
  options.decimals = DecimalMode::kFloat32;
  auto type = arrow::decimal256(40, 1);
  auto conversion = Resolve(*type, options, /*lossy=*/true);
  ASSERT_TRUE(conversion.ok());
  auto converted = ConvertValues(*conversion, Decimals(type, {"2.5", "-0.1"}));
  ASSERT_TRUE(converted.ok());
  const auto& floats = static_cast<const arrow::FloatArray&>(**converted);
  EXPECT_EQ(floats.Value(0), 2.5f);
  EXPECT_EQ(floats.Value(1), static_cast<float>(-0.1));
}

TEST(ValueConvert, ListElementsAreConvertedAndOffsetsKept) {
  ColumnOptions options;
  options.decimals = DecimalMode::kScaledInt64;
  auto type = arrow::decimal128(9, 2);
  auto conversion = Resolve(*type, options);
  ASSERT_TRUE(conversion.ok());
  auto values = Decimals(type, {"1.00", "-2.50", "3.25", "", "4.00"});
  arrow::Int32Builder offsets;
  ASSERT_OK(offsets.AppendValues({0, 2, 2, 5}));
  auto list = arrow::ListArray::FromArrays(*offsets.Finish().ValueOrDie(), *values).ValueOrDie();
  // Rows 1..2 of the list: an empty row, then [3.25, null, 4.00].
  auto converted = ConvertValues(*conversion, list->Slice(1));
  ASSERT_TRUE(converted.ok()) << converted.status().ToString();
  const auto& out = static_cast<const arrow::ListArray&>(**converted);
  ASSERT_EQ(out.length(), 2);
  EXPECT_EQ(out.value_length(0), 0);
  ASSERT_EQ(out.value_length(1), 3);
  const auto& ints = static_cast<const arrow::Int64Array&>(*out.values());
  EXPECT_EQ(ints.Value(out.value_offset(1)), 325);
  EXPECT_TRUE(ints.IsNull(out.value_offset(1) + 1));
  EXPECT_EQ(ints.Value(out.value_offset(1) + 2), 400);
}

TEST(ValueConvert, TimeUnitsMultiplyOrDivideInFloat64) {
  ColumnOptions options;
  options.time_unit = TimeUnit::kMilli;
  DType dtype = DType::kUInt8;
  auto type = arrow::timestamp(arrow::TimeUnit::SECOND, "UTC");
  // Without footer statistics (no catalog here) an int64 column's range is the type's: lossy.
  EXPECT_EQ(GetErrorKind(Resolve(*type, options).status()), ErrorKind::kLossyCast);
  auto conversion = Resolve(*type, options, /*lossy=*/true, &dtype);
  ASSERT_TRUE(conversion.ok()) << conversion.status().ToString();
  EXPECT_EQ(dtype, DType::kFloat64);
  EXPECT_EQ(conversion->multiply, 1000);
  arrow::TimestampBuilder builder(type, arrow::default_memory_pool());
  ASSERT_OK(builder.AppendValues({-3, 1700000000}));
  auto converted = ConvertValues(*conversion, builder.Finish().ValueOrDie());
  ASSERT_TRUE(converted.ok());
  const auto& ms = static_cast<const arrow::DoubleArray&>(**converted);
  EXPECT_EQ(ms.Value(0), -3000.0);
  EXPECT_EQ(ms.Value(1), 1.7e12);

  options.time_unit = TimeUnit::kDay;
  conversion = Resolve(*arrow::date32(), options);
  ASSERT_TRUE(conversion.ok());
  EXPECT_TRUE(conversion->exact_in_float32 == false);  // the type's range, without a catalog
  arrow::Date32Builder dates;
  ASSERT_OK(dates.AppendValues({19000, -1}));
  converted = ConvertValues(*conversion, dates.Finish().ValueOrDie());
  ASSERT_TRUE(converted.ok());
  EXPECT_EQ(static_cast<const arrow::DoubleArray&>(**converted).Value(0), 19000.0);
  EXPECT_EQ(static_cast<const arrow::DoubleArray&>(**converted).Value(1), -1.0);
}

TEST(ValueConvert, NanosecondsBeyondFloat64NeedAllowLossyCast) {
  ColumnOptions options;
  options.time_unit = TimeUnit::kSecond;
  // Without statistics the type's range decides: int64 nanoseconds do not fit.
  auto status = Resolve(*arrow::timestamp(arrow::TimeUnit::NANO), options).status();
  EXPECT_EQ(GetErrorKind(status), ErrorKind::kLossyCast);
  EXPECT_NE(status.message().find("allow_lossy_cast=True"), std::string::npos);
  EXPECT_TRUE(Resolve(*arrow::timestamp(arrow::TimeUnit::NANO), options, true).ok());
  // Dates in seconds fit whatever the value (2**31 days * 86400 < 2**52).
  EXPECT_TRUE(Resolve(*arrow::date32(), options).ok());
}

}  // namespace
}  // namespace stoker
