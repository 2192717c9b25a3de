#include "resolve/classify.h"

#include <arrow/extension/fixed_shape_tensor.h>
#include <arrow/extension_type.h>
#include <arrow/type.h>

#include <vector>

#include "resolve/column_checks.h"
#include "resolve/value_conversion.h"

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

// What a dictionary or extension type wraps: `*type` becomes the value or storage type, with
// a fixed-shape tensor's shape in `*ext_shape` and the extension's name in `*ext_name`.
Status Unwrap(const std::string& name, ColumnSpec* spec, std::shared_ptr<arrow::DataType>* type,
              std::vector<int64_t>* ext_shape, std::string* ext_name) {
  if ((*type)->id() == arrow::Type::DICTIONARY) {
    spec->dictionary = true;
    *type = static_cast<const arrow::DictionaryType&>(**type).value_type();
  }
  if ((*type)->id() != arrow::Type::EXTENSION) return Status::OK();
  const auto& ext = static_cast<const arrow::ExtensionType&>(**type);
  *ext_name = ext.extension_name();
  if (*ext_name == "arrow.fixed_shape_tensor") {
    const auto* tensor = dynamic_cast<const arrow::extension::FixedShapeTensorType*>(&ext);
    if (tensor == nullptr || tensor->shape().empty()) {
      return Unsupported(name, ext, " (its shape metadata cannot be read)");
    }
    *ext_shape = tensor->shape();
    // pyarrow writes a permutation, usually the identity (row-major, nothing to do); any
    // other would need a transpose.
    const std::vector<int64_t>& permutation = tensor->permutation();
    for (size_t i = 0; i < permutation.size(); ++i) {
      if (permutation[i] != static_cast<int64_t>(i)) {
        return Unsupported(name, ext,
                           " (tensors with a non-identity permutation are not supported)");
      }
    }
  } else if (*ext_name != "arrow.uuid") {  // 16 bytes per row, delivered as they are
    return Unsupported(name, ext,
                       " (only the arrow.fixed_shape_tensor and arrow.uuid extensions are "
                       "known)");
  }
  *type = ext.storage_type();
  return Status::OK();
}

// fixed_size_list (nested, of numbers or bools; an arrow.fixed_shape_tensor's storage): a
// tensor of the lists' shape per row.
Status ClassifyFixedSizeList(const std::string& name, const arrow::DataType& full_type,
                             const std::shared_ptr<arrow::DataType>& type,
                             const std::vector<int64_t>& ext_shape, ColumnSpec* spec) {
  std::shared_ptr<arrow::DataType> inner = type;
  while (inner->id() == arrow::Type::FIXED_SIZE_LIST) {
    const auto& fsl = static_cast<const arrow::FixedSizeListType&>(*inner);
    spec->inner_shape.push_back(fsl.list_size());
    spec->inner *= fsl.list_size();
    inner = fsl.value_type();
  }
  // Bits are unpacked to one byte per value, like bool columns.
  const bool bits = inner->id() == arrow::Type::BOOL;
  DType dtype = DType::kBool;
  std::string annotation;
  if (!bits && (!FixedWidthDType(*inner, &dtype, &annotation) || IsTemporal(annotation))) {
    return Unsupported(name, full_type, " (fixed_size_list values must be numeric or bool)");
  }
  if (!ext_shape.empty()) {
    int64_t product = 1;
    for (int64_t d : ext_shape) product *= d;
    if (product != spec->inner) {
      return Unsupported(name, full_type, " (tensor shape disagrees with its storage)");
    }
    spec->inner_shape = ext_shape;
    spec->annotation = "arrow.fixed_shape_tensor";
  }
  spec->layout = bits ? SourceLayout::kBool : SourceLayout::kFixed;
  spec->source_dtype = spec->dtype = dtype;
  spec->fixed_list = true;
  return Status::OK();
}

// The element type of a list (below its levels of lists): its dtype, and the annotation of
// strings or converted values. `*annotation` is set for a raw temporal element (refused).
Status ClassifyListValues(const std::string& name, const arrow::DataType& full_type,
                          const arrow::DataType& value_type, const ColumnOptions& options,
                          const Catalog* catalog, bool allow_lossy_cast, ColumnSpec* spec,
                          DType* dtype, std::string* annotation) {
  const arrow::Type::type value_id = value_type.id();
  if (value_id == arrow::Type::NA) {
    return Unsupported(name, full_type,
                       " (every element of a list<null> is null, so it holds no values to "
                       "deliver; leave it out of columns)");
  }
  if (value_id == arrow::Type::STRING || value_id == arrow::Type::LARGE_STRING ||
      value_id == arrow::Type::BINARY || value_id == arrow::Type::LARGE_BINARY) {
    // Only element-wise transforms make numbers of these (ResolveColumns checks).
    spec->list_of_strings = true;
    *dtype = DType::kUInt8;
    *annotation = value_id == arrow::Type::STRING || value_id == arrow::Type::LARGE_STRING
                      ? "utf8"
                      : "binary";
    spec->annotation = *annotation;
  } else if (value_id == arrow::Type::BOOL) {
    *dtype = DType::kBool;  // unpacked from bits by its column writer
  } else if (IsDecimalType(value_type) ||
             (IsTemporalType(value_type) && options.time_unit != TimeUnit::kUnset)) {
    // The elements are converted by the decoder, as a scalar column's values are.
    STOKER_RETURN_NOT_OK(ResolveConversion(catalog, name, value_type, options, allow_lossy_cast,
                                           &spec->conversion, dtype, &spec->annotation));
  } else if (!FixedWidthDType(value_type, dtype, annotation) || IsTemporal(*annotation)) {
    const std::string why =
        IsTemporal(*annotation)
            ? " (list values must be numeric, bool or strings, or lists of them: pass "
              "time_unit={'" +
                  name + "': 's'} for float64 counts of a unit)"
            : " (list values must be numeric, bool or strings, or lists of them)";
    return Unsupported(name, full_type, why);
  }
  return Status::OK();
}

// list / large_list (of lists, numbers, bools or strings): padded or ragged, as `lists=` says.
Status ClassifyList(const std::string& name, const arrow::DataType& full_type,
                    const arrow::DataType& type, const ColumnOptions& options,
                    const Catalog* catalog, bool allow_lossy_cast, ColumnSpec* spec) {
  const auto& list = static_cast<const arrow::BaseListType&>(type);
  // Lists of lists: each level below the rows' is one more offsets tensor (ragged only).
  std::shared_ptr<arrow::DataType> value_type = list.value_type();
  while (value_type->id() == arrow::Type::LIST || value_type->id() == arrow::Type::LARGE_LIST) {
    ++spec->list_levels;
    value_type = static_cast<const arrow::BaseListType&>(*value_type).value_type();
  }
  DType dtype = DType::kUInt8;
  std::string annotation;
  STOKER_RETURN_NOT_OK(ClassifyListValues(name, full_type, *value_type, options, catalog,
                                          allow_lossy_cast, spec, &dtype, &annotation));
  if (spec->list_of_strings && spec->list_levels > 0) {
    // Strings in lists of lists: the bytes are the innermost level.
    spec->list_of_strings = false;
    ++spec->list_levels;
  }
  spec->layout = SourceLayout::kList;
  spec->source_dtype = spec->dtype = dtype;
  if (options.list_mode == ListMode::kUnset) {
    return MakeError(ErrorKind::kUnsupportedType,
                     "column '" + name + "' is a variable-length list (" + full_type.ToString() +
                         "): choose lists={'" + name +
                         "': 'padded'} for a [B, max_len] tensor plus lengths, or lists={'" + name +
                         "': 'ragged'} for flat values plus offsets");
  }
  spec->kind = options.list_mode == ListMode::kPadded ? ColumnKind::kPadded : ColumnKind::kRagged;
  // Padding pads numbers; strings in lists of lists are delivered ragged only.
  if (spec->list_levels > 0 && spec->kind == ColumnKind::kPadded && !annotation.empty()) {
    return MakeError(ErrorKind::kUnsupportedType,
                     "column '" + name + "' is a list of lists or strings (" +
                         full_type.ToString() +
                         "): lists='padded' pads one level; choose "
                         "lists={'" +
                         name +
                         "': 'ragged'} for flat values plus one offsets "
                         "tensor per level");
  }
  return Status::OK();
}

}  // namespace

Status Classify(const std::string& name, const std::shared_ptr<arrow::DataType>& full_type,
                const ColumnOptions& options, const Catalog* catalog, bool allow_lossy_cast,
                ColumnSpec* spec) {
  spec->name = name;
  spec->options = options;
  spec->arrow_type = full_type->ToString();
  std::shared_ptr<arrow::DataType> type = full_type;
  std::vector<int64_t> ext_shape;
  std::string ext_name;
  STOKER_RETURN_NOT_OK(Unwrap(name, spec, &type, &ext_shape, &ext_name));

  DType dtype;
  std::string annotation;
  if (IsDecimalType(*type) || (IsTemporalType(*type) && options.time_unit != TimeUnit::kUnset)) {
    // Converted by the decoder into a plain numeric column (decode/convert_values.h).
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
    case arrow::Type::FIXED_SIZE_LIST:
      return ClassifyFixedSizeList(name, *full_type, type, ext_shape, spec);
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST:
      return ClassifyList(name, *full_type, *type, options, catalog, allow_lossy_cast, spec);
    default:
      return Unsupported(name, *full_type, "");
  }
}

}  // namespace stoker
