// Loads and stores of single tensor elements of any ElementType, through double. Header-only so
// the per-element switch inlines into the feature and normalize loops.
#pragma once

#include <cstdint>
#include <cstring>

#include "transform/value.h"
#include "util/convert.h"

namespace stoker::transform::internal {

template <typename T>
inline T LoadAs(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

template <typename T>
inline void StoreAs(uint8_t* p, T value) {
  std::memcpy(p, &value, sizeof(T));
}

inline float BFloat16ToFloat(uint16_t bits) {
  const uint32_t wide = uint32_t{bits} << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

/// Round-to-nearest-even float -> bfloat16 (NaN stays a quiet NaN).
inline uint16_t FloatToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

/// Element `p` of type `type` as a long double (exact for every integer type on x86-64, whose
/// long double has a 64-bit mantissa).
inline long double LoadValue(ElementType type, const uint8_t* p) {
  switch (type) {
    case ElementType::kBool:
      return *p != 0;
    case ElementType::kInt8:
      return LoadAs<int8_t>(p);
    case ElementType::kInt16:
      return LoadAs<int16_t>(p);
    case ElementType::kInt32:
      return LoadAs<int32_t>(p);
    case ElementType::kInt64:
      return LoadAs<int64_t>(p);
    case ElementType::kUInt8:
      return *p;
    case ElementType::kUInt16:
      return LoadAs<uint16_t>(p);
    case ElementType::kUInt32:
      return LoadAs<uint32_t>(p);
    case ElementType::kUInt64:
      return LoadAs<uint64_t>(p);
    case ElementType::kFloat16:
      return HalfToFloat(LoadAs<uint16_t>(p));
    case ElementType::kFloat32:
      return LoadAs<float>(p);
    case ElementType::kFloat64:
      return LoadAs<double>(p);
    case ElementType::kBFloat16:
      return BFloat16ToFloat(LoadAs<uint16_t>(p));
  }
  return 0.0;
}

inline double LoadDouble(ElementType type, const uint8_t* p) {
  return static_cast<double>(LoadValue(type, p));
}

/// Stores `value` as `type`. Integers: the caller has checked the range (NaN and out-of-range
/// values are undefined for integer targets); floats round to nearest.
inline void StoreValue(ElementType type, uint8_t* p, long double value) {
  switch (type) {
    case ElementType::kBool:
      *p = value != 0;
      break;
    case ElementType::kInt8:
      StoreAs(p, static_cast<int8_t>(value));
      break;
    case ElementType::kInt16:
      StoreAs(p, static_cast<int16_t>(value));
      break;
    case ElementType::kInt32:
      StoreAs(p, static_cast<int32_t>(value));
      break;
    case ElementType::kInt64:
      StoreAs(p, static_cast<int64_t>(value));
      break;
    case ElementType::kUInt8:
      StoreAs(p, static_cast<uint8_t>(value));
      break;
    case ElementType::kUInt16:
      StoreAs(p, static_cast<uint16_t>(value));
      break;
    case ElementType::kUInt32:
      StoreAs(p, static_cast<uint32_t>(value));
      break;
    case ElementType::kUInt64:
      StoreAs(p, static_cast<uint64_t>(value));
      break;
    case ElementType::kFloat16:
      StoreAs(p, FloatToHalf(static_cast<float>(value)));
      break;
    case ElementType::kFloat32:
      StoreAs(p, static_cast<float>(value));
      break;
    case ElementType::kFloat64:
      StoreAs(p, static_cast<double>(value));
      break;
    case ElementType::kBFloat16:
      StoreAs(p, FloatToBFloat16(static_cast<float>(value)));
      break;
  }
}

}  // namespace stoker::transform::internal
