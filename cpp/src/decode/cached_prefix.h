// The cached prefix of a column's transform chain (ColumnSpec::cached_ops, chosen at open by
// resolve/chains.h), run by the decoder over every row it decodes, before the ready-tensor cache,
// so that the cache stores the prefix's output.
// Thread safety: a pure function of its inputs (the chain's ops are const and thread-safe).
#pragma once

#include <arrow/array.h>

#include <cstdint>
#include <memory>

#include "catalog/catalog.h"
#include "resolve/column_spec.h"
#include "stoker/error.h"

namespace stoker {

/// Ops [0, spec.cached_ops) of `spec`'s chain over every row of `array`, rows from `row_begin`
/// of catalog row group `row_group`: a fixed_size_list array of the prefix's output tensors, or
/// with cached_shapes large_binary rows (each its int64 shape, then its data padded to 8 bytes);
/// for a list column the whole chain over every element, a large_list array of its numbers.
/// Under on_error="zero" a row the prefix cannot transform becomes a null; otherwise the error
/// names the file, row group and row.
Result<std::shared_ptr<arrow::Array>> RunCachedPrefix(const Catalog& catalog,
                                                      const ColumnSpec& spec,
                                                      const std::shared_ptr<arrow::Array>& array,
                                                      int row_group, int64_t row_begin);

}  // namespace stoker
