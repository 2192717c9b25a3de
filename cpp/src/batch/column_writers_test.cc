#include "batch/column_writers.h"

#include <arrow/array.h>
#include <arrow/buffer.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "batch/assembler.h"
#include "batch/slab_pool.h"
#include "decode/packed_rows.h"
#include "util/recycling_pool.h"
#include "util/stream_copy.h"

namespace stoker {
namespace {

// Runs one writer over `refs` the way BatchAssembler does: size, one slab, fill.
struct Written {
  std::shared_ptr<Slab> slab;
  OutputColumn column;
  int64_t slab_bytes = 0;
};

Written Write(const ColumnWriter& writer, const std::vector<RowRef>& refs) {
  static std::shared_ptr<SlabPool> pool = SlabPool::Make(0);
  const BatchRows rows(refs);
  Written out;
  SlabLayout layout;
  writer.Size(rows, &out.column, &layout);
  out.slab_bytes = layout.total_bytes();
  out.slab = pool->Acquire(layout.total_bytes());
  std::memset(out.slab->data(), 0xAB, layout.total_bytes());  // poison: every byte is written
  layout.Bind(out.slab);
  EXPECT_TRUE(writer.Fill(rows, &out.column).ok());
  return out;
}

template <typename T>
std::vector<T> Values(const Tensor& tensor) {
  const T* data = reinterpret_cast<const T*>(tensor.data);
  return std::vector<T>(data, data + tensor.num_elements());
}

// A validity bitmap (LSB first) from bools.
std::vector<uint8_t> Bitmap(const std::vector<int>& valid) {
  std::vector<uint8_t> bits((valid.size() + 7) / 8, 0);
  for (size_t i = 0; i < valid.size(); ++i) {
    if (valid[i]) bits[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
  }
  return bits;
}

ColumnSpec Spec(const std::string& name, SourceLayout layout, ColumnKind kind, DType source,
                DType dtype) {
  ColumnSpec spec;
  spec.name = name;
  spec.layout = layout;
  spec.kind = kind;
  spec.source_dtype = source;
  spec.dtype = dtype;
  return spec;
}

// Two hand-built items with one column each (slot 0).
struct TwoItems {
  DecodedItem a, b;
  TwoItems() {
    a.num_rows = 4;
    b.num_rows = 3;
    a.sources.resize(1);
    b.sources.resize(1);
  }
};

TEST(SlabLayout, PlacesTensorsAt64ByteAlignedOffsetsInOrder) {
  Tensor x, y, z;
  x.dtype = DType::kInt32;
  x.shape = {3};  // 12 bytes -> 64
  y.dtype = DType::kFloat64;
  y.shape = {2, 9};  // 144 bytes -> 192
  z.dtype = DType::kBool;
  z.shape = {0};
  SlabLayout layout;
  layout.Place(&x);
  layout.Place(&y);
  layout.Place(&z);
  EXPECT_EQ(layout.total_bytes(), 64 + 192);
  auto slab = SlabPool::Make(0)->Acquire(layout.total_bytes());
  layout.Bind(slab);
  EXPECT_EQ(x.data, slab->data());
  EXPECT_EQ(y.data, slab->data() + 64);
  EXPECT_EQ(z.data, slab->data() + 256);
  EXPECT_EQ(y.owner, slab);
}

TEST(BatchRows, FindsDistinctItemsAndRuns) {
  DecodedItem a, b;
  const BatchRows rows({{&a, 2}, {&a, 3}, {&a, 4}, {&b, 0}, {&a, 5}, {&b, 1}, {&b, 2}});
  ASSERT_EQ(rows.items.size(), 2u);
  EXPECT_EQ(rows.item, (std::vector<uint32_t>{0, 0, 0, 1, 0, 1, 1}));
  EXPECT_EQ(rows.row, (std::vector<int64_t>{2, 3, 4, 0, 5, 1, 2}));
  EXPECT_EQ(rows.runs, (std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 1}, {4, 1}, {5, 2}}));
  EXPECT_FALSE(rows.use_runs);  // 4 runs for 7 rows
}

// The pipeline's batches are stretches of window orders: the rows, their items (in order of
// first use) and the runs are those of the same rows given one by one.
TEST(BatchRows, StretchesOfWindowsResolveAsTheirRowsOneByOne) {
  DecodedItem a, b, c, d;
  auto first = std::make_shared<WindowRows>();
  first->items = {&a, &b, &c};  // 3, 4 and 2 rows
  first->starts = {0, 3, 7};
  first->order = {8, 3, 4, 5, 0, 7, 1, 2, 6};
  auto second = std::make_shared<WindowRows>();
  second->items = {&d};
  second->starts = {0};
  second->order = {1, 2, 3, 0, 4};
  const std::vector<RowStretch> stretches = {{first, 2, 9}, {second, 0, 3}};
  std::vector<RowRef> refs;
  for (const RowStretch& stretch : stretches) {
    for (int64_t p = stretch.begin; p < stretch.end; ++p) {
      const WindowRows& window = *stretch.window;
      const int64_t at = window.order[p];
      size_t k = 0;
      while (k + 1 < window.starts.size() && window.starts[k + 1] <= at) ++k;
      refs.push_back({window.items[k], at - window.starts[k]});
    }
  }
  const BatchRows expected(refs);
  const BatchRows rows(stretches);
  EXPECT_EQ(rows.items, (std::vector<const DecodedItem*>{&b, &a, &c, &d}));
  EXPECT_EQ(rows.items, expected.items);
  EXPECT_EQ(rows.item, (std::vector<uint32_t>{0, 0, 1, 2, 1, 1, 0, 3, 3, 3}));
  EXPECT_EQ(rows.item, expected.item);
  EXPECT_EQ(rows.row, (std::vector<int64_t>{1, 2, 0, 0, 1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(rows.row, expected.row);
  EXPECT_EQ(rows.runs, (std::vector<std::pair<int64_t, int64_t>>{
                           {0, 2}, {2, 1}, {3, 1}, {4, 2}, {6, 1}, {7, 3}}));
  EXPECT_EQ(rows.runs, expected.runs);
  EXPECT_FALSE(rows.use_runs);
  // A stretch of an item's rows in order (an unshuffled window) is one run.
  auto in_order = std::make_shared<WindowRows>();
  in_order->items = {&d};
  in_order->starts = {0};
  in_order->order = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const BatchRows run({{in_order, 4, 14}});
  EXPECT_EQ(run.items, (std::vector<const DecodedItem*>{&d}));
  EXPECT_EQ(run.runs, (std::vector<std::pair<int64_t, int64_t>>{{0, 10}}));
  EXPECT_EQ(run.row.front(), 4);
  EXPECT_TRUE(run.use_runs);
}

TEST(BatchRows, ABatchAfterALargerOneOnTheSameThreadHoldsOnlyItsOwnRows) {
  DecodedItem a, b, c;
  { const BatchRows larger({{&a, 2}, {&a, 3}, {&a, 4}, {&b, 0}, {&a, 5}, {&b, 1}, {&b, 2}}); }
  // Built from the vectors the first one left behind (their capacity), and again while another
  // is alive (that one then starts from nothing).
  const BatchRows rows({{&c, 7}, {&b, 4}, {&b, 5}});
  const BatchRows nested({{&a, 1}});
  ASSERT_EQ(rows.size(), 3);
  ASSERT_EQ(nested.size(), 1);
  EXPECT_EQ(rows.items, (std::vector<const DecodedItem*>{&c, &b}));
  EXPECT_EQ(rows.item, (std::vector<uint32_t>{0, 1, 1}));
  EXPECT_EQ(rows.row, (std::vector<int64_t>{7, 4, 5}));
  EXPECT_EQ(rows.runs, (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 2}}));
  EXPECT_EQ(nested.items, (std::vector<const DecodedItem*>{&a}));
  EXPECT_EQ(nested.runs, (std::vector<std::pair<int64_t, int64_t>>{{0, 1}}));
}

TEST(DenseWriter, GathersCastsAndFillsNulls) {
  TwoItems items;
  const int32_t a_values[] = {10, 11, 12, 13};
  const int32_t b_values[] = {20, 21, 22};
  const std::vector<uint8_t> b_valid = Bitmap({true, false, true});
  items.a.sources[0].values = reinterpret_cast<const uint8_t*>(a_values);
  items.b.sources[0].values = reinterpret_cast<const uint8_t*>(b_values);
  items.b.sources[0].validity = b_valid.data();
  ColumnSpec spec =
      Spec("x", SourceLayout::kFixed, ColumnKind::kDense, DType::kInt32, DType::kInt64);
  spec.options.has_fill_null = true;
  spec.options.fill_null = -1;
  const DenseWriter writer(spec, 0, 0);
  const Written out =
      Write(writer, {{&items.b, 2}, {&items.a, 0}, {&items.b, 1}, {&items.a, 3}, {&items.a, 1}});
  EXPECT_EQ(out.column.name, "x");
  EXPECT_EQ(out.column.kind, ColumnKind::kDense);
  EXPECT_FALSE(out.column.has_mask);
  EXPECT_EQ(out.column.values.dtype, DType::kInt64);
  EXPECT_EQ(out.column.values.shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(Values<int64_t>(out.column.values), (std::vector<int64_t>{22, 10, -1, 13, 11}));
}

TEST(DenseWriter, CopiesRunsOfFixedSizeRows) {
  DecodedItem item;
  item.num_rows = 40;
  item.sources.resize(1);
  std::vector<float> values(item.num_rows * 3);
  for (size_t k = 0; k < values.size(); ++k) values[k] = static_cast<float>(k);
  item.sources[0].values = reinterpret_cast<const uint8_t*>(values.data());
  ColumnSpec spec =
      Spec("v", SourceLayout::kFixed, ColumnKind::kDense, DType::kFloat32, DType::kFloat32);
  spec.inner = 3;
  spec.inner_shape = {3};
  const DenseWriter writer(spec, 0, 0);
  std::vector<RowRef> refs;
  for (int64_t r = 5; r < 37; ++r) refs.push_back({&item, r});  // one run: runs are used
  ASSERT_TRUE(BatchRows(refs).use_runs);
  const Written out = Write(writer, refs);
  EXPECT_EQ(out.column.values.shape, (std::vector<int64_t>{32, 3}));
  const std::vector<float> got = Values<float>(out.column.values);
  EXPECT_EQ(got, std::vector<float>(values.begin() + 15, values.begin() + 111));
}

// Shuffled rows of three items, more than the gather's prefetch distance (rows are read ahead
// of the one copied) and fewer, with a cast and nulls: every value lands where its row is.
TEST(DenseWriter, GathersShuffledRowsLongerAndShorterThanItsPrefetchDistance) {
  DecodedItem items[3];
  std::vector<std::vector<int32_t>> values(3);
  std::vector<uint8_t> valid_with_null = Bitmap(std::vector<int>(300, 1));
  valid_with_null[7 / 8] &= static_cast<uint8_t>(~(1u << (7 % 8)));  // item 2's row 7
  for (int k = 0; k < 3; ++k) {
    items[k].num_rows = 300;
    items[k].sources.resize(1);
    for (int r = 0; r < 300; ++r) values[k].push_back(1000 * k + r);
    items[k].sources[0].values = reinterpret_cast<const uint8_t*>(values[k].data());
  }
  items[2].sources[0].validity = valid_with_null.data();
  ColumnSpec spec =
      Spec("x", SourceLayout::kFixed, ColumnKind::kDense, DType::kInt32, DType::kInt64);
  spec.options.has_fill_null = true;
  spec.options.fill_null = -1;
  const DenseWriter writer(spec, 0, 0);
  for (const int num_rows : {5, 127, 128, 129, 130, 500}) {
    std::vector<RowRef> refs;
    std::vector<int64_t> expected;
    uint64_t state = 12345;
    refs.push_back({&items[2], 7});  // null
    expected.push_back(-1);
    for (int i = 1; i < num_rows; ++i) {
      state = state * 6364136223846793005u + 1442695040888963407u;
      const int k = static_cast<int>((state >> 33) % 3);
      const int64_t r = static_cast<int64_t>((state >> 40) % 300);
      refs.push_back({&items[k], r});
      expected.push_back(k == 2 && r == 7 ? -1 : 1000 * k + r);
    }
    ASSERT_FALSE(BatchRows(refs).use_runs);
    const Written out = Write(writer, refs);
    EXPECT_EQ(Values<int64_t>(out.column.values), expected) << num_rows;
  }
}

// Shuffled rows of at least kStreamCopyBytes are copied with streaming stores: rows whose size
// is no multiple of a line or of 16 bytes, after a short row's offset, each land whole, and a
// null row is filled.
TEST(DenseWriter, GathersShuffledLargeRowsWhole) {
  for (const int64_t inner : {kStreamCopyBytes, kStreamCopyBytes + 37}) {
    DecodedItem items[2];
    std::vector<std::vector<uint8_t>> values(2);
    std::vector<uint8_t> valid = Bitmap({1, 1, 0, 1, 1});
    for (int k = 0; k < 2; ++k) {
      items[k].num_rows = 5;
      items[k].sources.resize(1);
      values[k].resize(5 * inner);
      for (int64_t i = 0; i < 5 * inner; ++i) values[k][i] = static_cast<uint8_t>(i * 7 + k * 13);
      items[k].sources[0].values = values[k].data();
    }
    items[1].sources[0].validity = valid.data();
    ColumnSpec spec =
        Spec("img", SourceLayout::kFixed, ColumnKind::kDense, DType::kUInt8, DType::kUInt8);
    spec.inner = inner;
    spec.inner_shape = {inner};
    spec.options.has_fill_null = true;
    spec.options.fill_null = 9;
    const DenseWriter writer(spec, 0, 0);
    const std::vector<RowRef> refs = {{&items[1], 4}, {&items[0], 2}, {&items[1], 2},
                                      {&items[0], 0}, {&items[1], 1}, {&items[0], 3}};
    ASSERT_FALSE(BatchRows(refs).use_runs);
    const Written out = Write(writer, refs);
    const std::vector<uint8_t> got = Values<uint8_t>(out.column.values);
    ASSERT_EQ(got.size(), refs.size() * inner);
    for (size_t i = 0; i < refs.size(); ++i) {
      const int k = refs[i].item == &items[0] ? 0 : 1;
      const int64_t r = refs[i].row;
      std::vector<uint8_t> expected(values[k].begin() + r * inner,
                                    values[k].begin() + (r + 1) * inner);
      if (k == 1 && r == 2) expected.assign(inner, 9);
      EXPECT_TRUE(std::equal(expected.begin(), expected.end(), got.begin() + i * inner))
          << "row " << i << " of " << inner << "-byte rows";
    }
  }
}

TEST(DenseWriter, UnpacksBools) {
  DecodedItem item;
  item.num_rows = 10;
  item.sources.resize(1);
  const std::vector<uint8_t> bits = Bitmap({0, 0, 0, 1, 0, 1, 1, 0, 0, 1});
  const std::vector<uint8_t> valid = Bitmap({1, 1, 1, 1, 0});
  item.sources[0].values = bits.data();
  item.sources[0].bit_offset = 3;  // row 0 is bit 3
  item.sources[0].validity = valid.data();
  ColumnSpec spec = Spec("b", SourceLayout::kBool, ColumnKind::kDense, DType::kBool, DType::kBool);
  spec.options.has_fill_null = true;
  spec.options.fill_null = 1;
  const DenseWriter writer(spec, 0, 0);
  // Rows 0..4 are bits 3..7: 1 0 1 1 0; row 4 is null -> the fill value 1.
  const Written out = Write(writer, {{&item, 0}, {&item, 1}, {&item, 2}, {&item, 3}, {&item, 4}});
  EXPECT_EQ(Values<uint8_t>(out.column.values), (std::vector<uint8_t>{1, 0, 1, 1, 1}));
}

// List rows: a = [1, 2], null, [3], []; b = [4, 5, 6], [7].
struct ListItems : TwoItems {
  const int16_t a_values[3] = {1, 2, 3};
  const int32_t a_offsets[5] = {0, 2, 2, 3, 3};
  std::vector<uint8_t> a_valid = Bitmap({true, false, true, true});
  const int16_t b_values[4] = {4, 5, 6, 7};
  const int64_t b_offsets[3] = {0, 3, 4};
  ListItems() {
    a.num_rows = 4;
    b.num_rows = 2;
    a.sources[0].values = reinterpret_cast<const uint8_t*>(a_values);
    a.sources[0].offsets32 = a_offsets;
    a.sources[0].validity = a_valid.data();
    b.sources[0].values = reinterpret_cast<const uint8_t*>(b_values);
    b.sources[0].offsets64 = b_offsets;
  }
};

TEST(PaddedWriter, PadsToTheLongestRowOfTheBatch) {
  ListItems items;
  ColumnSpec spec =
      Spec("l", SourceLayout::kList, ColumnKind::kPadded, DType::kInt16, DType::kInt16);
  spec.options.pad_value = -9;
  const PaddedWriter writer(spec, 0, 0);
  const Written out =
      Write(writer, {{&items.a, 0}, {&items.b, 0}, {&items.a, 1}, {&items.a, 3}, {&items.b, 1}});
  EXPECT_EQ(out.column.kind, ColumnKind::kPadded);
  EXPECT_EQ(out.column.values.shape, (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(Values<int16_t>(out.column.values),
            (std::vector<int16_t>{1, 2, -9, 4, 5, 6, -9, -9, -9, -9, -9, -9, 7, -9, -9}));
  EXPECT_EQ(Values<int64_t>(out.column.lengths), (std::vector<int64_t>{2, 3, 0, 0, 1}));
}

TEST(PaddedWriter, AllEmptyRowsGiveZeroWidth) {
  ListItems items;
  const PaddedWriter writer(
      Spec("l", SourceLayout::kList, ColumnKind::kPadded, DType::kInt16, DType::kInt16), 0, 0);
  const Written out = Write(writer, {{&items.a, 1}, {&items.a, 3}});
  EXPECT_EQ(out.column.values.shape, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(Values<int64_t>(out.column.lengths), (std::vector<int64_t>{0, 0}));
}

// Two items of list<float> rows longer than the writers' prefetch distance: a (offsets32,
// every fifth row null) and b (offsets64, no nulls), and a shuffled batch of rows of both.
struct ManyListRows {
  DecodedItem a, b;
  std::vector<float> a_values, b_values;
  std::vector<int32_t> a_offsets{0};
  std::vector<int64_t> b_offsets{0};
  std::vector<uint8_t> a_valid;
  std::vector<RowRef> refs;
  // The rows as the writers should deliver them (null rows empty).
  std::vector<std::vector<float>> expected;

  ManyListRows() {
    std::vector<int> valid;
    for (int r = 0; r < 30; ++r) {
      valid.push_back(r % 5 != 3);
      const int length = valid.back() ? r % 7 : 0;
      for (int k = 0; k < length; ++k) a_values.push_back(1000.0f + r * 10 + k);
      a_offsets.push_back(static_cast<int32_t>(a_values.size()));
    }
    for (int r = 0; r < 25; ++r) {
      for (int k = 0; k < (r * 3) % 11; ++k) b_values.push_back(-2000.0f - r * 20 - k);
      b_offsets.push_back(static_cast<int64_t>(b_values.size()));
    }
    a_valid = Bitmap(valid);
    a.num_rows = 30;
    b.num_rows = 25;
    a.sources.resize(1);
    b.sources.resize(1);
    a.sources[0].values = reinterpret_cast<const uint8_t*>(a_values.data());
    a.sources[0].offsets32 = a_offsets.data();
    a.sources[0].validity = a_valid.data();
    b.sources[0].values = reinterpret_cast<const uint8_t*>(b_values.data());
    b.sources[0].offsets64 = b_offsets.data();
    for (int k = 0; k < 40; ++k) {
      const bool from_a = k % 3 != 1;
      const int64_t row = from_a ? (k * 7) % 30 : (k * 11) % 25;
      refs.push_back({from_a ? &a : &b, row});
      const float* values = from_a ? a_values.data() : b_values.data();
      const int64_t begin = from_a ? a_offsets[row] : b_offsets[row];
      const int64_t end = from_a ? a_offsets[row + 1] : b_offsets[row + 1];
      expected.emplace_back(values + begin, values + end);
    }
  }
};

TEST(PaddedWriter, ManyShuffledRowsMatchARowByRowCopyForEveryPad) {
  const ManyListRows data;
  // 0 pads with memset; -0.0 (a set sign bit) and 2.5 with the value itself.
  for (const double pad : {0.0, -0.0, 2.5}) {
    SCOPED_TRACE(pad);
    ColumnSpec spec =
        Spec("l", SourceLayout::kList, ColumnKind::kPadded, DType::kFloat32, DType::kFloat32);
    spec.options.pad_value = pad;
    const Written out = Write(PaddedWriter(spec, 0, 0), data.refs);
    size_t longest = 0;
    for (const auto& row : data.expected) longest = std::max(longest, row.size());
    ASSERT_EQ(out.column.values.shape, (std::vector<int64_t>{40, static_cast<int64_t>(longest)}));
    std::vector<float> want;
    std::vector<int64_t> lengths;
    for (const auto& row : data.expected) {
      want.insert(want.end(), row.begin(), row.end());
      want.resize(want.size() + longest - row.size(), static_cast<float>(pad));
      lengths.push_back(static_cast<int64_t>(row.size()));
    }
    // Bytes, not values: -0.0 == 0.0 would pass for a pad written as 0.
    ASSERT_EQ(static_cast<size_t>(out.column.values.num_elements()), want.size());
    EXPECT_EQ(std::memcmp(out.column.values.data, want.data(), want.size() * sizeof(float)), 0);
    EXPECT_EQ(Values<int64_t>(out.column.lengths), lengths);
  }
}

TEST(OffsetsWriter, ManyShuffledRowsMatchARowByRowCopy) {
  const ManyListRows data;
  const Written out = Write(OffsetsWriter(Spec("r", SourceLayout::kList, ColumnKind::kRagged,
                                               DType::kFloat32, DType::kFloat32),
                                          0, 0),
                            data.refs);
  std::vector<float> want;
  std::vector<int64_t> offsets{0};
  for (const auto& row : data.expected) {
    want.insert(want.end(), row.begin(), row.end());
    offsets.push_back(static_cast<int64_t>(want.size()));
  }
  EXPECT_EQ(Values<float>(out.column.values), want);
  EXPECT_EQ(Values<int64_t>(out.column.offsets), offsets);
}

TEST(PaddedWriter, BoolListsUnpackBitsAndPad) {
  // 12 rows of lengths r % 4 from bit 3 of the bitmap: more rows than the prefetch distance.
  DecodedItem item;
  item.num_rows = 12;
  item.sources.resize(1);
  std::vector<int> bits = {1, 1, 1};  // before child 0
  std::vector<int32_t> offsets{0};
  for (int r = 0; r < 12; ++r) {
    for (int k = 0; k < r % 4; ++k) bits.push_back((r + k) % 3 == 0);
    offsets.push_back(static_cast<int32_t>(bits.size() - 3));
  }
  const std::vector<uint8_t> bitmap = Bitmap(bits);
  item.sources[0].values = bitmap.data();
  item.sources[0].bit_offset = 3;
  item.sources[0].offsets32 = offsets.data();
  std::vector<RowRef> refs;
  for (int k = 0; k < 12; ++k) refs.push_back({&item, (k * 5) % 12});
  for (const double pad : {0.0, 1.0}) {
    SCOPED_TRACE(pad);
    ColumnSpec spec =
        Spec("b", SourceLayout::kList, ColumnKind::kPadded, DType::kBool, DType::kBool);
    spec.options.pad_value = pad;
    const Written out = Write(PaddedWriter(spec, 0, 0), refs);
    ASSERT_EQ(out.column.values.shape, (std::vector<int64_t>{12, 3}));
    std::vector<uint8_t> want;
    for (const RowRef& ref : refs) {
      const int length = static_cast<int>(ref.row % 4);
      for (int k = 0; k < 3; ++k) {
        want.push_back(k < length ? (ref.row + k) % 3 == 0 : static_cast<uint8_t>(pad));
      }
    }
    EXPECT_EQ(Values<uint8_t>(out.column.values), want);
  }
}

TEST(OffsetsWriter, ConcatenatesRaggedRows) {
  ListItems items;
  const OffsetsWriter writer(
      Spec("r", SourceLayout::kList, ColumnKind::kRagged, DType::kInt16, DType::kInt16), 0, 3);
  EXPECT_EQ(writer.output(), 3);
  const Written out =
      Write(writer, {{&items.b, 0}, {&items.a, 1}, {&items.a, 0}, {&items.b, 1}, {&items.a, 2}});
  EXPECT_EQ(out.column.kind, ColumnKind::kRagged);
  EXPECT_EQ(Values<int16_t>(out.column.values), (std::vector<int16_t>{4, 5, 6, 1, 2, 7, 3}));
  EXPECT_EQ(Values<int64_t>(out.column.offsets), (std::vector<int64_t>{0, 3, 3, 5, 6, 7}));
}

TEST(OffsetsWriter, CopiesStringBytesAndBoolLists) {
  DecodedItem item;
  item.num_rows = 3;
  item.sources.resize(2);
  const char text[] = "héllo!";  // "hé", "llo", "!" by byte offsets
  const int32_t text_offsets[] = {0, 3, 6, 7};
  item.sources[0].values = reinterpret_cast<const uint8_t*>(text);
  item.sources[0].offsets32 = text_offsets;
  const std::vector<uint8_t> bits = Bitmap({1, 0, 1, 1, 0});
  const int32_t bool_offsets[] = {0, 2, 2, 4};
  item.sources[1].values = bits.data();
  item.sources[1].bit_offset = 1;  // child 0 is bit 1
  item.sources[1].offsets32 = bool_offsets;
  ColumnSpec strings =
      Spec("s", SourceLayout::kString, ColumnKind::kStrings, DType::kUInt8, DType::kUInt8);
  strings.annotation = "utf8";
  const Written s = Write(OffsetsWriter(strings, 0, 0), {{&item, 2}, {&item, 0}, {&item, 1}});
  EXPECT_EQ(s.column.annotation, "utf8");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(s.column.values.data),
                        s.column.values.num_elements()),
            "!héllo");
  EXPECT_EQ(Values<int64_t>(s.column.offsets), (std::vector<int64_t>{0, 1, 4, 7}));
  const Written b = Write(
      OffsetsWriter(
          Spec("bl", SourceLayout::kList, ColumnKind::kRagged, DType::kBool, DType::kBool), 1, 0),
      {{&item, 0}, {&item, 1}, {&item, 2}});
  // Bits 1..4: 0 1 1 0 -> rows [0, 1], [], [1, 0].
  EXPECT_EQ(Values<uint8_t>(b.column.values), (std::vector<uint8_t>{0, 1, 1, 0}));
  EXPECT_EQ(Values<int64_t>(b.column.offsets), (std::vector<int64_t>{0, 2, 2, 4}));
}

TEST(OffsetsWriter, ListsOfListsGiveOneOffsetsTensorPerLevel) {
  // Rows (list<list<int32>>): [[1, 2], []], null, [[3]], [] ; then list<string>: ["ab", "c"].
  DecodedItem item;
  item.num_rows = 4;
  item.sources.resize(2);
  const int32_t values[] = {1, 2, 3};
  const int32_t inner[] = {0, 2, 2, 3};
  const int64_t rows[] = {0, 2, 2, 3, 3};
  const std::vector<uint8_t> valid = Bitmap({1, 0, 1, 1});
  ColumnSource& nested = item.sources[0];
  nested.values = reinterpret_cast<const uint8_t*>(values);
  nested.offsets64 = rows;
  nested.validity = valid.data();
  nested.levels.push_back({inner, nullptr});
  ColumnSpec spec =
      Spec("g", SourceLayout::kList, ColumnKind::kRagged, DType::kInt32, DType::kInt32);
  spec.list_levels = 1;
  const Written g = Write(OffsetsWriter(spec, 0, 0), {{&item, 2}, {&item, 1}, {&item, 0}});
  EXPECT_EQ(Values<int64_t>(g.column.offsets), (std::vector<int64_t>{0, 1, 1, 3}));
  ASSERT_EQ(g.column.inner_offsets.size(), 1u);
  EXPECT_EQ(Values<int64_t>(g.column.inner_offsets[0]), (std::vector<int64_t>{0, 1, 3, 3}));
  EXPECT_EQ(Values<int32_t>(g.column.values), (std::vector<int32_t>{3, 1, 2}));

  const char text[] = "abc";
  const int32_t string_offsets[] = {0, 2, 3};
  const int32_t row_offsets[] = {0, 2, 2, 2, 2};
  ColumnSource& words = item.sources[1];
  words.values = reinterpret_cast<const uint8_t*>(text);
  words.offsets32 = row_offsets;
  words.levels.push_back({string_offsets, nullptr});
  spec = Spec("w", SourceLayout::kList, ColumnKind::kRagged, DType::kUInt8, DType::kUInt8);
  spec.list_levels = 1;
  spec.annotation = "utf8";
  const Written w = Write(OffsetsWriter(spec, 1, 0), {{&item, 1}, {&item, 0}});
  EXPECT_EQ(Values<int64_t>(w.column.offsets), (std::vector<int64_t>{0, 0, 2}));
  EXPECT_EQ(Values<int64_t>(w.column.inner_offsets[0]), (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(w.column.values.data), 3), "abc");
}

TEST(PaddedWriter, ListsOfListsPadEveryLevel) {
  // Rows (list<list<int32>>): [[1, 2], []], null, [[3]].
  DecodedItem item;
  item.num_rows = 3;
  item.sources.resize(1);
  const int32_t values[] = {1, 2, 3};
  const int32_t inner[] = {0, 2, 2, 3};
  const int64_t rows[] = {0, 2, 2, 3};
  const std::vector<uint8_t> valid = Bitmap({1, 0, 1});
  ColumnSource& nested = item.sources[0];
  nested.values = reinterpret_cast<const uint8_t*>(values);
  nested.offsets64 = rows;
  nested.validity = valid.data();
  nested.levels.push_back({inner, nullptr});
  ColumnSpec spec =
      Spec("g", SourceLayout::kList, ColumnKind::kPadded, DType::kInt32, DType::kInt32);
  spec.list_levels = 1;
  spec.options.pad_value = -1;
  const Written g = Write(PaddedWriter(spec, 0, 0), {{&item, 2}, {&item, 1}, {&item, 0}});
  EXPECT_EQ(g.column.values.shape, (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(Values<int32_t>(g.column.values),
            (std::vector<int32_t>{3, -1, -1, -1, -1, -1, -1, -1, 1, 2, -1, -1}));
  EXPECT_EQ(Values<int64_t>(g.column.lengths), (std::vector<int64_t>{1, 0, 2}));
  ASSERT_EQ(g.column.inner_lengths.size(), 1u);
  EXPECT_EQ(g.column.inner_lengths[0].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(Values<int64_t>(g.column.inner_lengths[0]), (std::vector<int64_t>{1, 0, 0, 0, 2, 0}));
}

TEST(PartitionWriter, RepeatsEachItemsValue) {
  TwoItems items;
  items.a.sources[0].partition_int = 2024;
  items.a.sources[0].partition_text = "2024";
  items.b.sources[0].partition_int = 7;
  items.b.sources[0].partition_text = "7";
  const std::vector<RowRef> refs = {{&items.a, 0}, {&items.b, 2}, {&items.a, 3}};
  const Written ints = Write(PartitionWriter(Spec("year", SourceLayout::kPartition,
                                                  ColumnKind::kDense, DType::kInt64, DType::kInt64),
                                             0, 0),
                             refs);
  EXPECT_EQ(Values<int64_t>(ints.column.values), (std::vector<int64_t>{2024, 7, 2024}));
  const Written text =
      Write(PartitionWriter(Spec("year", SourceLayout::kPartition, ColumnKind::kStrings,
                                 DType::kUInt8, DType::kUInt8),
                            0, 0),
            refs);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(text.column.values.data),
                        text.column.values.num_elements()),
            "202472024");
  EXPECT_EQ(Values<int64_t>(text.column.offsets), (std::vector<int64_t>{0, 4, 5, 9}));
}

TEST(MaskWriter, MarksValidRows) {
  ListItems items;
  const Written out =
      Write(MaskWriter(0, 0), {{&items.a, 0}, {&items.a, 1}, {&items.b, 0}, {&items.a, 2}});
  EXPECT_TRUE(out.column.has_mask);
  EXPECT_EQ(out.column.mask.dtype, DType::kBool);
  EXPECT_EQ(Values<uint8_t>(out.column.mask), (std::vector<uint8_t>{1, 0, 1, 1}));
}

// The values writer then the element mask writer of one column, as BatchAssembler runs them.
Written WriteWithMasks(const ColumnWriter& values, const ColumnWriter& masks,
                       const std::vector<RowRef>& refs) {
  static std::shared_ptr<SlabPool> pool = SlabPool::Make(0);
  const BatchRows rows(refs);
  Written out;
  SlabLayout layout;
  values.Size(rows, &out.column, &layout);
  masks.Size(rows, &out.column, &layout);
  out.slab = pool->Acquire(layout.total_bytes());
  std::memset(out.slab->data(), 0xAB, layout.total_bytes());  // poison: every byte is written
  layout.Bind(out.slab);
  EXPECT_TRUE(values.Fill(rows, &out.column).ok());
  EXPECT_TRUE(masks.Fill(rows, &out.column).ok());
  return out;
}

// Rows (list<list<int32>>): [[1, null], null], null, [[3]]; the null element holds 0 (the
// decoder's fill), the null inner list spans nothing.
struct NullsInLists {
  DecodedItem item;
  const int32_t values[3] = {1, 0, 3};
  const int32_t inner[4] = {0, 2, 2, 3};
  const int64_t rows[4] = {0, 2, 2, 3};
  const std::vector<uint8_t> row_valid = Bitmap({1, 0, 1});
  const std::vector<uint8_t> inner_valid = Bitmap({1, 0, 1});
  const std::vector<uint8_t> value_valid = Bitmap({1, 0, 1});
  NullsInLists() {
    item.num_rows = 3;
    item.sources.resize(1);
    ColumnSource& src = item.sources[0];
    src.values = reinterpret_cast<const uint8_t*>(values);
    src.offsets64 = rows;
    src.validity = row_valid.data();
    ColumnSource::Level level;
    level.offsets32 = inner;
    level.validity = inner_valid.data();
    src.levels.push_back(level);
    src.values_validity = value_valid.data();
  }
  ColumnSpec Spec(ColumnKind kind) const {
    ColumnSpec spec = stoker::Spec("g", SourceLayout::kList, kind, DType::kInt32, DType::kInt32);
    spec.list_levels = 1;
    spec.options.null_mask = true;
    spec.options.pad_value = -1;
    return spec;
  }
};

TEST(ElementMaskWriter, RaggedMasksFollowEachLevelsItems) {
  NullsInLists data;
  const ColumnSpec spec = data.Spec(ColumnKind::kRagged);
  EXPECT_EQ(ElementMaskLevels(spec), 2);
  const Written g = WriteWithMasks(OffsetsWriter(spec, 0, 0), ElementMaskWriter(spec, 0, 0),
                                   {{&data.item, 2}, {&data.item, 1}, {&data.item, 0}});
  EXPECT_EQ(Values<int64_t>(g.column.offsets), (std::vector<int64_t>{0, 1, 1, 3}));
  EXPECT_EQ(Values<int64_t>(g.column.inner_offsets[0]), (std::vector<int64_t>{0, 1, 3, 3}));
  EXPECT_EQ(Values<int32_t>(g.column.values), (std::vector<int32_t>{3, 1, 0}));
  ASSERT_EQ(g.column.element_masks.size(), 2u);
  EXPECT_EQ(g.column.element_masks[0].dtype, DType::kBool);
  EXPECT_EQ(Values<uint8_t>(g.column.element_masks[0]), (std::vector<uint8_t>{1, 1, 0}));
  EXPECT_EQ(Values<uint8_t>(g.column.element_masks[1]), (std::vector<uint8_t>{1, 1, 0}));
}

TEST(ElementMaskWriter, PaddedMasksHaveEachLevelsShape) {
  NullsInLists data;
  const ColumnSpec spec = data.Spec(ColumnKind::kPadded);
  const Written g = WriteWithMasks(PaddedWriter(spec, 0, 0), ElementMaskWriter(spec, 0, 0),
                                   {{&data.item, 2}, {&data.item, 1}, {&data.item, 0}});
  ASSERT_EQ(g.column.element_masks.size(), 2u);
  EXPECT_EQ(g.column.element_masks[0].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(g.column.element_masks[1].shape, (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(Values<uint8_t>(g.column.element_masks[0]), (std::vector<uint8_t>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(Values<uint8_t>(g.column.element_masks[1]),
            (std::vector<uint8_t>{1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(Values<int32_t>(g.column.values),
            (std::vector<int32_t>{3, -1, -1, -1, -1, -1, -1, -1, 1, 0, -1, -1}));
  EXPECT_EQ(Values<int64_t>(g.column.inner_lengths[0]), (std::vector<int64_t>{1, 0, 0, 0, 2, 0}));
}

TEST(ElementMaskWriter, ListsOfStringsMaskTheStrings) {
  // Rows (list<string>): ["ab", null], ["c"]: the strings are the only masked level.
  DecodedItem item;
  item.num_rows = 2;
  item.sources.resize(1);
  const char text[] = "abc";
  const int32_t string_offsets[] = {0, 2, 2, 3};
  const int32_t row_offsets[] = {0, 2, 3};
  const std::vector<uint8_t> string_valid = Bitmap({1, 0, 1});
  ColumnSource& words = item.sources[0];
  words.values = reinterpret_cast<const uint8_t*>(text);
  words.offsets32 = row_offsets;
  ColumnSource::Level level;
  level.offsets32 = string_offsets;
  level.validity = string_valid.data();
  words.levels.push_back(level);
  ColumnSpec spec =
      Spec("w", SourceLayout::kList, ColumnKind::kRagged, DType::kUInt8, DType::kUInt8);
  spec.list_levels = 1;
  spec.annotation = "utf8";
  spec.options.null_mask = true;
  EXPECT_EQ(ElementMaskLevels(spec), 1);
  const Written w = WriteWithMasks(OffsetsWriter(spec, 0, 0), ElementMaskWriter(spec, 0, 0),
                                   {{&item, 1}, {&item, 0}});
  EXPECT_EQ(Values<int64_t>(w.column.inner_offsets[0]), (std::vector<int64_t>{0, 1, 3, 3}));
  ASSERT_EQ(w.column.element_masks.size(), 1u);
  EXPECT_EQ(Values<uint8_t>(w.column.element_masks[0]), (std::vector<uint8_t>{1, 1, 0}));
}

TEST(ElementMaskWriter, FixedSizeListsMaskEveryElement) {
  // Rows (fixed_size_list<int32, 2>): [5, null], null; then an item without element nulls.
  TwoItems items;
  const int32_t a_values[] = {5, 0, 0, 0, 7, 8, 9, 10};
  const uint8_t a_elements[] = {1, 0, 0, 0, 1, 1, 1, 1};
  const std::vector<uint8_t> a_rows = Bitmap({1, 0, 1, 1});
  const int32_t b_values[] = {1, 2, 3, 4, 5, 6};
  items.a.sources[0].values = reinterpret_cast<const uint8_t*>(a_values);
  items.a.sources[0].validity = a_rows.data();
  items.a.sources[0].element_valid = a_elements;
  items.b.sources[0].values = reinterpret_cast<const uint8_t*>(b_values);
  ColumnSpec spec =
      Spec("t", SourceLayout::kFixed, ColumnKind::kDense, DType::kInt32, DType::kInt32);
  spec.inner = 2;
  spec.inner_shape = {2};
  spec.fixed_list = true;
  spec.options.null_mask = true;
  EXPECT_EQ(ElementMaskLevels(spec), 1);
  const Written t = WriteWithMasks(DenseWriter(spec, 0, 0), ElementMaskWriter(spec, 0, 0),
                                   {{&items.a, 0}, {&items.a, 1}, {&items.b, 2}});
  EXPECT_EQ(Values<int32_t>(t.column.values), (std::vector<int32_t>{5, 0, 0, 0, 5, 6}));
  ASSERT_EQ(t.column.element_masks.size(), 1u);
  EXPECT_EQ(t.column.element_masks[0].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(Values<uint8_t>(t.column.element_masks[0]), (std::vector<uint8_t>{1, 0, 0, 0, 1, 1}));
  spec.options.null_mask = false;
  EXPECT_EQ(ElementMaskLevels(spec), 0);
}

TEST(FeaturesWriter, PrepareTransposesThenFillCopiesRows) {
  DecodedItem item;
  item.num_rows = 70;      // more than one transpose block
  item.sources.resize(3);  // slot 0: another column, slots 1-2: features
  std::vector<int32_t> f0(item.num_rows);
  std::vector<double> f1(item.num_rows);
  for (int r = 0; r < item.num_rows; ++r) {
    f0[r] = r;
    f1[r] = 0.5 + r;
  }
  const std::vector<uint8_t> f0_valid = Bitmap(std::vector<int>(70, 1));
  std::vector<uint8_t> valid = f0_valid;
  valid[1] &= ~(1u << 1);                                                // row 9 of f0 is null
  item.sources[0].values = reinterpret_cast<const uint8_t*>(f0.data());  // untouched by Prepare
  item.sources[1].values = reinterpret_cast<const uint8_t*>(f0.data());
  item.sources[1].validity = valid.data();
  item.sources[2].values = reinterpret_cast<const uint8_t*>(f1.data());
  ColumnSpec a = Spec("f0", SourceLayout::kFixed, ColumnKind::kDense, DType::kInt32, DType::kInt32);
  a.options.has_fill_null = true;
  a.options.fill_null = -2;
  const ColumnSpec b =
      Spec("f1", SourceLayout::kFixed, ColumnKind::kDense, DType::kFloat64, DType::kFloat64);
  const FeaturesWriter writer({a, b}, 1, DType::kFloat32, "feats", 5);
  ASSERT_TRUE(writer.Prepare(&item).ok());
  ASSERT_EQ(item.feature_rows.size(), 1u);
  ASSERT_NE(item.feature_rows[0], nullptr);
  EXPECT_EQ(item.feature_rows[0]->size(), 70 * 2 * 4);
  EXPECT_NE(item.sources[0].values, nullptr);
  EXPECT_EQ(item.sources[1].values, nullptr);  // freed
  EXPECT_EQ(item.sources[2].values, nullptr);
  const Written out =
      Write(writer, {{&item, 9}, {&item, 10}, {&item, 11}, {&item, 69}, {&item, 0}});
  EXPECT_EQ(out.column.name, "feats");
  EXPECT_EQ(out.column.values.dtype, DType::kFloat32);
  EXPECT_EQ(out.column.values.shape, (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(Values<float>(out.column.values),
            (std::vector<float>{-2, 9.5, 10, 10.5, 11, 11.5, 69, 69.5, 0, 0.5}));
}

// Runs of four plain float features are transposed four rows at a time (TransposeFour); a
// feature with nulls between them, and the rows past the last multiple of four, go one by one.
TEST(FeaturesWriter, PrepareTransposesRunsOfFourFeaturesExactly) {
  constexpr int kFeatures = 9;
  DecodedItem item;
  item.num_rows = 70;  // a block of 64 rows, then 6: four rows at a time and a tail of two
  item.sources.resize(kFeatures);
  std::vector<std::vector<float>> columns(kFeatures, std::vector<float>(item.num_rows));
  for (int f = 0; f < kFeatures; ++f) {
    for (int r = 0; r < item.num_rows; ++r) columns[f][r] = static_cast<float>(f * 1000 + r);
    item.sources[f].values = reinterpret_cast<const uint8_t*>(columns[f].data());
  }
  // A NaN with a payload: moved bit for bit.
  const uint32_t nan_bits = 0x7fc01234u;
  std::memcpy(&columns[2][5], &nan_bits, 4);
  std::vector<uint8_t> valid = Bitmap(std::vector<int>(item.num_rows, 1));
  valid[0] &= ~(1u << 3);  // feature 4, row 3 is null
  item.sources[4].validity = valid.data();
  ColumnSpec f =
      Spec("f", SourceLayout::kFixed, ColumnKind::kDense, DType::kFloat32, DType::kFloat32);
  f.options.has_fill_null = true;
  f.options.fill_null = -1;
  const FeaturesWriter writer(std::vector<ColumnSpec>(kFeatures, f), 0, DType::kFloat32, "feats",
                              0);
  ASSERT_TRUE(writer.Prepare(&item).ok());
  ASSERT_NE(item.feature_rows[0], nullptr);
  const auto* matrix = reinterpret_cast<const uint32_t*>(item.feature_rows[0]->data());
  for (int r = 0; r < item.num_rows; ++r) {
    for (int k = 0; k < kFeatures; ++k) {
      float expected = static_cast<float>(k * 1000 + r);
      if (k == 4 && r == 3) expected = -1;
      uint32_t bits;
      std::memcpy(&bits, &expected, 4);
      if (k == 2 && r == 5) bits = nan_bits;
      ASSERT_EQ(matrix[r * kFeatures + k], bits) << "row " << r << ", feature " << k;
    }
  }
}

// Feature blocks (the ready-tensor cache's final layout): rows of `count` float features.
FeatureBlock Block(int group, int64_t first, int64_t count, const std::vector<float>& rows) {
  FeatureBlock block;
  block.group = group;
  block.first = first;
  block.count = count;
  block.rows = reinterpret_cast<const uint8_t*>(rows.data());
  return block;
}

TEST(FeaturesWriter, AGroupWhollyInBlocksIsCopiedFromThemWithoutAMatrix) {
  DecodedItem item;
  item.num_rows = 3;
  item.sources.resize(3);  // features in slots 0-2, all in blocks (empty sources)
  const std::vector<float> first = {0, 1, 10, 11, 20, 21};  // features 0-1
  const std::vector<float> last = {2, 12, 22};              // feature 2
  item.feature_blocks = {Block(0, 0, 2, first), Block(0, 2, 1, last)};
  const ColumnSpec f =
      Spec("f", SourceLayout::kFixed, ColumnKind::kDense, DType::kFloat32, DType::kFloat32);
  const FeaturesWriter writer({f, f, f}, 0, FeatureGroupSpec{"g", DType::kFloat32, true, 0, 3}, 0,
                              0);
  ASSERT_TRUE(writer.Prepare(&item).ok());
  ASSERT_EQ(item.feature_rows.size(), 1u);
  EXPECT_EQ(item.feature_rows[0], nullptr);  // no matrix: batches read the blocks
  const Written out = Write(writer, {{&item, 2}, {&item, 0}, {&item, 1}});
  EXPECT_EQ(Values<float>(out.column.values),
            (std::vector<float>{20, 21, 22, 0, 1, 2, 10, 11, 12}));
  EXPECT_EQ(Values<uint8_t>(out.column.mask), std::vector<uint8_t>(9, 1));
}

TEST(FeaturesWriter, BlocksAndColumnsOfOneGroupMeetInTheMatrix) {
  DecodedItem item;
  item.num_rows = 2;
  item.sources.resize(2);
  const std::vector<float> block_rows = {5, 6};  // feature 0, from a block
  item.feature_blocks = {Block(0, 0, 1, block_rows)};
  const std::vector<int64_t> column = {7, 8};  // feature 1, a column with a null in row 1
  std::vector<uint8_t> valid = Bitmap({1, 0});
  item.sources[1].values = reinterpret_cast<const uint8_t*>(column.data());
  item.sources[1].validity = valid.data();
  const ColumnSpec block_feature =
      Spec("b", SourceLayout::kFixed, ColumnKind::kDense, DType::kFloat32, DType::kFloat32);
  const ColumnSpec column_feature =
      Spec("c", SourceLayout::kFixed, ColumnKind::kDense, DType::kInt64, DType::kInt64);
  const FeaturesWriter writer({block_feature, column_feature}, 0,
                              FeatureGroupSpec{"g", DType::kFloat32, true, 0, 2}, 0, 0);
  ASSERT_TRUE(writer.Prepare(&item).ok());
  ASSERT_NE(item.feature_rows[0], nullptr);
  const Written out = Write(writer, {{&item, 1}, {&item, 0}});
  EXPECT_EQ(Values<float>(out.column.values), (std::vector<float>{6, 0, 5, 7}));
  EXPECT_EQ(Values<uint8_t>(out.column.mask), (std::vector<uint8_t>{1, 0, 1, 1}));
}

// The stacked matrix is the largest buffer of an item: it comes from the recycling pool, so a
// later item reuses a freed one instead of faulting in fresh pages.
TEST(FeaturesWriter, PrepareRecyclesTheMatrix) {
  const RecyclingPool::Budget budget(int64_t{256} << 20);
  std::vector<float> f0(4096, 1.5f);
  const ColumnSpec a =
      Spec("f0", SourceLayout::kFixed, ColumnKind::kDense, DType::kFloat32, DType::kFloat32);
  const FeaturesWriter writer({a, a, a, a}, 0, DType::kFloat32, "feats", 0);
  auto prepare = [&] {
    DecodedItem item;
    item.num_rows = 4096;  // a 64 KiB matrix: above the pool's smallest kept size
    item.sources.resize(4);
    for (auto& source : item.sources) source.values = reinterpret_cast<const uint8_t*>(f0.data());
    EXPECT_TRUE(writer.Prepare(&item).ok());
    EXPECT_EQ(reinterpret_cast<const float*>(item.feature_rows[0]->data())[4095 * 4 + 3], 1.5f);
  };
  prepare();  // its matrix is freed into the pool with the item
  const int64_t reused = RecyclingPool::Get()->reused();
  prepare();
  EXPECT_GT(RecyclingPool::Get()->reused(), reused);
}

// A column whose chain is cast(int32 -> uint8): 300 does not fit, a null has no value.
ColumnSpec CastSpec(bool zero) {
  ColumnSpec spec =
      Spec("x", SourceLayout::kFixed, ColumnKind::kDense, DType::kInt32, DType::kUInt8);
  std::vector<std::unique_ptr<transform::Op>> ops;
  ops.push_back(*transform::MakeOp("cast", {{"dtype", ParamValue("uint8")}}));
  spec.chain = std::make_shared<const transform::Chain>(*transform::Chain::Make(
      "x", transform::ValueType::Tensor(transform::ElementType::kInt32, {}), std::move(ops)));
  spec.options.on_error_zero = zero;
  spec.counters = std::make_shared<TransformCounters>();
  return spec;
}

TEST(TransformWriter, OnErrorZeroSubstitutesZerosAndFlagsTheRows) {
  TwoItems items;
  const int32_t a_values[] = {1, 300, 3, 4};
  const int32_t b_values[] = {5, 6, 7};
  const std::vector<uint8_t> b_valid = Bitmap({true, false, true});
  items.a.sources[0].values = reinterpret_cast<const uint8_t*>(a_values);
  items.b.sources[0].values = reinterpret_cast<const uint8_t*>(b_values);
  items.b.sources[0].validity = b_valid.data();
  const ColumnSpec spec = CastSpec(true);
  const TransformWriter writer(spec, 0, 0);
  const Written out =
      Write(writer, {{&items.a, 0}, {&items.a, 1}, {&items.b, 1}, {&items.b, 2}, {&items.a, 3}});
  EXPECT_TRUE(out.column.has_valid);
  EXPECT_EQ(out.column.valid.shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(Values<uint8_t>(out.column.valid), (std::vector<uint8_t>{1, 0, 0, 1, 1}));
  EXPECT_EQ(Values<uint8_t>(out.column.values), (std::vector<uint8_t>{1, 0, 0, 7, 4}));
  EXPECT_EQ(spec.counters->substituted_rows, 2);
  EXPECT_EQ(spec.counters->batch_rows, 4);  // the null never reaches the chain
}

TEST(TransformWriter, WithoutOnErrorARowThatFailsNamesWhereItIs) {
  TwoItems items;
  const int32_t a_values[] = {1, 300, 3, 4};
  items.a.sources[0].values = reinterpret_cast<const uint8_t*>(a_values);
  items.a.where = "f.parquet, row group 2";
  items.a.row_begin = 10;
  const TransformWriter writer(CastSpec(false), 0, 0);
  static std::shared_ptr<SlabPool> pool = SlabPool::Make(0);
  const BatchRows rows({{&items.a, 0}, {&items.a, 1}});
  OutputColumn column;
  SlabLayout layout;
  writer.Size(rows, &column, &layout);
  EXPECT_FALSE(column.has_valid);
  auto slab = pool->Acquire(layout.total_bytes());
  layout.Bind(slab);
  const Status status = writer.Fill(rows, &column);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("f.parquet, row group 2, row 11"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("column 'x'"), std::string::npos) << status.message();
}

// A uint8 [64] column whose chain (a cast) ran wholly before the cache, and an item of `rows`
// such rows in a 64-byte aligned Arrow buffer (row r filled with r + 1).
struct PrefixItem {
  ColumnSpec spec;
  DecodedItem item;
  std::shared_ptr<arrow::Buffer> buffer;
  explicit PrefixItem(int64_t rows) {
    spec = Spec("x", SourceLayout::kFixed, ColumnKind::kDense, DType::kUInt8, DType::kUInt8);
    spec.inner = 64;
    spec.inner_shape = spec.output_shape = {64};
    std::vector<std::unique_ptr<transform::Op>> ops;
    ops.push_back(*transform::MakeOp("cast", {{"dtype", ParamValue("uint8")}}));
    spec.chain = std::make_shared<const transform::Chain>(*transform::Chain::Make(
        "x", transform::ValueType::Tensor(transform::ElementType::kUInt8, {64}), std::move(ops)));
    spec.cached_ops = 1;
    buffer = *arrow::AllocateBuffer(rows * 64);
    for (int64_t r = 0; r < rows; ++r) std::memset(buffer->mutable_data() + r * 64, r + 1, 64);
    item.num_rows = rows;
    item.sources.resize(1);
    item.sources[0].array =
        arrow::MakeArray(arrow::ArrayData::Make(arrow::uint8(), rows * 64, {nullptr, buffer}));
    item.sources[0].values = buffer->data();
  }
};

TEST(TransformWriter, LendsTheItemsRowsToABatchThatIsOneRunOfAtLeastAQuarterOfThem) {
  auto prefix = std::make_unique<PrefixItem>(4);
  const uint8_t* base = prefix->buffer->data();
  const TransformWriter writer(prefix->spec, 0, 0, /*lend=*/true);
  const Written whole = Write(
      writer, {{&prefix->item, 0}, {&prefix->item, 1}, {&prefix->item, 2}, {&prefix->item, 3}});
  EXPECT_EQ(whole.column.values.data, base);
  EXPECT_EQ(whole.slab_bytes, 0);  // nothing placed in the slab
  EXPECT_EQ(whole.column.values.shape, (std::vector<int64_t>{4, 64}));
  const Written half = Write(writer, {{&prefix->item, 2}, {&prefix->item, 3}});
  EXPECT_EQ(half.column.values.data, base + 2 * 64);
  const Written quarter = Write(writer, {{&prefix->item, 1}});
  EXPECT_EQ(quarter.column.values.data, base + 64);
  // The tensor's owner keeps the rows alive after the item (and its array) are gone.
  prefix.reset();
  const std::vector<uint8_t> values = Values<uint8_t>(whole.column.values);
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(values[r * 64 + 63], r + 1);
  EXPECT_EQ(Values<uint8_t>(half.column.values)[64], 4);
}

TEST(TransformWriter, CopiesRowsItMayNotLend) {
  PrefixItem prefix(5);
  PrefixItem other(4);
  const uint8_t* base = prefix.buffer->data();
  const TransformWriter lending(prefix.spec, 0, 0, /*lend=*/true);
  const TransformWriter copying(prefix.spec, 0, 0, /*lend=*/false);
  const std::vector<std::vector<RowRef>> cases = {
      {{&prefix.item, 0}},                                       // under a quarter
      {{&prefix.item, 0}, {&prefix.item, 2}},                    // two runs
      {{&prefix.item, 0}, {&prefix.item, 1}, {&other.item, 0}},  // two items
  };
  for (const auto& refs : cases) {
    const Written out = Write(lending, refs);
    EXPECT_EQ(out.column.values.data, out.slab->data());
    EXPECT_EQ(Values<uint8_t>(out.column.values)[0], 1);
  }
  const Written out = Write(copying, {{&prefix.item, 0},
                                      {&prefix.item, 1},
                                      {&prefix.item, 2},
                                      {&prefix.item, 3},
                                      {&prefix.item, 4}});
  EXPECT_EQ(out.column.values.data, out.slab->data());
  EXPECT_NE(out.column.values.data, base);
  EXPECT_EQ(Values<uint8_t>(out.column.values)[3 * 64], 4);
}

TEST(PaddingFlagWriter, CopiesEachItemsFlag) {
  TwoItems items;
  items.b.padding = true;
  const Written out =
      Write(PaddingFlagWriter("pad", 0), {{&items.a, 0}, {&items.b, 0}, {&items.b, 1}});
  EXPECT_EQ(out.column.name, "pad");
  EXPECT_EQ(Values<uint8_t>(out.column.values), (std::vector<uint8_t>{0, 1, 1}));
}

// Nine plain columns of every width (int64, float32, int16, uint8...) over three items: one with
// its rows packed (as the ready-tensor cache delivers them: columns gone), one decoded this epoch
// and one with nulls (both read from their columns; the nulls filled with fill_null), rows
// shuffled across all three. Every output equals its DenseWriter's, for a batch of all three
// items, of the packed item's rows alone and of the column items' rows alone.
TEST(PackedWriter, PackedUnpackedAndHeadItemsGiveWhatDenseWritersGive) {
  const std::vector<DType> dtypes = {DType::kInt64, DType::kFloat32, DType::kInt16,
                                     DType::kUInt8, DType::kFloat64, DType::kInt32,
                                     DType::kInt8,  DType::kUInt16,  DType::kInt64};
  const int num_columns = static_cast<int>(dtypes.size());
  std::vector<ColumnSpec> specs;
  for (int c = 0; c < num_columns; ++c) {
    specs.push_back(Spec("c" + std::to_string(c), SourceLayout::kFixed, ColumnKind::kDense,
                         dtypes[c], dtypes[c]));
    specs.back().options.has_fill_null = true;
    specs.back().options.fill_null = 7;
    ASSERT_TRUE(Packable(specs.back()));
  }
  // Slot 0 is another column: the run starts at slot 1.
  const int64_t rows_per_item[] = {70, 130, 50};
  DecodedItem items[3];
  std::vector<std::vector<std::vector<uint8_t>>> bytes(3);
  const std::vector<uint8_t> with_nulls = Bitmap(std::vector<int>(50, 1));
  std::vector<uint8_t> valid = with_nulls;
  valid[0] &= ~(1u << 3);  // row 3 of item 2 is null in the columns given this bitmap
  for (int k = 0; k < 3; ++k) {
    items[k].num_rows = rows_per_item[k];
    items[k].sources.resize(num_columns + 1);
    for (int c = 0; c < num_columns; ++c) {
      const int width = DTypeSize(dtypes[c]);
      bytes[k].emplace_back(rows_per_item[k] * width);
      for (size_t b = 0; b < bytes[k][c].size(); ++b) {
        bytes[k][c][b] = static_cast<uint8_t>(b * 31 + c * 7 + k * 101);
      }
      items[k].sources[c + 1].values = bytes[k][c].data();
      if (k == 2 && c % 3 == 0) items[k].sources[c + 1].validity = valid.data();
    }
  }
  std::vector<RowRef> refs;
  for (int k = 0; k < 3; ++k) {
    for (int64_t r = 0; r < rows_per_item[k]; ++r) refs.push_back({&items[k], r});
  }
  std::mt19937 shuffle(5);
  std::shuffle(refs.begin(), refs.end(), shuffle);

  // What DenseWriters give, from the columns as they are before Prepare.
  std::vector<std::vector<uint8_t>> expected;
  for (int c = 0; c < num_columns; ++c) {
    const Written dense = Write(DenseWriter(specs[c], c + 1, c), refs);
    const uint8_t* data = dense.column.values.data;
    expected.emplace_back(data, data + dense.column.values.num_bytes());
  }

  const PackedWriter writer(specs, 1, 0, 3);
  // Item 0 as the cache delivers it: its run packed by rows, no columns.
  const PackedRun run = MakePackedRun(specs, 0, num_columns);
  std::vector<const uint8_t*> values(num_columns);
  for (int c = 0; c < num_columns; ++c) values[c] = items[0].sources[c + 1].values;
  std::vector<uint8_t> packed_bytes(rows_per_item[0] * run.row_bytes);
  PackRows(run, values.data(), rows_per_item[0], packed_bytes.data());
  items[0].packed_rows = {std::make_shared<arrow::Buffer>(
      packed_bytes.data(), static_cast<int64_t>(packed_bytes.size()))};
  for (int c = 0; c < num_columns; ++c) items[0].sources[c + 1] = ColumnSource{};
  // Prepare leaves the others' columns as they are (no packing on the batches' path).
  for (DecodedItem& item : items) ASSERT_TRUE(writer.Prepare(&item).ok());
  for (int k = 1; k < 3; ++k) {
    EXPECT_TRUE(items[k].packed_rows.empty());
    EXPECT_NE(items[k].sources[1].values, nullptr);
  }

  // A batch of all three items, one of the packed item's rows alone and one of the others' rows
  // alone (the column gathers).
  std::vector<RowRef> packed_only;
  std::vector<RowRef> columns_only;
  for (const RowRef& ref : refs) {
    (ref.item == &items[0] ? packed_only : columns_only).push_back(ref);
  }
  for (const auto* batch : {&refs, &packed_only, &columns_only}) {
    const BatchRows rows(*batch);
    std::vector<OutputColumn> columns(num_columns);
    SlabLayout layout;
    writer.Size(rows, columns.data(), &layout);
    auto slab = SlabPool::Make(0)->Acquire(layout.total_bytes());
    std::memset(slab->data(), 0xAB, layout.total_bytes());
    layout.Bind(slab);
    ASSERT_TRUE(writer.Fill(rows, columns.data()).ok());
    for (int c = 0; c < num_columns; ++c) {
      SCOPED_TRACE(c);
      EXPECT_EQ(columns[c].name, specs[c].name);
      EXPECT_EQ(columns[c].values.dtype, dtypes[c]);
      ASSERT_EQ(columns[c].values.shape, (std::vector<int64_t>{rows.size()}));
      const uint8_t* data = columns[c].values.data;
      std::vector<uint8_t> got(data, data + columns[c].values.num_bytes());
      if (batch == &refs) {
        EXPECT_EQ(got, expected[c]);
      } else {
        // The same rows, in the same order, as the full batch's rows of those items.
        const int width = DTypeSize(dtypes[c]);
        std::vector<uint8_t> want;
        for (size_t i = 0; i < refs.size(); ++i) {
          if ((refs[i].item == &items[0]) != (batch == &packed_only)) continue;
          want.insert(want.end(), expected[c].begin() + i * width,
                      expected[c].begin() + (i + 1) * width);
        }
        EXPECT_EQ(got, want);
      }
    }
  }
}

TEST(MakeColumnWriters, EightAdjacentPlainColumnsShareAPackedWriter) {
  OutputSpec spec;
  auto plain = [](const std::string& name) {
    return Spec(name, SourceLayout::kFixed, ColumnKind::kDense, DType::kFloat32, DType::kFloat32);
  };
  for (int c = 0; c < 8; ++c) spec.columns.push_back(plain("a" + std::to_string(c)));
  // A cast breaks the run; seven are too few to pack.
  spec.columns.push_back(
      Spec("cast", SourceLayout::kFixed, ColumnKind::kDense, DType::kInt32, DType::kInt64));
  for (int c = 0; c < 7; ++c) spec.columns.push_back(plain("b" + std::to_string(c)));
  WriterOptions options;
  options.pack = true;
  const ColumnWriters made = MakeColumnWriters(spec, options);
  EXPECT_EQ(made.num_outputs, 16);
  ASSERT_EQ(made.writers.size(), 9u);
  EXPECT_NE(dynamic_cast<const PackedWriter*>(made.writers[0].get()), nullptr);
  EXPECT_EQ(made.writers[0]->output(), 0);
  for (size_t w = 1; w < made.writers.size(); ++w) {
    EXPECT_NE(dynamic_cast<const DenseWriter*>(made.writers[w].get()), nullptr) << w;
    EXPECT_EQ(made.writers[w]->output(), static_cast<int>(w) + 7);
  }
  // Unshuffled batches copy runs of rows from the columns: no packing.
  options.pack = false;
  const ColumnWriters unpacked = MakeColumnWriters(spec, options);
  EXPECT_EQ(unpacked.num_outputs, 16);
  ASSERT_EQ(unpacked.writers.size(), 16u);
  for (const auto& writer : unpacked.writers) {
    EXPECT_NE(dynamic_cast<const DenseWriter*>(writer.get()), nullptr);
  }
}

TEST(MakeColumnWriters, OneWriterPerOutputPlusMasksFeaturesAndPadding) {
  OutputSpec spec;
  spec.columns.push_back(
      Spec("d", SourceLayout::kFixed, ColumnKind::kDense, DType::kInt32, DType::kInt32));
  spec.columns.push_back(
      Spec("s", SourceLayout::kString, ColumnKind::kStrings, DType::kUInt8, DType::kUInt8));
  spec.columns.back().options.null_mask = true;
  spec.columns.push_back(
      Spec("p", SourceLayout::kPartition, ColumnKind::kDense, DType::kInt64, DType::kInt64));
  spec.features.push_back(
      Spec("f", SourceLayout::kFixed, ColumnKind::kDense, DType::kInt32, DType::kInt32));
  spec.feature_groups.push_back({"features", DType::kFloat32, false, 0, 1});
  WriterOptions options;
  options.padding_mask = true;
  const ColumnWriters made = MakeColumnWriters(spec, options);
  EXPECT_EQ(made.num_outputs, 5);
  std::vector<int> outputs;
  for (const auto& writer : made.writers) outputs.push_back(writer->output());
  EXPECT_EQ(outputs, (std::vector<int>{0, 1, 1, 2, 3, 4}));
  EXPECT_NE(dynamic_cast<const DenseWriter*>(made.writers[0].get()), nullptr);
  EXPECT_NE(dynamic_cast<const OffsetsWriter*>(made.writers[1].get()), nullptr);
  EXPECT_NE(dynamic_cast<const MaskWriter*>(made.writers[2].get()), nullptr);
  EXPECT_NE(dynamic_cast<const PartitionWriter*>(made.writers[3].get()), nullptr);
  EXPECT_NE(dynamic_cast<const FeaturesWriter*>(made.writers[4].get()), nullptr);
  EXPECT_NE(dynamic_cast<const PaddingFlagWriter*>(made.writers[5].get()), nullptr);
}

TEST(MakeColumnWriters, ListsInNullMaskGetAnElementMaskWriter) {
  OutputSpec spec;
  spec.columns.push_back(
      Spec("l", SourceLayout::kList, ColumnKind::kRagged, DType::kInt32, DType::kInt32));
  spec.columns.back().options.null_mask = true;
  spec.columns.push_back(
      Spec("m", SourceLayout::kList, ColumnKind::kRagged, DType::kInt32, DType::kInt32));
  const ColumnWriters made = MakeColumnWriters(spec, WriterOptions());
  std::vector<int> outputs;
  for (const auto& writer : made.writers) outputs.push_back(writer->output());
  EXPECT_EQ(outputs, (std::vector<int>{0, 0, 0, 1}));
  EXPECT_NE(dynamic_cast<const MaskWriter*>(made.writers[1].get()), nullptr);
  EXPECT_NE(dynamic_cast<const ElementMaskWriter*>(made.writers[2].get()), nullptr);
}

// Two groups over adjacent slots, each its own dtype; the masked group zero-fills nulls and
// reports them in its [B, F] mask.
TEST(FeaturesWriter, GroupsHaveTheirOwnDtypeAndMask) {
  DecodedItem item;
  item.num_rows = 3;
  item.sources.resize(3);
  const double dense[] = {0.5, 1.5, 2.5};
  const int64_t ids[] = {7, 99, 9};
  const int32_t more[] = {1, 2, 3};
  const std::vector<uint8_t> ids_valid = Bitmap({true, false, true});
  item.sources[0].values = reinterpret_cast<const uint8_t*>(dense);
  item.sources[1].values = reinterpret_cast<const uint8_t*>(ids);
  item.sources[1].validity = ids_valid.data();
  item.sources[2].values = reinterpret_cast<const uint8_t*>(more);
  const ColumnSpec d =
      Spec("d", SourceLayout::kFixed, ColumnKind::kDense, DType::kFloat64, DType::kFloat64);
  const ColumnSpec i =
      Spec("i", SourceLayout::kFixed, ColumnKind::kDense, DType::kInt64, DType::kInt64);
  const ColumnSpec m =
      Spec("m", SourceLayout::kFixed, ColumnKind::kDense, DType::kInt32, DType::kInt32);
  const FeaturesWriter dense_writer({d}, 0, FeatureGroupSpec{"dense", DType::kFloat32, false, 0, 1},
                                    0, 0);
  const FeaturesWriter id_writer({i, m}, 1, FeatureGroupSpec{"ids", DType::kInt64, true, 1, 2}, 1,
                                 1);
  ASSERT_TRUE(dense_writer.Prepare(&item).ok());
  ASSERT_TRUE(id_writer.Prepare(&item).ok());
  ASSERT_EQ(item.feature_rows.size(), 2u);
  const Written dense_out = Write(dense_writer, {{&item, 2}, {&item, 0}});
  EXPECT_EQ(dense_out.column.name, "dense");
  EXPECT_FALSE(dense_out.column.has_mask);
  EXPECT_EQ(Values<float>(dense_out.column.values), (std::vector<float>{2.5, 0.5}));
  const Written id_out = Write(id_writer, {{&item, 0}, {&item, 1}, {&item, 2}});
  EXPECT_EQ(id_out.column.name, "ids");
  EXPECT_EQ(id_out.column.values.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(Values<int64_t>(id_out.column.values), (std::vector<int64_t>{7, 1, 0, 2, 9, 3}));
  ASSERT_TRUE(id_out.column.has_mask);
  EXPECT_EQ(id_out.column.mask.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(Values<uint8_t>(id_out.column.mask), (std::vector<uint8_t>{1, 1, 0, 1, 1, 1}));
}

// The whole assembler: every output column, one slab, in spec order.
TEST(BatchAssembler, AssemblesAllColumnsIntoOneSlab) {
  auto spec = std::make_shared<OutputSpec>();
  spec->columns.push_back(
      Spec("d", SourceLayout::kFixed, ColumnKind::kDense, DType::kInt32, DType::kInt32));
  spec->columns.push_back(
      Spec("l", SourceLayout::kList, ColumnKind::kPadded, DType::kInt16, DType::kInt16));
  spec->columns.back().options.null_mask = true;
  spec->features.push_back(
      Spec("f", SourceLayout::kFixed, ColumnKind::kDense, DType::kInt32, DType::kInt32));
  spec->feature_groups.push_back({"features", DType::kFloat32, false, 0, 1});
  WriterOptions options;
  options.padding_mask = true;
  options.padding_name = "__padding__";
  const BatchAssembler assembler(spec, options, SlabPool::Make(2));

  DecodedItem item;
  item.num_rows = 3;
  item.padding = true;
  item.sources.resize(3);
  const int32_t dense[] = {7, 8, 9};
  const int16_t list_values[] = {1, 2, 3};
  const int32_t list_offsets[] = {0, 1, 1, 3};
  const std::vector<uint8_t> list_valid = Bitmap({true, false, true});
  const int32_t feature[] = {100, 101, 102};
  item.sources[0].values = reinterpret_cast<const uint8_t*>(dense);
  item.sources[1].values = reinterpret_cast<const uint8_t*>(list_values);
  item.sources[1].offsets32 = list_offsets;
  item.sources[1].validity = list_valid.data();
  item.sources[2].values = reinterpret_cast<const uint8_t*>(feature);
  ASSERT_TRUE(assembler.Prepare(&item).ok());

  auto window = std::make_shared<WindowRows>();
  window->order = {2, 1, 0};
  window->starts = {0};
  window->items = {&item};
  auto made = assembler.Assemble(4, {{window, 0, 3}});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const Batch& batch = **made;
  EXPECT_EQ(batch.index, 4);
  EXPECT_EQ(batch.num_rows, 3);
  ASSERT_EQ(batch.columns.size(), 4u);
  EXPECT_EQ(batch.columns[0].name, "d");
  EXPECT_EQ(Values<int32_t>(batch.columns[0].values), (std::vector<int32_t>{9, 8, 7}));
  EXPECT_EQ(batch.columns[1].name, "l");
  EXPECT_EQ(Values<int16_t>(batch.columns[1].values), (std::vector<int16_t>{2, 3, 0, 0, 1, 0}));
  EXPECT_EQ(Values<int64_t>(batch.columns[1].lengths), (std::vector<int64_t>{2, 0, 1}));
  EXPECT_EQ(Values<uint8_t>(batch.columns[1].mask), (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(batch.columns[2].name, "features");
  EXPECT_EQ(Values<float>(batch.columns[2].values), (std::vector<float>{102, 101, 100}));
  EXPECT_EQ(batch.columns[3].name, "__padding__");
  EXPECT_EQ(Values<uint8_t>(batch.columns[3].values), (std::vector<uint8_t>{1, 1, 1}));
  // One slab holds every tensor.
  const std::shared_ptr<Slab>& slab = batch.columns[0].values.owner;
  for (const OutputColumn& column : batch.columns) EXPECT_EQ(column.values.owner, slab);
  EXPECT_EQ(batch.columns[1].lengths.owner, slab);
  EXPECT_EQ(batch.columns[1].mask.owner, slab);
}

}  // namespace
}  // namespace stoker
