// ColumnLookup: the columns the options can name (the catalog's, or a user transform's outputs,
// plus the hive partition columns either way), and the first step of resolving one of them: its
// options, its type classified, its value conversion and vocabulary.
// Thread safety: used by one thread, at open.
#pragma once

#include <arrow/type_fwd.h>

#include <memory>
#include <set>
#include <string>

#include "catalog/catalog.h"
#include "resolve/categories.h"
#include "resolve/column_spec.h"
#include "stoker/error.h"
#include "stoker/options.h"

namespace stoker {

class ColumnLookup {
 public:
  /// The columns `options` can name. With a user transform: its outputs (its schema is
  /// `transform_schema`, or learned here by calling it) plus the partition columns; the
  /// transform, its inputs and its schema are recorded in `out`, which also receives the
  /// vocabularies the lookups build.
  /// `cached`: a ready-tensor cache is on (what chains resolved through this lookup ask).
  static Result<ColumnLookup> Make(const Catalog& catalog, const ColumnsOptions& options,
                                   bool cached, std::shared_ptr<arrow::Schema> transform_schema,
                                   OutputSpec* out);

  /// Column `name` as it is read: options (its own, else its nearest struct parent's, else the
  /// defaults), type, value conversion and vocabulary. Errors name the column and the option
  /// that fixes them.
  Status Find(const std::string& name, ColumnSpec* spec);

  /// The columns the options can name, partition columns last.
  const arrow::Schema& schema() const { return *schema_; }
  /// The user transform's output schema, or null.
  const std::shared_ptr<arrow::Schema>& transform_schema() const { return transform_schema_; }
  /// The fields (file columns or transform outputs) that a found column reads.
  const std::set<std::string>& needed() const { return needed_; }
  /// Whether a ready-tensor cache is on.
  bool cached() const { return cached_; }
  /// "auto" vocabularies built ahead (BuildAutoVocabularies), used instead of building.
  void set_built_vocabularies(BuiltVocabularies built) { built_ = std::move(built); }

 private:
  ColumnLookup(const Catalog& catalog, const ColumnsOptions& options, bool cached, OutputSpec* out)
      : catalog_(&catalog), options_(&options), cached_(cached), out_(out) {}

  /// The options of `name`; `*named` tells whether they are the column's (or a parent's) own.
  const ColumnOptions& OptionsFor(const std::string& name, bool* named) const;
  Status FindPartition(int index, const ColumnOptions& options, ColumnSpec* spec);
  Status FindField(int index, const ColumnOptions& options, ColumnSpec* spec);
  /// The vocabulary of a column named in categories (nothing otherwise).
  Status MakeCategorical(ColumnSpec* spec);

  const Catalog* catalog_;
  const ColumnsOptions* options_;
  bool cached_;
  OutputSpec* out_;
  std::shared_ptr<arrow::Schema> schema_;
  std::shared_ptr<arrow::Schema> transform_schema_;
  int num_regular_ = 0;  // fields of schema_ before the partition columns
  std::set<std::string> needed_;
  BuiltVocabularies built_;
};

}  // namespace stoker
