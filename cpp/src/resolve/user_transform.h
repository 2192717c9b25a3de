// A user transform (stoker/user_transform.h) at open: which file columns it reads and its output
// schema, learned by calling it on the first rows; and the check of every call's output against
// that schema, which the decoder runs on each row group (Decoder::DecodeRows).
#pragma once

#include <arrow/record_batch.h>

#include <memory>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "stoker/user_transform.h"

namespace stoker {

/// How many rows of the first row group the transform is called on at open.
inline constexpr int64_t kTransformProbeRows = 64;

/// The file columns the user transform receives: `transform_columns`
/// (ColumnsOptions::transform_columns), or every file column when it is empty, in schema order.
/// Errors name a column that is not a file column.
Result<std::vector<std::string>> TransformInputs(const Catalog& catalog,
                                                 const std::vector<std::string>& transform_columns);

/// Runs `transform` on `input` and checks its output: as many rows as the input, and, when
/// `expected` is given, the same column names and types. Errors (ErrorKind::kTransform) start
/// with `where` and name the key and both types.
Result<std::shared_ptr<arrow::RecordBatch>> RunUserTransform(
    UserTransform& transform, const arrow::Schema* expected,
    const std::shared_ptr<arrow::RecordBatch>& input, const std::string& where);

/// The transform's output schema: its output for the first kTransformProbeRows rows of the
/// first row group (called at open, before any thread starts). `transform_columns` as for
/// TransformInputs.
Result<std::shared_ptr<arrow::Schema>> ProbeUserTransform(
    const Catalog& catalog, UserTransform& transform,
    const std::vector<std::string>& transform_columns);

}  // namespace stoker
