// Decoder: reads one task (a segment's row group, a group of its columns) through Arrow's
// Parquet reader, then prepares each column for batch assembly: slices it to the segment, checks
// nulls against the options, and resolves dictionaries. Runs on the CPU workers (push-down), so
// batch assembly only copies.
// Thread safety: Decode() is const and may run on many threads at once.
#pragma once

#include <arrow/array.h>
#include <arrow/table.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "decode/column_spec.h"
#include "plan/planner.h"

namespace stoker {

/// One column of one decoded segment, as raw pointers the column writers gather from.
struct ColumnSource {
  std::shared_ptr<arrow::Array> array;   // keeps the buffers alive
  std::shared_ptr<arrow::Buffer> owned;  // values made here (list elements after fill_null)
  const uint8_t* values = nullptr;       // fixed: row 0; lists/strings: the child values
  int64_t bit_offset = 0;                // bool values: bit index of values[0] (row 0 or child 0)
  const uint8_t* validity = nullptr;     // null bitmap of the rows, or nullptr
  int64_t validity_offset = 0;
  const int32_t* offsets32 = nullptr;  // lists/strings: offsets of row 0
  const int64_t* offsets64 = nullptr;
  /// Lists of lists (ColumnSpec::list_levels): the offsets of each level below the rows', outer
  /// first; each indexes the next level (the last one `values`).
  struct Level {
    const int32_t* offsets32 = nullptr;
    const int64_t* offsets64 = nullptr;
    /// Null bitmap of this level's items (inner lists, or strings), or nullptr when none is null;
    /// a null item spans no items of the next level (Decoder::PrepareSource checks).
    const uint8_t* validity = nullptr;
    int64_t validity_offset = 0;
    int64_t At(int64_t i) const { return offsets32 ? offsets32[i] : offsets64[i]; }
    bool IsValid(int64_t i) const {
      if (validity == nullptr) return true;
      const int64_t bit = validity_offset + i;
      return (validity[bit >> 3] >> (bit & 7)) & 1;
    }
  };
  std::vector<Level> levels;
  /// Lists: null bitmap of the child values (indexed like `values`), or nullptr when none is
  /// null. The values under a null hold fill_null or 0 (a copy in `owned`).
  const uint8_t* values_validity = nullptr;
  int64_t values_validity_offset = 0;
  /// Fixed-size lists with null elements: one byte per element from row 0 (1: present), kept
  /// in `owned_valid`; nullptr when no element below the rows is null.
  const uint8_t* element_valid = nullptr;
  std::shared_ptr<arrow::Buffer> owned_valid;
  bool IsValueValid(int64_t k) const {
    if (values_validity == nullptr) return true;
    const int64_t bit = values_validity_offset + k;
    return (values_validity[bit >> 3] >> (bit & 7)) & 1;
  }
  // Partition columns: the constant value.
  int64_t partition_int = 0;
  std::string partition_text;

  bool IsValid(int64_t row) const {
    if (validity == nullptr) return true;
    const int64_t bit = validity_offset + row;
    return (validity[bit >> 3] >> (bit & 7)) & 1;
  }
  int64_t Begin(int64_t row) const { return offsets32 ? offsets32[row] : offsets64[row]; }
  int64_t End(int64_t row) const { return offsets32 ? offsets32[row + 1] : offsets64[row + 1]; }
};

struct DecodeTask {
  int segment = 0;                  // index into Plan::segments
  std::vector<std::string> fields;  // file fields this task reads
  int64_t estimated_bytes = 0;
};

/// Consecutive features of one feature group in their final layout: row-major rows of `count`
/// features (group order, from `first`) in the group's dtype, no nulls. The ready-tensor cache
/// builds and stores them (TensorCache), so a warm item is gathered straight from its entry.
struct FeatureBlock {
  int group = 0;
  int64_t first = 0;
  int64_t count = 0;
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

/// One row of a transformed column as a transform Value: a view of bytes, text or a tensor in
/// `source` (laid out as `spec` describes), or a null Value.
transform::Value TransformInput(const ColumnSpec& spec, const ColumnSource& source, int64_t row);

/// Reads `fields` of catalog row group `row_group`, whole, through Arrow's Parquet reader.
/// Errors name the file, row group and columns.
Result<std::shared_ptr<arrow::Table>> ReadRowGroupTable(const Catalog& catalog, int row_group,
                                                        const std::vector<std::string>& fields);

/// One array of `column`'s chunks with dictionaries resolved and, unless `keep_extensions`,
/// extension types replaced by their storage. `field` and `where` name it in errors.
Result<std::shared_ptr<arrow::Array>> FlattenColumn(const arrow::ChunkedArray& column,
                                                    bool keep_extensions, const std::string& field,
                                                    const std::string& where);

class Decoder {
 public:
  Decoder(std::shared_ptr<const Catalog> catalog, std::shared_ptr<const OutputSpec> spec);

  /// Splits a segment's columns into tasks of about `task_bytes` uncompressed bytes each.
  std::vector<DecodeTask> MakeTasks(const Plan& plan, int segment, int64_t task_bytes) const;

  /// A task's columns for its segment: DecodeRows of the segment's row group and rows.
  Result<DecodedColumns> Decode(const Plan& plan, const DecodeTask& task) const;

  /// The row-group-level entry point: `fields` of catalog row group `row_group`, rows
  /// [row_begin, row_begin + num_rows), with extension types unwrapped and dictionaries resolved.
  /// Errors name the file, row group and columns. With a user transform, `fields` (then always
  /// its inputs) are read for the whole row group and its outputs (DecodedNames) come back.
  Result<DecodedColumns> DecodeRows(int row_group, const std::vector<std::string>& fields,
                                    int64_t row_begin, int64_t num_rows) const;

  /// The name a field's decoded arrays are cached under: the field, plus the fingerprint of the
  /// transform ops applied before the cache (so changing a transform never serves stale entries).
  std::string CacheName(const std::string& field) const;

  /// The names of the arrays DecodeRows returns for `fields`: `fields`, or with a user transform
  /// its outputs that the loader reads.
  std::vector<std::string> DecodedNames(const std::vector<std::string>& fields) const;

  /// What the cache key adds for a user transform (its fingerprint and inputs); empty without.
  std::string CachePrefix() const;

  /// Builds the item from every task's columns of one segment; checks nulls against options.
  Result<std::shared_ptr<DecodedItem>> Assemble(const Plan& plan, int segment,
                                                std::vector<DecodedColumns> parts) const;

 private:
  Status PrepareSource(const ColumnSpec& spec, const Segment& segment,
                       const std::shared_ptr<arrow::Array>& array, ColumnSource* out) const;

  /// Runs the cached prefix of `spec`'s chain over every row of `array` (a row group's values,
  /// from `row_begin`): a fixed_size_list array of the prefix's output tensors.
  Result<std::shared_ptr<arrow::Array>> ApplyCachedOps(const ColumnSpec& spec,
                                                       const std::shared_ptr<arrow::Array>& array,
                                                       int row_group, int64_t row_begin) const;
  /// Runs the chain of a list column over every element of `array`: a large_list array of the
  /// chain's output, with the same row lengths and row nulls.
  Result<std::shared_ptr<arrow::Array>> ApplyListOps(const ColumnSpec& spec,
                                                     const std::shared_ptr<arrow::Array>& array,
                                                     int row_group, int64_t row_begin) const;
  /// FlattenColumn, or for a categorical field its ids (ApplyVocabulary).
  Result<std::shared_ptr<arrow::Array>> Flatten(const arrow::ChunkedArray& column,
                                                const std::string& field,
                                                const std::string& where) const;
  /// DecodeRows with a user transform: reads its inputs of the whole row group, runs it, then
  /// slices its outputs to the rows and runs their chains' cached prefixes.
  Result<DecodedColumns> DecodeTransformed(int row_group, int64_t row_begin,
                                           int64_t num_rows) const;
  /// The value conversion (time_unit, decimals) of `field`, or null.
  const ValueConversion* Conversion(const std::string& field) const;
  /// The spec of an output column read from `field`, when it has a transform chain.
  const ColumnSpec* ChainedColumn(const std::string& field) const;

  std::shared_ptr<const Catalog> catalog_;
  std::shared_ptr<const OutputSpec> spec_;
  std::vector<int64_t> row_group_starts_;  // dataset-wide id of each row group's first row
};

}  // namespace stoker
