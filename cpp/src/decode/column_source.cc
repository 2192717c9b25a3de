#include "decode/column_source.h"

#include <arrow/util/bit_util.h>
#include <arrow/util/bitmap_ops.h>

#include <cstring>

#include "resolve/column_checks.h"
#include "util/convert.h"
#include "util/output_keys.h"
#include "util/recycling_pool.h"

namespace stoker {
namespace {

// Nulls among `length` items of `level` from absolute index `begin` (its offset included).
int64_t NullsIn(const arrow::ArrayData& level, int64_t begin, int64_t length) {
  if (length <= 0 || level.GetNullCount() == 0 || !level.buffers[0]) return 0;
  return length - arrow::internal::CountSetBits(level.buffers[0]->data(), begin, length);
}

// Whether null number or bool elements of `spec` (in lists or fixed-size lists) may be
// delivered, and as what: an error that names the options that deliver them otherwise.
Status CheckElementNulls(const ColumnSpec& spec, const std::string& where, int64_t nulls,
                         int mask_level) {
  const std::string& name = spec.name;
  const bool bits = spec.source_dtype == DType::kBool;
  if (spec.chain && spec.layout != SourceLayout::kList) {  // a list's chain ran already
    return MakeError(ErrorKind::kNullValues,
                     "column '" + name + "' has " + std::to_string(nulls) +
                         " null element(s) inside its lists in " + where +
                         "; its transforms take no null elements (fill them in a transform= "
                         "function, or leave the transforms out and pass null_mask=['" +
                         name + "'])");
  }
  if (!spec.options.null_mask && !ElementFillApplies(spec)) {
    return MakeError(ErrorKind::kNullValues,
                     "column '" + name + "' has " + std::to_string(nulls) +
                         " null element(s) inside its lists in " + where + "; pass fill_null={'" +
                         name + "': " + (bits ? "0 or 1" : "value") +
                         "} to replace them, or null_mask=['" + name + "'] to deliver them (as " +
                         (bits ? "False" : "0") + ", false in '" + MaskKey(name, mask_level) +
                         "')");
  }
  if (ElementFillApplies(spec) && !IsRepresentable(spec.options.fill_null, spec.source_dtype)) {
    return MakeError(ErrorKind::kInvalidOption,
                     "column '" + name + "' has null elements in " + where +
                         " and fill_null=" + FormatValue(spec.options.fill_null) +
                         " cannot be stored exactly as " + DTypeName(spec.source_dtype) +
                         "; pass fill_null={'" + name + "': value} with a value it holds");
  }
  return Status::OK();
}

// The value a null element holds: the column's fill_null, or 0.
double ElementFill(const ColumnSpec& spec) {
  return ElementFillApplies(spec) ? spec.options.fill_null : 0;
}

// Points `out->values` at a copy of `count` values (bits from bit `offset` when `bits`, else
// elements from element `offset`) with the column's fill value (or 0) where `is_null(i)`; the
// decoded arrays stay as they are (the cache holds them).
template <typename IsNull>
Status CopyFilled(const ColumnSpec& spec, bool bits, const uint8_t* values, int64_t offset,
                  int64_t count, IsNull is_null, ColumnSource* out) {
  const double fill = ElementFill(spec);
  if (bits) {
    ARROW_ASSIGN_OR_RAISE(
        std::shared_ptr<arrow::Buffer> copy,
        arrow::internal::CopyBitmap(arrow::default_memory_pool(), values, offset, count));
    for (int64_t i = 0; i < count; ++i) {
      if (is_null(i)) arrow::bit_util::SetBitTo(copy->mutable_data(), i, fill != 0);
    }
    out->values = copy->data();
    out->bit_offset = 0;
    out->owned = std::move(copy);
    return Status::OK();
  }
  const int width = DTypeSize(spec.source_dtype);
  ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::Buffer> filled,
                        arrow::AllocateBuffer(count * width, RecyclingPool::Get()));
  std::memcpy(filled->mutable_data(), values + offset * width, count * width);
  VisitDType(spec.source_dtype, [&](auto tag) {
    using T = decltype(tag);
    const T value = FromDouble<T>(fill);
    T* typed = reinterpret_cast<T*>(filled->mutable_data());
    for (int64_t i = 0; i < count; ++i) {
      if (is_null(i)) typed[i] = value;
    }
  });
  out->values = filled->data();
  out->owned = std::move(filled);
  return Status::OK();
}

// A list's child values (numbers or bits) with the fill value where an element is null.
Status FillListElements(const ColumnSpec& spec, const arrow::ArrayData& child, ColumnSource* out) {
  const uint8_t* validity = child.buffers[0]->data();
  STOKER_RETURN_NOT_OK(CopyFilled(
      spec, spec.source_dtype == DType::kBool, child.buffers[1]->data(), child.offset, child.length,
      [&](int64_t i) { return !arrow::bit_util::GetBit(validity, child.offset + i); }, out));
  out->values_validity = validity;
  out->values_validity_offset = child.offset;
  return Status::OK();
}

// One level below the rows of a fixed-size list that holds nulls: `items` items of it, the
// segment's, from absolute index `index`.
struct NullLevel {
  const arrow::ArrayData* level;
  int64_t index;
  int64_t items;
};

// Fixed-size lists with null elements or inner lists: the segment's `total` values copied from
// `out->values` with the fill value where an element (or a list above it) is null, and one
// validity byte per element.
Status FillFixedElements(const ColumnSpec& spec, const std::string& where,
                         const std::vector<NullLevel>& nulled, int64_t total, ColumnSource* out) {
  int64_t nulls = 0;
  for (const NullLevel& level : nulled) nulls += NullsIn(*level.level, level.index, level.items);
  STOKER_RETURN_NOT_OK(CheckElementNulls(spec, where, nulls, 1));
  ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::Buffer> valid,
                        arrow::AllocateBuffer(total, RecyclingPool::Get()));
  uint8_t* flags = valid->mutable_data();
  std::memset(flags, 1, total);
  for (const NullLevel& level : nulled) {
    // Each item of this level covers `span` values.
    const int64_t span = total / level.items;
    const uint8_t* bitmap = level.level->buffers[0]->data();
    for (int64_t t = 0; t < level.items; ++t) {
      if (!arrow::bit_util::GetBit(bitmap, level.index + t)) {
        std::memset(flags + t * span, 0, span);
      }
    }
  }
  const bool bits = spec.layout == SourceLayout::kBool;
  STOKER_RETURN_NOT_OK(CopyFilled(
      spec, bits, out->values, bits ? out->bit_offset : 0, total,
      [&](int64_t j) { return flags[j] == 0; }, out));
  out->element_valid = valid->data();
  out->owned_valid = std::move(valid);
  return Status::OK();
}

}  // namespace

std::string RowsWhere(const Catalog& catalog, const RowGroupRef& rg, int64_t row_begin,
                      int64_t num_rows) {
  if (row_begin == 0 && num_rows == rg.num_rows) return catalog.Where(rg);
  return "rows " + std::to_string(row_begin) + "-" + std::to_string(row_begin + num_rows - 1) +
         " of " + catalog.Where(rg) + " (" + std::to_string(rg.num_rows) + " rows)";
}

transform::Value TransformInput(const ColumnSpec& spec, const ColumnSource& source, int64_t row) {
  using transform::Value;
  if (!source.IsValid(row)) return Value::Null();
  if (spec.cached_shapes) {  // a cached row of its own shape: int64 dims, then the data
    const transform::ValueType& type = spec.chain->types()[spec.cached_ops];
    const uint8_t* bytes = source.values + source.Begin(row);
    std::vector<int64_t> shape(type.shape.size());
    std::memcpy(shape.data(), bytes, shape.size() * sizeof(int64_t));
    return Value::TensorView(type.element, std::move(shape),
                             bytes + type.shape.size() * sizeof(int64_t));
  }
  if (spec.layout == SourceLayout::kString) {
    const int64_t begin = source.Begin(row);
    return Value::View(
        spec.annotation == "utf8" || spec.chain->input_type().kind == transform::ValueKind::kString
            ? transform::ValueKind::kString
            : transform::ValueKind::kBytes,
        source.values + begin, source.End(row) - begin);
  }
  const int64_t size = DTypeSize(spec.source_dtype);
  return Value::TensorView(
      transform::FromDType(spec.source_dtype),
      spec.inner == 1 && spec.inner_shape.empty() ? std::vector<int64_t>{} : spec.inner_shape,
      source.values + row * spec.inner * size);
}

Status PrepareSource(const ColumnSpec& spec, const std::string& where,
                     const std::shared_ptr<arrow::Array>& array, ColumnSource* out) {
  if (array->null_count() > 0 && !NullsCovered(spec)) {
    return MakeError(ErrorKind::kNullValues,
                     std::string(spec.feature_group.empty() ? "column '" : "feature column '") +
                         spec.name + "' has " + std::to_string(array->null_count()) +
                         " null(s) in " + where + NullAdvice(spec));
  }
  if (array->null_count() > 0 && FillNullApplies(spec) &&
      !IsRepresentable(spec.options.fill_null, spec.dtype)) {
    return MakeError(ErrorKind::kInvalidOption,
                     "column '" + spec.name + "' has nulls in " + where +
                         " and fill_null=" + FormatValue(spec.options.fill_null) +
                         " cannot be stored exactly as " + DTypeName(spec.dtype) +
                         "; pass fill_null={'" + spec.name + "': value} with a value it holds");
  }
  out->array = array;
  const arrow::ArrayData& data = *array->data();
  if (array->null_count() > 0) {
    out->validity = data.buffers[0]->data();
    out->validity_offset = data.offset;
  }
  switch (spec.layout) {
    case SourceLayout::kFixed:
    case SourceLayout::kBool: {
      // Descend through fixed_size_list levels to the flat values; remember the levels with
      // null items among the segment's rows (`items` of them from `index` at each level).
      const arrow::ArrayData* level = &data;
      int64_t index = data.offset;
      int64_t items = data.length;
      std::vector<NullLevel> nulled;
      while (level->type->id() == arrow::Type::FIXED_SIZE_LIST) {
        const int size = static_cast<const arrow::FixedSizeListType&>(*level->type).list_size();
        level = level->child_data[0].get();
        index = level->offset + index * size;
        items *= size;
        if (NullsIn(*level, index, items) > 0) nulled.push_back({level, index, items});
      }
      if (level->type->id() == arrow::Type::FIXED_SIZE_BINARY) {
        index *= static_cast<const arrow::FixedSizeBinaryType&>(*level->type).byte_width();
      }
      if (spec.layout == SourceLayout::kBool) {
        out->values = level->buffers[1]->data();
        out->bit_offset = index;  // bits are addressed from the buffer's start
      } else {
        out->values = level->buffers[1]->data() + index * DTypeSize(spec.source_dtype);
      }
      if (!nulled.empty()) {
        STOKER_RETURN_NOT_OK(FillFixedElements(spec, where, nulled, items, out));
      }
      break;
    }
    case SourceLayout::kList:
    case SourceLayout::kString: {
      const bool large = data.type->id() == arrow::Type::LARGE_LIST ||
                         data.type->id() == arrow::Type::LARGE_STRING ||
                         data.type->id() == arrow::Type::LARGE_BINARY;
      if (large) {
        out->offsets64 = data.GetValues<int64_t>(1);
      } else {
        out->offsets32 = data.GetValues<int32_t>(1);
      }
      if (spec.layout == SourceLayout::kString) {
        out->values = data.buffers[2] ? data.buffers[2]->data() : nullptr;
      } else {
        const arrow::ArrayData* level = data.child_data[0].get();
        // The items of each level that the segment's rows reach: [first, last).
        int64_t first = data.length > 0 ? out->Begin(0) : 0;
        int64_t last = data.length > 0 ? out->End(data.length - 1) : 0;
        for (int l = 0; l < spec.list_levels; ++l) {
          const arrow::Type::type id = level->type->id();
          const bool strings = id == arrow::Type::STRING || id == arrow::Type::LARGE_STRING ||
                               id == arrow::Type::BINARY || id == arrow::Type::LARGE_BINARY;
          ColumnSource::Level offsets;
          if (id == arrow::Type::LARGE_LIST || id == arrow::Type::LARGE_STRING ||
              id == arrow::Type::LARGE_BINARY) {
            offsets.offsets64 = level->GetValues<int64_t>(1);
          } else {
            offsets.offsets32 = level->GetValues<int32_t>(1);
          }
          if (const int64_t nulls = NullsIn(*level, level->offset + first, last - first);
              nulls > 0) {
            const std::string what = strings
                                         ? " null string(s) inside its lists"
                                         : " null inner list(s) at level " + std::to_string(l + 1);
            if (!spec.options.null_mask) {
              return MakeError(ErrorKind::kNullValues,
                               "column '" + spec.name + "' has " + std::to_string(nulls) + what +
                                   " in " + where + "; pass null_mask=['" + spec.name +
                                   "'] to deliver them (as empty " +
                                   (strings ? "strings" : "lists") + ", false in '" +
                                   MaskKey(spec.name, l + 1) + "')");
            }
            offsets.validity = level->buffers[0]->data();
            offsets.validity_offset = level->offset;
            // The writers deliver a null item as an empty one and skip its span: Parquet's
            // reader never gives a null a span, other writers of Arrow data might.
            for (int64_t k = first; k < last; ++k) {
              if (!offsets.IsValid(k) && offsets.At(k + 1) != offsets.At(k)) {
                return MakeError(ErrorKind::kCorruptFile,
                                 "column '" + spec.name + "' of " + where + " has a null" +
                                     (strings ? " string" : " inner list") +
                                     " that spans data; a null must be empty");
              }
            }
          }
          out->levels.push_back(offsets);
          if (strings) {
            // The strings' bytes: indexed by their offsets from the data buffer's start.
            out->values = level->buffers[2] ? level->buffers[2]->data() : nullptr;
            return Status::OK();
          }
          if (last > first) {
            first = offsets.At(first);
            last = offsets.At(last);
          } else {
            first = last = 0;
          }
          level = level->child_data[0].get();
        }
        const arrow::ArrayData& child = *level;
        if (spec.source_dtype == DType::kBool) {
          out->values = child.buffers[1]->data();
          out->bit_offset = child.offset;
        } else {
          out->values = child.buffers[1]->data() + child.offset * DTypeSize(spec.source_dtype);
        }
        if (const int64_t nulls = NullsIn(child, child.offset + first, last - first); nulls > 0) {
          STOKER_RETURN_NOT_OK(CheckElementNulls(spec, where, nulls, spec.list_levels + 1));
          STOKER_RETURN_NOT_OK(FillListElements(spec, child, out));
        }
      }
      break;
    }
    case SourceLayout::kPartition:
      break;
  }
  return Status::OK();
}

}  // namespace stoker
