#include "resolve/resolve_columns.h"

#include <arrow/type.h>
#include <parquet/metadata.h>
#include <parquet/schema.h>
#include <parquet/statistics.h>

#include <algorithm>
#include <map>
#include <set>

#include "resolve/chains.h"
#include "resolve/column_checks.h"
#include "resolve/features.h"
#include "resolve/lookup.h"
#include "resolve/output_names.h"

namespace stoker {
namespace {

// Whether nothing names the columns: every column is delivered.
bool AllColumns(const ColumnsOptions& options) {
  return options.columns.empty() && options.features.empty() && options.feature_groups.empty();
}

// The columns delivered one tensor each: `options.columns` (a struct parent stands for its
// leaves), or every column when neither columns nor features are given.
std::vector<std::string> RequestedColumns(const arrow::Schema& schema,
                                          const ColumnsOptions& options) {
  std::vector<std::string> columns = ExpandParents(schema, options.columns);
  if (AllColumns(options)) {
    for (const auto& field : schema.fields()) columns.push_back(field->name());
  }
  return columns;
}

// The options as resolved, when transforms name a struct by its own name. A struct with a binary
// `bytes` field (HuggingFace's Image and Audio features: struct<bytes: binary, path: string>) is
// then one column: its chain reads `<struct>.bytes` and its output takes the struct's name
// (`renamed`, leaf -> output); its other fields are delivered only when columns names them.
struct StructChains {
  ColumnsOptions options;
  std::map<std::string, std::string> renamed;
  std::map<std::string, std::string> chained;  // struct -> its bytes field
  std::set<std::string> failed;                // structs named by transforms without one
};

bool IsBinary(const arrow::DataType& type) {
  return type.id() == arrow::Type::BINARY || type.id() == arrow::Type::LARGE_BINARY;
}

// The fields of struct `name` (not itself a column), in schema order: "s.a", "s.b.c".
std::vector<std::string> StructLeaves(const arrow::Schema& schema, const std::string& name) {
  std::vector<std::string> leaves;
  if (schema.GetFieldIndex(name) >= 0) return leaves;
  const std::string prefix = name + ".";
  for (const auto& field : schema.fields()) {
    if (field->name().compare(0, prefix.size(), prefix) == 0) leaves.push_back(field->name());
  }
  return leaves;
}

// transforms['`name`'] on struct `name` (whose fields are `leaves`) without a binary bytes field.
Status StructTransformError(const std::string& name, const std::vector<std::string>& leaves) {
  std::string fields;
  for (const auto& leaf : leaves) fields += (fields.empty() ? "'" : ", '") + leaf + "'";
  return MakeError(
      ErrorKind::kInvalidOption,
      "transforms['" + name + "']: column '" + name + "' is a struct of fields " + fields +
          ", and transforms apply to one field: name it, as in transforms={'" + leaves.front() +
          "': [...]} (a struct takes transforms under its own name only when it has "
          "a binary 'bytes' field, as HuggingFace's Image and Audio features do: "
          "the ops then read the bytes)");
}

// The struct parents named by transforms (one chain or several outputs) whose chains read their
// bytes field, with the options rewritten to name that field; a struct without one is a problem.
StructChains ChainStructBytes(const arrow::Schema& schema, const ColumnsOptions& options,
                              std::vector<Status>* problems) {
  StructChains out{options, {}, {}, {}};
  std::set<std::string> keys;
  for (const auto& [name, unused] : options.transforms) keys.insert(name);
  for (const auto& [name, unused] : options.transform_outputs) keys.insert(name);
  std::map<std::string, std::string>& chained = out.chained;
  for (const std::string& name : keys) {
    const std::vector<std::string> leaves = StructLeaves(schema, name);
    const bool requested =
        AllColumns(options) ||
        std::find(options.columns.begin(), options.columns.end(), name) != options.columns.end();
    // Not a struct, or not requested: reported as such by the checks that follow.
    if (leaves.empty() || !requested) continue;
    const std::string bytes = name + ".bytes";
    const int index = schema.GetFieldIndex(bytes);
    if (index < 0 || !IsBinary(*schema.field(index)->type())) {
      problems->push_back(StructTransformError(name, leaves));
      out.failed.insert(name);
      out.options.transforms.erase(name);
      out.options.transform_outputs.erase(name);
      continue;
    }
    if (options.transforms.contains(bytes) || options.transform_outputs.contains(bytes)) {
      problems->push_back(MakeError(ErrorKind::kInvalidOption,
                                    "transforms names both '" + name + "' and '" + bytes +
                                        "', which read the same bytes; keep one"));
      out.failed.insert(name);
      out.options.transforms.erase(name);
      out.options.transform_outputs.erase(name);
      continue;
    }
    if (auto chain = out.options.transforms.extract(name)) {
      out.options.transforms.emplace(bytes, std::move(chain.mapped()));
      out.renamed[bytes] = name;
    }
    if (auto outputs = out.options.transform_outputs.extract(name)) {
      out.options.transform_outputs.emplace(bytes, std::move(outputs.mapped()));
    }
    chained[name] = bytes;
  }
  if (chained.empty()) return out;
  // The struct stands for its bytes field alone, in columns or among all the columns.
  std::vector<std::string> columns;
  if (AllColumns(options)) {
    for (const auto& field : schema.fields()) columns.push_back(field->name());
  } else {
    columns = options.columns;
  }
  out.options.columns.clear();
  for (const std::string& column : columns) {
    auto parent = std::find_if(chained.begin(), chained.end(), [&](const auto& entry) {
      return column == entry.first || column.rfind(entry.first + ".", 0) == 0;
    });
    const bool field = parent != chained.end();  // a chained struct, or one of its fields
    if (field && (column == parent->first || (AllColumns(options) && column == parent->second))) {
      out.options.columns.push_back(parent->second);
    } else if (field && column == parent->second) {
      problems->push_back(MakeError(ErrorKind::kInvalidOption,
                                    "columns names both '" + parent->first + "' and '" + column +
                                        "', and transforms['" + parent->first + "'] reads '" +
                                        column + "' as column '" + parent->first + "'; keep '" +
                                        parent->first + "'"));
    } else if (!field || !AllColumns(options)) {
      out.options.columns.push_back(column);  // another column, or a field named: as it is
    }
  }
  return out;
}

// on_error='zero' on a list column, whose chain gives a list per row: there is no zero tensor to
// substitute. The advice names the other requested columns whose chains can take it.
Status OnErrorZeroOnList(const std::string& name, const ColumnsOptions& options,
                         const arrow::Schema& schema, const std::vector<std::string>& columns) {
  std::string others;
  for (const auto& [other, unused] : options.transforms) {
    const int index = schema.GetFieldIndex(other);
    if (other == name || index < 0 ||
        std::find(columns.begin(), columns.end(), other) == columns.end()) {
      continue;
    }
    const arrow::Type::type id = schema.field(index)->type()->id();
    if (id == arrow::Type::LIST || id == arrow::Type::LARGE_LIST) continue;
    others += (others.empty() ? "'" : ", '") + other + "': 'zero'";
  }
  return MakeError(ErrorKind::kInvalidOption,
                   "on_error='zero' for column '" + name +
                       "': its transforms give a list per row, whose length varies, so "
                       "there is no zero tensor to substitute; " +
                       (others.empty() ? "leave on_error unset"
                                       : "give on_error per column, without '" + name +
                                             "': on_error={" + others + "}"));
}

// Column `spec` through its chain `ops` (a list column: element by element, with its pad_value
// then checked against the chain's output).
Status ResolveColumnChain(const std::vector<OpSpec>& ops, const ColumnsOptions& options,
                          bool cached, const arrow::Schema& schema,
                          const std::vector<std::string>& columns, OutputSpec* out,
                          ColumnSpec* spec) {
  if (spec->layout == SourceLayout::kPartition) {
    return MakeError(ErrorKind::kUnsupportedType,
                     "transforms['" + spec->name + "']: partition columns take no transforms");
  }
  STOKER_RETURN_NOT_OK(ResolveChain(ops, spec, true, cached));
  spec->counters = out->transform_counters;
  if (spec->layout != SourceLayout::kList) return Status::OK();
  STOKER_RETURN_NOT_OK(CheckOptionValues(*spec));
  if (spec->options.on_error_zero) return OnErrorZeroOnList(spec->name, options, schema, columns);
  return Status::OK();
}

// on_error='zero' applies to columns with transforms, and only where every row has one shape (a
// zero tensor stands for a failed row).
Status CheckOnErrorZero(const ColumnSpec& spec) {
  const std::string& name = spec.name;
  if (spec.options.on_error_zero && !spec.chain && spec.explicit_options) {
    return MakeError(ErrorKind::kInvalidOption,
                     "on_error={'" + name + "': 'zero'}: column '" + name +
                         "' has no transforms; on_error applies to columns with transforms");
  }
  if (!spec.options.on_error_zero || !spec.chain) return Status::OK();
  for (int64_t dim : spec.output_shape) {
    if (dim < 0) {
      return MakeError(ErrorKind::kInvalidOption,
                       "on_error='zero' for column '" + name +
                           "': its transforms give a shape that varies per row, so there is "
                           "no zero tensor to substitute; add a resize or crop to a fixed "
                           "size");
    }
  }
  return Status::OK();
}

// Column `name` of `columns` into out->columns: as read, through its chain, or as the outputs of
// its several chains (group number `*groups`, then incremented). Its name, and its outputs',
// go into `*seen_outputs`.
Status ResolveColumn(const std::string& name, const std::vector<std::string>& columns,
                     const ColumnsOptions& options,
                     const std::map<std::string, std::string>& renamed, ColumnLookup& lookup,
                     int* groups, std::set<std::string>* seen_outputs, OutputSpec* out) {
  if (!seen_outputs->insert(name).second) {
    return MakeError(ErrorKind::kInvalidOption, "column '" + name + "' is listed twice in columns");
  }
  // A struct's chain on its bytes field: delivered under the struct's name.
  auto output = renamed.find(name);
  if (output != renamed.end() && !seen_outputs->insert(output->second).second) {
    return MakeError(ErrorKind::kInvalidOption,
                     "transforms['" + output->second + "'] output '" + output->second +
                         "' clashes with another column or output of that name");
  }
  if (auto outputs = options.transform_outputs.find(name);
      outputs != options.transform_outputs.end()) {
    return ResolveOutputs(outputs->second, name, (*groups)++, lookup.cached(), lookup, seen_outputs,
                          out);
  }
  ColumnSpec spec;
  STOKER_RETURN_NOT_OK(lookup.Find(name, &spec));
  if (output != renamed.end()) {
    spec.name = output->second;
    spec.field = name;
  }
  auto chain = options.transforms.find(name);
  // A list's pad_value applies to the chain's output: checked after it.
  if (chain == options.transforms.end() || spec.layout != SourceLayout::kList) {
    STOKER_RETURN_NOT_OK(CheckOptionValues(spec));
  }
  if (chain != options.transforms.end()) {
    STOKER_RETURN_NOT_OK(ResolveColumnChain(chain->second, options, lookup.cached(),
                                            lookup.schema(), columns, out, &spec));
  }
  STOKER_RETURN_NOT_OK(CheckOnErrorZero(spec));
  out->columns.push_back(std::move(spec));
  return Status::OK();
}

// Several outputs of a column need the column in `columns`, one way of transforming it, and no
// feature of that name.
void CheckSeveralOutputs(const ColumnsOptions& options, const std::vector<std::string>& columns,
                         const std::set<std::string>& feature_names,
                         std::vector<Status>* problems) {
  for (const auto& [name, outputs] : options.transform_outputs) {
    if (std::find(columns.begin(), columns.end(), name) == columns.end()) {
      problems->push_back(
          MakeError(ErrorKind::kInvalidOption, "transforms names column '" + name +
                                                   "' with several outputs, which is "
                                                   "not in columns"));
    }
    if (options.transforms.contains(name)) {
      problems->push_back(MakeError(ErrorKind::kInvalidOption, "transforms gives column '" + name +
                                                                   "' both one chain and several"));
    }
    if (feature_names.contains(name)) {
      problems->push_back(
          MakeError(ErrorKind::kInvalidOption,
                    "column '" + name +
                        "' has transforms with several outputs and is also in features; "
                        "a feature takes one chain"));
    }
  }
}

// transforms and categories name only requested columns or features.
void CheckNamedColumns(const ColumnsOptions& options, const std::set<std::string>& seen_outputs,
                       const std::set<std::string>& feature_names, std::vector<Status>* problems) {
  auto requested = [&](const std::string& name) {
    return seen_outputs.contains(name) || feature_names.contains(name);
  };
  for (const auto& [name, chain] : options.transforms) {
    if (!requested(name)) {
      problems->push_back(MakeError(ErrorKind::kInvalidOption, "transforms names column '" + name +
                                                                   "', which is not in columns or "
                                                                   "features"));
    }
  }
  for (const auto& [name, vocabulary] : options.categories) {
    if (!requested(name)) {
      problems->push_back(
          MakeError(ErrorKind::kInvalidOption,
                    "categories names column '" + name + "', which is not in columns or features"));
    }
  }
}

// Nulls of a flat column (one leaf, not nested) over every row group, from the footers' statistics;
// 0 when unknown.
int64_t FooterNullCount(const Catalog& catalog, const std::string& field) {
  int64_t nulls = 0;
  for (const CatalogFile& file : catalog.files()) {
    auto it = file.fields.find(field);
    if (it == file.fields.end() || it->second.leaves.size() != 1) continue;
    const int leaf = it->second.leaves[0];
    if (file.metadata->schema()->Column(leaf)->max_repetition_level() > 0) continue;
    for (int rg = 0; rg < file.metadata->num_row_groups(); ++rg) {
      auto chunk = file.metadata->RowGroup(rg)->ColumnChunk(leaf);
      auto stats = chunk->is_stats_set() ? chunk->statistics() : nullptr;
      if (stats && stats->HasNullCount()) nulls += stats->null_count();
    }
  }
  return nulls;
}

// A column that some files lack (added later) is null in their rows: without a choice for nulls,
// say so now rather than at the first batch from such a file.
void AddMissingColumnProblems(const Catalog& catalog, const OutputSpec& out,
                              std::vector<Status>* problems) {
  for (const auto* group : {&out.columns, &out.features}) {
    for (const ColumnSpec& spec : *group) {
      if (spec.layout == SourceLayout::kPartition || NullsCovered(spec)) continue;
      const std::string missing = catalog.MissingIn(spec.Field());
      if (missing.empty()) continue;
      problems->push_back(MakeError(
          ErrorKind::kNullValues, "column '" + spec.Field() + "' is not in '" + missing +
                                      "' (files without it are read as nulls)" + NullAdvice(spec)));
    }
  }
}

// When the open fails anyway: the columns whose footers show nulls that no option covers
// (otherwise found per row group during iteration), so that one round fixes everything.
void AddFooterNullProblems(const Catalog& catalog, const OutputSpec& out,
                           std::vector<Status>* problems) {
  for (const auto* specs : {&out.columns, &out.features}) {
    const bool features = specs == &out.features;
    for (const ColumnSpec& spec : *specs) {
      if (spec.layout == SourceLayout::kPartition || NullsCovered(spec)) continue;
      const int64_t nulls = FooterNullCount(catalog, spec.Field());
      if (nulls <= 0) continue;
      problems->push_back(MakeError(ErrorKind::kNullValues,
                                    std::string(features ? "feature column '" : "column '") +
                                        spec.name + "' has " + std::to_string(nulls) +
                                        " null(s) by the footers' statistics" + NullAdvice(spec)));
    }
  }
}

// The fields the decoder reads (file_fields, in schema order) and delivers (decoded_fields);
// with a user transform, file_fields are its inputs (ColumnLookup::Make) and decoded_fields the
// outputs that columns read, in its output order.
void SetFields(const ColumnLookup& lookup, OutputSpec* out) {
  const std::set<std::string>& needed = lookup.needed();
  if (out->user_transform) {
    for (const auto& field : lookup.transform_schema()->fields()) {
      if (needed.contains(field->name())) out->decoded_fields.push_back(field->name());
    }
    return;
  }
  for (const auto& field : lookup.schema().fields()) {
    if (needed.contains(field->name())) out->file_fields.push_back(field->name());
  }
  out->decoded_fields = out->file_fields;
}

}  // namespace

Result<OutputSpec> ResolveColumns(const Catalog& catalog, const ColumnsOptions& given, bool cached,
                                  std::shared_ptr<arrow::Schema> transform_schema,
                                  const std::string& padding_flag, int num_threads) {
  // Every problem is collected, so that one error lists them all (CombineProblems).
  std::vector<Status> problems;
  // The dataset's structs named by transforms (with transform=, its outputs are the columns).
  const StructChains structs = given.user_transform
                                   ? StructChains{given, {}, {}, {}}
                                   : ChainStructBytes(*catalog.schema(), given, &problems);
  const ColumnsOptions& options = structs.options;
  OutputSpec out;
  STOKER_ASSIGN_OR_RAISE(
      ColumnLookup lookup,
      ColumnLookup::Make(catalog, options, cached, std::move(transform_schema), &out));
  // The "auto" vocabularies all at once, on several threads; each column takes its own (its
  // error too) where it would have built it.
  lookup.set_built_vocabularies(BuildAutoVocabularies(catalog, options, num_threads));
  const arrow::Schema& schema = lookup.schema();
  std::set<std::string> seen_outputs;
  const std::vector<std::string> columns = RequestedColumns(schema, options);
  int groups = 0;
  for (const auto& name : columns) {
    if (Status status = ResolveColumn(name, columns, options, structs.renamed, lookup, &groups,
                                      &seen_outputs, &out);
        !status.ok()) {
      problems.push_back(std::move(status));
    }
  }
  std::vector<FeatureGroup> feature_groups = EffectiveFeatureGroups(options);
  std::set<std::string> feature_names;
  for (auto& group : feature_groups) {
    group.columns = ExpandParents(schema, group.columns);  // a struct parent: its leaves
    feature_names.insert(group.columns.begin(), group.columns.end());
  }
  CheckSeveralOutputs(options, columns, feature_names, &problems);
  CheckNamedColumns(options, seen_outputs, feature_names, &problems);
  ResolveFeatureGroups(catalog, options, feature_groups, seen_outputs, lookup, &out, &problems);
  if (!options.user_transform) AddMissingColumnProblems(catalog, out, &problems);
  if (!problems.empty()) {
    if (!options.user_transform) AddFooterNullProblems(catalog, out, &problems);
    return CombineProblems(problems);
  }
  // The names the batches will hold, as the caller named the options (given, not the copy).
  STOKER_RETURN_NOT_OK(CheckOutputNames(given, padding_flag, ToColumnInfos(out)));
  SetFields(lookup, &out);
  return out;
}

Result<std::vector<ColumnSpec>> ResolveColumnAlone(
    const Catalog& catalog, const ColumnsOptions& options, bool cached,
    const std::shared_ptr<arrow::Schema>& transform_schema, const std::string& name, bool feature) {
  // A field of a struct named by transforms (Describe lists structs by their fields): its bytes
  // field is the struct's column, its other fields nothing unless columns names them.
  std::string column = name;
  if (!feature && !options.user_transform) {
    std::vector<Status> problems;
    const StructChains structs = ChainStructBytes(*catalog.schema(), options, &problems);
    const auto& named = structs.options.columns;
    for (const auto& [parent, bytes] : structs.chained) {
      if (name == bytes) {
        column = parent;
      } else if (name.rfind(parent + ".", 0) == 0 &&
                 std::find(named.begin(), named.end(), name) == named.end()) {
        return std::vector<ColumnSpec>{};
      }
    }
    for (const std::string& parent : structs.failed) {
      if (name.rfind(parent + ".", 0) == 0) column = parent;  // its error
    }
  }
  ColumnsOptions one = options;
  one.columns.clear();
  one.features.clear();
  one.feature_groups.clear();
  if (feature) {
    // The column alone in its group: the group's dtype and mask.
    for (const FeatureGroup& group : EffectiveFeatureGroups(options)) {
      if (std::find(group.columns.begin(), group.columns.end(), name) != group.columns.end()) {
        FeatureGroup alone = group;
        alone.columns = {name};
        one.feature_groups.push_back(std::move(alone));
      }
    }
  } else {
    one.columns.push_back(column);
  }
  // Only this column's vocabulary (an "auto" one is built from the data).
  one.categories.clear();
  if (auto categories = options.categories.find(column); categories != options.categories.end()) {
    one.categories.insert(*categories);
  }
  // Only this column's per-column options (lists=, time_unit=... by name, a struct's for its
  // leaves): another column's would name a column this resolution does not read.
  one.column_options.clear();
  for (const auto& [key, column_options] : options.column_options) {
    if (key == column || column.starts_with(key + ".") || key.starts_with(column + ".")) {
      one.column_options.emplace(key, column_options);
    }
  }
  // Only this column's transform chain: what the chain produces is part of its description.
  one.transforms.clear();
  if (auto chain = options.transforms.find(column); chain != options.transforms.end()) {
    one.transforms.insert(*chain);
  }
  one.transform_outputs.clear();
  if (auto outputs = options.transform_outputs.find(column);
      outputs != options.transform_outputs.end() && !feature) {
    one.transform_outputs.insert(*outputs);
  }
  STOKER_ASSIGN_OR_RAISE(OutputSpec spec, ResolveColumns(catalog, one, cached, transform_schema));
  return feature ? spec.features : spec.columns;
}

}  // namespace stoker
