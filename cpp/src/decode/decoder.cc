#include "decode/decoder.h"

#include <arrow/array.h>
#include <arrow/array/concatenate.h>
#include <arrow/buffer.h>
#include <arrow/extension_type.h>
#include <arrow/table.h>
#include <arrow/util/bit_util.h>
#include <arrow/util/bitmap_ops.h>
#include <arrow/util/byte_size.h>
#include <arrow/util/logging.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include "decode/dictionary.h"
#include "decode/nested.h"
#include "decode/user_code.h"
#include "io/filesystem.h"
#include "util/convert.h"
#include "util/recycling_pool.h"

namespace stoker {
namespace {

std::shared_ptr<arrow::DataType> ArrowType(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return arrow::boolean();
    case DType::kInt8:
      return arrow::int8();
    case DType::kInt16:
      return arrow::int16();
    case DType::kInt32:
      return arrow::int32();
    case DType::kInt64:
      return arrow::int64();
    case DType::kUInt8:
      return arrow::uint8();
    case DType::kUInt16:
      return arrow::uint16();
    case DType::kUInt32:
      return arrow::uint32();
    case DType::kUInt64:
      return arrow::uint64();
    case DType::kFloat16:
      return arrow::float16();
    case DType::kFloat32:
      return arrow::float32();
    case DType::kFloat64:
      return arrow::float64();
    case DType::kBFloat16:
      return arrow::uint16();  // Arrow has no bfloat16: the cache stores the bits
  }
  return arrow::uint8();
}

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
                         (bits ? "False" : "0") + ", false in '" + name + "_mask_" +
                         std::to_string(mask_level) + "')");
  }
  if (ElementFillApplies(spec) && !IsRepresentable(spec.options.fill_null, spec.source_dtype)) {
    std::ostringstream value;
    value.precision(17);
    value << spec.options.fill_null;
    return MakeError(ErrorKind::kInvalidOption,
                     "column '" + name + "' has null elements in " + where +
                         " and fill_null=" + value.str() + " cannot be stored exactly as " +
                         DTypeName(spec.source_dtype) + "; pass fill_null={'" + name +
                         "': value} with a value it holds");
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
                        arrow::AllocateBuffer(count * width));
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
  ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::Buffer> valid, arrow::AllocateBuffer(total));
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

Decoder::Decoder(std::shared_ptr<const Catalog> catalog, std::shared_ptr<const OutputSpec> spec)
    : catalog_(std::move(catalog)), spec_(std::move(spec)) {
  int64_t start = 0;
  for (const auto& rg : catalog_->row_groups()) {
    row_group_starts_.push_back(start);
    start += rg.num_rows;
  }
}

const ColumnSpec* Decoder::ChainedColumn(const std::string& field) const {
  for (const auto& column : spec_->columns) {
    if (column.chain && column.Field() == field) return &column;
  }
  for (const auto& feature : spec_->features) {
    if (feature.chain && feature.name == field) return &feature;
  }
  return nullptr;
}

const ValueConversion* Decoder::Conversion(const std::string& field) const {
  for (const auto& column : spec_->columns) {
    if (column.conversion.active() && column.Field() == field) return &column.conversion;
  }
  for (const auto& feature : spec_->features) {
    if (feature.conversion.active() && feature.Field() == field) return &feature.conversion;
  }
  return nullptr;
}

std::string Decoder::CacheName(const std::string& field) const {
  // A converted column's entries hold the converted values (time_unit, decimals).
  const ValueConversion* conversion = Conversion(field);
  const std::string base = conversion ? field + "|" + conversion->tag : field;
  // Category ids are stored, not strings: the entry belongs to this vocabulary only.
  if (auto vocabulary = spec_->vocabularies.find(field); vocabulary != spec_->vocabularies.end()) {
    char hash[17];
    std::snprintf(hash, sizeof(hash), "%016llx",
                  static_cast<unsigned long long>(vocabulary->second->hash()));
    return base + "|vocabulary=" + hash;
  }
  const ColumnSpec* column = ChainedColumn(field);
  if (column == nullptr || column->cached_ops == 0) return base;
  // Entries written under on_error="zero" hold failed rows as nulls: never serve them to a
  // loader that must raise for those rows.
  return base + "|" + column->chain->Fingerprint(column->cached_ops) +
         (column->cached_shapes ? "|shaped-rows-v1" : "") +
         (column->options.on_error_zero ? "|on_error=zero" : "");
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

Result<std::shared_ptr<arrow::Array>> Decoder::ApplyCachedOps(
    const ColumnSpec& spec, const std::shared_ptr<arrow::Array>& array, int row_group,
    int64_t row_begin) const {
  if (spec.layout == SourceLayout::kList) {
    return ApplyListOps(spec, array, row_group, row_begin);
  }
  const RowGroupRef& rg = catalog_->row_groups()[row_group];
  const transform::Chain& chain = *spec.chain;
  // Read the raw column as the chain's input: the spec before the transform describes it.
  ColumnSpec raw = spec;
  raw.cached_shapes = false;
  const transform::ValueType& input = chain.input_type();
  if (input.kind == transform::ValueKind::kTensor) {
    raw.layout = SourceLayout::kFixed;
    raw.source_dtype = *transform::ToDType(input.element);
    raw.inner_shape = input.shape;
    raw.inner = 1;
    for (int64_t dim : input.shape) raw.inner *= dim;
  } else {
    raw.layout = SourceLayout::kString;
  }
  ColumnSource source;
  STOKER_RETURN_NOT_OK(
      PrepareSource(raw, Segment{row_group, row_begin, array->length(), false}, array, &source));

  const transform::ValueType& type = chain.types()[spec.cached_ops];
  const int64_t rows = array->length();
  // Fixed-shape rows go into one buffer of `row_bytes` each; rows of their own shape into
  // large_binary values, each its int64 shape then its data, padded to 8 bytes so that every
  // row's data stays aligned.
  const bool shaped = spec.cached_shapes;
  const int64_t row_bytes = shaped ? 0 : spec.inner * DTypeSize(spec.source_dtype);
  const int64_t header = static_cast<int64_t>(type.shape.size() * sizeof(int64_t));
  std::shared_ptr<arrow::ResizableBuffer> buffer;
  STOKER_ASSIGN_OR_RAISE(buffer,
                         arrow::AllocateResizableBuffer(rows * row_bytes, RecyclingPool::Get()));
  std::shared_ptr<arrow::Buffer> offsets;
  int64_t* row_offsets = nullptr;
  if (shaped) {
    STOKER_ASSIGN_OR_RAISE(offsets, arrow::AllocateBuffer((rows + 1) * sizeof(int64_t)));
    row_offsets = reinterpret_cast<int64_t*>(offsets->mutable_data());
    row_offsets[0] = 0;
  }
  int64_t used = 0;  // bytes of `buffer` written (shaped rows)
  // Under on_error="zero" a row the prefix cannot transform becomes a null (zeros, or an empty
  // shaped row) of the cached array, so the cache remembers it and the writer substitutes it.
  std::shared_ptr<arrow::Buffer> validity;
  int64_t null_count = 0;
  auto fail_row = [&](int64_t row) -> Status {
    if (!validity) {
      STOKER_ASSIGN_OR_RAISE(validity, arrow::AllocateBitmap(rows));
      std::memset(validity->mutable_data(), 0xff, validity->size());
    }
    arrow::bit_util::ClearBit(validity->mutable_data(), row);
    if (shaped) {
      row_offsets[row + 1] = used;
    } else {
      std::memset(buffer->mutable_data() + row * row_bytes, 0, row_bytes);
    }
    ++null_count;
    return Status::OK();
  };
  const bool zero = spec.options.on_error_zero;
  auto fixed_rows = [&]() -> std::shared_ptr<arrow::Array> {
    auto element = ArrowType(spec.source_dtype);
    auto values = arrow::MakeArray(arrow::ArrayData::Make(
        element, rows * spec.inner, {nullptr, std::shared_ptr<arrow::Buffer>(buffer)}));
    return std::make_shared<arrow::FixedSizeListArray>(
        arrow::fixed_size_list(element, static_cast<int32_t>(spec.inner)), rows, values,
        null_count > 0 ? validity : nullptr, null_count);
  };
  // Element-wise numeric prefixes (standardize, clip, cast...) without nulls run as one columnar
  // pass with the same arithmetic: the per-row Value overhead dominates on scalar columns. On an
  // error the rows are re-run one by one below, which names the row (or zeroes it).
  const bool bits =
      input.kind == transform::ValueKind::kTensor && input.element == transform::ElementType::kBool;
  if (!shaped && !bits && array->null_count() == 0 && chain.SupportsColumn(0, spec.cached_ops)) {
    std::vector<uint8_t> column_scratch;
    const transform::ColumnInput column{source.values, source.offsets32, source.offsets64};
    if (chain.ApplyColumn(column, rows, buffer->mutable_data(), &column_scratch, 0, spec.cached_ops)
            .ok()) {
      if (spec.counters) spec.counters->prefix_rows += rows;
      return fixed_rows();
    }
  }
  transform::Value out;
  transform::Value scratch;
  int64_t applied = 0;
  for (int64_t row = 0; row < rows; ++row) {
    const transform::Value in = TransformInput(raw, source, row);
    if (in.is_null() && !chain.op(0).AcceptsNull()) {
      if (zero) {
        STOKER_RETURN_NOT_OK(fail_row(row));
        continue;
      }
      return MakeError(ErrorKind::kNullValues,
                       "column '" + spec.Field() + "' is null in " + catalog_->Where(rg) +
                           ", row " + std::to_string(row_begin + row) +
                           "; its transforms need a value (start the chain with fill_null)");
    }
    transform::RowContext context;  // the cached ops are deterministic: no random keys needed
    uint8_t* const slot = shaped ? nullptr : buffer->mutable_data() + row * row_bytes;
    out.Lend(slot, row_bytes);  // the last op writes the row in place (no copy)
    Status status = chain.Apply(context, in, &out, &scratch, 0, spec.cached_ops);
    out.Lend(nullptr, 0);
    ++applied;
    if (status.ok() &&
        (out.is_null() || (!shaped && out.size_bytes() != row_bytes) ||
         (shaped && (out.kind() != transform::ValueKind::kTensor ||
                     static_cast<int64_t>(out.shape().size() * sizeof(int64_t)) != header)))) {
      status = MakeError(ErrorKind::kCorruptFile,
                         "column '" + spec.Field() + "': the transforms produced " +
                             out.type().ToString() + ", not " + type.ToString());
    }
    if (!status.ok()) {
      if (zero) {
        STOKER_RETURN_NOT_OK(fail_row(row));
        continue;
      }
      return Status(status.code(),
                    catalog_->Where(rg) + ", row " + std::to_string(row_begin + row) + ": " +
                        status.message(),
                    status.detail());
    }
    if (shaped) {
      const int64_t size = (header + out.size_bytes() + 7) / 8 * 8;
      if (used + size > buffer->size()) {
        STOKER_RETURN_NOT_OK(buffer->Resize(std::max(used + size, buffer->size() * 2), false));
      }
      uint8_t* to = buffer->mutable_data() + used;
      std::memcpy(to, out.shape().data(), header);
      std::memcpy(to + header, out.data(), out.size_bytes());
      std::memset(to + header + out.size_bytes(), 0, size - header - out.size_bytes());
      used += size;
      row_offsets[row + 1] = used;
    } else if (out.data() != slot) {
      std::memcpy(slot, out.data(), row_bytes);
    }
  }
  if (spec.counters) spec.counters->prefix_rows += applied;
  if (shaped) {
    STOKER_RETURN_NOT_OK(buffer->Resize(used, true));
    return std::make_shared<arrow::LargeBinaryArray>(
        rows, offsets, buffer, null_count > 0 ? validity : nullptr, null_count);
  }
  return fixed_rows();
}

namespace {

// Offsets and elements of a list or large_list array, whatever its offset width and element
// kind, read through one interface.
struct ListView {
  const arrow::Array* list = nullptr;
  const int32_t* offsets32 = nullptr;
  const int64_t* offsets64 = nullptr;
  std::shared_ptr<arrow::Array> values;

  int64_t Begin(int64_t row) const { return offsets32 ? offsets32[row] : offsets64[row]; }
  int64_t End(int64_t row) const { return offsets32 ? offsets32[row + 1] : offsets64[row + 1]; }
};

ListView ViewList(const std::shared_ptr<arrow::Array>& array) {
  ListView view;
  view.list = array.get();
  if (array->type_id() == arrow::Type::LARGE_LIST) {
    const auto& list = static_cast<const arrow::LargeListArray&>(*array);
    view.offsets64 = list.raw_value_offsets();
    view.values = list.values();
  } else {
    const auto& list = static_cast<const arrow::ListArray&>(*array);
    view.offsets32 = list.raw_value_offsets();
    view.values = list.values();
  }
  return view;
}

// Element `index` of a list's values as a transform input.
transform::Value ElementInput(const arrow::Array& values, int64_t index,
                              const transform::ValueType& type) {
  using transform::Value;
  if (values.IsNull(index)) return Value::Null();
  if (type.kind == transform::ValueKind::kTensor) {
    const int size = transform::ElementSize(type.element);
    const arrow::ArrayData& data = *values.data();
    return Value::TensorView(type.element, {},
                             data.buffers[1]->data() + (data.offset + index) * size);
  }
  std::string_view bytes;
  if (values.type_id() == arrow::Type::LARGE_STRING ||
      values.type_id() == arrow::Type::LARGE_BINARY) {
    bytes = static_cast<const arrow::LargeBinaryArray&>(values).GetView(index);
  } else {
    bytes = static_cast<const arrow::BinaryArray&>(values).GetView(index);
  }
  return Value::View(type.kind, bytes.data(), static_cast<int64_t>(bytes.size()));
}

}  // namespace

Result<std::shared_ptr<arrow::Array>> Decoder::ApplyListOps(
    const ColumnSpec& spec, const std::shared_ptr<arrow::Array>& array, int row_group,
    int64_t row_begin) const {
  const RowGroupRef& rg = catalog_->row_groups()[row_group];
  const transform::Chain& chain = *spec.chain;
  const ListView list = ViewList(array);
  const int64_t rows = array->length();
  const int64_t width = DTypeSize(spec.source_dtype);
  int64_t total = 0;
  for (int64_t row = 0; row < rows; ++row) {
    if (array->IsValid(row)) total += list.End(row) - list.Begin(row);
  }
  STOKER_ASSIGN_OR_RAISE(auto offsets, arrow::AllocateBuffer((rows + 1) * sizeof(int64_t)));
  STOKER_ASSIGN_OR_RAISE(auto values, arrow::AllocateBuffer(total * width));
  auto* out_offsets = reinterpret_cast<int64_t*>(offsets->mutable_data());
  std::shared_ptr<arrow::Buffer> validity;
  if (array->null_count() > 0) {
    STOKER_ASSIGN_OR_RAISE(validity, arrow::AllocateBitmap(rows));
    std::memset(validity->mutable_data(), 0, validity->size());
  }
  const transform::ValueType& input = chain.input_type();
  transform::Value out;
  transform::Value scratch;
  int64_t position = 0;
  out_offsets[0] = 0;
  // A null element the chain does not take stays null (0 under it): what it becomes is the
  // column options' choice (PrepareSource), not the cache's.
  const bool skip_nulls = list.values->null_count() > 0 && !chain.op(0).AcceptsNull();
  std::shared_ptr<arrow::Buffer> element_validity;
  int64_t element_nulls = 0;
  if (skip_nulls) {
    STOKER_ASSIGN_OR_RAISE(element_validity, arrow::AllocateBitmap(total));
    std::memset(element_validity->mutable_data(), 0xff, element_validity->size());
  }
  for (int64_t row = 0; row < rows; ++row) {
    if (array->IsValid(row)) {
      if (validity) arrow::bit_util::SetBit(validity->mutable_data(), row);
      for (int64_t k = list.Begin(row); k < list.End(row); ++k) {
        if (skip_nulls && list.values->IsNull(k)) {
          std::memset(values->mutable_data() + position * width, 0, width);
          arrow::bit_util::ClearBit(element_validity->mutable_data(), position);
          ++element_nulls;
          ++position;
          continue;
        }
        const transform::Value in = ElementInput(*list.values, k, input);
        transform::RowContext context;  // list chains are deterministic
        Status status = chain.Apply(context, in, &out, &scratch);
        if (status.ok() && out.size_bytes() != width) {
          status = MakeError(ErrorKind::kCorruptFile, "the transforms produced " +
                                                          out.type().ToString() +
                                                          " for an element, not one number");
        }
        if (!status.ok()) {
          return Status(status.code(),
                        catalog_->Where(rg) + ", row " + std::to_string(row_begin + row) +
                            ", element " + std::to_string(k - list.Begin(row)) + ": " +
                            status.message(),
                        status.detail());
        }
        std::memcpy(values->mutable_data() + position * width, out.data(), width);
        ++position;
      }
    }
    out_offsets[row + 1] = position;
  }
  if (spec.counters) spec.counters->prefix_rows += rows;
  auto element = ArrowType(spec.source_dtype);
  auto child =
      arrow::MakeArray(arrow::ArrayData::Make(element, total,
                                              {element_nulls > 0 ? element_validity : nullptr,
                                               std::shared_ptr<arrow::Buffer>(std::move(values))},
                                              element_nulls));
  return std::make_shared<arrow::LargeListArray>(arrow::large_list(element), rows,
                                                 std::shared_ptr<arrow::Buffer>(std::move(offsets)),
                                                 child, validity, array->null_count());
}

std::vector<DecodeTask> Decoder::MakeTasks(const Plan& plan, int segment,
                                           int64_t task_bytes) const {
  const Segment& seg = plan.segments[segment];
  const RowGroupRef& rg = catalog_->row_groups()[seg.row_group];
  const double fraction = static_cast<double>(seg.num_rows) / static_cast<double>(rg.num_rows);
  std::vector<DecodeTask> tasks;
  DecodeTask current;
  current.segment = segment;
  for (const auto& field : spec_->file_fields) {
    // The whole row group is decoded even for a slice; its size is what the task costs.
    const int64_t bytes = catalog_->FieldBytes(rg, field);
    // A user transform sees all its inputs at once: one task.
    if (!current.fields.empty() && current.estimated_bytes + bytes > task_bytes &&
        !spec_->user_transform) {
      tasks.push_back(std::move(current));
      current = DecodeTask{};
      current.segment = segment;
    }
    current.fields.push_back(field);
    current.estimated_bytes += static_cast<int64_t>(bytes * std::max(fraction, 0.0) + 0.5);
  }
  tasks.push_back(std::move(current));  // may be empty when only partition columns are read
  return tasks;
}

Result<DecodedColumns> Decoder::Decode(const Plan& plan, const DecodeTask& task) const {
  const Segment& seg = plan.segments[task.segment];
  return DecodeRows(seg.row_group, task.fields, seg.row_begin, seg.num_rows);
}

Result<std::shared_ptr<arrow::Table>> ReadRowGroupTable(const Catalog& catalog, int row_group,
                                                        const std::vector<std::string>& fields) {
  const RowGroupRef& rg = catalog.row_groups()[row_group];
  const CatalogFile& file = catalog.files()[rg.file];

  // A column this file lacks (added to the dataset later) is read as nulls.
  std::vector<int> leaves;
  for (const auto& field : fields) {
    auto it = file.fields.find(field);
    if (it == file.fields.end()) continue;
    leaves.insert(leaves.end(), it->second.leaves.begin(), it->second.leaves.end());
  }
  std::sort(leaves.begin(), leaves.end());
  leaves.erase(std::unique(leaves.begin(), leaves.end()), leaves.end());

  std::shared_ptr<arrow::Table> table;
  Status failure;
  if (!leaves.empty()) {
    auto input = file.Open();
    if (!input.ok()) {
      return MakeError(ErrorKind::kStorage,
                       "cannot open " + catalog.Where(rg) + ": " + input.status().message());
    }
    try {
      parquet::ArrowReaderProperties arrow_props;
      arrow_props.set_use_threads(false);           // our workers are the parallelism
      SetReaderProperties(*file.fs, &arrow_props);  // pre-buffer coalesced ranges if remote
      // Page buffers and arrays come from the recycling pool: the same sizes every row group.
      auto reader = parquet::ParquetFileReader::Open(
          *input, parquet::ReaderProperties(RecyclingPool::Get()), file.metadata);
      auto arrow_reader =
          parquet::arrow::FileReader::Make(RecyclingPool::Get(), std::move(reader), arrow_props);
      if (!arrow_reader.ok()) {
        failure = arrow_reader.status();
      } else {
        auto result = (*arrow_reader)->ReadRowGroup(rg.row_group, leaves);
        if (result.ok()) {
          table = *result;
        } else {
          failure = result.status();
        }
      }
    } catch (const parquet::ParquetStatusException& e) {
      failure = e.status();
    } catch (const parquet::ParquetException& e) {
      failure = Status::IOError(e.what());
    }
    if (!table) {
      std::string columns;
      for (const auto& f : fields) columns += (columns.empty() ? "'" : ", '") + f + "'";
      ErrorKind kind = ReadFailureKind(failure);
      std::string why = failure.message();
      if (kind == ErrorKind::kNotFound) {
        // The file was listed when the loader opened: it vanished since, a storage failure (as
        // when a local file cannot be opened any more), not a wrong source.
        kind = ErrorKind::kStorage;
        why = "the file no longer exists (deleted after the loader opened it?): " + why;
      }
      return MakeError(
          kind, std::string(kind == ErrorKind::kCorruptFile ? "cannot decode" : "cannot read") +
                    " column(s) " + columns + " of " + catalog.Where(rg) + ": " + why);
    }
  }
  // One column per requested field: a nested leaf extracted from its top-level column, and
  // every file's type converted to the dataset's unified type.
  std::vector<std::shared_ptr<arrow::Field>> out_fields;
  std::vector<std::shared_ptr<arrow::ChunkedArray>> out_columns;
  const std::string where = catalog.Where(rg);
  for (const auto& field : fields) {
    auto unified = catalog.schema()->GetFieldByName(field);
    if (!unified) {
      return MakeError(ErrorKind::kColumnNotFound,
                       "column '" + field + "' is not in the dataset (" + where + ")");
    }
    const std::shared_ptr<arrow::DataType>& type = unified->type();
    auto it = file.fields.find(field);
    if (it == file.fields.end()) {
      STOKER_ASSIGN_OR_RAISE(auto nulls, arrow::MakeArrayOfNull(type, rg.num_rows));
      out_fields.push_back(arrow::field(field, type));
      out_columns.push_back(std::make_shared<arrow::ChunkedArray>(std::move(nulls)));
      continue;
    }
    auto top = table ? table->GetColumnByName(it->second.top) : nullptr;
    if (!top) {
      return MakeError(ErrorKind::kCorruptFile,
                       "column '" + field + "' missing after decoding " + where);
    }
    if (it->second.path.empty() && top->type()->Equals(*type)) {
      out_fields.push_back(arrow::field(field, type));
      out_columns.push_back(std::move(top));
      continue;
    }
    std::vector<std::shared_ptr<arrow::Array>> chunks;
    for (const auto& chunk : top->chunks()) {
      auto leaf = ExtractPath(chunk, it->second.path);
      if (!leaf.ok()) {
        return MakeError(ErrorKind::kCorruptFile, "cannot read column '" + field + "' of " + where +
                                                      ": " + leaf.status().message());
      }
      STOKER_ASSIGN_OR_RAISE(auto conformed, ConformArray(*leaf, type, field, where));
      chunks.push_back(std::move(conformed));
    }
    out_fields.push_back(arrow::field(field, type));
    out_columns.push_back(std::make_shared<arrow::ChunkedArray>(std::move(chunks), type));
  }
  return arrow::Table::Make(arrow::schema(std::move(out_fields)), std::move(out_columns),
                            rg.num_rows);
}

Result<std::shared_ptr<arrow::Array>> FlattenColumn(const arrow::ChunkedArray& column,
                                                    bool keep_extensions, const std::string& field,
                                                    const std::string& where) {
  // Dictionaries and extensions are unwrapped chunk by chunk (chunks may carry different
  // dictionaries).
  std::vector<std::shared_ptr<arrow::Array>> chunks;
  for (auto chunk : column.chunks()) {
    if (chunk->type_id() == arrow::Type::EXTENSION && !keep_extensions) {
      chunk = static_cast<const arrow::ExtensionArray&>(*chunk).storage();
    }
    if (chunk->type_id() == arrow::Type::DICTIONARY) {
      ARROW_ASSIGN_OR_RAISE(
          chunk,
          MaterializeDictionary(static_cast<const arrow::DictionaryArray&>(*chunk), field, where));
    }
    chunks.push_back(std::move(chunk));
  }
  if (chunks.size() == 1) return std::move(chunks[0]);
  if (chunks.empty()) return arrow::MakeEmptyArray(column.type());
  return arrow::Concatenate(chunks);
}

Result<std::shared_ptr<arrow::Array>> Decoder::Flatten(const arrow::ChunkedArray& column,
                                                       const std::string& field,
                                                       const std::string& where) const {
  if (auto vocabulary = spec_->vocabularies.find(field); vocabulary != spec_->vocabularies.end()) {
    return ApplyVocabulary(*vocabulary->second, column, field, where);
  }
  return FlattenColumn(column, /*keep_extensions=*/false, field, where);
}

Result<DecodedColumns> Decoder::DecodeTransformed(int row_group, int64_t row_begin,
                                                  int64_t num_rows) const {
  const RowGroupRef& rg = catalog_->row_groups()[row_group];
  const std::string where = catalog_->Where(rg);
  // The transform sees the whole row group, whatever part of it the segment is: its output is
  // what the cache stores, and a function of the row group alone.
  STOKER_ASSIGN_OR_RAISE(auto input, ReadTransformInput(*catalog_, row_group, spec_->file_fields));
  STOKER_ASSIGN_OR_RAISE(
      auto output,
      RunUserTransform(*spec_->user_transform, spec_->transform_schema.get(), input, where));
  DecodedColumns out;
  for (const auto& field : spec_->decoded_fields) {
    auto column = output->GetColumnByName(field);
    ARROW_DCHECK(column);  // RunUserTransform checked the schema
    STOKER_ASSIGN_OR_RAISE(
        auto array, Flatten(arrow::ChunkedArray(column->Slice(row_begin, num_rows)), field, where));
    if (const ValueConversion* conversion = Conversion(field)) {
      STOKER_ASSIGN_OR_RAISE(array, ConvertValues(*conversion, array));
    }
    if (const ColumnSpec* chained = ChainedColumn(field); chained && chained->cached_ops > 0) {
      STOKER_ASSIGN_OR_RAISE(array, ApplyCachedOps(*chained, array, row_group, row_begin));
    }
    out.bytes += arrow::util::TotalBufferSize(*array->data());
    out.arrays.emplace_back(field, std::move(array));
  }
  return out;
}

std::vector<std::string> Decoder::DecodedNames(const std::vector<std::string>& fields) const {
  return spec_->user_transform ? spec_->decoded_fields : fields;
}

std::string Decoder::CachePrefix() const {
  if (!spec_->user_transform) return "";
  std::string prefix = "transform=" + spec_->user_transform->Fingerprint() + "(";
  for (const auto& field : spec_->file_fields) prefix += field + ",";
  return prefix + ")";
}

Result<DecodedColumns> Decoder::DecodeRows(int row_group, const std::vector<std::string>& fields,
                                           int64_t row_begin, int64_t num_rows) const {
  if (spec_->user_transform) return DecodeTransformed(row_group, row_begin, num_rows);
  DecodedColumns out;
  if (fields.empty()) return out;
  const RowGroupRef& rg = catalog_->row_groups()[row_group];
  STOKER_ASSIGN_OR_RAISE(auto table, ReadRowGroupTable(*catalog_, row_group, fields));
  for (const auto& field : fields) {
    auto chunked = table->GetColumnByName(field);
    if (!chunked) {
      return MakeError(ErrorKind::kCorruptFile,
                       "column '" + field + "' missing after decoding " + catalog_->Where(rg));
    }
    if (chunked->length() != rg.num_rows) {
      return MakeError(ErrorKind::kCorruptFile, "column '" + field + "' of " + catalog_->Where(rg) +
                                                    " has " + std::to_string(chunked->length()) +
                                                    " values, the footer says " +
                                                    std::to_string(rg.num_rows));
    }
    // Slice first so dictionaries are resolved for the segment's rows only.
    STOKER_ASSIGN_OR_RAISE(
        auto array, Flatten(*chunked->Slice(row_begin, num_rows), field, catalog_->Where(rg)));
    if (const ValueConversion* conversion = Conversion(field)) {
      STOKER_ASSIGN_OR_RAISE(array, ConvertValues(*conversion, array));
    }
    if (const ColumnSpec* chained = ChainedColumn(field); chained && chained->cached_ops > 0) {
      STOKER_ASSIGN_OR_RAISE(array, ApplyCachedOps(*chained, array, row_group, row_begin));
    }
    out.bytes += arrow::util::TotalBufferSize(*array->data());
    out.arrays.emplace_back(field, std::move(array));
  }
  return out;
}

Status Decoder::PrepareSource(const ColumnSpec& spec, const Segment& segment,
                              const std::shared_ptr<arrow::Array>& array, ColumnSource* out) const {
  const RowGroupRef& rg = catalog_->row_groups()[segment.row_group];
  // Counts below are of the segment's rows: say which rows when that is not the whole row group.
  const std::string where = segment.row_begin == 0 && segment.num_rows == rg.num_rows
                                ? catalog_->Where(rg)
                                : "rows " + std::to_string(segment.row_begin) + "-" +
                                      std::to_string(segment.row_begin + segment.num_rows - 1) +
                                      " of " + catalog_->Where(rg) + " (" +
                                      std::to_string(rg.num_rows) + " rows)";
  if (array->null_count() > 0 && !NullsCovered(spec)) {
    return MakeError(ErrorKind::kNullValues,
                     std::string(spec.feature_group.empty() ? "column '" : "feature column '") +
                         spec.name + "' has " + std::to_string(array->null_count()) +
                         " null(s) in " + where + NullAdvice(spec));
  }
  if (array->null_count() > 0 && FillNullApplies(spec) &&
      !IsRepresentable(spec.options.fill_null, spec.dtype)) {
    std::ostringstream value;
    value.precision(17);
    value << spec.options.fill_null;
    return MakeError(ErrorKind::kInvalidOption,
                     "column '" + spec.name + "' has nulls in " + where + " and fill_null=" +
                         value.str() + " cannot be stored exactly as " + DTypeName(spec.dtype) +
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
                                   (strings ? "strings" : "lists") + ", false in '" + spec.name +
                                   "_mask_" + std::to_string(l + 1) + "')");
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

Result<std::shared_ptr<DecodedItem>> Decoder::Assemble(const Plan& plan, int segment,
                                                       std::vector<DecodedColumns> parts) const {
  const Segment& seg = plan.segments[segment];
  const RowGroupRef& rg = catalog_->row_groups()[seg.row_group];
  auto item = std::make_shared<DecodedItem>();
  item->segment = segment;
  item->num_rows = seg.num_rows;
  item->padding = seg.padding;
  item->where = catalog_->Where(rg);
  item->row_begin = seg.row_begin;
  item->first_row_id = row_group_starts_[seg.row_group] + seg.row_begin;
  auto find = [&](const std::string& name) -> std::shared_ptr<arrow::Array> {
    for (const auto& part : parts) {
      for (const auto& [field, array] : part.arrays) {
        if (field == name) return array;
      }
    }
    return nullptr;
  };
  for (const auto& part : parts) {
    item->bytes += part.bytes;
    item->feature_blocks.insert(item->feature_blocks.end(), part.blocks.begin(), part.blocks.end());
  }
  auto add = [&](const ColumnSpec& spec, bool feature) -> Status {
    ColumnSource source;
    if (spec.layout == SourceLayout::kPartition) {
      const int key = spec.field_index - catalog_->num_file_fields();
      const std::string& value = catalog_->files()[rg.file].partition_values[key];
      source.partition_text = value;
      if (spec.vocabulary) {
        source.partition_int = spec.vocabulary->Lookup(value);
      } else if (spec.kind == ColumnKind::kDense) {
        source.partition_int = std::stoll(value);
      }
      if (feature && spec.kind == ColumnKind::kDense) {
        // A stacked partition feature is read like a column: the value on every row.
        ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::Buffer> values,
                              arrow::AllocateBuffer(seg.num_rows * sizeof(int64_t)));
        std::fill_n(reinterpret_cast<int64_t*>(values->mutable_data()), seg.num_rows,
                    source.partition_int);
        source.values = values->data();
        source.array = std::make_shared<arrow::Int64Array>(seg.num_rows, values);
      }
    } else {
      auto array = find(spec.Field());
      if (!array && feature) {
        item->sources.emplace_back();  // in a FeatureBlock (the cache's final layout)
        return Status::OK();
      }
      ARROW_DCHECK(array);
      STOKER_RETURN_NOT_OK(PrepareSource(spec, seg, array, &source));
    }
    item->sources.push_back(std::move(source));
    return Status::OK();
  };
  for (const auto& spec : spec_->columns) STOKER_RETURN_NOT_OK(add(spec, false));
  for (const auto& spec : spec_->features) STOKER_RETURN_NOT_OK(add(spec, true));
  return item;
}

}  // namespace stoker
