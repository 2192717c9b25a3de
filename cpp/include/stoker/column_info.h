// ColumnInfo: what stoker produces for one output column (Loader::Columns, Describe).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stoker/tensor.h"

namespace stoker {

/// What the loader will produce for one column, for Python's `loader.columns` and `inspect`.
struct ColumnInfo {
  std::string name;
  std::string arrow_type;
  ColumnKind kind;
  DType dtype;
  std::vector<int64_t> inner_shape;  // per-row shape after the batch dimension
  std::string annotation;
  /// Element masks the batches carry (`<name>_mask_1`...): lists and fixed-size lists under
  /// null_mask, one per level below the rows; 0 otherwise.
  int mask_levels = 0;
  /// The keys the column adds beside its own in every batch, in the order of OutputColumn's
  /// arrays: a padded list's lengths (`<name>_lengths`, `<name>_lengths_1`...), its masks
  /// (`<name>_mask`, `<name>_mask_1`...), its valid flags (`<name>_valid`).
  std::vector<std::string> added_keys;
};

}  // namespace stoker
