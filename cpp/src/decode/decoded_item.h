// What decoding delivers: a task's arrays and blocks (DecodedColumns), and a segment's item that
// batch assembly reads (DecodedItem). Plain data, shared by the decoder, the ready-tensor cache's
// entries (tensor_entry.h) and the batch writers.
// Thread safety: plain structs; an item is immutable once joined and prepared.
#pragma once

#include <arrow/array.h>
#include <arrow/buffer.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "decode/column_source.h"

namespace stoker {

/// Consecutive features of one feature group in their final layout: row-major rows of `count`
/// features (group order, from `first`) in the group's dtype, no nulls. The ready-tensor cache
/// builds and stores them (CachedDecoder), so a warm item is gathered straight from its entry.
///
/// `packed`: a PackedRun's columns instead (resolve/column_spec.h), packed by rows: `group` is the
/// run's index, `first` and `count` its columns; the item's DecodedItem::packed_rows.
struct FeatureBlock {
  int group = 0;
  int64_t first = 0;
  int64_t count = 0;
  bool packed = false;
  std::shared_ptr<arrow::Array> array;  // keeps `rows` alive (a cache entry's mapping)
  const uint8_t* rows = nullptr;        // the segment's row 0
};

/// Arrays of one task, by field name, and the task's feature blocks (their fields have no array).
struct DecodedColumns {
  std::vector<std::pair<std::string, std::shared_ptr<arrow::Array>>> arrays;
  std::vector<FeatureBlock> blocks;
  int64_t bytes = 0;
};

/// Everything batch assembly needs from one segment: one ColumnSource per output slot
/// (OutputSpec::columns, then OutputSpec::features).
struct DecodedItem {
  int segment = 0;
  int64_t num_rows = 0;
  int64_t bytes = 0;
  bool padding = false;
  std::vector<ColumnSource> sources;
  /// Per feature group: the stacked features of every row, row-major [num_rows, F] in the
  /// group's dtype, and with the group's null_mask its validity [num_rows, F] (bool); built by
  /// BatchAssembler::Prepare on the worker so batches copy whole rows (empty when no features).
  std::vector<std::shared_ptr<arrow::Buffer>> feature_rows;
  std::vector<std::shared_ptr<arrow::Buffer>> feature_masks;
  /// Per PackedRun: its columns' values row by row ([num_rows, row bytes], each column at its
  /// offset), from a packed block (the decoding worker's, or a cache entry's); null otherwise (a
  /// run split between tasks or with a null: its rows are read from the columns).
  std::vector<std::shared_ptr<arrow::Buffer>> packed_rows;
  /// Feature blocks from the cache (every task's); a feature in a block has an empty source. A
  /// group wholly covered by blocks gets no matrix: batches copy from the blocks.
  std::vector<FeatureBlock> feature_blocks;
  /// Where the rows come from, for transform errors and random keys: "file 'x', row group 3",
  /// the segment's first row in its row group, and the dataset-wide id of the item's row 0 (row
  /// groups numbered in catalog order).
  std::string where;
  int64_t row_begin = 0;
  int64_t first_row_id = 0;
};

}  // namespace stoker
