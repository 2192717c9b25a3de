// ColumnSpec: what one requested column becomes, decided once from the schema and the options.
//
// Resolution is where type errors surface (unknown column, unsupported type, a list without a
// chosen mode, a lossy feature cast), before any thread starts.
#pragma once

#include <arrow/type_fwd.h>

#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "stoker/column_info.h"
#include "stoker/options.h"
#include "transform/op.h"

namespace stoker {

/// How the source Arrow data is laid out.
enum class SourceLayout {
  kFixed,      // fixed-width values, `inner` per row (primitive or fixed_size_list of them)
  kBool,       // bit-packed booleans, `inner` per row (bool or fixed_size_list of bool)
  kList,       // list / large_list of fixed-width values or bits (source_dtype kBool)
  kString,     // string / binary (and large_ variants)
  kPartition,  // a hive partition value, constant per file
};

struct ColumnSpec {
  std::string name;
  int field_index = -1;  // in Catalog::schema()
  SourceLayout layout = SourceLayout::kFixed;
  ColumnKind kind = ColumnKind::kDense;
  DType source_dtype = DType::kUInt8;  // element type as stored
  DType dtype = DType::kUInt8;         // element type delivered
  int64_t inner = 1;                   // elements per row (fixed-size lists)
  std::vector<int64_t> inner_shape;
  bool dictionary = false;
  ColumnOptions options;
  /// Whether `options` came from a per-column entry rather than the defaults for all columns.
  bool explicit_options = false;
  std::string arrow_type;
  std::string annotation;
  /// The column's transform chain (LoaderOptions::transforms), or null. The decoder runs ops
  /// [0, cached_ops) per row before the ready-tensor cache, so the cache stores their output; the
  /// column's writer runs the rest per batch. `layout`, `source_dtype`, `inner` and `inner_shape`
  /// then describe what the writer reads (the raw column, or the cached prefix's fixed-shape
  /// tensors); `dtype` and `kind` what it writes (a dense tensor of the chain's output type).
  std::shared_ptr<const transform::Chain> chain;
  size_t cached_ops = 0;
  std::vector<int64_t> output_shape;  // per-row shape of the chain's output
};

struct OutputSpec {
  std::vector<ColumnSpec> columns;   // one output tensor group each
  std::vector<ColumnSpec> features;  // stacked into one [B, F] tensor
  /// Field names the decoder must read (file fields only), in schema order. With a user
  /// transform: the transform's inputs.
  std::vector<std::string> file_fields;
  /// Names of the arrays a decode task delivers: file_fields, or with a user transform the
  /// transform outputs that columns and features read, in the transform's output order.
  std::vector<std::string> decoded_fields;
  /// LoaderOptions::user_transform (or null) and its output schema, learned at open.
  std::shared_ptr<UserTransform> user_transform;
  std::shared_ptr<arrow::Schema> transform_schema;
};

/// Resolves `options.columns` / `options.features` against the catalog's schema or, with a user
/// transform, against its output schema (plus the partition columns). `transform_schema`: that
/// schema when already learned (ProbeUserTransform); null: learned here by calling the transform.
Result<OutputSpec> ResolveColumns(const Catalog& catalog, const LoaderOptions& options,
                                  std::shared_ptr<arrow::Schema> transform_schema = nullptr);

/// Whether nulls of this column are replaced by its fill_null value (numeric and bool columns
/// with fill_null set; strings and lists need null_mask instead).
bool FillNullApplies(const ColumnSpec& spec);

/// Whether `value` (a fill_null or pad_value option) is exactly representable as `dtype`.
/// NaN and infinities count as representable in the float dtypes only.
bool IsRepresentable(double value, DType dtype);

/// Whether every value of `from` is exactly representable as `to`.
bool IsLosslessCast(DType from, DType to);

ColumnInfo ToColumnInfo(const ColumnSpec& spec);

}  // namespace stoker
