#include "batch/assembler.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace stoker {
namespace {

struct Half {
  uint16_t bits;
};

float HalfToFloat(uint16_t h) {
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
uint16_t FloatToHalf(float value) {
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
  }
}

template <typename D, typename S>
inline D Convert(S value) {
  if constexpr (std::is_same_v<S, Half>) {
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
  } else {
    return static_cast<D>(value);
  }
}

inline uint8_t BitAt(const uint8_t* bits, int64_t index) {
  return (bits[index >> 3] >> (index & 7)) & 1;
}

int64_t Align(int64_t bytes) { return (bytes + 63) / 64 * 64; }

// Where each tensor of the batch goes inside the slab.
struct Layout {
  int64_t total = 0;
  int64_t Reserve(int64_t bytes) {
    const int64_t at = total;
    total += Align(bytes);
    return at;
  }
};

Tensor MakeTensor(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

// Fixed-width gather with an optional element cast; `inner` elements per row.
template <typename S, typename D>
void GatherFixed(const std::vector<RowRef>& rows, int slot, int64_t inner, D* out,
                 int64_t out_stride, const ColumnSpec& spec) {
  const int64_t count = static_cast<int64_t>(rows.size());
  const bool fill = spec.options.has_fill_null;
  const D fill_value = FromDouble<D>(spec.options.fill_null);
  for (int64_t i = 0; i < count;) {
    const ColumnSource& src = rows[i].item->sources[slot];
    const S* values = reinterpret_cast<const S*>(src.values);
    // Runs of consecutive rows from one item (unshuffled order) copy in one go.
    int64_t run = 1;
    while (i + run < count && rows[i + run].item == rows[i].item &&
           rows[i + run].row == rows[i].row + run) {
      ++run;
    }
    if constexpr (std::is_same_v<S, D>) {
      if (out_stride == inner) {
        std::memcpy(out + i * inner, values + rows[i].row * inner, run * inner * sizeof(D));
      } else {
        for (int64_t r = 0; r < run; ++r) {
          const S* from = values + (rows[i].row + r) * inner;
          D* to = out + (i + r) * out_stride;
          for (int64_t k = 0; k < inner; ++k) to[k] = from[k];
        }
      }
    } else {
      for (int64_t r = 0; r < run; ++r) {
        const S* from = values + (rows[i].row + r) * inner;
        D* to = out + (i + r) * out_stride;
        for (int64_t k = 0; k < inner; ++k) to[k] = Convert<D>(from[k]);
      }
    }
    if (src.validity != nullptr) {
      for (int64_t r = 0; r < run; ++r) {
        if (src.IsValid(rows[i].row + r)) continue;
        D* to = out + (i + r) * out_stride;
        for (int64_t k = 0; k < inner; ++k) to[k] = fill ? fill_value : FromDouble<D>(0);
      }
    }
    i += run;
  }
}

template <typename D>
void GatherBool(const std::vector<RowRef>& rows, int slot, int64_t inner, D* out,
                int64_t out_stride, const ColumnSpec& spec) {
  const D fill_value = FromDouble<D>(spec.options.has_fill_null ? spec.options.fill_null : 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    const ColumnSource& src = rows[i].item->sources[slot];
    const bool valid = src.IsValid(rows[i].row);
    const int64_t first = src.bit_offset + rows[i].row * inner;
    for (int64_t k = 0; k < inner; ++k) {
      out[i * out_stride + k] = valid ? Convert<D>(BitAt(src.values, first + k)) : fill_value;
    }
  }
}

// `length` list values from child index `begin`: one copy, or one byte per bit for bool lists.
void CopyListValues(const ColumnSource& src, DType source_dtype, int64_t begin, int64_t length,
                    uint8_t* to) {
  if (source_dtype == DType::kBool) {
    for (int64_t k = 0; k < length; ++k) to[k] = BitAt(src.values, src.bit_offset + begin + k);
    return;
  }
  const int width = DTypeSize(source_dtype);
  std::memcpy(to, src.values + begin * width, length * width);
}

void GatherFixedColumn(const std::vector<RowRef>& rows, int slot, const ColumnSpec& spec,
                       DType out_dtype, uint8_t* out, int64_t out_stride) {
  VisitDType(out_dtype, [&](auto out_tag) {
    using D = decltype(out_tag);
    D* typed = reinterpret_cast<D*>(out);
    if (spec.layout == SourceLayout::kBool) {
      GatherBool<D>(rows, slot, spec.inner, typed, out_stride, spec);
      return;
    }
    VisitDType(spec.source_dtype, [&](auto source_tag) {
      using S = decltype(source_tag);
      GatherFixed<S, D>(rows, slot, spec.inner, typed, out_stride, spec);
    });
  });
}

}  // namespace

BatchAssembler::BatchAssembler(std::shared_ptr<const OutputSpec> spec, const LoaderOptions& options,
                               std::shared_ptr<SlabPool> pool)
    : spec_(std::move(spec)),
      pool_(std::move(pool)),
      features_dtype_(options.features_dtype),
      features_name_(options.features_name),
      padding_mask_(options.padding_mask),
      padding_name_(options.padding_name) {}

Result<std::shared_ptr<Batch>> BatchAssembler::Assemble(int64_t index,
                                                        const std::vector<RowRef>& rows) const {
  const int64_t batch_rows = static_cast<int64_t>(rows.size());
  auto batch = std::make_shared<Batch>();
  batch->index = index;
  batch->num_rows = batch_rows;

  // Pass 1: shapes and slab offsets.
  Layout layout;
  std::vector<int64_t> value_at, aux_at, mask_at;
  const int num_columns = static_cast<int>(spec_->columns.size());
  for (int c = 0; c < num_columns; ++c) {
    const ColumnSpec& spec = spec_->columns[c];
    OutputColumn column;
    column.name = spec.name;
    column.kind = spec.kind;
    column.annotation = spec.annotation;
    int64_t aux = -1;
    switch (spec.kind) {
      case ColumnKind::kDense: {
        std::vector<int64_t> shape = {batch_rows};
        shape.insert(shape.end(), spec.inner_shape.begin(), spec.inner_shape.end());
        column.values = MakeTensor(spec.dtype, std::move(shape));
        break;
      }
      case ColumnKind::kPadded:
      case ColumnKind::kRagged:
      case ColumnKind::kStrings: {
        int64_t total = 0;
        int64_t longest = 0;
        for (const RowRef& ref : rows) {
          const ColumnSource& src = ref.item->sources[c];
          int64_t length;
          if (spec.layout == SourceLayout::kPartition) {
            length = static_cast<int64_t>(src.partition_text.size());
          } else {
            length = src.IsValid(ref.row) ? src.End(ref.row) - src.Begin(ref.row) : 0;
          }
          total += length;
          longest = std::max(longest, length);
        }
        if (spec.kind == ColumnKind::kPadded) {
          column.values = MakeTensor(spec.dtype, {batch_rows, longest});
          column.lengths = MakeTensor(DType::kInt64, {batch_rows});
          aux = layout.Reserve(column.lengths.num_bytes());
        } else {
          column.values = MakeTensor(spec.dtype, {total});
          column.offsets = MakeTensor(DType::kInt64, {batch_rows + 1});
          aux = layout.Reserve(column.offsets.num_bytes());
        }
        break;
      }
    }
    value_at.push_back(layout.Reserve(column.values.num_bytes()));
    aux_at.push_back(aux);
    column.has_mask = spec.options.null_mask;
    if (column.has_mask) column.mask = MakeTensor(DType::kBool, {batch_rows});
    mask_at.push_back(column.has_mask ? layout.Reserve(batch_rows) : -1);
    batch->columns.push_back(std::move(column));
  }
  const int64_t num_features = static_cast<int64_t>(spec_->features.size());
  int64_t features_at = -1;
  if (num_features > 0) {
    features_at = layout.Reserve(batch_rows * num_features * DTypeSize(features_dtype_));
  }
  const int64_t padding_at = padding_mask_ ? layout.Reserve(batch_rows) : -1;

  std::shared_ptr<Slab> slab = pool_->Acquire(layout.total);
  uint8_t* base = slab->data();
  auto bind = [&](Tensor* tensor, int64_t at) {
    tensor->data = base + at;
    tensor->owner = slab;
  };

  // Pass 2: fill.
  for (int c = 0; c < num_columns; ++c) {
    const ColumnSpec& spec = spec_->columns[c];
    OutputColumn& column = batch->columns[c];
    bind(&column.values, value_at[c]);
    if (column.has_mask) {
      bind(&column.mask, mask_at[c]);
      for (int64_t i = 0; i < batch_rows; ++i) {
        column.mask.data[i] = rows[i].item->sources[c].IsValid(rows[i].row);
      }
    }
    if (spec.layout == SourceLayout::kPartition) {
      if (spec.kind == ColumnKind::kDense) {
        auto* out = reinterpret_cast<int64_t*>(column.values.data);
        for (int64_t i = 0; i < batch_rows; ++i) out[i] = rows[i].item->sources[c].partition_int;
      } else {
        bind(&column.offsets, aux_at[c]);
        auto* offsets = reinterpret_cast<int64_t*>(column.offsets.data);
        offsets[0] = 0;
        for (int64_t i = 0; i < batch_rows; ++i) {
          const std::string& text = rows[i].item->sources[c].partition_text;
          std::memcpy(column.values.data + offsets[i], text.data(), text.size());
          offsets[i + 1] = offsets[i] + static_cast<int64_t>(text.size());
        }
      }
      continue;
    }
    switch (spec.kind) {
      case ColumnKind::kDense:
        GatherFixedColumn(rows, c, spec, spec.dtype, column.values.data, spec.inner);
        break;
      case ColumnKind::kRagged:
      case ColumnKind::kStrings: {
        bind(&column.offsets, aux_at[c]);
        auto* offsets = reinterpret_cast<int64_t*>(column.offsets.data);
        const int width = DTypeSize(spec.dtype);
        offsets[0] = 0;
        for (int64_t i = 0; i < batch_rows; ++i) {
          const ColumnSource& src = rows[i].item->sources[c];
          int64_t length = 0;
          if (src.IsValid(rows[i].row)) {
            const int64_t begin = src.Begin(rows[i].row);
            length = src.End(rows[i].row) - begin;
            CopyListValues(src, spec.source_dtype, begin, length,
                           column.values.data + offsets[i] * width);
          }
          offsets[i + 1] = offsets[i] + length;
        }
        break;
      }
      case ColumnKind::kPadded: {
        bind(&column.lengths, aux_at[c]);
        auto* lengths = reinterpret_cast<int64_t*>(column.lengths.data);
        const int64_t longest = column.values.shape[1];
        VisitDType(spec.dtype, [&](auto tag) {
          using T = decltype(tag);
          const T pad = FromDouble<T>(spec.options.pad_value);
          T* out = reinterpret_cast<T*>(column.values.data);
          for (int64_t i = 0; i < batch_rows; ++i) {
            const ColumnSource& src = rows[i].item->sources[c];
            int64_t length = 0;
            if (src.IsValid(rows[i].row)) {
              const int64_t begin = src.Begin(rows[i].row);
              length = src.End(rows[i].row) - begin;
              CopyListValues(src, spec.source_dtype, begin, length,
                             reinterpret_cast<uint8_t*>(out + i * longest));
            }
            for (int64_t k = length; k < longest; ++k) out[i * longest + k] = pad;
            lengths[i] = length;
          }
        });
        break;
      }
    }
  }

  if (num_features > 0) {
    OutputColumn column;
    column.name = features_name_;
    column.values = MakeTensor(features_dtype_, {batch_rows, num_features});
    bind(&column.values, features_at);
    const int width = DTypeSize(features_dtype_);
    for (int64_t f = 0; f < num_features; ++f) {
      GatherFixedColumn(rows, num_columns + static_cast<int>(f), spec_->features[f],
                        features_dtype_, column.values.data + f * width, num_features);
    }
    batch->columns.push_back(std::move(column));
  }
  if (padding_mask_) {
    OutputColumn column;
    column.name = padding_name_;
    column.values = MakeTensor(DType::kBool, {batch_rows});
    bind(&column.values, padding_at);
    for (int64_t i = 0; i < batch_rows; ++i) column.values.data[i] = rows[i].item->padding;
    batch->columns.push_back(std::move(column));
  }
  return batch;
}

}  // namespace stoker
