// Classify: how a column's Arrow type becomes a tensor (its source layout, stored and delivered
// dtype, per-row shape and annotation), or why it cannot.
#pragma once

#include <arrow/type_fwd.h>

#include <memory>
#include <string>

#include "catalog/catalog.h"
#include "resolve/column_spec.h"
#include "stoker/error.h"
#include "stoker/options.h"

namespace stoker {

/// Fills `spec` (name, options, arrow_type, layout, kind, dtypes, inner shape, annotation, value
/// conversion) for column `name` of type `type` read with `options`. `catalog` (null for a user
/// transform's outputs) and `allow_lossy_cast` decide value conversions (time_unit, decimals).
/// Errors (kUnsupportedType, or the conversion's) name the column and what would fix it.
Status Classify(const std::string& name, const std::shared_ptr<arrow::DataType>& type,
                const ColumnOptions& options, const Catalog* catalog, bool allow_lossy_cast,
                ColumnSpec* spec);

}  // namespace stoker
