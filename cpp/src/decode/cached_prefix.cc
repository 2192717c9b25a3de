#include "decode/cached_prefix.h"

#include <arrow/buffer.h>
#include <arrow/util/bit_util.h>

#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

#include "decode/column_source.h"
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

// The chain of a list column over every element of `array` (rows from `row_begin` of the row
// group `where` names): a large_list array of the chain's output, with the same row lengths and
// row nulls.
Result<std::shared_ptr<arrow::Array>> RunListChain(const std::string& where, const ColumnSpec& spec,
                                                   const std::shared_ptr<arrow::Array>& array,
                                                   int64_t row_begin) {
  const transform::Chain& chain = *spec.chain;
  const ListView list = ViewList(array);
  const int64_t rows = array->length();
  const int64_t width = DTypeSize(spec.source_dtype);
  int64_t total = 0;
  for (int64_t row = 0; row < rows; ++row) {
    if (array->IsValid(row)) total += list.End(row) - list.Begin(row);
  }
  STOKER_ASSIGN_OR_RAISE(auto offsets,
                         arrow::AllocateBuffer((rows + 1) * sizeof(int64_t), RecyclingPool::Get()));
  STOKER_ASSIGN_OR_RAISE(auto values, arrow::AllocateBuffer(total * width, RecyclingPool::Get()));
  auto* out_offsets = reinterpret_cast<int64_t*>(offsets->mutable_data());
  std::shared_ptr<arrow::Buffer> validity;
  if (array->null_count() > 0) {
    STOKER_ASSIGN_OR_RAISE(validity, arrow::AllocateBitmap(rows, RecyclingPool::Get()));
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
    STOKER_ASSIGN_OR_RAISE(element_validity, arrow::AllocateBitmap(total, RecyclingPool::Get()));
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
                        where + ", row " + std::to_string(row_begin + row) + ", element " +
                            std::to_string(k - list.Begin(row)) + ": " + status.message(),
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

}  // namespace

Result<std::shared_ptr<arrow::Array>> RunCachedPrefix(const Catalog& catalog,
                                                      const ColumnSpec& spec,
                                                      const std::shared_ptr<arrow::Array>& array,
                                                      int row_group, int64_t row_begin) {
  const RowGroupRef& rg = catalog.row_groups()[row_group];
  if (spec.layout == SourceLayout::kList) {
    return RunListChain(catalog.Where(rg), spec, array, row_begin);
  }
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
      PrepareSource(raw, RowsWhere(catalog, rg, row_begin, array->length()), array, &source));

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
    STOKER_ASSIGN_OR_RAISE(
        offsets, arrow::AllocateBuffer((rows + 1) * sizeof(int64_t), RecyclingPool::Get()));
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
      STOKER_ASSIGN_OR_RAISE(validity, arrow::AllocateBitmap(rows, RecyclingPool::Get()));
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
                       "column '" + spec.Field() + "' is null in " + catalog.Where(rg) + ", row " +
                           std::to_string(row_begin + row) +
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
      return Status(
          status.code(),
          catalog.Where(rg) + ", row " + std::to_string(row_begin + row) + ": " + status.message(),
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

}  // namespace stoker
