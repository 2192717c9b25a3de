#include "resolve/column_spec.h"

#include <arrow/type.h>

#include <algorithm>
#include <cmath>

#include "util/output_keys.h"

namespace stoker {

std::vector<std::string> ExpandParents(const arrow::Schema& schema,
                                       const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& name : names) {
    if (schema.GetFieldIndex(name) >= 0) {
      out.push_back(name);
      continue;
    }
    const std::string prefix = name + ".";
    const size_t before = out.size();
    for (const auto& field : schema.fields()) {
      if (field->name().compare(0, prefix.size(), prefix) == 0) out.push_back(field->name());
    }
    if (out.size() == before) out.push_back(name);  // not found: reported by the lookup
  }
  return out;
}

bool Packable(const ColumnSpec& spec) {
  const int width = DTypeSize(spec.dtype);
  return spec.kind == ColumnKind::kDense && spec.layout == SourceLayout::kFixed &&
         spec.inner == 1 && spec.inner_shape.empty() && !spec.chain && spec.group < 0 &&
         !spec.options.null_mask && spec.source_dtype == spec.dtype && spec.dtype != DType::kBool &&
         (width == 1 || width == 2 || width == 4 || width == 8);
}

PackedRun MakePackedRun(const std::vector<ColumnSpec>& columns, int first, int count) {
  PackedRun run;
  run.first = first;
  run.count = count;
  for (int k = 0; k < count; ++k) {
    run.widths.push_back(DTypeSize(columns[first + k].dtype));
    run.offsets.push_back(run.row_bytes);
    run.row_bytes += run.widths.back();
  }
  return run;
}

std::vector<PackedRun> PackedRuns(const OutputSpec& spec) {
  std::vector<PackedRun> runs;
  const int num_columns = static_cast<int>(spec.columns.size());
  for (int c = 0; c < num_columns; ++c) {
    int count = 0;
    while (c + count < num_columns && Packable(spec.columns[c + count])) ++count;
    if (count < kMinPackedColumns) continue;
    runs.push_back(MakePackedRun(spec.columns, c, count));
    c += count - 1;
  }
  return runs;
}

bool FillNullApplies(const ColumnSpec& spec) {
  const bool scalar_values =
      spec.layout == SourceLayout::kFixed || spec.layout == SourceLayout::kBool;
  return scalar_values && spec.options.has_fill_null;
}

bool NullsCovered(const ColumnSpec& spec) {
  // A numeric fill value cannot stand for a missing string or list: those need the mask.
  const bool variable_length =
      spec.layout == SourceLayout::kString || spec.layout == SourceLayout::kList;
  return spec.options.null_mask || (spec.options.has_fill_null && !variable_length) ||
         (spec.chain && spec.layout != SourceLayout::kList &&
          (spec.options.on_error_zero || spec.chain->op(0).AcceptsNull()));
}

std::string NullAdvice(const ColumnSpec& spec) {
  const std::string& name = spec.Field();
  const std::string fill = "fill_null={'" + name + "': value}";
  if (!spec.feature_group.empty()) {
    // A stacked feature has no mask of its own: the group's mask has one column per feature.
    return "; pass " + fill + " to replace them or null_mask=['" + spec.feature_group +
           "'] to get the group's validity mask ('" + MaskKey(spec.feature_group) + "')";
  }
  if (spec.group >= 0) {
    // Several outputs of one column take no null_mask (ResolveOutputs).
    return "; start each of its transforms with ops.fill_null(value) to replace them, or pass "
           "on_error={'" +
           name + "': 'zero'}";
  }
  if (spec.layout == SourceLayout::kString || spec.layout == SourceLayout::kList) {
    return "; pass null_mask=['" + name +
           "'] to get a validity mask (fill_null does not apply to strings and lists)";
  }
  if (spec.chain) {
    // Its ops see the values first: neither fill_null= nor null_mask= reaches them. Named as
    // delivered (a struct's chain on its bytes field takes the struct's options).
    return "; start its transforms with ops.fill_null(value) to replace them, or pass "
           "on_error={'" +
           spec.name + "': 'zero'} to get zeros there, false in '" + spec.name + "_valid'";
  }
  return "; pass " + fill + " to replace them or null_mask=['" + name + "'] to get a validity mask";
}

int ElementMaskLevels(const ColumnSpec& spec) {
  if (!spec.options.null_mask) return 0;
  if (spec.layout == SourceLayout::kList) {
    // Strings are the last level (their bytes are never null); numbers and bools one more.
    const bool strings = spec.annotation == "utf8" || spec.annotation == "binary";
    return spec.list_levels + (strings ? 0 : 1);
  }
  // A fixed-size list through a chain becomes the chain's tensor: no elements left to mask.
  return spec.fixed_list && !spec.chain ? 1 : 0;
}

bool WritesValid(const ColumnSpec& spec) {
  // MakeColumnWriters: partitions have their own writer, a list's chain runs in the decoder.
  return spec.options.on_error_zero && spec.layout != SourceLayout::kPartition &&
         (spec.group >= 0 || (spec.chain && spec.layout != SourceLayout::kList));
}

std::vector<std::string> AddedKeys(const ColumnSpec& spec) {
  const int lengths_levels = spec.kind == ColumnKind::kPadded ? 1 + spec.list_levels : 0;
  return AddedKeys(spec.name, lengths_levels, spec.options.null_mask, ElementMaskLevels(spec),
                   WritesValid(spec));
}

bool ElementFillApplies(const ColumnSpec& spec) {
  if (!spec.options.has_fill_null) return false;
  if (spec.layout == SourceLayout::kList) {
    return spec.annotation != "utf8" && spec.annotation != "binary";
  }
  return spec.fixed_list &&
         (spec.layout == SourceLayout::kFixed || spec.layout == SourceLayout::kBool);
}

bool IsRepresentable(double value, DType dtype) {
  auto integral_in = [value](double low, double high_exclusive) {
    return std::trunc(value) == value && value >= low && value < high_exclusive;
  };
  switch (dtype) {
    case DType::kBool:
      return value == 0 || value == 1;
    case DType::kInt8:
      return integral_in(-0x1p7, 0x1p7);
    case DType::kInt16:
      return integral_in(-0x1p15, 0x1p15);
    case DType::kInt32:
      return integral_in(-0x1p31, 0x1p31);
    case DType::kInt64:
      return integral_in(-0x1p63, 0x1p63);
    case DType::kUInt8:
      return integral_in(0, 0x1p8);
    case DType::kUInt16:
      return integral_in(0, 0x1p16);
    case DType::kUInt32:
      return integral_in(0, 0x1p32);
    case DType::kUInt64:
      return integral_in(0, 0x1p64);
    case DType::kFloat64:
      return true;
    case DType::kBFloat16: {
      if (std::isnan(value) || std::isinf(value) || value == 0) return true;
      if (std::fabs(value) > 0x1.fep127) return false;
      // 8 significant bits; subnormals are multiples of 2**-133.
      int exponent = 0;
      std::frexp(value, &exponent);
      const double scaled = std::ldexp(value, std::min(8 - exponent, 133));
      return std::trunc(scaled) == scaled;
    }
    case DType::kFloat32:
      return std::isnan(value) || static_cast<double>(static_cast<float>(value)) == value;
    case DType::kFloat16: {
      if (std::isnan(value) || std::isinf(value) || value == 0) return true;
      if (std::fabs(value) > 65504) return false;
      // 11 significant bits for normals; subnormals are multiples of 2**-24.
      int exponent = 0;
      std::frexp(value, &exponent);
      const double scaled = std::ldexp(value, std::min(11 - exponent, 24));
      return std::trunc(scaled) == scaled;
    }
  }
  return false;
}

bool IsLosslessCast(DType from, DType to) {
  if (from == to || from == DType::kBool) return true;
  auto is_float = [](DType t) {
    return t == DType::kFloat16 || t == DType::kFloat32 || t == DType::kFloat64 ||
           t == DType::kBFloat16;
  };
  auto is_signed = [](DType t) {
    return t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 || t == DType::kInt64;
  };
  const int from_bits = DTypeSize(from) * 8;
  const int to_bits = DTypeSize(to) * 8;
  if (to == DType::kBool) return false;
  if (is_float(from)) return is_float(to) && to_bits > from_bits;
  if (is_float(to)) {
    const int mantissa = to == DType::kFloat16    ? 11
                         : to == DType::kBFloat16 ? 8
                         : to == DType::kFloat32  ? 24
                                                  : 53;
    const int magnitude_bits = is_signed(from) ? from_bits - 1 : from_bits;
    return magnitude_bits <= mantissa;
  }
  if (is_signed(from) && !is_signed(to)) return false;
  return to_bits > from_bits;
}

ColumnInfo ToColumnInfo(const ColumnSpec& spec) {
  return {spec.name,
          spec.arrow_type,
          spec.kind,
          spec.dtype,
          spec.chain ? spec.output_shape : spec.inner_shape,
          spec.annotation,
          ElementMaskLevels(spec),
          AddedKeys(spec)};
}

}  // namespace stoker
