#include "batch/assembler.h"

#include <arrow/buffer.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/convert.h"

namespace stoker {
namespace {

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

// The rows of one batch resolved once: which distinct item and which row each comes from, and
// the runs of consecutive rows of one item (long in natural order, length 1 when shuffled).
struct RowIndex {
  std::vector<const DecodedItem*> items;
  std::vector<uint32_t> item;
  std::vector<int64_t> row;
  std::vector<std::pair<int64_t, int64_t>> runs;  // (first row in the batch, length)
  bool use_runs = false;

  explicit RowIndex(const std::vector<RowRef>& refs) {
    const int64_t count = static_cast<int64_t>(refs.size());
    item.resize(count);
    row.resize(count);
    uint32_t last = 0;
    for (int64_t i = 0; i < count; ++i) {
      const DecodedItem* it = refs[i].item;
      if (items.empty() || items[last] != it) {
        auto found = std::find(items.begin(), items.end(), it);
        if (found == items.end()) {
          items.push_back(it);
          found = items.end() - 1;
        }
        last = static_cast<uint32_t>(found - items.begin());
      }
      item[i] = last;
      row[i] = refs[i].row;
      if (i > 0 && item[i] == item[i - 1] && row[i] == row[i - 1] + 1) {
        ++runs.back().second;
      } else {
        runs.emplace_back(i, 1);
      }
    }
    use_runs = static_cast<int64_t>(runs.size()) * 8 <= count;
  }
};

// Fixed-width gather of batch rows [begin, end) with an optional element cast; `inner` elements
// per row, `out_stride` elements between output rows.
template <typename S, typename D>
void GatherFixed(const RowIndex& index, int slot, int64_t inner, D* out, int64_t out_stride,
                 const ColumnSpec& spec, int64_t begin, int64_t end) {
  const size_t num_items = index.items.size();
  const S* bases[64];
  std::vector<const S*> many;
  const S** base = bases;
  if (num_items > 64) {
    many.resize(num_items);
    base = many.data();
  }
  bool any_nulls = false;
  for (size_t k = 0; k < num_items; ++k) {
    const ColumnSource& src = index.items[k]->sources[slot];
    base[k] = reinterpret_cast<const S*>(src.values);
    any_nulls |= src.validity != nullptr;
  }
  if (index.use_runs && out_stride == inner) {
    for (const auto& [first, length] : index.runs) {
      const int64_t from = std::max(first, begin);
      const int64_t to = std::min(first + length, end);
      if (from >= to) continue;
      const S* src = base[index.item[from]] + index.row[from] * inner;
      D* dst = out + from * out_stride;
      if constexpr (std::is_same_v<S, D>) {
        std::memcpy(dst, src, (to - from) * inner * sizeof(D));
      } else {
        for (int64_t k = 0; k < (to - from) * inner; ++k) dst[k] = Convert<D>(src[k]);
      }
    }
  } else if (inner == 1) {
    for (int64_t i = begin; i < end; ++i) {
      out[i * out_stride] = Convert<D>(base[index.item[i]][index.row[i]]);
    }
  } else {
    for (int64_t i = begin; i < end; ++i) {
      const S* src = base[index.item[i]] + index.row[i] * inner;
      D* dst = out + i * out_stride;
      if constexpr (std::is_same_v<S, D>) {
        std::memcpy(dst, src, inner * sizeof(D));
      } else {
        for (int64_t k = 0; k < inner; ++k) dst[k] = Convert<D>(src[k]);
      }
    }
  }
  if (!any_nulls) return;
  const D fill_value = FromDouble<D>(spec.options.has_fill_null ? spec.options.fill_null : 0);
  for (int64_t i = begin; i < end; ++i) {
    const ColumnSource& src = index.items[index.item[i]]->sources[slot];
    if (src.IsValid(index.row[i])) continue;
    D* dst = out + i * out_stride;
    for (int64_t k = 0; k < inner; ++k) dst[k] = fill_value;
  }
}

template <typename D>
void GatherBool(const RowIndex& index, int slot, int64_t inner, D* out, int64_t out_stride,
                const ColumnSpec& spec, int64_t begin, int64_t end) {
  const D fill_value = FromDouble<D>(spec.options.has_fill_null ? spec.options.fill_null : 0);
  for (int64_t i = begin; i < end; ++i) {
    const ColumnSource& src = index.items[index.item[i]]->sources[slot];
    const int64_t row = index.row[i];
    const bool valid = src.IsValid(row);
    const int64_t first = src.bit_offset + row * inner;
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

void GatherFixedColumn(const RowIndex& index, int slot, const ColumnSpec& spec, DType out_dtype,
                       uint8_t* out, int64_t out_stride, int64_t begin, int64_t end) {
  VisitDType(out_dtype, [&](auto out_tag) {
    using D = decltype(out_tag);
    D* typed = reinterpret_cast<D*>(out);
    if (spec.layout == SourceLayout::kBool) {
      GatherBool<D>(index, slot, spec.inner, typed, out_stride, spec, begin, end);
      return;
    }
    VisitDType(spec.source_dtype, [&](auto source_tag) {
      using S = decltype(source_tag);
      GatherFixed<S, D>(index, slot, spec.inner, typed, out_stride, spec, begin, end);
    });
  });
}

// Rows per block of the feature transpose: a block of the [rows, F] matrix stays in L1/L2 while
// every feature column writes into it (one pass per column over all rows would evict and
// refetch each matrix line F times).
constexpr int64_t kFeatureBlockRows = 64;

}  // namespace

BatchAssembler::BatchAssembler(std::shared_ptr<const OutputSpec> spec, const LoaderOptions& options,
                               std::shared_ptr<SlabPool> pool)
    : spec_(std::move(spec)),
      pool_(std::move(pool)),
      features_dtype_(options.features_dtype),
      features_name_(options.features_name),
      padding_mask_(options.padding_mask),
      padding_name_(options.padding_name) {}

Status BatchAssembler::Prepare(DecodedItem* item) const {
  const int64_t num_features = static_cast<int64_t>(spec_->features.size());
  if (num_features == 0 || item->num_rows == 0) return Status::OK();
  const int64_t row_bytes = num_features * DTypeSize(features_dtype_);
  ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::Buffer> matrix,
                        arrow::AllocateBuffer(item->num_rows * row_bytes));
  std::vector<RowRef> refs(item->num_rows);
  for (int64_t r = 0; r < item->num_rows; ++r) refs[r] = {item, r};
  const RowIndex rows(refs);
  const int num_columns = static_cast<int>(spec_->columns.size());
  uint8_t* out = matrix->mutable_data();
  const int width = DTypeSize(features_dtype_);
  // Blocked transpose: a block of rows of the matrix stays in cache while each column fills it.
  for (int64_t begin = 0; begin < item->num_rows; begin += kFeatureBlockRows) {
    const int64_t end = std::min(item->num_rows, begin + kFeatureBlockRows);
    for (int64_t f = 0; f < num_features; ++f) {
      GatherFixedColumn(rows, num_columns + static_cast<int>(f), spec_->features[f],
                        features_dtype_, out + f * width, num_features, begin, end);
    }
  }
  item->feature_rows = std::move(matrix);
  // The feature columns are no longer read; free them (an output column keeps its own).
  for (int64_t f = 0; f < num_features; ++f) item->sources[num_columns + f] = ColumnSource{};
  return Status::OK();
}

Result<std::shared_ptr<Batch>> BatchAssembler::Assemble(int64_t index,
                                                        const std::vector<RowRef>& rows) const {
  const int64_t batch_rows = static_cast<int64_t>(rows.size());
  const RowIndex rows_index(rows);
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
        GatherFixedColumn(rows_index, c, spec, spec.dtype, column.values.data, spec.inner, 0,
                          batch_rows);
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
    // Whole rows of the items' feature matrices (built by Prepare).
    const int64_t row_bytes = num_features * DTypeSize(features_dtype_);
    for (const auto& [first, length] : rows_index.runs) {
      const DecodedItem* item = rows_index.items[rows_index.item[first]];
      std::memcpy(column.values.data + first * row_bytes,
                  item->feature_rows->data() + rows_index.row[first] * row_bytes,
                  length * row_bytes);
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
