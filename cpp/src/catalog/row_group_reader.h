// Reading a row group through the catalog: the requested columns of one catalog row group as the
// dataset's unified types (nested leaves extracted, each file's types conformed), through Arrow's
// Parquet reader with the footer the catalog read (local fixed-width columns without nulls
// through Parquet's column reader: README.md). Used at open (an "auto" vocabulary's scan, the
// user transform's probe) and by the decoder on the workers.
// Thread safety: pure functions of the (immutable) catalog; any thread.
#pragma once

#include <arrow/array.h>
#include <arrow/record_batch.h>
#include <arrow/table.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "stoker/error.h"

namespace stoker {

/// Reads `fields` of catalog row group `row_group` (local fixed-width columns without nulls
/// directly, with Parquet's column reader; the others through Arrow's Parquet reader).
/// Fields in `as_dictionary` (string columns) come back as dictionary arrays where the file
/// stores them dictionary-encoded, so a caller can work per distinct value instead of per row.
/// With `num_rows` in [0, the row group's rows), only its first `num_rows` rows are decoded
/// (pages past them are not). Errors name the file, row group and columns.
Result<std::shared_ptr<arrow::Table>> ReadRowGroupTable(
    const Catalog& catalog, int row_group, const std::vector<std::string>& fields,
    const std::set<std::string>& as_dictionary = {}, int64_t num_rows = -1);

/// One array of `column`'s chunks with dictionaries resolved and, unless `keep_extensions`,
/// extension types replaced by their storage. `field` and `where` name it in errors.
Result<std::shared_ptr<arrow::Array>> FlattenColumn(const arrow::ChunkedArray& column,
                                                    bool keep_extensions, const std::string& field,
                                                    const std::string& where);

/// `fields` of one whole row group as one record batch: dictionaries resolved, extension types
/// (fixed-shape tensors) kept so that a reader sees their shape. What a user transform receives.
Result<std::shared_ptr<arrow::RecordBatch>> ReadRowGroupBatch(
    const Catalog& catalog, int row_group, const std::vector<std::string>& fields);

}  // namespace stoker
