// Value conversions chosen by options: temporal columns as float64 counts of a unit
// (`time_unit`), decimal columns as float64, float32 or their unscaled int64 (`decimals`).
//
// Decided once at open (ResolveConversion, from the Arrow type, the options and the footers'
// statistics); run by the decoder on each decoded array before the ready-tensor cache
// (decode/convert_values.h), so everything after it sees a plain numeric column.
// Thread safety: plain values.
#pragma once

#include <arrow/type_fwd.h>

#include <cstdint>
#include <string>

#include "catalog/catalog.h"
#include "stoker/options.h"

namespace stoker {

struct ValueConversion {
  enum class Kind { kNone, kTime, kDecimal };
  Kind kind = Kind::kNone;
  /// kTime: value = double(count) * multiply / divide (one of the two is 1).
  int64_t multiply = 1;
  int64_t divide = 1;
  /// kDecimal: the delivered form and the column's scale.
  DecimalMode decimals = DecimalMode::kUnset;
  int32_t scale = 0;
  /// Added to the field's cache name, so entries of another conversion are never served.
  std::string tag;
  /// Every converted value is exactly representable as float32 (a feature may be stacked into
  /// float32 without allow_lossy_cast).
  bool exact_in_float32 = false;

  bool active() const { return kind != Kind::kNone; }
};

/// Whether `type` is a timestamp, date, time or duration.
bool IsTemporalType(const arrow::DataType& type);
/// Whether `type` is a decimal (32, 64, 128 or 256 bits).
bool IsDecimalType(const arrow::DataType& type);

/// The conversion `options` asks for column `name` of `type` (a temporal or decimal storage
/// type), with the delivered element type in `dtype` and a description in `annotation`.
/// `catalog` (may be null: a user transform's output) gives the footers' min/max statistics of
/// the column, which decide whether a time conversion is exact. Errors name the column and the
/// option that fixes them: a decimal without `decimals`, a lossy choice without
/// allow_lossy_cast, scaled_int64 for a precision above 18.
Status ResolveConversion(const Catalog* catalog, const std::string& name,
                         const arrow::DataType& type, const ColumnOptions& options,
                         bool allow_lossy_cast, ValueConversion* out, DType* dtype,
                         std::string* annotation);

}  // namespace stoker
