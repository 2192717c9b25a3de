#include "decode/column_spec.h"

#include <arrow/extension/fixed_shape_tensor.h>
#include <arrow/extension_type.h>
#include <arrow/type.h>
#include <parquet/metadata.h>
#include <parquet/schema.h>
#include <parquet/statistics.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include "decode/user_code.h"

namespace stoker {
namespace {

bool FixedWidthDType(const arrow::DataType& type, DType* out, std::string* annotation) {
  using arrow::Type;
  switch (type.id()) {
    case Type::INT8:
      *out = DType::kInt8;
      return true;
    case Type::INT16:
      *out = DType::kInt16;
      return true;
    case Type::INT32:
      *out = DType::kInt32;
      return true;
    case Type::INT64:
      *out = DType::kInt64;
      return true;
    case Type::UINT8:
      *out = DType::kUInt8;
      return true;
    case Type::UINT16:
      *out = DType::kUInt16;
      return true;
    case Type::UINT32:
      *out = DType::kUInt32;
      return true;
    case Type::UINT64:
      *out = DType::kUInt64;
      return true;
    case Type::HALF_FLOAT:
      *out = DType::kFloat16;
      return true;
    case Type::FLOAT:
      *out = DType::kFloat32;
      return true;
    case Type::DOUBLE:
      *out = DType::kFloat64;
      return true;
    // Temporal types travel as their integer storage; the unit goes to the annotation.
    case Type::DATE32:
      *out = DType::kInt32;
      *annotation = "date32[day]";
      return true;
    case Type::DATE64:
      *out = DType::kInt64;
      *annotation = "date64[ms]";
      return true;
    case Type::TIMESTAMP:
    case Type::DURATION:
    case Type::TIME64:
      *out = DType::kInt64;
      *annotation = type.ToString();
      return true;
    case Type::TIME32:
      *out = DType::kInt32;
      *annotation = type.ToString();
      return true;
    default:
      return false;
  }
}

bool IsTemporal(const std::string& annotation) { return !annotation.empty(); }

Status Unsupported(const std::string& column, const arrow::DataType& type, const char* why) {
  return MakeError(ErrorKind::kUnsupportedType,
                   "column '" + column + "' has type " + type.ToString() +
                       ", which stoker cannot turn into a tensor" + why);
}

// `catalog` (null for a user transform's outputs) and `allow_lossy_cast` decide value
// conversions (time_unit, decimals).
Status Classify(const std::string& name, const std::shared_ptr<arrow::DataType>& full_type,
                const ColumnOptions& options, const Catalog* catalog, bool allow_lossy_cast,
                ColumnSpec* spec) {
  spec->name = name;
  spec->options = options;
  spec->arrow_type = full_type->ToString();
  std::shared_ptr<arrow::DataType> type = full_type;
  if (type->id() == arrow::Type::DICTIONARY) {
    spec->dictionary = true;
    type = static_cast<const arrow::DictionaryType&>(*type).value_type();
  }
  std::vector<int64_t> ext_shape;
  std::string ext_name;
  if (type->id() == arrow::Type::EXTENSION) {
    const auto& ext = static_cast<const arrow::ExtensionType&>(*type);
    ext_name = ext.extension_name();
    if (ext_name == "arrow.fixed_shape_tensor") {
      const auto* tensor = dynamic_cast<const arrow::extension::FixedShapeTensorType*>(&ext);
      if (tensor == nullptr || tensor->shape().empty()) {
        return Unsupported(name, *type, " (its shape metadata cannot be read)");
      }
      ext_shape = tensor->shape();
      // pyarrow writes a permutation, usually the identity (row-major, nothing to do); any
      // other would need a transpose.
      const std::vector<int64_t>& permutation = tensor->permutation();
      for (size_t i = 0; i < permutation.size(); ++i) {
        if (permutation[i] != static_cast<int64_t>(i)) {
          return Unsupported(name, *type,
                             " (tensors with a non-identity permutation are not supported)");
        }
      }
    } else if (ext_name != "arrow.uuid") {  // 16 bytes per row, delivered as they are
      return Unsupported(name, *type,
                         " (only the arrow.fixed_shape_tensor and arrow.uuid extensions are "
                         "known)");
    }
    type = ext.storage_type();
  }

  DType dtype;
  std::string annotation;
  if (IsDecimalType(*type) || (IsTemporalType(*type) && options.time_unit != TimeUnit::kUnset)) {
    // Converted by the decoder into a plain numeric column (value_convert.h).
    STOKER_RETURN_NOT_OK(ResolveConversion(catalog, name, *type, options, allow_lossy_cast,
                                           &spec->conversion, &dtype, &spec->annotation));
    spec->layout = SourceLayout::kFixed;
    spec->source_dtype = spec->dtype = dtype;
    spec->kind = ColumnKind::kDense;
    return Status::OK();
  }
  if (FixedWidthDType(*type, &dtype, &annotation)) {
    spec->layout = SourceLayout::kFixed;
    spec->source_dtype = dtype;
    // Dates and times are widened to int64 so every temporal column has one dtype.
    spec->dtype = IsTemporal(annotation) ? DType::kInt64 : dtype;
    spec->annotation = annotation;
    spec->kind = ColumnKind::kDense;
    return Status::OK();
  }
  switch (type->id()) {
    case arrow::Type::BOOL:
      spec->layout = SourceLayout::kBool;
      spec->source_dtype = spec->dtype = DType::kBool;
      return Status::OK();
    case arrow::Type::FIXED_SIZE_BINARY: {
      // Hashes, UUIDs: a [B, byte_width] uint8 tensor of the raw bytes.
      const int width = static_cast<const arrow::FixedSizeBinaryType&>(*type).byte_width();
      spec->layout = SourceLayout::kFixed;
      spec->source_dtype = spec->dtype = DType::kUInt8;
      spec->inner = width;
      spec->inner_shape = {width};
      spec->annotation = ext_name.empty() ? type->ToString() : ext_name;
      return Status::OK();
    }
    case arrow::Type::STRING:
    case arrow::Type::LARGE_STRING:
    case arrow::Type::BINARY:
    case arrow::Type::LARGE_BINARY: {
      spec->layout = SourceLayout::kString;
      spec->kind = ColumnKind::kStrings;
      spec->source_dtype = spec->dtype = DType::kUInt8;
      const bool utf8 =
          type->id() == arrow::Type::STRING || type->id() == arrow::Type::LARGE_STRING;
      spec->annotation = utf8 ? "utf8" : "binary";
      return Status::OK();
    }
    case arrow::Type::FIXED_SIZE_LIST: {
      std::shared_ptr<arrow::DataType> inner = type;
      while (inner->id() == arrow::Type::FIXED_SIZE_LIST) {
        const auto& fsl = static_cast<const arrow::FixedSizeListType&>(*inner);
        spec->inner_shape.push_back(fsl.list_size());
        spec->inner *= fsl.list_size();
        inner = fsl.value_type();
      }
      // Bits are unpacked to one byte per value, like bool columns.
      const bool bits = inner->id() == arrow::Type::BOOL;
      if (bits) {
        dtype = DType::kBool;
      } else if (!FixedWidthDType(*inner, &dtype, &annotation) || IsTemporal(annotation)) {
        return Unsupported(name, *full_type, " (fixed_size_list values must be numeric or bool)");
      }
      if (!ext_shape.empty()) {
        int64_t product = 1;
        for (int64_t d : ext_shape) product *= d;
        if (product != spec->inner) {
          return Unsupported(name, *full_type, " (tensor shape disagrees with its storage)");
        }
        spec->inner_shape = ext_shape;
        spec->annotation = "arrow.fixed_shape_tensor";
      }
      spec->layout = bits ? SourceLayout::kBool : SourceLayout::kFixed;
      spec->source_dtype = spec->dtype = dtype;
      spec->fixed_list = true;
      return Status::OK();
    }
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST: {
      const auto& list = static_cast<const arrow::BaseListType&>(*type);
      // Lists of lists: each level below the rows' is one more offsets tensor (ragged only).
      std::shared_ptr<arrow::DataType> value_type = list.value_type();
      while (value_type->id() == arrow::Type::LIST || value_type->id() == arrow::Type::LARGE_LIST) {
        ++spec->list_levels;
        value_type = static_cast<const arrow::BaseListType&>(*value_type).value_type();
      }
      const arrow::Type::type value_id = value_type->id();
      if (value_id == arrow::Type::NA) {
        return Unsupported(name, *full_type,
                           " (every element of a list<null> is null, so it holds no values to "
                           "deliver; leave it out of columns)");
      }
      if (value_id == arrow::Type::STRING || value_id == arrow::Type::LARGE_STRING ||
          value_id == arrow::Type::BINARY || value_id == arrow::Type::LARGE_BINARY) {
        // Only element-wise transforms make numbers of these (ResolveColumns checks).
        spec->list_of_strings = true;
        dtype = DType::kUInt8;
        annotation = value_id == arrow::Type::STRING || value_id == arrow::Type::LARGE_STRING
                         ? "utf8"
                         : "binary";
        spec->annotation = annotation;
      } else if (value_id == arrow::Type::BOOL) {
        dtype = DType::kBool;  // unpacked from bits by its column writer
      } else if (IsDecimalType(*value_type) ||
                 (IsTemporalType(*value_type) && options.time_unit != TimeUnit::kUnset)) {
        // The elements are converted by the decoder, as a scalar column's values are.
        STOKER_RETURN_NOT_OK(ResolveConversion(catalog, name, *value_type, options,
                                               allow_lossy_cast, &spec->conversion, &dtype,
                                               &spec->annotation));
      } else if (!FixedWidthDType(*value_type, &dtype, &annotation) || IsTemporal(annotation)) {
        const std::string why =
            IsTemporal(annotation)
                ? " (list values must be numeric, bool or strings, or lists of them: pass "
                  "time_unit={'" +
                      name + "': 's'} for float64 counts of a unit)"
                : " (list values must be numeric, bool or strings, or lists of them)";
        return Unsupported(name, *full_type, why.c_str());
      }
      if (spec->list_of_strings && spec->list_levels > 0) {
        // Strings in lists of lists: the bytes are the innermost level.
        spec->list_of_strings = false;
        ++spec->list_levels;
      }
      spec->layout = SourceLayout::kList;
      spec->source_dtype = spec->dtype = dtype;
      if (options.list_mode == ListMode::kUnset) {
        return MakeError(ErrorKind::kUnsupportedType,
                         "column '" + name + "' is a variable-length list (" +
                             full_type->ToString() + "): choose lists={'" + name +
                             "': 'padded'} for a [B, max_len] tensor plus lengths, or lists={'" +
                             name + "': 'ragged'} for flat values plus offsets");
      }
      spec->kind =
          options.list_mode == ListMode::kPadded ? ColumnKind::kPadded : ColumnKind::kRagged;
      // Padding pads numbers; strings in lists of lists are delivered ragged only.
      if (spec->list_levels > 0 && spec->kind == ColumnKind::kPadded && !annotation.empty()) {
        return MakeError(ErrorKind::kUnsupportedType,
                         "column '" + name + "' is a list of lists or strings (" +
                             full_type->ToString() +
                             "): lists='padded' pads one level; choose "
                             "lists={'" +
                             name +
                             "': 'ragged'} for flat values plus one offsets "
                             "tensor per level");
      }
      return Status::OK();
    }
    default:
      return Unsupported(name, *full_type, "");
  }
}

std::string FormatValue(double value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

// fill_null and pad_value are written into the delivered dtype; a value that dtype cannot hold
// would change silently, so it is refused up front. A fill value given for all columns at once
// (fill_null=nan) is checked only where a column really has nulls (Decoder), so that it does not
// trip over integer columns without any.
Status CheckOptionValues(const ColumnSpec& spec) {
  if (spec.explicit_options && (FillNullApplies(spec) || ElementFillApplies(spec)) &&
      !IsRepresentable(spec.options.fill_null, spec.dtype)) {
    return MakeError(ErrorKind::kInvalidOption,
                     "fill_null=" + FormatValue(spec.options.fill_null) + " for column '" +
                         spec.name + "' cannot be stored exactly as " + DTypeName(spec.dtype) +
                         "; pass fill_null={'" + spec.name + "': value} with a value it holds");
  }
  if (spec.kind == ColumnKind::kPadded && !IsRepresentable(spec.options.pad_value, spec.dtype)) {
    return MakeError(ErrorKind::kInvalidOption,
                     "pad_value=" + FormatValue(spec.options.pad_value) + " for column '" +
                         spec.name + "' cannot be stored exactly as " + DTypeName(spec.dtype) +
                         "; pass pad_value={'" + spec.name + "': value} with a value it holds");
  }
  return Status::OK();
}

// One error for every problem found while resolving the columns, one line each: the kind (and
// so the Python exception type) of the first, in the order columns then features.
Status CombineProblems(const std::vector<Status>& problems) {
  if (problems.size() == 1) return problems[0];
  std::string message = std::to_string(problems.size()) +
                        " problems with the requested columns (fix them all, then open again):";
  for (const Status& problem : problems) message += "\n  - " + problem.message();
  return MakeError(GetErrorKind(problems[0]).value_or(ErrorKind::kInvalidOption),
                   std::move(message));
}

// Nulls of a flat column (one leaf, not nested) over every row group, from the footers' statistics;
// 0 when unknown.
int64_t FooterNullCount(const Catalog& catalog, const std::string& field) {
  int64_t nulls = 0;
  for (const CatalogFile& file : catalog.files()) {
    auto it = file.fields.find(field);
    if (it == file.fields.end() || it->second.leaves.size() != 1) continue;
    const int leaf = it->second.leaves[0];
    if (file.metadata->schema()->Column(leaf)->max_repetition_level() > 0) continue;
    for (int rg = 0; rg < file.metadata->num_row_groups(); ++rg) {
      auto chunk = file.metadata->RowGroup(rg)->ColumnChunk(leaf);
      auto stats = chunk->is_stats_set() ? chunk->statistics() : nullptr;
      if (stats && stats->HasNullCount()) nulls += stats->null_count();
    }
  }
  return nulls;
}

std::string Available(const arrow::Schema& schema) {
  std::string out;
  for (const auto& field : schema.fields()) {
    if (!out.empty()) out += ", ";
    out += field->name();
  }
  return out;
}

}  // namespace

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
           "'] to get the group's validity mask ('" + spec.feature_group + "_mask')";
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
    // Its ops see the values first: neither fill_null= nor null_mask= reaches them.
    return "; start its transforms with ops.fill_null(value) to replace them, or pass "
           "on_error={'" +
           name + "': 'zero'} to get zeros there, false in '" + name + "_valid'";
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

// The transform chain of `spec`'s column: the ops built and type-checked against the column's
// values, the cacheable prefix chosen, and the spec turned into the chain's dense output.
// Makes ops [0, cached) of `spec`'s chain its cached prefix: the spec then describes what the
// decoder stores and the writer reads (fixed-shape tensors, or tensors with their shapes).
void SetCachedPrefix(size_t cached, ColumnSpec* spec) {
  spec->cached_ops = cached;
  spec->cached_shapes = false;
  if (cached == 0) return;
  const transform::ValueType& type = spec->chain->types()[cached];
  spec->source_dtype = *transform::ToDType(type.element);
  spec->dictionary = false;  // the cached values are plain tensors
  if (type.FixedShape()) {
    spec->layout = SourceLayout::kFixed;
    spec->inner_shape = type.shape;
    spec->inner = 1;
    for (int64_t dim : type.shape) spec->inner *= dim;
  } else {
    spec->layout = SourceLayout::kString;
    spec->cached_shapes = true;
    spec->inner_shape.clear();
    spec->inner = 1;
  }
}

Status ResolveChain(const std::vector<OpSpec>& specs, ColumnSpec* spec, bool allow_cache,
                    bool variable_cache) {
  using transform::ValueType;
  ValueType input;
  const bool list = spec->layout == SourceLayout::kList;
  if (list) {
    // Element-wise: the chain sees one list element at a time.
    if (spec->list_of_strings) {
      input = spec->annotation == "utf8" ? ValueType::String() : ValueType::Bytes();
    } else if (spec->source_dtype == DType::kBool) {
      return MakeError(ErrorKind::kUnsupportedType, "transforms on column '" + spec->name + "' (" +
                                                        spec->arrow_type +
                                                        "): lists of bool take no transforms");
    } else {
      input = ValueType::Tensor(transform::FromDType(spec->source_dtype), {});
    }
  } else if (spec->layout == SourceLayout::kString) {
    input = spec->annotation == "utf8" ? ValueType::String() : ValueType::Bytes();
  } else if (spec->layout == SourceLayout::kFixed &&
             (!IsTemporal(spec->annotation) || spec->annotation == "arrow.fixed_shape_tensor" ||
              spec->conversion.active())) {
    input = ValueType::Tensor(transform::FromDType(spec->source_dtype),
                              spec->inner == 1 ? std::vector<int64_t>{} : spec->inner_shape);
  } else {
    return MakeError(ErrorKind::kUnsupportedType,
                     "transforms on column '" + spec->name + "' (" + spec->arrow_type +
                         "): transforms take binary, string, numeric or fixed-size list columns" +
                         (IsTemporal(spec->annotation) && spec->layout == SourceLayout::kFixed
                              ? "; time_unit={'" + spec->name +
                                    "': 's'} makes a timestamp or date a float64 number first"
                              : std::string()));
  }
  std::vector<std::unique_ptr<transform::Op>> ops;
  for (const auto& op : specs) {
    auto made = transform::MakeOp(op.op, op.params);
    if (!made.ok()) {
      return MakeError(ErrorKind::kInvalidOption,
                       "transforms['" + spec->name + "']: " + made.status().message());
    }
    ops.push_back(std::move(*made));
  }
  transform::Chain::Options chain_options;
  chain_options.require_fixed_shape = true;
  STOKER_ASSIGN_OR_RAISE(auto chain,
                         transform::Chain::Make(spec->name, input, std::move(ops), chain_options));
  const ValueType& output = chain.output_type();
  const auto output_dtype = transform::ToDType(output.element);
  if (output.kind != transform::ValueKind::kTensor || !output_dtype) {
    return MakeError(ErrorKind::kUnsupportedType, "transforms['" + spec->name + "'] ends in " +
                                                      output.ToString() +
                                                      "; a chain must end in a tensor");
  }
  if (list) {
    // A list's chain runs whole in the decoder over the list's elements (so it is cached), and
    // the column stays a list of the chain's output, padded or ragged as `lists=` says.
    if (chain.DeterministicPrefixLength() != chain.size()) {
      return MakeError(ErrorKind::kInvalidOption,
                       "transforms['" + spec->name + "'] on list column '" + spec->name +
                           "' has a random op; the ops of a list column apply to each element "
                           "and must be deterministic");
    }
    if (!output.shape.empty() || *output_dtype == DType::kBool) {
      return MakeError(ErrorKind::kUnsupportedType,
                       "transforms['" + spec->name + "'] give " + output.ToString() +
                           " per element of list column '" + spec->name +
                           "'; the ops of a list column must give one number (not bool) per "
                           "element");
    }
    spec->source_dtype = spec->dtype = *output_dtype;
    spec->list_of_strings = false;
    spec->dictionary = false;
    spec->annotation.clear();
    spec->output_shape = {};
    spec->cached_ops = chain.size();
    spec->chain = std::make_shared<const transform::Chain>(std::move(chain));
    return Status::OK();
  }
  // The cache stores the longest deterministic prefix whose output is a fixed-shape tensor, or,
  // with a cache_dir, any tensor (a decoded image of its own size): a warm epoch then decodes
  // nothing. Without a cache_dir a variable-shape prefix would only move work between threads
  // and split decode from the resize or crop that follows it, so the chain runs whole per batch.
  size_t cached = allow_cache ? chain.DeterministicPrefixLength() : 0;
  while (cached > 0) {
    const ValueType& type = chain.types()[cached];
    if (type.kind == transform::ValueKind::kTensor && (type.FixedShape() || variable_cache) &&
        !chain.SplitsFusedOps(cached)) {
      break;
    }
    --cached;
  }
  spec->kind = ColumnKind::kDense;
  spec->dtype = *output_dtype;
  spec->output_shape = output.shape;
  spec->annotation.clear();
  spec->chain = std::make_shared<const transform::Chain>(std::move(chain));
  SetCachedPrefix(cached, spec);
  return Status::OK();
}

// The outputs of one column with several chains (`group`): one dense ColumnSpec each, read from
// the column, with the deterministic prefix the chains share run once per row.
template <typename Lookup>
Status ResolveOutputs(const std::vector<std::pair<std::string, std::vector<OpSpec>>>& outputs,
                      const std::string& column, int group, bool cache, Lookup& lookup,
                      std::set<std::string>* seen_outputs, OutputSpec* out) {
  if (outputs.empty()) {
    return MakeError(ErrorKind::kInvalidOption, "transforms['" + column + "'] names no outputs");
  }
  const size_t first = out->columns.size();
  for (const auto& [name, ops] : outputs) {
    if (name != column && !seen_outputs->insert(name).second) {
      return MakeError(ErrorKind::kInvalidOption,
                       "transforms['" + column + "'] output '" + name +
                           "' clashes with another column or output of that name");
    }
    ColumnSpec spec;
    STOKER_RETURN_NOT_OK(lookup(column, &spec));
    if (spec.layout == SourceLayout::kPartition || spec.layout == SourceLayout::kList) {
      return MakeError(ErrorKind::kUnsupportedType,
                       "transforms['" + column +
                           "']: several outputs need a binary, string, "
                           "numeric or fixed-size list column");
    }
    if (spec.options.null_mask) {
      return MakeError(ErrorKind::kInvalidOption,
                       "null_mask for column '" + column +
                           "', whose transforms give several outputs: start the chains with "
                           "fill_null, or use on_error='zero'");
    }
    // The whole chain runs per batch; the shared prefix once per row for all outputs (cached
    // instead with a cache_dir, below).
    STOKER_RETURN_NOT_OK(ResolveChain(ops, &spec, /*allow_cache=*/false, false));
    spec.name = name;
    spec.field = column;
    spec.group = group;
    spec.counters = out->transform_counters;
    out->columns.push_back(std::move(spec));
  }
  // Shared: the leading deterministic ops with equal fingerprints in every output's chain.
  const transform::Chain& head = *out->columns[first].chain;
  size_t shared = head.DeterministicPrefixLength();
  for (size_t i = first + 1; i < out->columns.size(); ++i) {
    const transform::Chain& chain = *out->columns[i].chain;
    size_t same = 0;
    while (same < shared && same < chain.size() &&
           chain.op(same).Fingerprint() == head.op(same).Fingerprint()) {
      ++same;
    }
    shared = same;
  }
  // With a cache_dir the shared prefix is the group's cached prefix: decoded once, before the
  // cache, as long as it ends in a tensor.
  size_t cached = 0;
  if (cache) {
    cached = shared;
    while (cached > 0 && head.types()[cached].kind != transform::ValueKind::kTensor) --cached;
  }
  for (size_t i = first; i < out->columns.size(); ++i) {
    out->columns[i].shared_ops = shared;
    SetCachedPrefix(cached, &out->columns[i]);
  }
  return Status::OK();
}

std::vector<FeatureGroup> EffectiveFeatureGroups(const LoaderOptions& options) {
  if (!options.feature_groups.empty()) return options.feature_groups;
  if (options.features.empty()) return {};
  FeatureGroup group;
  group.name = options.features_name;
  group.columns = options.features;
  group.dtype = options.features_dtype;
  group.null_mask = options.default_column_options.null_mask;
  return {group};
}

namespace {

// A column named in LoaderOptions::categories becomes int64 ids (dense, one per row): its
// vocabulary is the given list, or built here once ("auto") and shared by every spec of it.
Status MakeCategorical(const Catalog& catalog, const LoaderOptions& options, ColumnSpec* spec,
                       OutputSpec* out) {
  auto given = options.categories.find(spec->name);
  if (given == options.categories.end()) return Status::OK();
  const std::string& name = spec->name;
  const bool partition = spec->layout == SourceLayout::kPartition;
  if (!partition && (spec->layout != SourceLayout::kString || spec->annotation != "utf8")) {
    return MakeError(ErrorKind::kUnsupportedType,
                     "categories['" + name + "']: column '" + name + "' has type " +
                         spec->arrow_type +
                         "; categories apply to string, large_string and dictionary<string> "
                         "columns and to hive partition columns");
  }
  if (options.transforms.count(name) || options.transform_outputs.count(name)) {
    return MakeError(ErrorKind::kInvalidOption,
                     "column '" + name +
                         "' is in both categories and transforms; use one (the vocabulary op "
                         "of transforms, or categories)");
  }
  std::shared_ptr<const Vocabulary>& vocabulary = out->vocabularies[name];
  if (!vocabulary) {
    if (!given->second.empty()) {
      STOKER_ASSIGN_OR_RAISE(vocabulary,
                             Vocabulary::Make(given->second, Vocabulary::Origin::kGiven, name));
    } else if (partition) {
      STOKER_ASSIGN_OR_RAISE(
          vocabulary,
          BuildPartitionVocabulary(catalog, spec->field_index - catalog.num_file_fields()));
    } else if (options.user_transform) {
      return MakeError(ErrorKind::kInvalidOption,
                       "categories['" + name +
                           "'] = 'auto' on an output of transform=: give the vocabulary (a "
                           "list or a file)");
    } else {
      STOKER_ASSIGN_OR_RAISE(vocabulary, BuildVocabulary(catalog, name));
    }
  }
  spec->vocabulary = vocabulary;
  spec->kind = ColumnKind::kDense;
  if (!partition) spec->layout = SourceLayout::kFixed;
  spec->source_dtype = spec->dtype = DType::kInt64;
  spec->annotation = "category";
  return Status::OK();
}

// |value| without overflow (|INT64_MIN| fits a uint64).
uint64_t Magnitude(int64_t value) {
  return value < 0 ? static_cast<uint64_t>(-(value + 1)) + 1 : static_cast<uint64_t>(value);
}

// Largest |value| a feature column can hold, from what is known before reading it: the footer
// statistics (min/max of every row group), the vocabulary size of a categorical column, or the
// values of an integer partition column. nullopt when unknown (a row group without statistics).
// Integers throughout: 2^53 + 1 must not round to 2^53 on the way.
std::optional<uint64_t> MagnitudeBound(const Catalog& catalog, const ColumnSpec& spec) {
  if (spec.vocabulary) return static_cast<uint64_t>(spec.vocabulary->size());
  if (spec.layout == SourceLayout::kPartition) {
    uint64_t bound = 0;
    for (const auto& file : catalog.files()) {
      const std::string& text = file.partition_values[spec.field_index - catalog.num_file_fields()];
      bound = std::max(bound, Magnitude(std::stoll(text)));
    }
    return bound;
  }
  if (spec.chain || spec.field_index < 0 || spec.layout != SourceLayout::kFixed) {
    return std::nullopt;
  }
  const bool is_unsigned =
      spec.source_dtype == DType::kUInt8 || spec.source_dtype == DType::kUInt16 ||
      spec.source_dtype == DType::kUInt32 || spec.source_dtype == DType::kUInt64;
  uint64_t bound = 0;
  for (const RowGroupRef& rg : catalog.row_groups()) {
    const CatalogFile& file = catalog.files()[rg.file];
    const FieldLeaves& leaves = file.fields.at(spec.Field());
    if (leaves.leaves.size() != 1) return std::nullopt;
    auto chunk = file.metadata->RowGroup(rg.row_group)->ColumnChunk(leaves.leaves.front());
    auto stats = chunk->statistics();
    if (!stats) return std::nullopt;
    if (stats->HasNullCount() && stats->null_count() == chunk->num_values()) continue;
    if (!stats->HasMinMax()) return std::nullopt;
    uint64_t low = 0;
    uint64_t high = 0;
    if (stats->physical_type() == parquet::Type::INT32) {
      const auto& typed = static_cast<const parquet::Int32Statistics&>(*stats);
      low = is_unsigned ? static_cast<uint32_t>(typed.min()) : Magnitude(typed.min());
      high = is_unsigned ? static_cast<uint32_t>(typed.max()) : Magnitude(typed.max());
    } else if (stats->physical_type() == parquet::Type::INT64) {
      const auto& typed = static_cast<const parquet::Int64Statistics&>(*stats);
      low = is_unsigned ? static_cast<uint64_t>(typed.min()) : Magnitude(typed.min());
      high = is_unsigned ? static_cast<uint64_t>(typed.max()) : Magnitude(typed.max());
    } else {
      return std::nullopt;
    }
    bound = std::max({bound, low, high});
  }
  return bound;
}

bool IsFloatDType(DType dtype) {
  return dtype == DType::kFloat16 || dtype == DType::kFloat32 || dtype == DType::kFloat64 ||
         dtype == DType::kBFloat16;
}

// Whether every value of feature `spec` (of type spec.dtype) is exact in `to`: by type, or for
// integers cast to floats by the magnitude bound (2^53 for float64, 2^24 for float32).
bool FeatureCastIsExact(const Catalog& catalog, const ColumnSpec& spec, DType to,
                        std::string* why) {
  if (IsLosslessCast(spec.dtype, to)) return true;
  if (IsFloatDType(spec.dtype) || !IsFloatDType(to)) {
    *why = "";
    return false;
  }
  const uint64_t limit = to == DType::kFloat64   ? uint64_t{1} << 53
                         : to == DType::kFloat32 ? uint64_t{1} << 24
                         : to == DType::kFloat16 ? uint64_t{1} << 11
                                                 : uint64_t{1} << 8;
  const std::optional<uint64_t> bound = MagnitudeBound(catalog, spec);
  if (!bound) {
    *why = " (the footers have no min/max statistics for it to prove every value fits)";
    return false;
  }
  if (*bound <= limit) return true;
  const char* source = spec.vocabulary                           ? "its vocabulary ids reach"
                       : spec.layout == SourceLayout::kPartition ? "its partition values reach"
                                                                 : "its footer statistics reach";
  *why = std::string(" (") + source + " |v| = " + std::to_string(*bound) + ", beyond the " +
         std::to_string(limit) + " that " + DTypeName(to) + " holds exactly)";
  return false;
}

}  // namespace

Result<OutputSpec> ResolveColumns(const Catalog& catalog, const LoaderOptions& options,
                                  std::shared_ptr<arrow::Schema> transform_schema) {
  OutputSpec out;
  // The columns the options name: the file's, or the user transform's outputs; partition
  // columns follow either way.
  std::shared_ptr<arrow::Schema> dataset_schema = catalog.schema();
  int num_regular = catalog.num_file_fields();
  if (options.user_transform) {
    STOKER_ASSIGN_OR_RAISE(out.file_fields, TransformInputs(catalog, options));
    if (!transform_schema) {
      STOKER_ASSIGN_OR_RAISE(transform_schema, ProbeUserTransform(catalog, options));
    }
    std::vector<std::shared_ptr<arrow::Field>> fields = transform_schema->fields();
    for (int i = catalog.num_file_fields(); i < catalog.schema()->num_fields(); ++i) {
      const auto& partition = catalog.schema()->field(i);
      if (transform_schema->GetFieldIndex(partition->name()) >= 0) {
        return MakeError(ErrorKind::kTransform,
                         "transform= returns key '" + partition->name() +
                             "', which is also a partition column of the dataset; rename it");
      }
      fields.push_back(partition);
    }
    num_regular = transform_schema->num_fields();
    dataset_schema = arrow::schema(fields);
    out.user_transform = options.user_transform;
    out.transform_schema = transform_schema;
  }
  const arrow::Schema& schema = *dataset_schema;
  std::set<std::string> needed;
  std::set<std::string> seen_outputs;

  auto lookup = [&](const std::string& name, ColumnSpec* spec) -> Status {
    const int index = schema.GetFieldIndex(name);
    if (index < 0) {
      return MakeError(ErrorKind::kColumnNotFound,
                       "column '" + name + "' is not in the dataset" +
                           (options.user_transform ? " (the outputs of transform=)" : "") +
                           "; available columns: " + Available(schema));
    }
    // Options of a struct's leaf: its own, else those of its nearest parent (`s` for `s.a.b`).
    auto it = options.column_options.find(name);
    for (size_t dot = name.rfind('.');
         it == options.column_options.end() && dot != std::string::npos && dot > 0;
         dot = name.rfind('.', dot - 1)) {
      it = options.column_options.find(name.substr(0, dot));
    }
    const ColumnOptions& column_options =
        it == options.column_options.end() ? options.default_column_options : it->second;
    // Partition columns keep their index in the catalog's schema.
    spec->field_index = index >= num_regular ? catalog.num_file_fields() + (index - num_regular)
                                             : (options.user_transform ? -1 : index);
    spec->explicit_options = it != options.column_options.end();
    if (index >= num_regular) {
      spec->name = name;
      spec->options = column_options;
      spec->arrow_type = schema.field(index)->type()->ToString();
      spec->layout = SourceLayout::kPartition;
      if (schema.field(index)->type()->id() == arrow::Type::INT64) {
        spec->source_dtype = spec->dtype = DType::kInt64;
      } else {
        spec->kind = ColumnKind::kStrings;
        spec->source_dtype = spec->dtype = DType::kUInt8;
        spec->annotation = "utf8";
      }
      // Partition values are ints or strings, never timestamps or decimals: an option naming
      // one for them would be ignored.
      const bool unit_named = column_options.time_unit != TimeUnit::kUnset &&
                              options.default_column_options.time_unit == TimeUnit::kUnset;
      const bool decimals_named = column_options.decimals != DecimalMode::kUnset &&
                                  options.default_column_options.decimals == DecimalMode::kUnset;
      if (spec->explicit_options && (unit_named || decimals_named)) {
        return MakeError(ErrorKind::kInvalidOption,
                         std::string(unit_named ? "time_unit" : "decimals") +
                             " names hive partition column '" + name +
                             "', whose values are integers or strings; leave it out");
      }
      return MakeCategorical(catalog, options, spec, &out);
    }
    if (!options.user_transform) {
      if (std::string conflict = catalog.Conflict(name); !conflict.empty()) {
        return MakeError(ErrorKind::kSchemaMismatch, conflict);
      }
    }
    needed.insert(name);
    // time_unit / decimals given for this column by name (not for all columns) must fit it
    // (or its list's elements).
    const arrow::DataType& field_type = *schema.field(index)->type();
    const arrow::DataType& type =
        field_type.id() == arrow::Type::LIST || field_type.id() == arrow::Type::LARGE_LIST
            ? *static_cast<const arrow::BaseListType&>(field_type).value_type()
            : field_type;
    if (spec->explicit_options && column_options.time_unit != TimeUnit::kUnset &&
        options.default_column_options.time_unit == TimeUnit::kUnset && !IsTemporalType(type)) {
      return MakeError(ErrorKind::kInvalidOption,
                       "time_unit names column '" + name + "' (" + type.ToString() +
                           "), which is not a timestamp, date, time or duration");
    }
    if (spec->explicit_options && column_options.decimals != DecimalMode::kUnset &&
        options.default_column_options.decimals == DecimalMode::kUnset && !IsDecimalType(type)) {
      return MakeError(
          ErrorKind::kInvalidOption,
          "decimals names column '" + name + "' (" + type.ToString() + "), which is not a decimal");
    }
    STOKER_RETURN_NOT_OK(Classify(name, schema.field(index)->type(), column_options,
                                  options.user_transform ? nullptr : &catalog,
                                  options.allow_lossy_cast, spec));
    STOKER_RETURN_NOT_OK(MakeCategorical(catalog, options, spec, &out));
    if (spec->list_of_strings && !options.transforms.count(name)) {
      if (spec->kind == ColumnKind::kPadded) {
        return Unsupported(
            name, *schema.field(index)->type(),
            (" as a padded list (lists='padded' pads numbers); choose lists={'" + name +
             "': 'ragged'} for the bytes plus two offsets tensors, or "
             "transforms that make numbers of the strings, such as "
             "hash_bucket or vocabulary")
                .c_str());
      }
      // Delivered ragged: the strings' bytes are a second level of offsets.
      spec->list_of_strings = false;
      spec->list_levels = 1;
    }
    if (spec->list_levels > 0 && options.transforms.count(name)) {
      return Unsupported(name, *schema.field(index)->type(),
                         " with transforms (transforms take lists of one level of numbers or "
                         "strings)");
    }
    const bool plain_values = (spec->layout == SourceLayout::kFixed && spec->inner == 1) ||
                              spec->layout == SourceLayout::kString;
    if (spec->dictionary && !plain_values) {
      return Unsupported(name, *schema.field(index)->type(),
                         " (dictionaries are supported for numeric and string values only)");
    }
    return Status::OK();
  };

  std::vector<std::string> columns = ExpandParents(schema, options.columns);
  if (columns.empty() && options.features.empty() && options.feature_groups.empty()) {
    for (const auto& field : schema.fields()) columns.push_back(field->name());
  }
  int groups = 0;
  // Every problem is collected, so that one error lists them all (CombineProblems).
  std::vector<Status> problems;
  auto resolve_column = [&](const std::string& name) -> Status {
    if (!seen_outputs.insert(name).second) {
      return MakeError(ErrorKind::kInvalidOption,
                       "column '" + name + "' is listed twice in columns");
    }
    if (auto outputs = options.transform_outputs.find(name);
        outputs != options.transform_outputs.end()) {
      STOKER_RETURN_NOT_OK(ResolveOutputs(outputs->second, name, groups++,
                                          !options.cache_dir.empty(), lookup, &seen_outputs, &out));
      return Status::OK();
    }
    ColumnSpec spec;
    STOKER_RETURN_NOT_OK(lookup(name, &spec));
    auto chain = options.transforms.find(name);
    // A list's pad_value applies to the chain's output: checked after it.
    if (chain == options.transforms.end() || spec.layout != SourceLayout::kList) {
      STOKER_RETURN_NOT_OK(CheckOptionValues(spec));
    }
    if (chain != options.transforms.end()) {
      if (spec.layout == SourceLayout::kPartition) {
        return MakeError(ErrorKind::kUnsupportedType,
                         "transforms['" + name + "']: partition columns take no transforms");
      }
      STOKER_RETURN_NOT_OK(ResolveChain(chain->second, &spec, true, !options.cache_dir.empty()));
      spec.counters = out.transform_counters;
      if (spec.layout == SourceLayout::kList) {
        STOKER_RETURN_NOT_OK(CheckOptionValues(spec));
        if (spec.options.on_error_zero) {
          // The advice names the other requested columns whose chains can take it.
          std::string others;
          for (const auto& [other, unused] : options.transforms) {
            const int index = schema.GetFieldIndex(other);
            if (other == name || index < 0 ||
                std::find(columns.begin(), columns.end(), other) == columns.end()) {
              continue;
            }
            const arrow::Type::type id = schema.field(index)->type()->id();
            if (id == arrow::Type::LIST || id == arrow::Type::LARGE_LIST) continue;
            others += (others.empty() ? "'" : ", '") + other + "': 'zero'";
          }
          return MakeError(ErrorKind::kInvalidOption,
                           "on_error='zero' for column '" + name +
                               "': its transforms give a list per row, whose length varies, so "
                               "there is no zero tensor to substitute; " +
                               (others.empty() ? "leave on_error unset"
                                               : "give on_error per column, without '" + name +
                                                     "': on_error={" + others + "}"));
        }
      }
    }
    if (spec.options.on_error_zero && !spec.chain && spec.explicit_options) {
      return MakeError(ErrorKind::kInvalidOption,
                       "on_error={'" + name + "': 'zero'}: column '" + name +
                           "' has no transforms; on_error applies to columns with transforms");
    }
    if (spec.options.on_error_zero && spec.chain) {
      // A zero tensor stands for a failed row only where every row has one shape.
      for (int64_t dim : spec.output_shape) {
        if (dim < 0) {
          return MakeError(ErrorKind::kInvalidOption,
                           "on_error='zero' for column '" + name +
                               "': its transforms give a shape that varies per row, so there is "
                               "no zero tensor to substitute; add a resize or crop to a fixed "
                               "size");
        }
      }
    }
    out.columns.push_back(std::move(spec));
    return Status::OK();
  };
  for (const auto& name : columns) {
    if (Status status = resolve_column(name); !status.ok()) problems.push_back(std::move(status));
  }
  std::vector<FeatureGroup> feature_groups = EffectiveFeatureGroups(options);
  std::set<std::string> feature_names;
  for (auto& group : feature_groups) {
    // A struct parent stands for its leaves.
    group.columns = ExpandParents(schema, group.columns);
    feature_names.insert(group.columns.begin(), group.columns.end());
  }
  for (const auto& [name, outputs] : options.transform_outputs) {
    if (std::find(columns.begin(), columns.end(), name) == columns.end()) {
      problems.push_back(
          MakeError(ErrorKind::kInvalidOption, "transforms names column '" + name +
                                                   "' with several outputs, which is "
                                                   "not in columns"));
    }
    if (options.transforms.count(name)) {
      problems.push_back(MakeError(ErrorKind::kInvalidOption, "transforms gives column '" + name +
                                                                  "' both one chain and several"));
    }
    if (feature_names.count(name)) {
      problems.push_back(
          MakeError(ErrorKind::kInvalidOption,
                    "column '" + name +
                        "' has transforms with several outputs and is also in features; "
                        "a feature takes one chain"));
    }
  }
  for (const auto& [name, chain] : options.transforms) {
    if (!seen_outputs.count(name) && !feature_names.count(name)) {
      problems.push_back(MakeError(ErrorKind::kInvalidOption, "transforms names column '" + name +
                                                                  "', which is not in columns or "
                                                                  "features"));
    }
  }
  for (const auto& [name, vocabulary] : options.categories) {
    if (!seen_outputs.count(name) && !feature_names.count(name)) {
      problems.push_back(
          MakeError(ErrorKind::kInvalidOption,
                    "categories names column '" + name + "', which is not in columns or features"));
    }
  }
  const bool single = options.feature_groups.empty();
  std::set<std::string> seen_features;
  std::vector<size_t> lossy_at;  // indices in `problems` of the lossy columns of every group
  std::map<std::string, DType> fixed_dtypes;
  bool all_fixable = true;
  for (const FeatureGroup& group : feature_groups) {
    // The legacy single group keeps its option names in messages.
    const std::string dtype_option =
        single ? "features_dtype" : "features_dtype['" + group.name + "']";
    if (group.dtype == DType::kBFloat16) {
      problems.push_back(MakeError(ErrorKind::kInvalidOption,
                                   dtype_option +
                                       "='bfloat16' is not supported; stack the features as "
                                       "float32 and cast on the device"));
      continue;
    }
    // A group of the dict form must not share a name with any column of the dataset (the
    // batch key would read as that column); the single group only with the requested ones.
    if (seen_outputs.count(group.name) || (!single && schema.GetFieldIndex(group.name) >= 0)) {
      problems.push_back(MakeError(ErrorKind::kInvalidOption,
                                   (single ? "features_name '" : "feature group '") + group.name +
                                       "' clashes with a column of that name; rename the group"));
      continue;
    }
    if (seen_outputs.count(group.name + "_mask") && group.null_mask) {
      problems.push_back(MakeError(ErrorKind::kInvalidOption,
                                   "feature group '" + group.name + "' adds '" + group.name +
                                       "_mask', which is also a column; rename the group"));
      continue;
    }
    FeatureGroupSpec group_spec;
    group_spec.name = group.name;
    group_spec.dtype = group.dtype;
    group_spec.null_mask = group.null_mask;
    group_spec.first = out.features.size();
    std::vector<std::string> lossy;   // one line per column that cannot be stacked exactly
    std::vector<ColumnSpec> as_read;  // the group's columns before the cast
    auto resolve_feature = [&](const std::string& name) -> Status {
      if (!seen_features.insert(name).second) {
        return MakeError(ErrorKind::kInvalidOption,
                         "column '" + name + "' is listed twice in features");
      }
      if (const int index = schema.GetFieldIndex(name); index >= 0) {
        const arrow::Type::type id = schema.field(index)->type()->id();
        if (id == arrow::Type::LIST || id == arrow::Type::LARGE_LIST) {
          // Before the lookup, whose advice (lists=) would not make a list stack.
          return MakeError(ErrorKind::kUnsupportedType,
                           "feature column '" + name + "' has type " +
                               schema.field(index)->type()->ToString() +
                               "; features must be scalar numeric or bool columns, and a list "
                               "has a length per row: move '" +
                               name + "' from features to columns, with lists={'" + name +
                               "': 'padded'} for a [B, max_len] tensor plus lengths");
        }
      }
      ColumnSpec spec;
      STOKER_RETURN_NOT_OK(lookup(name, &spec));
      spec.feature_group = group.name;
      if (spec.options.on_error_zero && spec.explicit_options) {
        return MakeError(ErrorKind::kInvalidOption,
                         "on_error={'" + name + "': 'zero'}: feature column '" + name +
                             "' has no <name>_valid in the stacked features; on_error applies "
                             "to the columns in columns");
      }
      if (auto chain = options.transforms.find(name); chain != options.transforms.end()) {
        // A feature's chain runs whole in the decoder (it is cached) and must give one number
        // per row, which is then cast and stacked like any feature column.
        if (spec.layout == SourceLayout::kPartition) {
          return MakeError(ErrorKind::kUnsupportedType,
                           "transforms['" + name + "']: partition columns take no transforms");
        }
        spec.options.on_error_zero = false;  // a stacked feature has no <name>_valid
        STOKER_RETURN_NOT_OK(ResolveChain(chain->second, &spec, true, !options.cache_dir.empty()));
        spec.counters = out.transform_counters;
        if (!spec.output_shape.empty()) {
          std::string shape;
          for (int64_t dim : spec.output_shape) {
            shape += (shape.empty() ? "" : ", ") + std::to_string(dim);
          }
          return MakeError(ErrorKind::kUnsupportedType,
                           "transforms['" + name + "'] gives [" + shape +
                               "] per row, but feature column '" + name +
                               "' needs one number per row to stack into " + group.name);
        }
        if (spec.cached_ops != spec.chain->size()) {
          return MakeError(ErrorKind::kInvalidOption,
                           "transforms['" + name + "'] on feature column '" + name +
                               "' has a random op; feature chains must be deterministic");
        }
        if (spec.dtype == DType::kBFloat16) {
          return MakeError(ErrorKind::kUnsupportedType,
                           "transforms['" + name + "'] gives bfloat16, which feature column '" +
                               name + "' cannot stack; end the chain in another dtype");
        }
        // The writer reads the cached scalars and casts them to features_dtype.
        spec.dtype = spec.source_dtype;
        spec.kind = ColumnKind::kDense;
      }
      // Partition columns stack when their values are numbers (or category ids).
      const bool partition_number =
          spec.layout == SourceLayout::kPartition && spec.kind == ColumnKind::kDense;
      const bool scalar =
          ((spec.layout == SourceLayout::kFixed || spec.layout == SourceLayout::kBool) &&
           spec.inner == 1) ||
          partition_number;
      if (!scalar) {
        return MakeError(
            ErrorKind::kUnsupportedType,
            "feature column '" + name + "' has type " + spec.arrow_type +
                "; features must be scalar numeric or bool columns" +
                (spec.layout == SourceLayout::kString || spec.layout == SourceLayout::kPartition
                     ? " (strings become ids with categories={'" + name + "': 'auto'})"
                     : ""));
      }
      if (spec.explicit_options && spec.options.null_mask && !group.null_mask) {
        return MakeError(ErrorKind::kInvalidOption,
                         "null_mask names feature column '" + name + "'; masks of features are " +
                             "per group: name the group (null_mask=['" + group.name + "'])");
      }
      // The group's mask lets nulls through (zero-filled, or fill_null where given).
      spec.options.null_mask = group.null_mask;
      // Converted values known to be exact in float32 (dates as days, small decimals) stack
      // into float32 as they are.
      const bool exact_conversion =
          spec.conversion.exact_in_float32 && group.dtype == DType::kFloat32;
      std::string why;
      if (!options.allow_lossy_cast && !exact_conversion &&
          !FeatureCastIsExact(catalog, spec, group.dtype, &why)) {
        // A raw temporal column (int64 counts of its unit) is better stacked as a count of a
        // chosen unit: say so.
        const std::string temporal_hint =
            IsTemporal(spec.annotation) && !spec.conversion.active()
                ? " (it holds " + spec.annotation + " counts; time_unit={'" + name +
                      "': 's'} stacks float64 seconds since the epoch, 'D' days)"
                : "";
        lossy.push_back("feature column '" + name + "' is " + DTypeName(spec.dtype) +
                        temporal_hint + " and stacking it into " + DTypeName(group.dtype) +
                        " can lose information" + why);
        // In order among the other problems; the fix is appended once every group is known.
        lossy_at.push_back(problems.size());
        problems.push_back(MakeError(ErrorKind::kLossyCast, lossy.back()));
      }
      as_read.push_back(spec);
      spec.dtype = group.dtype;
      STOKER_RETURN_NOT_OK(CheckOptionValues(spec));
      out.features.push_back(std::move(spec));
      return Status::OK();
    };
    for (const auto& name : group.columns) {
      if (Status status = resolve_feature(name); !status.ok()) {
        problems.push_back(std::move(status));
      }
    }
    group_spec.count = out.features.size() - group_spec.first;
    if (!lossy.empty()) {
      // A fix that works: a dtype every column of the group stacks into exactly (and holds its
      // fill_null), else only the explicit allow_lossy_cast.
      std::optional<DType> fix;
      for (DType candidate : {DType::kFloat64, DType::kInt64}) {
        bool exact = true;
        for (const ColumnSpec& original : as_read) {
          std::string ignored;
          exact = exact && FeatureCastIsExact(catalog, original, candidate, &ignored) &&
                  !(original.explicit_options && FillNullApplies(original) &&
                    !IsRepresentable(original.options.fill_null, candidate));
        }
        if (exact) {
          fix = candidate;
          break;
        }
      }
      if (fix) {
        fixed_dtypes[group.name] = *fix;
      } else {
        all_fixable = false;
      }
    }
    out.feature_groups.push_back(std::move(group_spec));
  }
  if (!lossy_at.empty()) {
    // Every lossy column of every group, each with the one suggestion that fixes them all.
    std::string fix;
    // One dtype for every group (the string form, which a dict of groups takes too) when the
    // groups that need a fix agree and the others already stack into it.
    const DType first_fix = all_fixable ? fixed_dtypes.begin()->second : DType::kFloat64;
    bool shared = all_fixable;
    for (const auto& group : feature_groups) {
      auto fixed = fixed_dtypes.find(group.name);
      shared = shared && (fixed == fixed_dtypes.end() ? group.dtype : fixed->second) == first_fix;
    }
    if (all_fixable && (single || shared)) {
      fix = "features_dtype='" + std::string(DTypeName(first_fix)) + "', or ";
    } else if (all_fixable) {
      fix = "features_dtype={";
      for (const auto& group : feature_groups) {
        auto fixed = fixed_dtypes.find(group.name);
        fix += "'" + group.name + "': '" +
               DTypeName(fixed == fixed_dtypes.end() ? group.dtype : fixed->second) + "', ";
      }
      fix.resize(fix.size() - 2);
      fix += "}, or ";
    }
    for (size_t index : lossy_at) {
      problems[index] =
          MakeError(ErrorKind::kLossyCast, problems[index].message() + "; pass " + fix +
                                               "allow_lossy_cast=True to accept the rounding");
    }
  }
  // A column that some files lack (added later) is null in their rows: without a choice for
  // nulls, say so now rather than at the first batch from such a file.
  if (!options.user_transform) {
    for (const auto* group : {&out.columns, &out.features}) {
      for (const ColumnSpec& spec : *group) {
        if (spec.layout == SourceLayout::kPartition || NullsCovered(spec)) continue;
        const std::string missing = catalog.MissingIn(spec.Field());
        if (missing.empty()) continue;
        problems.push_back(MakeError(ErrorKind::kNullValues,
                                     "column '" + spec.Field() + "' is not in '" + missing +
                                         "' (files without it are read as nulls)" +
                                         NullAdvice(spec)));
      }
    }
  }
  if (!problems.empty()) {
    // The open fails anyway: also name the columns whose footers show nulls that no option
    // covers (otherwise found per row group during iteration), so one round fixes everything.
    if (!options.user_transform) {
      for (const auto* specs : {&out.columns, &out.features}) {
        const bool features = specs == &out.features;
        for (const ColumnSpec& spec : *specs) {
          if (spec.layout == SourceLayout::kPartition || NullsCovered(spec)) continue;
          const int64_t nulls = FooterNullCount(catalog, spec.Field());
          if (nulls <= 0) continue;
          problems.push_back(MakeError(ErrorKind::kNullValues,
                                       std::string(features ? "feature column '" : "column '") +
                                           spec.name + "' has " + std::to_string(nulls) +
                                           " null(s) by the footers' statistics" +
                                           NullAdvice(spec)));
        }
      }
    }
    return CombineProblems(problems);
  }
  if (options.user_transform) {
    for (const auto& field : transform_schema->fields()) {
      if (needed.count(field->name())) out.decoded_fields.push_back(field->name());
    }
    return out;
  }
  for (const auto& field : schema.fields()) {
    if (needed.count(field->name())) out.file_fields.push_back(field->name());
  }
  out.decoded_fields = out.file_fields;
  return out;
}

ColumnInfo ToColumnInfo(const ColumnSpec& spec) {
  return {spec.name,
          spec.arrow_type,
          spec.kind,
          spec.dtype,
          spec.chain ? spec.output_shape : spec.inner_shape,
          spec.annotation,
          ElementMaskLevels(spec)};
}

}  // namespace stoker
