// Element conversions between stoker's dtypes, shared by the gather kernels.
// Header-only so the per-element calls inline into the loops.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "stoker/tensor.h"

namespace stoker {

struct Half {
  uint16_t bits;
};

struct BFloat16 {
  uint16_t bits;
};

inline float BFloat16ToFloat(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof(out));
  return out;
}

// Round-to-nearest-even float -> bfloat16 (NaN stays a quiet NaN).
inline uint16_t FloatToBFloat16(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      bits = sign | (exponent << 23) | ((mantissa & 0x3ff) << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000 | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// Round-to-nearest-even float -> IEEE half, for fill and pad values of float16 columns.
inline uint16_t FloatToHalf(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) {  // inf or NaN (kept quiet)
    return sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0);
  }
  if (abs >= 0x477ff000) return sign | 0x7c00;  // rounds past 65504: inf
  if (abs < 0x38800000) {                       // below 2**-14: a half subnormal (or zero)
    if (abs < 0x33000000) return sign;          // at most 2**-25: rounds to zero
    const uint32_t mantissa = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - (abs >> 23);
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (abs - 0x38000000) >> 13;  // rebias the exponent from 127 to 15
  const uint32_t rest = abs & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;  // a carry bumps the exponent
  return static_cast<uint16_t>(sign | half);
}

template <typename F>
void VisitDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kBool:
      f(uint8_t{});
      break;
    case DType::kInt8:
      f(int8_t{});
      break;
    case DType::kInt16:
      f(int16_t{});
      break;
    case DType::kInt32:
      f(int32_t{});
      break;
    case DType::kInt64:
      f(int64_t{});
      break;
    case DType::kUInt8:
      f(uint8_t{});
      break;
    case DType::kUInt16:
      f(uint16_t{});
      break;
    case DType::kUInt32:
      f(uint32_t{});
      break;
    case DType::kUInt64:
      f(uint64_t{});
      break;
    case DType::kFloat16:
      f(Half{});
      break;
    case DType::kFloat32:
      f(float{});
      break;
    case DType::kFloat64:
      f(double{});
      break;
    case DType::kBFloat16:
      f(BFloat16{});
      break;
  }
}

template <typename D, typename S>
inline D Convert(S value) {
  if constexpr (std::is_same_v<S, BFloat16> || std::is_same_v<D, BFloat16>) {
    if constexpr (std::is_same_v<S, D>) {
      return value;
    } else if constexpr (std::is_same_v<D, BFloat16>) {
      return BFloat16{0};  // unreachable: bfloat16 is never a cast target (options validation)
    } else if constexpr (std::is_same_v<D, Half>) {
      return Half{0};  // unreachable, as above
    } else {
      return static_cast<D>(BFloat16ToFloat(value.bits));
    }
  } else if constexpr (std::is_same_v<S, Half>) {
    if constexpr (std::is_same_v<D, Half>) {
      return value;
    } else {
      return static_cast<D>(HalfToFloat(value.bits));
    }
  } else if constexpr (std::is_same_v<D, Half>) {
    return Half{0};  // unreachable: float16 is never a cast target (options validation)
  } else {
    return static_cast<D>(value);
  }
}

template <typename D>
D FromDouble(double value) {
  if constexpr (std::is_same_v<D, Half>) {
    return Half{FloatToHalf(static_cast<float>(value))};
  } else if constexpr (std::is_same_v<D, BFloat16>) {
    return BFloat16{FloatToBFloat16(static_cast<float>(value))};
  } else {
    return static_cast<D>(value);
  }
}

inline uint8_t BitAt(const uint8_t* bits, int64_t index) {
  return (bits[index >> 3] >> (index & 7)) & 1;
}

}  // namespace stoker
