// ColumnSource: one column of one decoded segment as the raw pointers the column writers gather
// from, prepared on the worker that decoded it (PrepareSource): nulls checked against the
// column's options, null elements filled in a copy, the offsets of every list level found.
// Thread safety: PrepareSource and TransformInput are pure functions; a ColumnSource is read-only
// once prepared.
#pragma once

#include <arrow/array.h>
#include <arrow/buffer.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "resolve/column_spec.h"
#include "stoker/error.h"
#include "transform/value.h"

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
    /// a null item spans no items of the next level (PrepareSource checks).
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

/// Points `out` at `array` (column `spec` of the rows that `where` names) for the writers: checks
/// its nulls against the options (rows, and below them inner lists, strings and elements), and
/// copies list or fixed-size list values whose null elements take the fill value. The decoded
/// array itself is never changed (the ready-tensor cache holds it).
Status PrepareSource(const ColumnSpec& spec, const std::string& where,
                     const std::shared_ptr<arrow::Array>& array, ColumnSource* out);

/// Where `num_rows` rows from `row_begin` of row group `rg` are, for messages: the row group
/// ("file 'x', row group 3"), or the rows of it when they are not all of it.
std::string RowsWhere(const Catalog& catalog, const RowGroupRef& rg, int64_t row_begin,
                      int64_t num_rows);

/// One row of a transformed column as a transform Value: a view of bytes, text or a tensor in
/// `source` (laid out as `spec` describes), or a null Value.
transform::Value TransformInput(const ColumnSpec& spec, const ColumnSource& source, int64_t row);

}  // namespace stoker
