#include "decode/convert_values.h"

#include <arrow/array.h>
#include <arrow/buffer.h>
#include <arrow/type.h>
#include <arrow/util/bit_util.h>
#include <arrow/util/bitmap_ops.h>
#include <arrow/util/decimal.h>

#include <cstring>
#include <type_traits>

#include "util/recycling_pool.h"

namespace stoker {
namespace {

constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                             1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

// Unscaled value / 10**scale, correctly rounded whenever the unscaled value and the power of
// ten are exact doubles (|unscaled| <= 2**53, 0 <= scale <= 22): then it equals Python's
// float(Decimal(...)). Otherwise Arrow's conversion.
template <typename Decimal>
double DecimalToDouble(const uint8_t* bytes, int32_t scale, bool* small, int64_t* low) {
  const Decimal value(bytes);
  *small = false;
  if constexpr (std::is_same_v<Decimal, arrow::Decimal32> ||
                std::is_same_v<Decimal, arrow::Decimal64>) {
    *low = value.value();
    *small = true;
  } else if constexpr (std::is_same_v<Decimal, arrow::Decimal128>) {
    *low = static_cast<int64_t>(value.low_bits());
    *small = value.high_bits() == (*low < 0 ? -1 : 0);
  } else {
    const auto& words = value.little_endian_array();
    *low = static_cast<int64_t>(words[0]);
    const uint64_t sign = *low < 0 ? ~uint64_t{0} : 0;
    *small = words[1] == sign && words[2] == sign && words[3] == sign;
  }
  if (*small && *low >= -(int64_t{1} << 53) && *low <= (int64_t{1} << 53) && scale >= 0 &&
      scale <= 22) {
    return static_cast<double>(*low) / kPow10[scale];
  }
  return value.ToDouble(scale);
}

template <typename Decimal>
Status ConvertDecimal(const ValueConversion& conversion, const arrow::ArrayData& data, int width,
                      uint8_t* out) {
  const uint8_t* values = data.buffers[1]->data() + data.offset * width;
  for (int64_t i = 0; i < data.length; ++i) {
    const bool valid = data.buffers[0] == nullptr ||
                       arrow::bit_util::GetBit(data.buffers[0]->data(), data.offset + i);
    bool small = false;
    int64_t low = 0;
    switch (conversion.decimals) {
      case DecimalMode::kScaledInt64: {
        int64_t unscaled = 0;
        if (valid) {
          DecimalToDouble<Decimal>(values + i * width, conversion.scale, &small, &low);
          unscaled = low;  // precision <= 18 was checked at open: always small
        }
        std::memcpy(out + i * 8, &unscaled, 8);
        break;
      }
      case DecimalMode::kFloat32: {
        const float value = valid ? static_cast<float>(DecimalToDouble<Decimal>(
                                        values + i * width, conversion.scale, &small, &low))
                                  : 0.0f;
        std::memcpy(out + i * 4, &value, 4);
        break;
      }
      default: {
        const double value =
            valid ? DecimalToDouble<Decimal>(values + i * width, conversion.scale, &small, &low)
                  : 0.0;
        std::memcpy(out + i * 8, &value, 8);
        break;
      }
    }
  }
  return Status::OK();
}

}  // namespace

Result<std::shared_ptr<arrow::Array>> ConvertValues(const ValueConversion& conversion,
                                                    const std::shared_ptr<arrow::Array>& array) {
  if (!conversion.active()) return array;
  if (array->type_id() == arrow::Type::LIST || array->type_id() == arrow::Type::LARGE_LIST) {
    // The elements: the whole child array converted, the offsets and row validity kept.
    STOKER_ASSIGN_OR_RAISE(
        auto values, ConvertValues(conversion, arrow::MakeArray(array->data()->child_data[0])));
    auto data = array->data()->Copy();
    data->type = array->type_id() == arrow::Type::LIST ? arrow::list(values->type())
                                                       : arrow::large_list(values->type());
    data->child_data = {values->data()};
    return arrow::MakeArray(data);
  }
  const arrow::ArrayData& data = *array->data();
  const int64_t length = data.length;
  std::shared_ptr<arrow::DataType> type = arrow::float64();
  if (conversion.kind == ValueConversion::Kind::kDecimal) {
    if (conversion.decimals == DecimalMode::kFloat32) type = arrow::float32();
    if (conversion.decimals == DecimalMode::kScaledInt64) type = arrow::int64();
  }
  const int out_width = type->id() == arrow::Type::FLOAT ? 4 : 8;
  STOKER_ASSIGN_OR_RAISE(auto values,
                         arrow::AllocateBuffer(length * out_width, RecyclingPool::Get()));
  uint8_t* out = values->mutable_data();
  const uint8_t* validity = data.buffers[0] ? data.buffers[0]->data() : nullptr;
  auto valid = [&](int64_t i) {
    return validity == nullptr || arrow::bit_util::GetBit(validity, data.offset + i);
  };
  if (conversion.kind == ValueConversion::Kind::kTime) {
    const bool narrow =
        data.type->id() == arrow::Type::DATE32 || data.type->id() == arrow::Type::TIME32;
    const double multiply = static_cast<double>(conversion.multiply);
    const double divide = static_cast<double>(conversion.divide);
    auto* to = reinterpret_cast<double*>(out);
    for (int64_t i = 0; i < length; ++i) {
      double count = 0;
      if (valid(i)) {
        count = narrow ? static_cast<double>(data.GetValues<int32_t>(1)[i])
                       : static_cast<double>(data.GetValues<int64_t>(1)[i]);
      }
      // The same arithmetic as numpy's `counts.astype(float64) * m` or `/ d`.
      to[i] = conversion.divide == 1 ? count * multiply : count / divide;
    }
  } else {
    switch (data.type->id()) {
      case arrow::Type::DECIMAL32:
        STOKER_RETURN_NOT_OK(ConvertDecimal<arrow::Decimal32>(conversion, data, 4, out));
        break;
      case arrow::Type::DECIMAL64:
        STOKER_RETURN_NOT_OK(ConvertDecimal<arrow::Decimal64>(conversion, data, 8, out));
        break;
      case arrow::Type::DECIMAL128:
        STOKER_RETURN_NOT_OK(ConvertDecimal<arrow::Decimal128>(conversion, data, 16, out));
        break;
      case arrow::Type::DECIMAL256:
        STOKER_RETURN_NOT_OK(ConvertDecimal<arrow::Decimal256>(conversion, data, 32, out));
        break;
      default:
        return MakeError(ErrorKind::kUnsupportedType,
                         "decimals: a " + data.type->ToString() + " array is not a decimal");
    }
  }
  std::shared_ptr<arrow::Buffer> bitmap;
  if (validity != nullptr && array->null_count() > 0) {
    STOKER_ASSIGN_OR_RAISE(bitmap, arrow::internal::CopyBitmap(arrow::default_memory_pool(),
                                                               validity, data.offset, length));
  }
  return arrow::MakeArray(arrow::ArrayData::Make(
      type, length, {bitmap, std::shared_ptr<arrow::Buffer>(std::move(values))},
      bitmap ? array->null_count() : 0));
}

}  // namespace stoker
