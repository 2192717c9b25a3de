// Nested and evolving columns: extracts a flattened column (a struct leaf, a list of a struct's
// leaf, a map's keys or values) from the array the Parquet reader returns, and converts a file's
// array to the dataset's unified type (Catalog, UnifyTypes).
// Thread safety: pure functions of their inputs.
#pragma once

#include <arrow/array.h>

#include <memory>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "stoker/error.h"

namespace stoker {

/// The column at `path` below `array` (a top-level column of a row group): struct children with
/// their parents' nulls merged in; through lists and maps, a list array with the same offsets
/// and nulls whose values are the column below.
Result<std::shared_ptr<arrow::Array>> ExtractPath(const std::shared_ptr<arrow::Array>& array,
                                                  const std::vector<PathStep>& path);

/// `array` converted to `type`, a unification of its type (UnifyTypes): dictionaries
/// materialized, numbers widened, string and list offsets widened, nulls of the null type given
/// the target type. `column` and `where` (file and row group) name it in errors.
Result<std::shared_ptr<arrow::Array>> ConformArray(const std::shared_ptr<arrow::Array>& array,
                                                   const std::shared_ptr<arrow::DataType>& type,
                                                   const std::string& column,
                                                   const std::string& where);

}  // namespace stoker
