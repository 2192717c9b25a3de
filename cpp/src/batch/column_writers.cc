#include "batch/column_writers.h"

#include <arrow/buffer.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "decode/packed_rows.h"
#include "util/convert.h"
#include "util/prefetch.h"
#include "util/recycling_pool.h"
#include "util/stream_copy.h"
#include "util/transpose.h"

namespace stoker {
namespace {

int64_t Align(int64_t bytes) { return (bytes + 63) / 64 * 64; }

void SetShape(Tensor* tensor, DType dtype, std::vector<int64_t> shape) {
  tensor->dtype = dtype;
  tensor->shape = std::move(shape);
}

// Copies the column's name and meaning into its output column (the values writer does this).
void Describe(const ColumnSpec& spec, OutputColumn* column) {
  column->name = spec.name;
  column->kind = spec.kind;
  column->annotation = spec.annotation;
}

// Rows a shuffled fixed-width gather asks for ahead of the one it copies: a window's columns
// (the narrow set's: 4 x 512 KB) miss the nearer caches. The narrow set's batch stage per epoch:
// cold 79-90 ms with none, 52-68 ms at 128; warm 89-123 -> 48-55 ms; 16, 32 and 64 ahead gained
// less (A/B, 3 runs of 9 epochs each).
constexpr int64_t kGatherAhead = 128;

// Fixed-width gather of batch rows [begin, end) with an optional element cast; `inner` elements
// per row, `out_stride` elements between output rows.
template <typename S, typename D>
void GatherFixed(const BatchRows& rows, int slot, int64_t inner, D* out, int64_t out_stride,
                 const ColumnSpec& spec, int64_t begin, int64_t end) {
  const size_t num_items = rows.items.size();
  const S* bases[64];
  std::vector<const S*> many;
  const S** base = bases;
  if (num_items > 64) {
    many.resize(num_items);
    base = many.data();
  }
  bool any_nulls = false;
  for (size_t k = 0; k < num_items; ++k) {
    const ColumnSource& src = rows.items[k]->sources[slot];
    base[k] = reinterpret_cast<const S*>(src.values);
    any_nulls |= src.validity != nullptr;
  }
  if (rows.use_runs && out_stride == inner) {
    for (const auto& [first, length] : rows.runs) {
      const int64_t from = std::max(first, begin);
      const int64_t to = std::min(first + length, end);
      if (from >= to) continue;
      const S* src = base[rows.item[from]] + rows.row[from] * inner;
      D* dst = out + from * out_stride;
      if constexpr (std::is_same_v<S, D>) {
        std::memcpy(dst, src, (to - from) * inner * sizeof(D));
      } else {
        for (int64_t k = 0; k < (to - from) * inner; ++k) dst[k] = Convert<D>(src[k]);
      }
    }
  } else if (inner == 1) {
    // Shuffled rows are a cache miss each: the row kGatherAhead on is asked for first, so that
    // many misses are in flight at once.
    int64_t i = begin;
    for (; i + kGatherAhead < end; ++i) {
      PrefetchLine(base[rows.item[i + kGatherAhead]] + rows.row[i + kGatherAhead]);
      out[i * out_stride] = Convert<D>(base[rows.item[i]][rows.row[i]]);
    }
    for (; i < end; ++i) out[i * out_stride] = Convert<D>(base[rows.item[i]][rows.row[i]]);
  } else {
    const bool stream = std::is_same_v<S, D> && inner * int64_t{sizeof(D)} >= kStreamCopyBytes;
    for (int64_t i = begin; i < end; ++i) {
      const S* src = base[rows.item[i]] + rows.row[i] * inner;
      D* dst = out + i * out_stride;
      if constexpr (std::is_same_v<S, D>) {
        if (stream) {
          StreamCopy(dst, src, inner * int64_t{sizeof(D)});
        } else {
          std::memcpy(dst, src, inner * sizeof(D));
        }
      } else {
        for (int64_t k = 0; k < inner; ++k) dst[k] = Convert<D>(src[k]);
      }
    }
    if (stream) StreamFence();
  }
  if (!any_nulls) return;
  const D fill_value = FromDouble<D>(spec.options.has_fill_null ? spec.options.fill_null : 0);
  for (int64_t i = begin; i < end; ++i) {
    if (rows.Source(i, slot).IsValid(rows.row[i])) continue;
    D* dst = out + i * out_stride;
    for (int64_t k = 0; k < inner; ++k) dst[k] = fill_value;
  }
}

template <typename D>
void GatherBool(const BatchRows& rows, int slot, int64_t inner, D* out, int64_t out_stride,
                const ColumnSpec& spec, int64_t begin, int64_t end) {
  const D fill_value = FromDouble<D>(spec.options.has_fill_null ? spec.options.fill_null : 0);
  for (int64_t i = begin; i < end; ++i) {
    const ColumnSource& src = rows.Source(i, slot);
    const int64_t row = rows.row[i];
    const bool valid = src.IsValid(row);
    const int64_t first = src.bit_offset + row * inner;
    for (int64_t k = 0; k < inner; ++k) {
      out[i * out_stride + k] = valid ? Convert<D>(BitAt(src.values, first + k)) : fill_value;
    }
  }
}

// Gathers rows [begin, end) of a fixed-width or bool column as `out_dtype`.
void GatherFixedColumn(const BatchRows& rows, int slot, const ColumnSpec& spec, DType out_dtype,
                       uint8_t* out, int64_t out_stride, int64_t begin, int64_t end) {
  VisitDType(out_dtype, [&](auto out_tag) {
    using D = decltype(out_tag);
    D* typed = reinterpret_cast<D*>(out);
    if (spec.layout == SourceLayout::kBool) {
      GatherBool<D>(rows, slot, spec.inner, typed, out_stride, spec, begin, end);
      return;
    }
    VisitDType(spec.source_dtype, [&](auto source_tag) {
      using S = decltype(source_tag);
      GatherFixed<S, D>(rows, slot, spec.inner, typed, out_stride, spec, begin, end);
    });
  });
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

// Elements of a list or string row (0 when null).
int64_t ListLength(const ColumnSource& src, int64_t row) {
  return src.IsValid(row) ? src.End(row) - src.Begin(row) : 0;
}

// The source of each distinct item of a batch in one array: a row's source is then one load
// from the batch's item index, not three (items, its sources, the slot).
class ItemSources {
 public:
  ItemSources(const BatchRows& rows, int slot) {
    const size_t count = rows.items.size();
    if (count > kInline) {
      many_.resize(count);
      sources_ = many_.data();
    }
    for (size_t k = 0; k < count; ++k) sources_[k] = &rows.items[k]->sources[slot];
  }
  // Not copyable: sources_ may point into this object's own inline_.
  ItemSources(const ItemSources&) = delete;
  ItemSources& operator=(const ItemSources&) = delete;
  const ColumnSource& operator[](uint32_t item) const { return *sources_[item]; }

 private:
  static constexpr size_t kInline = 64;
  const ColumnSource* inline_[kInline];
  std::vector<const ColumnSource*> many_;
  const ColumnSource** sources_ = inline_;
};

// Rows ahead of the one being copied whose list values are prefetched. A shuffled batch reads
// each row's values from a random place of its item (megabytes apart): without it, every row's
// copy waits on memory before the next row's loads start.
constexpr int64_t kPrefetchRows = 8;

// Prefetches the values of batch row `i` of a list column (`width` bytes per value; 0: bits).
// Inlined into the per-row loops that call it.
[[gnu::always_inline]] inline void PrefetchListRow(const BatchRows& rows,
                                                   const ItemSources& sources, int64_t i,
                                                   int width) {
  const ColumnSource& src = sources[rows.item[i]];
  const int64_t row = rows.row[i];
  if (!src.IsValid(row)) return;
  const int64_t begin = src.Begin(row);
  const int64_t end = src.End(row);
  const uint8_t* from;
  int64_t bytes;
  if (width == 0) {
    from = src.values + (src.bit_offset + begin) / 8;
    bytes = (end - begin + 7) / 8 + 1;
  } else {
    from = src.values + begin * width;
    bytes = (end - begin) * width;
  }
  PrefetchLines(from, bytes);
}

// The per-row vectors of the last BatchRows this thread built, kept for the next: a batch of
// 65,536 shuffled rows needs 1.8 MB of them, which malloc returned to the kernel and took back
// zeroed every batch (40% of a narrow cold epoch's page faults, 15% of its CPU in faults).
struct RowsScratch {
  std::vector<const DecodedItem*> items;
  std::vector<uint32_t> item;
  std::vector<int64_t> row;
  std::vector<std::pair<int64_t, int64_t>> runs;
};
thread_local RowsScratch rows_scratch;

}  // namespace

BatchRows::BatchRows(const std::vector<RowRef>& refs) {
  Start(static_cast<int64_t>(refs.size()));
  uint32_t last = 0;
  for (int64_t i = 0; i < size(); ++i) {
    const DecodedItem* it = refs[i].item;
    if (items.empty() || items[last] != it) last = Intern(it);
    Set(i, last, refs[i].row);
  }
  Finish();
}

BatchRows::BatchRows(const std::vector<RowStretch>& stretches) {
  int64_t count = 0;
  for (const RowStretch& stretch : stretches) count += stretch.end - stretch.begin;
  Start(count);
  constexpr uint32_t kNone = ~0u;
  std::vector<uint32_t> index;  // per item of the window: its index in `items`, or kNone
  int64_t i = 0;
  for (const RowStretch& stretch : stretches) {
    const WindowRows& window = *stretch.window;
    index.assign(window.items.size(), kNone);
    auto item_index = [&](size_t k) {
      if (index[k] == kNone) index[k] = Intern(window.items[k]);
      return index[k];
    };
    const uint32_t* order = window.order.data();
    if (window.starts.size() == 1) {
      const uint32_t only = item_index(0);
      for (int64_t p = stretch.begin; p < stretch.end; ++p) Set(i++, only, order[p]);
      continue;
    }
    for (int64_t p = stretch.begin; p < stretch.end; ++p) {
      const int64_t at = order[p];
      const size_t k = std::upper_bound(window.starts.begin(), window.starts.end(), at) -
                       window.starts.begin() - 1;
      Set(i++, item_index(k), at - window.starts[k]);
    }
  }
  Finish();
}

void BatchRows::Start(int64_t count) {
  items = std::move(rows_scratch.items);
  item = std::move(rows_scratch.item);
  row = std::move(rows_scratch.row);
  runs = std::move(rows_scratch.runs);
  items.clear();
  runs.clear();
  runs.reserve(count);
  item.resize(count);
  row.resize(count);
}

uint32_t BatchRows::Intern(const DecodedItem* it) {
  auto found = std::find(items.begin(), items.end(), it);
  if (found == items.end()) {
    items.push_back(it);
    found = items.end() - 1;
  }
  return static_cast<uint32_t>(found - items.begin());
}

BatchRows::~BatchRows() {
  rows_scratch = RowsScratch{std::move(items), std::move(item), std::move(row), std::move(runs)};
}

void SlabLayout::Place(Tensor* tensor) {
  placed_.emplace_back(tensor, total_);
  total_ += Align(tensor->num_bytes());
}

void SlabLayout::Bind(const std::shared_ptr<Slab>& slab) const {
  uint8_t* base = slab->data();
  for (const auto& [tensor, offset] : placed_) {
    tensor->data = base + offset;
    tensor->owner = slab;
  }
}

// --- DenseWriter ---------------------------------------------------------------------------

DenseWriter::DenseWriter(ColumnSpec spec, int slot, int output)
    : ColumnWriter(output), spec_(std::move(spec)), slot_(slot) {}

// A dense [B, row_shape...] values tensor of the spec's dtype, placed in the slab.
void SizeDense(const ColumnSpec& spec, const std::vector<int64_t>& row_shape, int64_t rows,
               OutputColumn* column, SlabLayout* layout) {
  Describe(spec, column);
  std::vector<int64_t> shape = {rows};
  shape.insert(shape.end(), row_shape.begin(), row_shape.end());
  SetShape(&column->values, spec.dtype, std::move(shape));
  layout->Place(&column->values);
}

void DenseWriter::Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const {
  SizeDense(spec_, spec_.inner_shape, rows.size(), column, layout);
}

Status DenseWriter::Fill(const BatchRows& rows, OutputColumn* column) const {
  GatherFixedColumn(rows, slot_, spec_, spec_.dtype, column->values.data, spec_.inner, 0,
                    rows.size());
  return Status::OK();
}

// --- PaddedWriter --------------------------------------------------------------------------

PaddedWriter::PaddedWriter(ColumnSpec spec, int slot, int output)
    : ColumnWriter(output), spec_(std::move(spec)), slot_(slot) {}

namespace {

// The longest list of each level of a batch of lists of lists: the rows' (level 0) first, the
// innermost (the values) last.
std::vector<int64_t> Longest(const BatchRows& rows, int slot, int levels) {
  std::vector<int64_t> longest(levels + 1, 0);
  for (int64_t i = 0; i < rows.size(); ++i) {
    const ColumnSource& src = rows.Source(i, slot);
    if (!src.IsValid(rows.row[i])) continue;
    int64_t begin = src.Begin(rows.row[i]);
    int64_t end = src.End(rows.row[i]);
    longest[0] = std::max(longest[0], end - begin);
    for (int l = 0; l < levels; ++l) {
      const ColumnSource::Level& level = src.levels[l];
      for (int64_t k = begin; k < end; ++k) {
        longest[l + 1] = std::max(longest[l + 1], level.At(k + 1) - level.At(k));
      }
      begin = level.At(begin);
      end = level.At(end);
    }
  }
  return longest;
}

// Writes items [begin, end) of level `depth` (0: a row's elements) at flat position `prefix` of
// the dims before it, then their children, down to the values.
void FillPaddedLevel(const ColumnSource& src, DType dtype, const std::vector<int64_t>& longest,
                     int depth, int64_t begin, int64_t end, int64_t prefix,
                     const std::vector<int64_t*>& lengths, uint8_t* values) {
  const int levels = static_cast<int>(longest.size()) - 1;
  if (depth == levels) {
    CopyListValues(src, dtype, begin, end - begin,
                   values + prefix * longest[levels] * DTypeSize(dtype));
    return;
  }
  const ColumnSource::Level& level = src.levels[depth];
  for (int64_t k = begin; k < end; ++k) {
    const int64_t at = prefix * longest[depth] + (k - begin);
    lengths[depth][at] = level.At(k + 1) - level.At(k);
    FillPaddedLevel(src, dtype, longest, depth + 1, level.At(k), level.At(k + 1), at, lengths,
                    values);
  }
}

}  // namespace

void PaddedWriter::Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const {
  Describe(spec_, column);
  if (spec_.list_levels > 0) {
    const std::vector<int64_t> longest = Longest(rows, slot_, spec_.list_levels);
    std::vector<int64_t> shape = {rows.size()};
    SetShape(&column->lengths, DType::kInt64, shape);
    layout->Place(&column->lengths);
    column->inner_lengths.resize(spec_.list_levels);
    for (int l = 0; l < spec_.list_levels; ++l) {
      shape.push_back(longest[l]);
      SetShape(&column->inner_lengths[l], DType::kInt64, shape);
      layout->Place(&column->inner_lengths[l]);
    }
    shape.push_back(longest.back());
    SetShape(&column->values, spec_.dtype, shape);
    layout->Place(&column->values);
    return;
  }
  int64_t longest = 0;
  for (int64_t i = 0; i < rows.size(); ++i) {
    longest = std::max(longest, ListLength(rows.Source(i, slot_), rows.row[i]));
  }
  SetShape(&column->lengths, DType::kInt64, {rows.size()});
  SetShape(&column->values, spec_.dtype, {rows.size(), longest});
  layout->Place(&column->lengths);
  layout->Place(&column->values);
}

Status PaddedWriter::Fill(const BatchRows& rows, OutputColumn* column) const {
  auto* lengths = reinterpret_cast<int64_t*>(column->lengths.data);
  if (spec_.list_levels > 0) {
    const int levels = spec_.list_levels;
    std::vector<int64_t> longest(column->values.shape.begin() + 1, column->values.shape.end());
    std::vector<int64_t*> inner(levels);
    for (int l = 0; l < levels; ++l) {
      inner[l] = reinterpret_cast<int64_t*>(column->inner_lengths[l].data);
      std::fill(inner[l], inner[l] + column->inner_lengths[l].num_elements(), 0);
    }
    VisitDType(spec_.dtype, [&](auto tag) {
      using T = decltype(tag);
      T* out = reinterpret_cast<T*>(column->values.data);
      std::fill(out, out + column->values.num_elements(), FromDouble<T>(spec_.options.pad_value));
    });
    for (int64_t i = 0; i < rows.size(); ++i) {
      const ColumnSource& src = rows.Source(i, slot_);
      lengths[i] = 0;
      if (!src.IsValid(rows.row[i])) continue;
      const int64_t begin = src.Begin(rows.row[i]);
      const int64_t end = src.End(rows.row[i]);
      lengths[i] = end - begin;
      // Level 0's items are the row's elements, at rows i of the [B, L0] lengths.
      for (int64_t k = begin; k < end; ++k) {
        const ColumnSource::Level& level = src.levels[0];
        const int64_t at = i * longest[0] + (k - begin);
        inner[0][at] = level.At(k + 1) - level.At(k);
        FillPaddedLevel(src, spec_.source_dtype, longest, 1, level.At(k), level.At(k + 1), at,
                        inner, column->values.data);
      }
    }
    return Status::OK();
  }
  // Lists are never cast: the source's values have the output's dtype (bool lists: bits that
  // become one byte each).
  const int64_t longest = column->values.shape[1];
  const ItemSources sources(rows, slot_);
  const bool bits = spec_.source_dtype == DType::kBool;
  const int64_t count = rows.size();
  VisitDType(spec_.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T pad = FromDouble<T>(spec_.options.pad_value);
    // All-zero pad bytes (0, and 0.0 but not -0.0): memset, as wide as the machine allows.
    unsigned char pad_bytes[sizeof(T)];
    std::memcpy(pad_bytes, &pad, sizeof(T));
    const bool zero_pad =
        std::all_of(pad_bytes, pad_bytes + sizeof(T), [](unsigned char b) { return b == 0; });
    T* out = reinterpret_cast<T*>(column->values.data);
    for (int64_t i = 0; i < count; ++i) {
      if (i + kPrefetchRows < count) {
        PrefetchListRow(rows, sources, i + kPrefetchRows, bits ? 0 : sizeof(T));
      }
      const ColumnSource& src = sources[rows.item[i]];
      const int64_t row = rows.row[i];
      T* dst = out + i * longest;
      int64_t length = 0;
      if (src.IsValid(row)) {
        const int64_t begin = src.Begin(row);
        length = src.End(row) - begin;
        if (bits) {
          CopyListValues(src, DType::kBool, begin, length, reinterpret_cast<uint8_t*>(dst));
        } else {
          std::memcpy(dst, src.values + begin * sizeof(T), length * sizeof(T));
        }
      }
      if (zero_pad) {
        std::memset(dst + length, 0, (longest - length) * sizeof(T));
      } else {
        std::fill_n(dst + length, longest - length, pad);
      }
      lengths[i] = length;
    }
  });
  return Status::OK();
}

// --- OffsetsWriter -------------------------------------------------------------------------

OffsetsWriter::OffsetsWriter(ColumnSpec spec, int slot, int output)
    : ColumnWriter(output), spec_(std::move(spec)), slot_(slot) {}

// The range of the next level's items under items [begin, end) of `level`.
std::pair<int64_t, int64_t> Descend(const ColumnSource::Level& level, int64_t begin, int64_t end) {
  return {level.At(begin), level.At(end)};
}

// Items at each level (rows' elements first, the values last) of a batch of lists of lists.
std::vector<int64_t> LevelCounts(const BatchRows& rows, int slot, int levels) {
  std::vector<int64_t> counts(levels + 1, 0);
  for (int64_t i = 0; i < rows.size(); ++i) {
    const ColumnSource& src = rows.Source(i, slot);
    if (!src.IsValid(rows.row[i])) continue;
    std::pair<int64_t, int64_t> range = {src.Begin(rows.row[i]), src.End(rows.row[i])};
    counts[0] += range.second - range.first;
    for (int l = 0; l < levels; ++l) {
      range = Descend(src.levels[l], range.first, range.second);
      counts[l + 1] += range.second - range.first;
    }
  }
  return counts;
}

void OffsetsWriter::Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const {
  Describe(spec_, column);
  if (spec_.list_levels > 0) {
    const std::vector<int64_t> counts = LevelCounts(rows, slot_, spec_.list_levels);
    SetShape(&column->offsets, DType::kInt64, {rows.size() + 1});
    layout->Place(&column->offsets);
    column->inner_offsets.resize(spec_.list_levels);
    for (int l = 0; l < spec_.list_levels; ++l) {
      SetShape(&column->inner_offsets[l], DType::kInt64, {counts[l] + 1});
      layout->Place(&column->inner_offsets[l]);
    }
    SetShape(&column->values, spec_.dtype, {counts.back()});
    layout->Place(&column->values);
    return;
  }
  int64_t total = 0;
  for (int64_t i = 0; i < rows.size(); ++i) total += ListLength(rows.Source(i, slot_), rows.row[i]);
  SetShape(&column->offsets, DType::kInt64, {rows.size() + 1});
  SetShape(&column->values, spec_.dtype, {total});
  layout->Place(&column->offsets);
  layout->Place(&column->values);
}

Status OffsetsWriter::Fill(const BatchRows& rows, OutputColumn* column) const {
  auto* offsets = reinterpret_cast<int64_t*>(column->offsets.data);
  const int width = DTypeSize(spec_.dtype);
  offsets[0] = 0;
  if (spec_.list_levels > 0) {
    // Each level's offsets are rebased to the batch: out[l] indexes level l + 1 (the values
    // after the last); `next[l]` counts the items of level l written so far.
    const int levels = spec_.list_levels;
    std::vector<int64_t*> out(levels);
    for (int l = 0; l < levels; ++l) {
      out[l] = reinterpret_cast<int64_t*>(column->inner_offsets[l].data);
      out[l][0] = 0;
    }
    std::vector<int64_t> next(levels + 1, 0);
    for (int64_t i = 0; i < rows.size(); ++i) {
      const ColumnSource& src = rows.Source(i, slot_);
      if (src.IsValid(rows.row[i])) {
        const int64_t begin = src.Begin(rows.row[i]);
        const int64_t end = src.End(rows.row[i]);
        // Level 0's items are [begin, end): write their offsets into level 1, and so on down.
        std::pair<int64_t, int64_t> range = {begin, end};
        for (int l = 0; l < levels; ++l) {
          const ColumnSource::Level& level = src.levels[l];
          for (int64_t k = range.first; k < range.second; ++k) {
            const int64_t length = level.At(k + 1) - level.At(k);
            out[l][next[l] + 1] = out[l][next[l]] + length;
            ++next[l];
          }
          range = Descend(level, range.first, range.second);
        }
        const int64_t length = range.second - range.first;
        CopyListValues(src, spec_.source_dtype, range.first, length,
                       column->values.data + next[levels] * width);
        next[levels] += length;
        offsets[i + 1] = offsets[i] + (end - begin);
      } else {
        offsets[i + 1] = offsets[i];
      }
    }
    return Status::OK();
  }
  const ItemSources sources(rows, slot_);
  const bool bits = spec_.source_dtype == DType::kBool;
  const int64_t count = rows.size();
  for (int64_t i = 0; i < count; ++i) {
    if (i + kPrefetchRows < count) {
      PrefetchListRow(rows, sources, i + kPrefetchRows, bits ? 0 : width);
    }
    const ColumnSource& src = sources[rows.item[i]];
    const int64_t row = rows.row[i];
    int64_t length = 0;
    if (src.IsValid(row)) {
      const int64_t begin = src.Begin(row);
      length = src.End(row) - begin;
      uint8_t* dst = column->values.data + offsets[i] * width;
      if (bits) {
        CopyListValues(src, DType::kBool, begin, length, dst);
      } else {
        std::memcpy(dst, src.values + begin * width, length * width);
      }
    }
    offsets[i + 1] = offsets[i] + length;
  }
  return Status::OK();
}

// --- PartitionWriter -----------------------------------------------------------------------

PartitionWriter::PartitionWriter(ColumnSpec spec, int slot, int output)
    : ColumnWriter(output), spec_(std::move(spec)), slot_(slot) {}

void PartitionWriter::Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const {
  Describe(spec_, column);
  if (spec_.kind == ColumnKind::kDense) {
    SetShape(&column->values, spec_.dtype, {rows.size()});
    layout->Place(&column->values);
    return;
  }
  int64_t total = 0;
  for (int64_t i = 0; i < rows.size(); ++i) {
    total += static_cast<int64_t>(rows.Source(i, slot_).partition_text.size());
  }
  SetShape(&column->offsets, DType::kInt64, {rows.size() + 1});
  SetShape(&column->values, spec_.dtype, {total});
  layout->Place(&column->offsets);
  layout->Place(&column->values);
}

Status PartitionWriter::Fill(const BatchRows& rows, OutputColumn* column) const {
  if (spec_.kind == ColumnKind::kDense) {
    auto* out = reinterpret_cast<int64_t*>(column->values.data);
    for (int64_t i = 0; i < rows.size(); ++i) out[i] = rows.Source(i, slot_).partition_int;
    return Status::OK();
  }
  auto* offsets = reinterpret_cast<int64_t*>(column->offsets.data);
  offsets[0] = 0;
  for (int64_t i = 0; i < rows.size(); ++i) {
    const std::string& text = rows.Source(i, slot_).partition_text;
    std::memcpy(column->values.data + offsets[i], text.data(), text.size());
    offsets[i + 1] = offsets[i] + static_cast<int64_t>(text.size());
  }
  return Status::OK();
}

// --- MaskWriter ----------------------------------------------------------------------------

void MaskWriter::Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const {
  column->has_mask = true;
  SetShape(&column->mask, DType::kBool, {rows.size()});
  layout->Place(&column->mask);
}

Status MaskWriter::Fill(const BatchRows& rows, OutputColumn* column) const {
  uint8_t* out = column->mask.data;
  for (int64_t i = 0; i < rows.size(); ++i) out[i] = rows.Source(i, slot_).IsValid(rows.row[i]);
  return Status::OK();
}

// --- ElementMaskWriter ---------------------------------------------------------------------

ElementMaskWriter::ElementMaskWriter(const ColumnSpec& spec, int slot, int output)
    : ColumnWriter(output), spec_(spec), slot_(slot), levels_(ElementMaskLevels(spec)) {}

void ElementMaskWriter::Size(const BatchRows& rows, OutputColumn* column,
                             SlabLayout* layout) const {
  // The values writer placed its tensors already: each mask takes the shape of its level's.
  column->element_masks.resize(levels_);
  for (int l = 0; l < levels_; ++l) {
    const bool inner = l < spec_.list_levels;  // an inner list or string level, not the values
    std::vector<int64_t> shape;
    switch (spec_.kind) {
      case ColumnKind::kPadded:
        shape = inner ? column->inner_lengths[l].shape : column->values.shape;
        break;
      case ColumnKind::kRagged:
      case ColumnKind::kStrings:
        shape = {inner ? column->inner_offsets[l].shape[0] - 1 : column->values.shape[0]};
        break;
      case ColumnKind::kDense:
        shape = column->values.shape;
        break;
    }
    SetShape(&column->element_masks[l], DType::kBool, std::move(shape));
    layout->Place(&column->element_masks[l]);
  }
}

namespace {

// Padded masks of items [begin, end) of level `depth` (0: a row's elements) at flat position
// `prefix` of the dims before it, then of their children; `dims` are the values' [L0, ..., Lk].
void FillPaddedMasks(const ColumnSource& src, const std::vector<int64_t>& dims, int list_levels,
                     int depth, int64_t begin, int64_t end, int64_t prefix,
                     const std::vector<uint8_t*>& masks) {
  for (int64_t k = begin; k < end; ++k) {
    const int64_t at = prefix * dims[depth] + (k - begin);
    if (depth < list_levels) {
      const ColumnSource::Level& level = src.levels[depth];
      masks[depth][at] = level.IsValid(k);
      FillPaddedMasks(src, dims, list_levels, depth + 1, level.At(k), level.At(k + 1), at, masks);
    } else {
      masks[depth][at] = src.IsValueValid(k);
    }
  }
}

}  // namespace

Status ElementMaskWriter::Fill(const BatchRows& rows, OutputColumn* column) const {
  std::vector<uint8_t*> masks(levels_);
  for (int l = 0; l < levels_; ++l) masks[l] = column->element_masks[l].data;
  if (spec_.kind == ColumnKind::kDense) {  // fixed-size lists: [B, n...]
    const int64_t inner = spec_.inner;
    for (int64_t i = 0; i < rows.size(); ++i) {
      const ColumnSource& src = rows.Source(i, slot_);
      const int64_t row = rows.row[i];
      uint8_t* out = masks[0] + i * inner;
      if (!src.IsValid(row)) {
        std::memset(out, 0, inner);
      } else if (src.element_valid != nullptr) {
        std::memcpy(out, src.element_valid + row * inner, inner);
      } else {
        std::memset(out, 1, inner);
      }
    }
    return Status::OK();
  }
  if (spec_.kind == ColumnKind::kPadded) {
    for (int l = 0; l < levels_; ++l) {
      std::memset(masks[l], 0, column->element_masks[l].num_elements());
    }
    const std::vector<int64_t> dims(column->values.shape.begin() + 1, column->values.shape.end());
    for (int64_t i = 0; i < rows.size(); ++i) {
      const ColumnSource& src = rows.Source(i, slot_);
      if (!src.IsValid(rows.row[i])) continue;
      FillPaddedMasks(src, dims, spec_.list_levels, 0, src.Begin(rows.row[i]), src.End(rows.row[i]),
                      i, masks);
    }
    return Status::OK();
  }
  // Ragged: each level's items in batch order, as the values writer concatenates them.
  std::vector<int64_t> next(levels_, 0);
  for (int64_t i = 0; i < rows.size(); ++i) {
    const ColumnSource& src = rows.Source(i, slot_);
    if (!src.IsValid(rows.row[i])) continue;
    std::pair<int64_t, int64_t> range = {src.Begin(rows.row[i]), src.End(rows.row[i])};
    for (int l = 0; l < levels_; ++l) {
      if (l < spec_.list_levels) {
        const ColumnSource::Level& level = src.levels[l];
        for (int64_t k = range.first; k < range.second; ++k) masks[l][next[l]++] = level.IsValid(k);
        range = Descend(level, range.first, range.second);
      } else {
        for (int64_t k = range.first; k < range.second; ++k) {
          masks[l][next[l]++] = src.IsValueValid(k);
        }
      }
    }
  }
  return Status::OK();
}

// --- FeaturesWriter ------------------------------------------------------------------------

FeaturesWriter::FeaturesWriter(std::vector<ColumnSpec> features, int first_slot,
                               FeatureGroupSpec group, int group_index, int output)
    : ColumnWriter(output),
      features_(std::move(features)),
      first_slot_(first_slot),
      group_(std::move(group)),
      group_index_(group_index) {}

FeaturesWriter::FeaturesWriter(std::vector<ColumnSpec> features, int first_slot, DType dtype,
                               std::string name, int output)
    : FeaturesWriter(std::move(features), first_slot,
                     FeatureGroupSpec{std::move(name), dtype, false, 0, 0}, 0, output) {}

Status FeaturesWriter::Prepare(DecodedItem* item) const {
  const int64_t num_features = static_cast<int64_t>(features_.size());
  if (num_features == 0 || item->num_rows == 0) return Status::OK();
  const size_t slots = static_cast<size_t>(group_index_) + 1;
  if (item->feature_rows.size() < slots) item->feature_rows.resize(slots);
  if (item->feature_masks.size() < slots) item->feature_masks.resize(slots);
  const DType dtype = group_.dtype;
  const int width = DTypeSize(dtype);
  // Features the cache delivered in their final layout (FeatureBlock): no transpose for them.
  std::vector<const FeatureBlock*> blocks;
  std::vector<bool> in_block(num_features, false);
  int64_t covered = 0;
  for (const FeatureBlock& block : item->feature_blocks) {
    if (block.group != group_index_) continue;
    blocks.push_back(&block);
    for (int64_t f = block.first; f < block.first + block.count; ++f) in_block[f] = true;
    covered += block.count;
  }
  // Wholly covered: batches copy from the blocks (zero copy from a warm cache entry).
  if (covered == num_features) return Status::OK();
  ARROW_ASSIGN_OR_RAISE(
      std::shared_ptr<arrow::Buffer> matrix,
      arrow::AllocateBuffer(item->num_rows * num_features * width, RecyclingPool::Get()));
  std::vector<RowRef> refs(item->num_rows);
  for (int64_t r = 0; r < item->num_rows; ++r) refs[r] = {item, r};
  const BatchRows rows(refs);
  uint8_t* out = matrix->mutable_data();
  // Features copied bit for bit (4 bytes, no cast, no nulls): four in a row take TransposeFour.
  std::vector<bool> plain(num_features, false);
  for (int64_t f = 0; f < num_features; ++f) {
    plain[f] = width == 4 && !in_block[f] && features_[f].layout != SourceLayout::kBool &&
               features_[f].source_dtype == dtype &&
               item->sources[first_slot_ + f].validity == nullptr;
  }
  // Blocked transpose: a block of rows of the matrix stays in cache while each column fills it.
  for (int64_t begin = 0; begin < item->num_rows; begin += kFeatureBlockRows) {
    const int64_t end = std::min(item->num_rows, begin + kFeatureBlockRows);
    for (int64_t f = 0; f < num_features; ++f) {
      if (in_block[f]) continue;
      if (f + 4 <= num_features && plain[f] && plain[f + 1] && plain[f + 2] && plain[f + 3]) {
        const uint32_t* columns[4];
        for (int k = 0; k < 4; ++k) {
          columns[k] = reinterpret_cast<const uint32_t*>(item->sources[first_slot_ + f + k].values);
        }
        TransposeFour(columns, reinterpret_cast<uint32_t*>(out) + f, num_features, begin, end);
        f += 3;
        continue;
      }
      const ColumnSource& src = item->sources[first_slot_ + f];
      if (features_[f].layout == SourceLayout::kBool || src.validity != nullptr) {
        GatherFixedColumn(rows, first_slot_ + static_cast<int>(f), features_[f], dtype,
                          out + f * width, num_features, begin, end);
        continue;
      }
      // The common case, without BatchRows' per-row indirection: one item, consecutive rows.
      VisitDType(dtype, [&](auto out_tag) {
        using D = decltype(out_tag);
        D* dst = reinterpret_cast<D*>(out) + f;
        VisitDType(features_[f].source_dtype, [&](auto source_tag) {
          using S = decltype(source_tag);
          const S* values = reinterpret_cast<const S*>(src.values);
          for (int64_t r = begin; r < end; ++r) dst[r * num_features] = Convert<D>(values[r]);
        });
      });
    }
  }
  for (const FeatureBlock* block : blocks) {
    const int64_t block_row_bytes = block->count * width;
    for (int64_t r = 0; r < item->num_rows; ++r) {
      std::memcpy(out + (r * num_features + block->first) * width,
                  block->rows + r * block_row_bytes, block_row_bytes);
    }
  }
  item->feature_rows[group_index_] = std::move(matrix);
  if (group_.null_mask) {
    ARROW_ASSIGN_OR_RAISE(
        std::shared_ptr<arrow::Buffer> mask,
        arrow::AllocateBuffer(item->num_rows * num_features, RecyclingPool::Get()));
    uint8_t* valid = mask->mutable_data();
    for (int64_t f = 0; f < num_features; ++f) {
      const ColumnSource& src = item->sources[first_slot_ + f];
      for (int64_t r = 0; r < item->num_rows; ++r) {
        valid[r * num_features + f] = in_block[f] || src.IsValid(r);  // blocks hold no nulls
      }
    }
    item->feature_masks[group_index_] = std::move(mask);
  }
  // The feature columns are no longer read; free them (an output column keeps its own).
  for (int64_t f = 0; f < num_features; ++f) item->sources[first_slot_ + f] = ColumnSource{};
  return Status::OK();
}

void FeaturesWriter::Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const {
  column->name = group_.name;
  const int64_t num_features = static_cast<int64_t>(features_.size());
  SetShape(&column->values, group_.dtype, {rows.size(), num_features});
  layout->Place(&column->values);
  if (group_.null_mask) {
    column->has_mask = true;
    SetShape(&column->mask, DType::kBool, {rows.size(), num_features});
    layout->Place(&column->mask);
  }
}

Status FeaturesWriter::Fill(const BatchRows& rows, OutputColumn* column) const {
  // Whole rows of the items' feature matrices (built by Prepare), or of their feature blocks.
  const int64_t num_features = static_cast<int64_t>(features_.size());
  const int width = DTypeSize(group_.dtype);
  const int64_t row_bytes = num_features * width;
  // Shuffled rows are cache (and TLB) misses each: the rows of the run kAhead runs on are asked
  // for while this one is copied (a long run's next lines the hardware fetches by itself). 4
  // ahead: the wide set's warm batches 51-64 -> 34-47 ms of CPU per epoch; 8 and 16 no better.
  constexpr size_t kAhead = 4;
  auto prefetch = [&](size_t run) {
    const auto& [first, length] = rows.runs[run];
    const DecodedItem& item = rows.Item(first);
    const int64_t row = rows.row[first];
    const int64_t rows_ahead = std::min<int64_t>(length, 2);
    if (static_cast<size_t>(group_index_) < item.feature_rows.size() &&
        item.feature_rows[group_index_] != nullptr) {
      PrefetchLines(item.feature_rows[group_index_]->data() + row * row_bytes,
                    rows_ahead * row_bytes);
      return;
    }
    for (const FeatureBlock& block : item.feature_blocks) {
      if (block.group != group_index_) continue;
      const int64_t block_row_bytes = block.count * width;
      PrefetchLines(block.rows + row * block_row_bytes, rows_ahead * block_row_bytes);
    }
  };
  const size_t num_runs = rows.runs.size();
  for (size_t r = 0; r < std::min(num_runs, kAhead); ++r) prefetch(r);
  for (size_t r = 0; r < num_runs; ++r) {
    if (r + kAhead < num_runs) prefetch(r + kAhead);
    const auto& [first, length] = rows.runs[r];
    const DecodedItem& item = rows.Item(first);
    const int64_t row = rows.row[first];
    uint8_t* const dst = column->values.data + first * row_bytes;
    const bool has_matrix = static_cast<size_t>(group_index_) < item.feature_rows.size() &&
                            item.feature_rows[group_index_] != nullptr;
    if (has_matrix) {
      std::memcpy(dst, item.feature_rows[group_index_]->data() + row * row_bytes,
                  length * row_bytes);
    } else {
      for (const FeatureBlock& block : item.feature_blocks) {
        if (block.group != group_index_) continue;
        const int64_t block_row_bytes = block.count * width;
        const uint8_t* src = block.rows + row * block_row_bytes;
        if (block.count == num_features) {
          std::memcpy(dst, src, length * row_bytes);
          continue;
        }
        for (int64_t k = 0; k < length; ++k) {
          std::memcpy(dst + k * row_bytes + block.first * width, src + k * block_row_bytes,
                      block_row_bytes);
        }
      }
    }
    if (group_.null_mask) {
      uint8_t* const mask = column->mask.data + first * num_features;
      if (has_matrix) {
        std::memcpy(mask, item.feature_masks[group_index_]->data() + row * num_features,
                    length * num_features);
      } else {
        std::memset(mask, 1, length * num_features);  // blocks hold no nulls
      }
    }
  }
  return Status::OK();
}

// --- PaddingFlagWriter ---------------------------------------------------------------------

void PaddingFlagWriter::Size(const BatchRows& rows, OutputColumn* column,
                             SlabLayout* layout) const {
  column->name = name_;
  SetShape(&column->values, DType::kBool, {rows.size()});
  layout->Place(&column->values);
}

Status PaddingFlagWriter::Fill(const BatchRows& rows, OutputColumn* column) const {
  uint8_t* out = column->values.data;
  for (int64_t i = 0; i < rows.size(); ++i) out[i] = rows.Item(i).padding;
  return Status::OK();
}

// --- TransformWriter -----------------------------------------------------------------------

namespace {

// A batch tensor's owner that keeps the decoded item's column (its buffers) alive.
class LentSlab final : public Slab {
 public:
  LentSlab(std::shared_ptr<arrow::Array> array, uint8_t* data, int64_t bytes)
      : array_(std::move(array)), data_(data), bytes_(bytes) {}
  uint8_t* data() override { return data_; }
  int64_t capacity() const override { return bytes_; }

 private:
  const std::shared_ptr<arrow::Array> array_;
  uint8_t* const data_;
  const int64_t bytes_;
};

}  // namespace

TransformWriter::TransformWriter(std::vector<ColumnSpec> specs, int slot, int output, bool lend)
    : ColumnWriter(output), specs_(std::move(specs)), slot_(slot), lend_(lend) {
  const ColumnSpec& head = specs_.front();
  row_bytes_ = DTypeSize(head.dtype);
  for (int64_t dim : head.output_shape) row_bytes_ *= dim;
  gather_only_ = head.chain && head.cached_ops >= head.chain->size() && specs_.size() == 1 &&
                 !head.options.on_error_zero && head.layout == SourceLayout::kFixed &&
                 head.source_dtype == head.dtype &&
                 head.inner * DTypeSize(head.dtype) == row_bytes_;
}

const uint8_t* TransformWriter::Lendable(const BatchRows& rows) const {
  if (!lend_ || !gather_only_ || rows.items.size() != 1 || rows.runs.size() != 1) return nullptr;
  const DecodedItem& item = *rows.items[0];
  const ColumnSource& source = item.sources[slot_];
  // At least a quarter of the item's rows: a batch kept by the user keeps at most four times
  // its bytes (and never more than one task's rows).
  if (source.array == nullptr || source.validity != nullptr || rows.size() * 4 < item.num_rows) {
    return nullptr;
  }
  const uint8_t* data = source.values + rows.row[0] * row_bytes_;
  // Aligned like a slab's tensors.
  return reinterpret_cast<uintptr_t>(data) % 64 == 0 ? data : nullptr;
}

void TransformWriter::Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const {
  if (const uint8_t* lent = Lendable(rows)) {
    const ColumnSpec& head = specs_.front();
    Describe(head, column);
    std::vector<int64_t> shape = {rows.size()};
    shape.insert(shape.end(), head.output_shape.begin(), head.output_shape.end());
    SetShape(&column->values, head.dtype, std::move(shape));
    // The item's buffer is this item's alone and read-only to the pipeline from here on.
    column->values.data = const_cast<uint8_t*>(lent);
    column->values.owner = std::make_shared<LentSlab>(
        rows.Source(0, slot_).array, column->values.data, rows.size() * row_bytes_);
    return;
  }
  for (size_t j = 0; j < specs_.size(); ++j) {
    const ColumnSpec& spec = specs_[j];
    SizeDense(spec, spec.output_shape, rows.size(), column + j, layout);
    if (WritesValid(spec)) {  // ColumnInfo::added_keys names it
      column[j].has_valid = true;
      SetShape(&column[j].valid, DType::kBool, {rows.size()});
      layout->Place(&column[j].valid);
    }
  }
}

Status TransformWriter::Fill(const BatchRows& rows, OutputColumn* column) const {
  const ColumnSpec& head = specs_.front();
  const transform::Chain& head_chain = *head.chain;
  const size_t cached = head.cached_ops;
  // Ops [cached, shared) are the same in every output's chain: run once per row.
  const size_t shared = std::max(cached, head.shared_ops);
  const bool zero = head.options.on_error_zero;
  const size_t outputs = specs_.size();
  std::vector<int64_t> row_bytes(outputs);
  for (size_t j = 0; j < outputs; ++j) {
    row_bytes[j] = DTypeSize(specs_[j].dtype);
    for (int64_t dim : specs_[j].output_shape) row_bytes[j] *= dim;
  }
  // A chain run entirely before the cache leaves nothing per row but a copy (none when Size
  // lent the item's rows): gather it like a plain column (a tight loop keeps many cache misses
  // in flight; the Value path does not).
  if (gather_only_) {
    if (Lendable(rows) != nullptr) return Status::OK();
    bool nulls = false;
    for (const DecodedItem* item : rows.items) nulls |= item->sources[slot_].validity != nullptr;
    if (!nulls) {
      GatherFixedColumn(rows, slot_, head, head.dtype, column[0].values.data, head.inner, 0,
                        rows.size());
      return Status::OK();
    }
  }
  transform::Value common;
  transform::Value value;
  transform::Value scratch;
  int64_t applied = 0;
  int64_t substituted = 0;
  // Under on_error="zero" a failed row (here, or a null the cached prefix left for it) becomes
  // zeros with valid = false; otherwise the error names the file, row group, row and column.
  auto fail = [&](size_t j, int64_t i, const DecodedItem& item, int64_t row, const Status& status) {
    if (zero) {
      std::memset(column[j].values.data + i * row_bytes[j], 0, row_bytes[j]);
      column[j].valid.data[i] = 0;
      ++substituted;
      return Status::OK();
    }
    return Status(
        status.code(),
        item.where + ", row " + std::to_string(item.row_begin + row) + ": " + status.message(),
        status.detail());
  };
  for (int64_t i = 0; i < rows.size(); ++i) {
    const DecodedItem& item = rows.Item(i);
    const int64_t row = rows.row[i];
    if (zero) {
      for (size_t j = 0; j < outputs; ++j) column[j].valid.data[i] = 1;
    }
    const transform::Value in = TransformInput(head, rows.Source(i, slot_), row);
    transform::RowContext context;
    context.seed = rows.seed;
    context.epoch = static_cast<uint64_t>(rows.epoch);
    context.row = static_cast<uint64_t>(item.first_row_id + row);
    // The value every output continues from (after the shared ops), or why there is none.
    const transform::Value* start = &in;
    Status status;
    if (in.is_null() && (cached >= head_chain.size() || !head_chain.op(cached).AcceptsNull())) {
      status = MakeError(ErrorKind::kNullValues,
                         "column '" + head.Field() +
                             "' is null; its transforms need a value (start the chain with "
                             "fill_null)");
    } else if (shared > cached) {
      status = head_chain.Apply(context, in, &common, &scratch, cached, shared);
      start = &common;
    }
    if (!status.ok()) {
      for (size_t j = 0; j < outputs; ++j) STOKER_RETURN_NOT_OK(fail(j, i, item, row, status));
      continue;
    }
    for (size_t j = 0; j < outputs; ++j) {
      const ColumnSpec& spec = specs_[j];
      const transform::Value* result = start;
      uint8_t* const slot = column[j].values.data + i * row_bytes[j];
      if (shared < spec.chain->size()) {
        value.Lend(slot, row_bytes[j]);  // the last op writes the row in place (no copy)
        Status step = spec.chain->Apply(context, *start, &value, &scratch, shared);
        value.Lend(nullptr, 0);
        ++applied;
        if (!step.ok()) {
          STOKER_RETURN_NOT_OK(fail(j, i, item, row, step));
          continue;
        }
        result = &value;
      }
      if (result->is_null() || result->size_bytes() != row_bytes[j]) {
        STOKER_RETURN_NOT_OK(
            fail(j, i, item, row,
                 MakeError(ErrorKind::kCorruptFile, "the transforms of column '" + spec.name +
                                                        "' produced " + result->type().ToString() +
                                                        " where a fixed shape is needed")));
        continue;
      }
      if (result->data() != slot) std::memcpy(slot, result->data(), row_bytes[j]);
    }
  }
  if (head.counters) {
    head.counters->batch_rows += applied;
    head.counters->substituted_rows += substituted;
  }
  return Status::OK();
}

// --- PackedWriter --------------------------------------------------------------------------

PackedWriter::PackedWriter(std::vector<ColumnSpec> specs, int first_slot, int packed_index,
                           int output)
    : ColumnWriter(output), specs_(std::move(specs)), packed_index_(packed_index) {
  run_ = MakePackedRun(specs_, 0, static_cast<int>(specs_.size()));
  run_.first = first_slot;
}

void PackedWriter::Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const {
  for (size_t c = 0; c < specs_.size(); ++c) {
    SizeDense(specs_[c], specs_[c].inner_shape, rows.size(), column + c, layout);
  }
}

Status PackedWriter::Fill(const BatchRows& rows, OutputColumn* column) const {
  const size_t num_items = rows.items.size();
  const int num_columns = static_cast<int>(specs_.size());
  const int64_t n = rows.size();
  // Per item: its packed rows, or null (its rows are read from its columns).
  std::vector<const uint8_t*> packed(num_items, nullptr);
  bool any_unpacked = false;
  bool any_packed = false;
  for (size_t k = 0; k < num_items; ++k) {
    const DecodedItem& item = *rows.items[k];
    const size_t index = static_cast<size_t>(packed_index_);
    if (index < item.packed_rows.size() && item.packed_rows[index] != nullptr) {
      packed[k] = item.packed_rows[index]->data();
      any_packed = true;
    } else {
      any_unpacked = true;
    }
  }
  if (!any_packed) {
    // Every row from its columns (decoded this epoch): DenseWriter's prefetching gathers.
    for (int c = 0; c < num_columns; ++c) {
      GatherFixedColumn(rows, run_.first + c, specs_[c], specs_[c].dtype, column[c].values.data, 1,
                        0, n);
    }
    return Status::OK();
  }
  // Where each row of a block is (its packed row, or null), found once for all the columns; the
  // next block's rows are found, and asked for, while this one is copied.
  const uint8_t* block_buffers[2][kFeatureBlockRows];
  const uint8_t** block_rows = block_buffers[0];
  const uint8_t** next_rows = block_buffers[1];
  auto locate = [&](int64_t begin, int64_t end, const uint8_t** to) {
    for (int64_t i = begin; i < end; ++i) {
      const uint8_t* item_rows = packed[rows.item[i]];
      to[i - begin] = item_rows != nullptr ? item_rows + rows.row[i] * run_.row_bytes : nullptr;
    }
  };
  locate(0, std::min(n, kFeatureBlockRows), block_rows);
  for (int64_t begin = 0; begin < n; begin += kFeatureBlockRows) {
    const int64_t end = std::min(n, begin + kFeatureBlockRows);
    const int64_t count = end - begin;
    const int64_t next_end = std::min(n, end + kFeatureBlockRows);
    locate(end, next_end, next_rows);
    for (int64_t i = 0; i < next_end - end; ++i) {
      if (next_rows[i] == nullptr) continue;
      PrefetchLines(next_rows[i], run_.row_bytes);
    }
    for (int c = 0; c < num_columns; ++c) {
      uint8_t* out = column[c].values.data + begin * run_.widths[c];
      const int64_t offset = run_.offsets[c];
      VisitWidth(run_.widths[c], [&](auto width) {
        constexpr int kWidth = decltype(width)::value;
        if (!any_unpacked) {
          for (int64_t i = 0; i < count; ++i) {
            CopyWidth<kWidth>(block_rows[i] + offset, out + i * kWidth);
          }
          return;
        }
        for (int64_t i = 0; i < count; ++i) {
          const uint8_t* from =
              block_rows[i] != nullptr
                  ? block_rows[i] + offset
                  : rows.Source(begin + i, run_.first + c).values + rows.row[begin + i] * kWidth;
          CopyWidth<kWidth>(from, out + i * kWidth);
        }
      });
    }
    std::swap(block_rows, next_rows);
  }
  if (!any_unpacked) return Status::OK();
  // Nulls of unpacked items: fill_null, or zero (DenseWriter's rule).
  for (int c = 0; c < num_columns; ++c) {
    const ColumnSpec& spec = specs_[c];
    VisitDType(spec.dtype, [&](auto tag) {
      using D = decltype(tag);
      const D fill_value = FromDouble<D>(spec.options.has_fill_null ? spec.options.fill_null : 0);
      D* out = reinterpret_cast<D*>(column[c].values.data);
      for (int64_t i = 0; i < n; ++i) {
        if (packed[rows.item[i]] != nullptr) continue;
        if (!rows.Source(i, run_.first + c).IsValid(rows.row[i])) out[i] = fill_value;
      }
    });
  }
  return Status::OK();
}

// --- MakeColumnWriters ---------------------------------------------------------------------

ColumnWriters MakeColumnWriters(const OutputSpec& spec, const WriterOptions& options) {
  ColumnWriters out;
  auto add = [&](std::unique_ptr<const ColumnWriter> writer) {
    out.writers.push_back(std::move(writer));
  };
  const int num_columns = static_cast<int>(spec.columns.size());
  const bool lend = options.lend;
  const std::vector<PackedRun> runs = options.pack ? PackedRuns(spec) : std::vector<PackedRun>{};
  size_t next_run = 0;
  for (int c = 0; c < num_columns; ++c) {
    const ColumnSpec& column = spec.columns[c];
    if (next_run < runs.size() && runs[next_run].first == c) {
      const PackedRun& run = runs[next_run];
      std::vector<ColumnSpec> members(spec.columns.begin() + c,
                                      spec.columns.begin() + c + run.count);
      add(std::make_unique<PackedWriter>(std::move(members), c, static_cast<int>(next_run++),
                                         out.num_outputs));
      out.num_outputs += run.count;
      c += run.count - 1;
      continue;
    }
    const int output = out.num_outputs++;
    if (column.layout == SourceLayout::kPartition) {
      add(std::make_unique<PartitionWriter>(column, c, output));
    } else if (column.group >= 0) {
      // One writer for all the outputs of the group (adjacent columns and slots).
      const int first_slot = c;
      std::vector<ColumnSpec> members = {column};
      while (c + 1 < num_columns && spec.columns[c + 1].group == column.group) {
        members.push_back(spec.columns[++c]);
        ++out.num_outputs;
      }
      add(std::make_unique<TransformWriter>(std::move(members), first_slot, output));
      continue;
    } else if (column.chain && column.layout != SourceLayout::kList) {
      // A list's chain ran in the decoder: its writer is the list's own.
      add(std::make_unique<TransformWriter>(column, c, output, lend));
    } else {
      switch (column.kind) {
        case ColumnKind::kDense:
          add(std::make_unique<DenseWriter>(column, c, output));
          break;
        case ColumnKind::kPadded:
          add(std::make_unique<PaddedWriter>(column, c, output));
          break;
        case ColumnKind::kRagged:
        case ColumnKind::kStrings:
          add(std::make_unique<OffsetsWriter>(column, c, output));
          break;
      }
    }
    if (column.options.null_mask) add(std::make_unique<MaskWriter>(c, output));
    if (ElementMaskLevels(column) > 0) add(std::make_unique<ElementMaskWriter>(column, c, output));
  }
  for (size_t g = 0; g < spec.feature_groups.size(); ++g) {
    const FeatureGroupSpec& group = spec.feature_groups[g];
    std::vector<ColumnSpec> members(spec.features.begin() + group.first,
                                    spec.features.begin() + group.first + group.count);
    add(std::make_unique<FeaturesWriter>(std::move(members),
                                         num_columns + static_cast<int>(group.first), group,
                                         static_cast<int>(g), out.num_outputs++));
  }
  if (options.padding_mask) {
    add(std::make_unique<PaddingFlagWriter>(options.padding_name, out.num_outputs++));
  }
  return out;
}

}  // namespace stoker
