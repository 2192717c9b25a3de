// ColumnSpec and OutputSpec: what each requested column becomes, decided once at open from the
// schema and the options (ResolveColumns, resolve/resolve_columns.h), and the facts about a
// resolved column that the decoder and the column writers consult at run time (nulls, masks).
// Thread safety: plain values, immutable once resolved.
#pragma once

#include <arrow/type_fwd.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "resolve/value_conversion.h"
#include "resolve/vocabulary.h"
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

/// Live counters of the transform chains (TransformStats), shared by the decoder and the writers
/// of one loader. Thread safety: atomics, updated by any worker.
struct TransformCounters {
  std::atomic<int64_t> prefix_rows{0};
  std::atomic<int64_t> batch_rows{0};
  std::atomic<int64_t> substituted_rows{0};
};

struct ColumnSpec {
  std::string name;
  /// The column read, when it differs from `name`: an output of a several-output chain.
  std::string field;
  const std::string& Field() const { return field.empty() ? name : field; }
  int field_index = -1;  // in Catalog::schema()
  SourceLayout layout = SourceLayout::kFixed;
  ColumnKind kind = ColumnKind::kDense;
  DType source_dtype = DType::kUInt8;  // element type as stored
  DType dtype = DType::kUInt8;         // element type delivered
  int64_t inner = 1;                   // elements per row (fixed-size lists)
  std::vector<int64_t> inner_shape;
  bool dictionary = false;
  /// A list of strings or binaries (kList, `annotation` "utf8" or "binary"): only with a chain
  /// that turns each element into a number (hash_bucket, vocabulary).
  bool list_of_strings = false;
  /// kList: offset levels below the rows' (list<list<T>>: 1; list<string>: 1, the strings' bytes
  /// being the innermost level; list<list<string>>: 2). Delivered ragged only.
  int list_levels = 0;
  /// The column is a fixed_size_list (or an arrow.fixed_shape_tensor over one): its elements may
  /// be null below the rows (ElementMaskLevels).
  bool fixed_list = false;
  ColumnOptions options;
  /// Whether `options` came from a per-column entry rather than the defaults for all columns.
  bool explicit_options = false;
  std::string arrow_type;
  std::string annotation;
  /// time_unit / decimals: the decoder converts the column's arrays before anything else reads
  /// them; `source_dtype` and `dtype` then describe the converted values.
  ValueConversion conversion;
  /// The column's transform chain (ColumnsOptions::transforms), or null. The decoder runs ops
  /// [0, cached_ops) per row before the ready-tensor cache, so the cache stores their output; the
  /// column's writer runs the rest per batch. `layout`, `source_dtype`, `inner` and `inner_shape`
  /// then describe what the writer reads (the raw column, or the cached prefix's fixed-shape
  /// tensors); `dtype` and `kind` what it writes (a dense tensor of the chain's output type).
  std::shared_ptr<const transform::Chain> chain;
  size_t cached_ops = 0;
  /// The cached prefix ends in a tensor whose shape varies per row (only with a cache_dir): the
  /// decoder stores each row as large_binary of its int64 shape then its data (padded to 8
  /// bytes), `layout` kString; TransformInput reads it back as a tensor.
  bool cached_shapes = false;
  std::vector<int64_t> output_shape;  // per-row shape of the chain's output
  /// Several outputs of one column (ColumnsOptions::transform_outputs) share a group number (-1:
  /// none) and are adjacent in OutputSpec::columns; ops [cached_ops, shared_ops) are the same in
  /// all of them and run once per row for the group.
  int group = -1;
  size_t shared_ops = 0;
  /// The loader's transform counters (OutputSpec::transform_counters) for chained columns.
  std::shared_ptr<TransformCounters> counters;
  /// A categorical column (ColumnsOptions::categories): its strings become these ids in the
  /// decoder, as Vocabulary::IdDType (`source_dtype`; delivered as int64), or for a partition
  /// column an int64 in Decoder::Join; null otherwise.
  std::shared_ptr<const Vocabulary> vocabulary;
  /// The stacked feature group this column is read into (empty for a column of `columns`):
  /// masks of features are per group, so advice names the group (NullAdvice).
  std::string feature_group;
};

/// One stacked feature group: OutputSpec::features[first, first + count).
struct FeatureGroupSpec {
  std::string name;
  DType dtype = DType::kFloat32;
  bool null_mask = false;
  size_t first = 0;
  size_t count = 0;
};

struct OutputSpec {
  std::vector<ColumnSpec> columns;   // one output tensor group each
  std::vector<ColumnSpec> features;  // stacked into [B, F] tensors, group after group
  std::vector<FeatureGroupSpec> feature_groups;
  /// The vocabularies of the categorical columns, by column.
  std::map<std::string, std::shared_ptr<const Vocabulary>> vocabularies;
  /// Field names the decoder must read (file fields only), in schema order. With a user
  /// transform: the transform's inputs.
  std::vector<std::string> file_fields;
  std::shared_ptr<TransformCounters> transform_counters = std::make_shared<TransformCounters>();
  /// Names of the arrays a decode task delivers: file_fields, or with a user transform the
  /// transform outputs that columns and features read, in the transform's output order.
  std::vector<std::string> decoded_fields;
  /// ColumnsOptions::user_transform (or null) and its output schema, learned at open.
  std::shared_ptr<UserTransform> user_transform;
  std::shared_ptr<arrow::Schema> transform_schema;
};

/// Whether `spec` may be stored row-packed (PackedRun): a dense scalar of 1, 2, 4 or 8 bytes,
/// delivered as read (no cast, chain or mask).
bool Packable(const ColumnSpec& spec);

/// A run of at least kMinPackedColumns adjacent packable columns, OutputSpec::columns[first,
/// first + count), each its own output, whose values are kept row by row ([rows, row_bytes],
/// each column's value at its offset, the widths summed in column order): a shuffled row then
/// costs the few cache lines of its packed row instead of one miss per column. Batches gather
/// them (PackedWriter); the ready-tensor cache stores them so (tensor_entry.h).
struct PackedRun {
  int first = 0;
  int count = 0;
  std::vector<int> widths;
  std::vector<int64_t> offsets;
  int64_t row_bytes = 0;
};
inline constexpr int kMinPackedColumns = 8;

/// The run of columns[first, first + count) (each Packable).
PackedRun MakePackedRun(const std::vector<ColumnSpec>& columns, int first, int count);
/// The packed runs of `spec`'s columns, in column order (a run's index is its place here).
std::vector<PackedRun> PackedRuns(const OutputSpec& spec);

/// `names` with each struct or map parent ("s", not itself a column) replaced by its leaves
/// ("s.a", "s.b.c"), in schema order; other names as they are.
std::vector<std::string> ExpandParents(const arrow::Schema& schema,
                                       const std::vector<std::string>& names);

/// Whether nulls of this column are replaced by its fill_null value (numeric and bool columns
/// with fill_null set; strings and lists need null_mask instead).
bool FillNullApplies(const ColumnSpec& spec);

/// Whether the column's options (null_mask, fill_null for scalar values, a chain that takes nulls
/// or on_error="zero") say what its null rows become.
bool NullsCovered(const ColumnSpec& spec);

/// What to pass so that the null rows of `spec` are accepted, as the end of an error message
/// ("; pass fill_null={'x': value} to replace them or null_mask=['x'] to get a validity mask"):
/// only options that work for this column (a feature's mask is its group's; strings and lists
/// take only the mask; a column with transforms, a fill_null op or on_error='zero').
std::string NullAdvice(const ColumnSpec& spec);

/// How many element-validity masks (`<name>_mask_1`, `<name>_mask_2`...) the column's batches
/// carry: one per level below the rows when the column is in null_mask and is a list (a list of
/// strings: the strings are its last level; a fixed-size list: one mask of the value shape);
/// 0 otherwise. A function of the type and options only, never of the data.
int ElementMaskLevels(const ColumnSpec& spec);

/// Whether the column's batches carry `<name>_valid` (ValidKey): on_error="zero" on a column
/// written by its transforms' writer (batch/column_writers.cc, TransformWriter).
bool WritesValid(const ColumnSpec& spec);

/// The keys the column adds beside its own in every batch, in batch order (util/output_keys.h):
/// a padded list's lengths (1 + its levels below the rows), its masks under null_mask
/// (ElementMaskLevels), its valid flags (WritesValid). A function of the type and options only.
std::vector<std::string> AddedKeys(const ColumnSpec& spec);

/// Whether null elements of a list column's numbers or bools are replaced by its fill_null
/// value (variable lists of numbers or bools, fixed-size lists), with or without null_mask.
bool ElementFillApplies(const ColumnSpec& spec);

/// Whether `value` (a fill_null or pad_value option) is exactly representable as `dtype`.
/// NaN and infinities count as representable in the float dtypes only.
bool IsRepresentable(double value, DType dtype);

/// Whether every value of `from` is exactly representable as `to`.
bool IsLosslessCast(DType from, DType to);

/// What `loader.columns` shows of a resolved column.
ColumnInfo ToColumnInfo(const ColumnSpec& spec);

}  // namespace stoker
