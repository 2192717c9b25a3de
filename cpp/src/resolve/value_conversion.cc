#include "resolve/value_conversion.h"

#include <arrow/type.h>
#include <parquet/metadata.h>
#include <parquet/schema.h>
#include <parquet/statistics.h>
#include <parquet/types.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

namespace stoker {
namespace {

constexpr double kNanosPerDay = 86400e9;

// Nanoseconds in one unit of `unit`.
double NanosPer(TimeUnit unit) {
  switch (unit) {
    case TimeUnit::kDay:
      return kNanosPerDay;
    case TimeUnit::kHour:
      return 3600e9;
    case TimeUnit::kMinute:
      return 60e9;
    case TimeUnit::kSecond:
      return 1e9;
    case TimeUnit::kMilli:
      return 1e6;
    case TimeUnit::kMicro:
      return 1e3;
    case TimeUnit::kNano:
    case TimeUnit::kUnset:
      return 1;
  }
  return 1;
}

double NanosPer(arrow::TimeUnit::type unit) {
  switch (unit) {
    case arrow::TimeUnit::SECOND:
      return 1e9;
    case arrow::TimeUnit::MILLI:
      return 1e6;
    case arrow::TimeUnit::MICRO:
      return 1e3;
    case arrow::TimeUnit::NANO:
      return 1;
  }
  return 1;
}

// Nanoseconds in one stored count of an Arrow temporal type.
double StorageNanos(const arrow::DataType& type) {
  switch (type.id()) {
    case arrow::Type::DATE32:
      return kNanosPerDay;
    case arrow::Type::DATE64:
      return 1e6;
    case arrow::Type::TIMESTAMP:
      return NanosPer(static_cast<const arrow::TimestampType&>(type).unit());
    case arrow::Type::DURATION:
      return NanosPer(static_cast<const arrow::DurationType&>(type).unit());
    case arrow::Type::TIME32:
    case arrow::Type::TIME64:
      return NanosPer(static_cast<const arrow::TimeType&>(type).unit());
    default:
      return 1;
  }
}

double ParquetNanos(parquet::LogicalType::TimeUnit::unit unit) {
  switch (unit) {
    case parquet::LogicalType::TimeUnit::MILLIS:
      return 1e6;
    case parquet::LogicalType::TimeUnit::MICROS:
      return 1e3;
    case parquet::LogicalType::TimeUnit::NANOS:
      return 1;
    default:
      return 0;
  }
}

// The largest |value| of `field` in nanoseconds over every row group of every file, from the
// footers' min/max statistics; nullopt where a row group with values has none (or INT96).
// The statistics are in the Parquet column's unit, which may differ from the Arrow type's
// (pyarrow stores date64 as days and timestamp[s] as milliseconds).
std::optional<double> FooterMaxAbsNanos(const Catalog& catalog, const std::string& field,
                                        double arrow_nanos) {
  double max_abs = 0;
  bool any = false;
  for (const CatalogFile& file : catalog.files()) {
    auto it = file.fields.find(field);
    if (it == file.fields.end()) continue;  // not in this file: no values there
    if (it->second.leaves.size() != 1) return std::nullopt;
    const int leaf = it->second.leaves[0];
    const parquet::ColumnDescriptor* column = file.metadata->schema()->Column(leaf);
    double nanos = 0;
    const auto& logical = column->logical_type();
    if (logical && logical->is_date()) {
      nanos = kNanosPerDay;
    } else if (logical && logical->is_timestamp()) {
      nanos = ParquetNanos(static_cast<const parquet::TimestampLogicalType&>(*logical).time_unit());
    } else if (logical && logical->is_time()) {
      nanos = ParquetNanos(static_cast<const parquet::TimeLogicalType&>(*logical).time_unit());
    } else if (!logical || logical->is_none()) {
      nanos = arrow_nanos;  // plain integers, read as they are (durations)
    }
    const parquet::Type::type physical = column->physical_type();
    if (nanos == 0 || (physical != parquet::Type::INT32 && physical != parquet::Type::INT64)) {
      return std::nullopt;
    }
    for (int rg = 0; rg < file.metadata->num_row_groups(); ++rg) {
      auto chunk = file.metadata->RowGroup(rg)->ColumnChunk(leaf);
      std::shared_ptr<parquet::Statistics> stats =
          chunk->is_stats_set() ? chunk->statistics() : nullptr;
      if (stats && stats->HasNullCount() && stats->null_count() == chunk->num_values()) continue;
      if (stats == nullptr || !stats->HasMinMax()) return std::nullopt;
      double low = 0;
      double high = 0;
      if (physical == parquet::Type::INT32) {
        const auto& typed = static_cast<const parquet::Int32Statistics&>(*stats);
        low = typed.min();
        high = typed.max();
      } else {
        const auto& typed = static_cast<const parquet::Int64Statistics&>(*stats);
        low = static_cast<double>(typed.min());
        high = static_cast<double>(typed.max());
      }
      max_abs = std::max({max_abs, std::fabs(low) * nanos, std::fabs(high) * nanos});
      any = true;
    }
  }
  if (!any) return 0.0;
  return max_abs;
}

std::string Quote(const std::string& text) { return "'" + text + "'"; }

std::string Short(double value) {
  std::ostringstream out;
  out.precision(3);
  out << value;
  return out.str();
}

Status ResolveTime(const Catalog* catalog, const std::string& name, const arrow::DataType& type,
                   TimeUnit unit, bool allow_lossy_cast, ValueConversion* out,
                   std::string* annotation) {
  const double from = StorageNanos(type);
  const double to = NanosPer(unit);
  out->kind = ValueConversion::Kind::kTime;
  if (from >= to) {
    out->multiply = static_cast<int64_t>(from / to);
  } else {
    out->divide = static_cast<int64_t>(to / from);
  }
  out->tag = std::string("time_unit=") + TimeUnitName(unit);
  const bool storage32 = type.id() == arrow::Type::DATE32 || type.id() == arrow::Type::TIME32;
  // The largest |count| the column can hold: from the footers, else from its storage type.
  std::optional<double> max_nanos;
  if (catalog != nullptr) max_nanos = FooterMaxAbsNanos(*catalog, name, from);
  const bool from_footers = max_nanos.has_value();
  if (!max_nanos) max_nanos = (storage32 ? 0x1p31 : 0x1p63) * from;
  // A float64 keeps the stored count recoverable while counts (in the finer of the two units)
  // stay within 2**52; beyond that the conversion rounds.
  const double max_counts = *max_nanos / std::min(from, to);
  out->exact_in_float32 = out->divide == 1 && *max_nanos / to <= 0x1p24;
  const std::string description =
      type.ToString() + " in " + TimeUnitName(unit) + " since " +
      (type.id() == arrow::Type::DURATION ? std::string("zero")
       : type.id() == arrow::Type::TIME32 || type.id() == arrow::Type::TIME64
           ? std::string("midnight")
           : std::string("1970-01-01"));
  *annotation = description;
  if (max_counts > 0x1p52 && !allow_lossy_cast) {
    return MakeError(
        ErrorKind::kLossyCast,
        "time_unit=" + Quote(TimeUnitName(unit)) + " for column '" + name + "' (" +
            type.ToString() + "): float64 cannot hold all its values exactly (" +
            (from_footers ? "up to " + Short(*max_nanos) +
                                " ns from the epoch, by the footers' "
                                "statistics"
                          : std::string("its type's range, and the footers have no statistics")) +
            "); pass allow_lossy_cast=True to accept rounding to float64's 53 bits, or leave "
            "time_unit unset for the stored int64 counts");
  }
  return Status::OK();
}

int32_t DecimalPrecision(const arrow::DataType& type) {
  return static_cast<const arrow::DecimalType&>(type).precision();
}

}  // namespace

bool IsTemporalType(const arrow::DataType& type) {
  switch (type.id()) {
    case arrow::Type::DATE32:
    case arrow::Type::DATE64:
    case arrow::Type::TIMESTAMP:
    case arrow::Type::TIME32:
    case arrow::Type::TIME64:
    case arrow::Type::DURATION:
      return true;
    default:
      return false;
  }
}

bool IsDecimalType(const arrow::DataType& type) {
  switch (type.id()) {
    case arrow::Type::DECIMAL32:
    case arrow::Type::DECIMAL64:
    case arrow::Type::DECIMAL128:
    case arrow::Type::DECIMAL256:
      return true;
    default:
      return false;
  }
}

Status ResolveConversion(const Catalog* catalog, const std::string& name,
                         const arrow::DataType& type, const ColumnOptions& options,
                         bool allow_lossy_cast, ValueConversion* out, DType* dtype,
                         std::string* annotation) {
  *out = ValueConversion{};
  if (IsTemporalType(type)) {
    if (options.time_unit == TimeUnit::kUnset) return Status::OK();
    *dtype = DType::kFloat64;
    return ResolveTime(catalog, name, type, options.time_unit, allow_lossy_cast, out, annotation);
  }
  if (!IsDecimalType(type)) return Status::OK();
  const int32_t precision = DecimalPrecision(type);
  const int32_t scale = static_cast<const arrow::DecimalType&>(type).scale();
  const std::string column = "column '" + name + "' (" + type.ToString() + ")";
  if (options.decimals == DecimalMode::kUnset) {
    return MakeError(ErrorKind::kUnsupportedType,
                     column + " is a decimal: pass decimals={'" + name +
                         "': 'float64'} (exact up to precision 15), 'float32' (exact up to "
                         "precision 6) or 'scaled_int64' (the unscaled integer, value * 10**" +
                         std::to_string(scale) + ", up to precision 18)");
  }
  out->kind = ValueConversion::Kind::kDecimal;
  out->decimals = options.decimals;
  out->scale = scale;
  out->tag = std::string("decimals=") + DecimalModeName(options.decimals);
  const std::string choice = "decimals=" + Quote(DecimalModeName(options.decimals)) + " for ";
  switch (options.decimals) {
    case DecimalMode::kScaledInt64:
      if (precision > 18) {
        return MakeError(ErrorKind::kInvalidOption,
                         choice + column + ": precision " + std::to_string(precision) +
                             " does not fit int64 (at most 18 digits); choose decimals={'" + name +
                             "': 'float64'} with allow_lossy_cast=True");
      }
      *dtype = DType::kInt64;
      *annotation = type.ToString() + " unscaled (value * 10**" + std::to_string(scale) + ")";
      return Status::OK();
    case DecimalMode::kFloat64:
    case DecimalMode::kFloat32: {
      const bool f32 = options.decimals == DecimalMode::kFloat32;
      const int32_t digits = f32 ? 6 : 15;
      *dtype = f32 ? DType::kFloat32 : DType::kFloat64;
      *annotation = type.ToString() + " as " + DTypeName(*dtype);
      out->exact_in_float32 = precision <= 6;
      if (precision > digits && !allow_lossy_cast) {
        std::string fix = "pass allow_lossy_cast=True to accept rounding";
        if (f32 && precision <= 15) fix += ", or decimals={'" + name + "': 'float64'}";
        if (precision <= 18) fix += ", or decimals={'" + name + "': 'scaled_int64'}";
        return MakeError(ErrorKind::kLossyCast,
                         choice + column + ": precision " + std::to_string(precision) +
                             " has more digits than " + DTypeName(*dtype) + " holds exactly (" +
                             std::to_string(digits) + "); " + fix);
      }
      return Status::OK();
    }
    case DecimalMode::kUnset:
      break;
  }
  return Status::OK();
}

}  // namespace stoker
