// The decoder's side of a user transform (stoker/user_transform.h): which file columns it reads,
// its output schema learned at open, and each call checked against that schema.
#pragma once

#include <arrow/record_batch.h>

#include <memory>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "stoker/options.h"
#include "stoker/user_transform.h"

namespace stoker {

/// How many rows of the first row group the transform is called on at open.
inline constexpr int64_t kTransformProbeRows = 64;

/// The file columns the user transform receives (options.transform_columns, or every file
/// column), in schema order; errors name a column that is not a file column.
Result<std::vector<std::string>> TransformInputs(const Catalog& catalog,
                                                 const LoaderOptions& options);

/// `fields` of one whole row group as the transform's input: dictionaries resolved, extension
/// types (fixed-shape tensors) kept so the callee sees their shape.
Result<std::shared_ptr<arrow::RecordBatch>> ReadTransformInput(
    const Catalog& catalog, int row_group, const std::vector<std::string>& fields);

/// Runs `transform` on `input` and checks its output: as many rows as the input, and, when
/// `expected` is given, the same column names and types. Errors (ErrorKind::kTransform) start
/// with `where` and name the key and both types.
Result<std::shared_ptr<arrow::RecordBatch>> RunUserTransform(
    UserTransform& transform, const arrow::Schema* expected,
    const std::shared_ptr<arrow::RecordBatch>& input, const std::string& where);

/// The transform's output schema: its output for the first kTransformProbeRows rows of the
/// first row group (called at open, before any thread starts).
Result<std::shared_ptr<arrow::Schema>> ProbeUserTransform(const Catalog& catalog,
                                                          const LoaderOptions& options);

}  // namespace stoker
