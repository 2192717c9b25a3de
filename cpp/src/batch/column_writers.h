// Column writers: each one writes one kind of output tensor group of a batch into its slab.
//
// A batch is assembled in two steps over a list of writers built once per loader from the
// OutputSpec (MakeColumnWriters):
//   1. Size: every writer sets the shapes of the tensors it writes (some need the batch's rows:
//      the longest list, the total of string bytes) and places them in the SlabLayout.
//   2. The assembler takes one slab of SlabLayout::total_bytes() and binds every placed tensor.
//   3. Fill: every writer writes its tensors.
// Writers may also prepare a decoded item once, on the worker that decoded it (the features
// writer transposes the feature columns there). A new output (a transform's codec) is a new
// writer, not a new arm of a switch.
//
// Thread safety: writers are immutable after construction; Size, Fill and Prepare are const and
// run on many workers at once (each on its own batch or item).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "decode/decoder.h"
#include "resolve/column_spec.h"
#include "stoker/options.h"
#include "stoker/tensor.h"

namespace stoker {

/// One row of a batch: a row of a decoded item.
struct RowRef {
  const DecodedItem* item;
  int64_t row;
};

/// A shuffle window's rows in delivery order: position p is window row order[p], which is row
/// order[p] - starts[k] of items[k] for the last k with starts[k] <= order[p] (starts ascending,
/// starts[0] == 0). The sequencer hands batches out as stretches of it, so the per-row work of
/// resolving them runs on the workers that assemble the batches, not on the one sequencer.
struct WindowRows {
  std::vector<uint32_t> order;
  std::vector<int64_t> starts;
  std::vector<const DecodedItem*> items;
};

/// Positions [begin, end) of a window's rows.
struct RowStretch {
  std::shared_ptr<const WindowRows> window;
  int64_t begin = 0;
  int64_t end = 0;
};

/// The rows of one batch resolved once: which distinct item and which row each comes from, and
/// the runs of consecutive rows of one item (long in natural order, length 1 when shuffled).
struct BatchRows {
  /// Reuses the vectors of the last BatchRows destroyed on this thread (their capacity).
  explicit BatchRows(const std::vector<RowRef>& refs);
  /// The same rows given as stretches of windows (the pipeline's batches).
  explicit BatchRows(const std::vector<RowStretch>& stretches);
  ~BatchRows();
  BatchRows(const BatchRows&) = delete;
  BatchRows& operator=(const BatchRows&) = delete;

  int64_t size() const { return static_cast<int64_t>(row.size()); }
  const DecodedItem& Item(int64_t i) const { return *items[item[i]]; }
  const ColumnSource& Source(int64_t i, int slot) const { return items[item[i]]->sources[slot]; }

  std::vector<const DecodedItem*> items;          // distinct, in order of first use
  std::vector<uint32_t> item;                     // per batch row: index into `items`
  std::vector<int64_t> row;                       // per batch row: row within its item
  std::vector<std::pair<int64_t, int64_t>> runs;  // (first row in the batch, length)
  /// Whether runs are long enough (8 rows on average) that copying run by run pays.
  bool use_runs = false;
  /// Keys of the transforms' random streams (with each row's global id): the plan's.
  uint64_t seed = 0;
  int64_t epoch = 0;

 private:
  /// Takes the vectors of the last BatchRows destroyed on this thread, sized for `count` rows.
  void Start(int64_t count);
  /// `it`'s index in `items`, added at its first use.
  uint32_t Intern(const DecodedItem* it);
  /// Sets batch row `i` and extends the runs.
  void Set(int64_t i, uint32_t item_index, int64_t item_row) {
    item[i] = item_index;
    row[i] = item_row;
    if (i > 0 && item[i - 1] == item_index && row[i - 1] + 1 == item_row) {
      ++runs.back().second;
    } else {
      runs.emplace_back(i, 1);
    }
  }
  void Finish() { use_runs = static_cast<int64_t>(runs.size()) * 8 <= size(); }
};

/// Where each tensor of a batch goes in its slab: 64-byte aligned offsets, in placement order.
class SlabLayout {
 public:
  /// Reserves room for `tensor` (its dtype and shape set) at the next aligned offset. The
  /// tensor must stay at this address until Bind().
  void Place(Tensor* tensor);
  int64_t total_bytes() const { return total_; }
  /// Points every placed tensor into `slab` and makes the slab its owner.
  void Bind(const std::shared_ptr<Slab>& slab) const;

 private:
  int64_t total_ = 0;
  std::vector<std::pair<Tensor*, int64_t>> placed_;
};

class ColumnWriter {
 public:
  explicit ColumnWriter(int output) : output_(output) {}
  virtual ~ColumnWriter() = default;

  /// Index of the batch's output column written (a mask writer shares its column's index).
  int output() const { return output_; }

  /// Per-item work on the worker that decoded `item`, before any batch reads it.
  virtual Status Prepare(DecodedItem* item) const { return Status::OK(); }
  /// Sets the shapes (and names) of the tensors this writer writes in `column`, and places them.
  virtual void Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const = 0;
  /// Writes those tensors, bound to the slab by now. Fails only for transforms (a row an op
  /// cannot take), naming the file, row group, row and column.
  virtual Status Fill(const BatchRows& rows, OutputColumn* column) const = 0;

 private:
  const int output_;
};

/// kDense from fixed-width or bit-packed values: [B] or [B, ...], typed gathers (runs of
/// consecutive rows copied at once), nulls filled with fill_null or zero.
class DenseWriter final : public ColumnWriter {
 public:
  DenseWriter(ColumnSpec spec, int slot, int output);
  void Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const override;
  Status Fill(const BatchRows& rows, OutputColumn* column) const override;

 private:
  const ColumnSpec spec_;
  const int slot_;
};

/// kPadded lists: values [B, longest row of the batch] padded with pad_value, lengths int64 [B].
class PaddedWriter final : public ColumnWriter {
 public:
  PaddedWriter(ColumnSpec spec, int slot, int output);
  void Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const override;
  Status Fill(const BatchRows& rows, OutputColumn* column) const override;

 private:
  const ColumnSpec spec_;
  const int slot_;
};

/// kRagged lists and kStrings: values [total] concatenated, offsets int64 [B + 1]. Null rows are
/// empty.
class OffsetsWriter final : public ColumnWriter {
 public:
  OffsetsWriter(ColumnSpec spec, int slot, int output);
  void Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const override;
  Status Fill(const BatchRows& rows, OutputColumn* column) const override;

 private:
  const ColumnSpec spec_;
  const int slot_;
};

/// Hive partition columns (one value per item): int64 [B], or strings (values + offsets).
class PartitionWriter final : public ColumnWriter {
 public:
  PartitionWriter(ColumnSpec spec, int slot, int output);
  void Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const override;
  Status Fill(const BatchRows& rows, OutputColumn* column) const override;

 private:
  const ColumnSpec spec_;
  const int slot_;
};

/// `<column>.mask` when null_mask is on: bool [B], true where the row is valid.
class MaskWriter final : public ColumnWriter {
 public:
  MaskWriter(int slot, int output) : ColumnWriter(output), slot_(slot) {}
  void Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const override;
  Status Fill(const BatchRows& rows, OutputColumn* column) const override;

 private:
  const int slot_;
};

/// The element masks of a list column under null_mask (OutputColumn::element_masks, Python's
/// `<column>_mask_1`...): ElementMaskLevels(spec) bool tensors shaped after the tensors the
/// column's values writer placed before it.
class ElementMaskWriter final : public ColumnWriter {
 public:
  ElementMaskWriter(const ColumnSpec& spec, int slot, int output);
  void Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const override;
  Status Fill(const BatchRows& rows, OutputColumn* column) const override;

 private:
  const ColumnSpec spec_;
  const int slot_;
  const int levels_;
};

/// One group of stacked features [B, F] in the group's dtype (plus `<group>_mask`, bool [B, F],
/// with the group's null_mask). Prepare casts and transposes an item's feature columns (slots
/// first_slot .. first_slot + F - 1) into its row-major matrix (DecodedItem::feature_rows[group])
/// and frees them; Fill copies whole matrix rows, a run at a time.
class FeaturesWriter final : public ColumnWriter {
 public:
  FeaturesWriter(std::vector<ColumnSpec> features, int first_slot, FeatureGroupSpec group,
                 int group_index, int output);
  /// One group without a mask (the single `features` group).
  FeaturesWriter(std::vector<ColumnSpec> features, int first_slot, DType dtype, std::string name,
                 int output);
  Status Prepare(DecodedItem* item) const override;
  void Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const override;
  Status Fill(const BatchRows& rows, OutputColumn* column) const override;

 private:
  const std::vector<ColumnSpec> features_;
  const int first_slot_;
  const FeatureGroupSpec group_;
  const int group_index_;
};

/// A PackedRun (resolve/column_spec.h): `specs` in slots and outputs first_slot.. and output()..
/// An item packed by the worker that decoded it, or read from the ready-tensor cache, holds the
/// run's values packed by rows (DecodedItem::packed_rows[packed_index]); Fill gathers a block of
/// rows at a time from them, so a shuffled row costs the few cache lines of its packed row
/// instead of one miss per column. Rows of other items (a run split between decode tasks, as the
/// head's and the first windows' are, or a row group with a null) come from their columns, as
/// DenseWriter gathers them.
class PackedWriter final : public ColumnWriter {
 public:
  PackedWriter(std::vector<ColumnSpec> specs, int first_slot, int packed_index, int output);
  void Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const override;
  Status Fill(const BatchRows& rows, OutputColumn* column) const override;

 private:
  const std::vector<ColumnSpec> specs_;
  const int packed_index_;
  PackedRun run_;  // set once by the constructor; `first` is the first slot
};

/// A column with a transform chain: dense [B, output shape...] of the chain's output dtype. Each
/// row's source (the raw value, or the cached prefix's tensor) goes through the chain's remaining
/// ops, random ones keyed by (seed, epoch, the row's global id, op index).
///
/// A column with several outputs (a group) has one writer for all of them: it writes the
/// adjacent output columns `output() .. output() + specs.size() - 1`, running the ops the
/// chains share once per row. Under on_error="zero" each output also gets `<name>_valid`.
///
/// `lend`: a chain run wholly before the cache leaves rows to copy; when a batch is one run of
/// one item covering at least a quarter of its rows, the batch's tensor points into the item's
/// buffer instead (kept alive by the tensor's owner). Only for buffers nothing else reads or
/// maps: off with a tensor cache (its entries are mapped, and written from the items after the
/// batch is out) and with pin_memory (the tensor would not be pinned).
class TransformWriter final : public ColumnWriter {
 public:
  TransformWriter(const ColumnSpec& spec, int slot, int output, bool lend = false)
      : TransformWriter(std::vector<ColumnSpec>{spec}, slot, output, lend) {}
  /// `specs` read the same source; their slots are slot .. slot + specs.size() - 1.
  TransformWriter(std::vector<ColumnSpec> specs, int slot, int output, bool lend = false);
  void Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const override;
  Status Fill(const BatchRows& rows, OutputColumn* column) const override;

 private:
  /// The rows' bytes in the item when the batch may point into them, else nullptr.
  const uint8_t* Lendable(const BatchRows& rows) const;

  const std::vector<ColumnSpec> specs_;
  const int slot_;
  const bool lend_;
  /// The chain ran wholly before the cache into rows of the output's dtype and shape: batches
  /// gather them like a plain column.
  bool gather_only_ = false;
  int64_t row_bytes_ = 0;  // of the (first) output
};

/// The padding flag: bool [B], true for rows that pad the rank's share (DecodedItem::padding).
class PaddingFlagWriter final : public ColumnWriter {
 public:
  PaddingFlagWriter(std::string name, int output) : ColumnWriter(output), name_(std::move(name)) {}
  void Size(const BatchRows& rows, OutputColumn* column, SlabLayout* layout) const override;
  Status Fill(const BatchRows& rows, OutputColumn* column) const override;

 private:
  const std::string name_;
};

/// The writers of a loader's batches, in slab order, and how many output columns they write.
struct ColumnWriters {
  std::vector<std::unique_ptr<const ColumnWriter>> writers;
  int num_outputs = 0;
};

/// What the writers take from a loader's options (its OrderOptions and ExecutionOptions, and
/// whether it has a cache), resolved by the loader.
struct WriterOptions {
  /// Adds a bool tensor named `padding_name` marking rows repeated to even out ranks.
  bool padding_mask = false;
  std::string padding_name = "__padding__";
  /// Transform writers may lend an item's buffer to a batch (TransformWriter's `lend`): false
  /// with a tensor cache or pin_memory.
  bool lend = true;
  /// PackedRuns get a PackedWriter (and a tensor cache stores them packed): when rows are
  /// shuffled and a tensor cache is on; unshuffled batches copy runs of rows from each column at
  /// once, and without a cache the column gathers cost less than packing each row group.
  bool pack = false;
};

/// One writer per output of `spec` (or per run of packed columns; plus mask writers per null_mask
/// column), then the features and padding-flag writers that `options` asks for.
ColumnWriters MakeColumnWriters(const OutputSpec& spec, const WriterOptions& options);

}  // namespace stoker
