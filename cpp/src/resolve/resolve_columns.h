// ResolveColumns: every requested column and feature turned into a ColumnSpec once, at open, so
// that every type, option and cast error surfaces before a thread starts, all of them in one
// error (one line per column).
#pragma once

#include <arrow/type_fwd.h>

#include <memory>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "resolve/column_spec.h"
#include "stoker/error.h"
#include "stoker/options.h"

namespace stoker {

/// Resolves `given.columns` / `given.features` against the catalog's schema or, with a user
/// transform, against its output schema (plus the partition columns). `transform_schema`: that
/// schema when already learned (ProbeUserTransform); null: learned here by calling the transform.
/// A struct named in both columns and transforms (a HuggingFace Image() feature, struct<bytes:
/// binary, path: string>) is one column: its chain reads `<struct>.bytes`, the output named after
/// the struct; its other fields only where columns names them. Any other struct named by
/// transforms is an error naming its fields.
/// `cached`: a ready-tensor cache is on (chains then keep their deterministic prefix apart for it).
/// `padding_flag`: the padding flag's name when padding_mask is on (no column may have it).
/// `num_threads`: how many threads build the "auto" vocabularies of categories (together).
Result<OutputSpec> ResolveColumns(const Catalog& catalog, const ColumnsOptions& given,
                                  bool cached = false,
                                  std::shared_ptr<arrow::Schema> transform_schema = nullptr,
                                  const std::string& padding_flag = "", int num_threads = 1);

/// Resolves `name` alone, as a column or (`feature`) as a feature alone in its group, with the
/// options' choices for it (its vocabulary, its chains): one spec, or one per output of a column
/// whose transforms give several. What Describe reports per column; cross-column checks (a
/// column listed twice, clashing names) are left out. A field of a struct whose transforms read
/// its bytes: the bytes field gives the struct's column, another field nothing unless columns
/// names it.
Result<std::vector<ColumnSpec>> ResolveColumnAlone(
    const Catalog& catalog, const ColumnsOptions& options, bool cached,
    const std::shared_ptr<arrow::Schema>& transform_schema, const std::string& name, bool feature);

}  // namespace stoker
