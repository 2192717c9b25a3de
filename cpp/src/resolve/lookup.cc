#include "resolve/lookup.h"

#include <arrow/type.h>

#include <vector>

#include "resolve/categories.h"
#include "resolve/classify.h"
#include "resolve/column_checks.h"
#include "resolve/user_transform.h"
#include "resolve/value_conversion.h"

namespace stoker {
namespace {

std::string Available(const arrow::Schema& schema) {
  std::string out;
  for (const auto& field : schema.fields()) {
    if (!out.empty()) out += ", ";
    out += field->name();
  }
  return out;
}

// time_unit / decimals given for column `name` by name (not for all columns) must fit it, or its
// list's elements.
Status CheckNamedConversion(const std::string& name, const arrow::DataType& field_type,
                            const ColumnOptions& options, const ColumnOptions& defaults) {
  const arrow::DataType& type =
      field_type.id() == arrow::Type::LIST || field_type.id() == arrow::Type::LARGE_LIST
          ? *static_cast<const arrow::BaseListType&>(field_type).value_type()
          : field_type;
  if (options.time_unit != TimeUnit::kUnset && defaults.time_unit == TimeUnit::kUnset &&
      !IsTemporalType(type)) {
    return MakeError(ErrorKind::kInvalidOption,
                     "time_unit names column '" + name + "' (" + type.ToString() +
                         "), which is not a timestamp, date, time or duration");
  }
  if (options.decimals != DecimalMode::kUnset && defaults.decimals == DecimalMode::kUnset &&
      !IsDecimalType(type)) {
    return MakeError(ErrorKind::kInvalidOption, "decimals names column '" + name + "' (" +
                                                    type.ToString() + "), which is not a decimal");
  }
  return Status::OK();
}

// A list of strings takes only transforms that make numbers of them; without any it is delivered
// ragged, the strings' bytes a second level of offsets.
Status SettleListOfStrings(const std::string& name, const arrow::DataType& type, bool transformed,
                           ColumnSpec* spec) {
  if (!spec->list_of_strings || transformed) return Status::OK();
  if (spec->kind == ColumnKind::kPadded) {
    return Unsupported(name, type,
                       " as a padded list (lists='padded' pads numbers); choose lists={'" + name +
                           "': 'ragged'} for the bytes plus two offsets tensors, or "
                           "transforms that make numbers of the strings, such as "
                           "hash_bucket or vocabulary");
  }
  spec->list_of_strings = false;
  spec->list_levels = 1;
  return Status::OK();
}

}  // namespace

Result<ColumnLookup> ColumnLookup::Make(const Catalog& catalog, const ColumnsOptions& options,
                                        bool cached,
                                        std::shared_ptr<arrow::Schema> transform_schema,
                                        OutputSpec* out) {
  ColumnLookup lookup(catalog, options, cached, out);
  lookup.schema_ = catalog.schema();
  lookup.num_regular_ = catalog.num_file_fields();
  if (!options.user_transform) return lookup;
  STOKER_ASSIGN_OR_RAISE(out->file_fields, TransformInputs(catalog, options.transform_columns));
  if (!transform_schema) {
    STOKER_ASSIGN_OR_RAISE(transform_schema, ProbeUserTransform(catalog, *options.user_transform,
                                                                options.transform_columns));
  }
  std::vector<std::shared_ptr<arrow::Field>> fields = transform_schema->fields();
  for (int i = catalog.num_file_fields(); i < catalog.schema()->num_fields(); ++i) {
    const auto& partition = catalog.schema()->field(i);
    if (transform_schema->GetFieldIndex(partition->name()) >= 0) {
      return MakeError(ErrorKind::kTransform,
                       "transform= returns key '" + partition->name() +
                           "', which is also a partition column of the dataset; rename it");
    }
    fields.push_back(partition);
  }
  lookup.num_regular_ = transform_schema->num_fields();
  lookup.schema_ = arrow::schema(fields);
  lookup.transform_schema_ = transform_schema;
  out->user_transform = options.user_transform;
  out->transform_schema = std::move(transform_schema);
  return lookup;
}

const ColumnOptions& ColumnLookup::OptionsFor(const std::string& name, bool* named) const {
  // Options of a struct's leaf: its own, else those of its nearest parent (`s` for `s.a.b`).
  const auto& by_column = options_->column_options;
  auto it = by_column.find(name);
  for (size_t dot = name.rfind('.'); it == by_column.end() && dot != std::string::npos && dot > 0;
       dot = name.rfind('.', dot - 1)) {
    it = by_column.find(name.substr(0, dot));
  }
  *named = it != by_column.end();
  return *named ? it->second : options_->default_column_options;
}

Status ColumnLookup::Find(const std::string& name, ColumnSpec* spec) {
  const int index = schema_->GetFieldIndex(name);
  if (index < 0) {
    return MakeError(ErrorKind::kColumnNotFound,
                     "column '" + name + "' is not in the dataset" +
                         (options_->user_transform ? " (the outputs of transform=)" : "") +
                         "; available columns: " + Available(*schema_));
  }
  bool named = false;
  const ColumnOptions& options = OptionsFor(name, &named);
  // Partition columns keep their index in the catalog's schema.
  spec->field_index = index >= num_regular_ ? catalog_->num_file_fields() + (index - num_regular_)
                                            : (options_->user_transform ? -1 : index);
  spec->explicit_options = named;
  if (index >= num_regular_) return FindPartition(index, options, spec);
  return FindField(index, options, spec);
}

Status ColumnLookup::FindPartition(int index, const ColumnOptions& options, ColumnSpec* spec) {
  const arrow::Field& field = *schema_->field(index);
  const std::string& name = field.name();
  spec->name = name;
  spec->options = options;
  spec->arrow_type = field.type()->ToString();
  spec->layout = SourceLayout::kPartition;
  if (field.type()->id() == arrow::Type::INT64) {
    spec->source_dtype = spec->dtype = DType::kInt64;
  } else {
    spec->kind = ColumnKind::kStrings;
    spec->source_dtype = spec->dtype = DType::kUInt8;
    spec->annotation = "utf8";
  }
  // Partition values are ints or strings, never timestamps or decimals: an option naming one for
  // them would be ignored.
  const ColumnOptions& defaults = options_->default_column_options;
  const bool unit_named =
      options.time_unit != TimeUnit::kUnset && defaults.time_unit == TimeUnit::kUnset;
  const bool decimals_named =
      options.decimals != DecimalMode::kUnset && defaults.decimals == DecimalMode::kUnset;
  if (spec->explicit_options && (unit_named || decimals_named)) {
    return MakeError(ErrorKind::kInvalidOption,
                     std::string(unit_named ? "time_unit" : "decimals") +
                         " names hive partition column '" + name +
                         "', whose values are integers or strings; leave it out");
  }
  return MakeCategorical(spec);
}

Status ColumnLookup::FindField(int index, const ColumnOptions& options, ColumnSpec* spec) {
  const std::shared_ptr<arrow::DataType>& type = schema_->field(index)->type();
  const std::string& name = schema_->field(index)->name();
  if (!options_->user_transform) {
    if (std::string conflict = catalog_->Conflict(name); !conflict.empty()) {
      return MakeError(ErrorKind::kSchemaMismatch, conflict);
    }
  }
  needed_.insert(name);
  if (spec->explicit_options) {
    STOKER_RETURN_NOT_OK(
        CheckNamedConversion(name, *type, options, options_->default_column_options));
  }
  STOKER_RETURN_NOT_OK(Classify(name, type, options, options_->user_transform ? nullptr : catalog_,
                                options_->allow_lossy_cast, spec));
  STOKER_RETURN_NOT_OK(MakeCategorical(spec));
  const bool transformed = options_->transforms.contains(name);
  STOKER_RETURN_NOT_OK(SettleListOfStrings(name, *type, transformed, spec));
  if (spec->list_levels > 0 && transformed) {
    return Unsupported(name, *type,
                       " with transforms (transforms take lists of one level of numbers or "
                       "strings)");
  }
  const bool plain_values = (spec->layout == SourceLayout::kFixed && spec->inner == 1) ||
                            spec->layout == SourceLayout::kString;
  if (spec->dictionary && !plain_values) {
    return Unsupported(name, *type,
                       " (dictionaries are supported for numeric and string values only)");
  }
  return Status::OK();
}

Status ColumnLookup::MakeCategorical(ColumnSpec* spec) {
  auto given = options_->categories.find(spec->name);
  if (given == options_->categories.end()) return Status::OK();
  const bool transformed =
      options_->transforms.contains(spec->name) || options_->transform_outputs.contains(spec->name);
  return ResolveCategory(*catalog_, given->second, transformed, options_->user_transform != nullptr,
                         spec, &out_->vocabularies, &built_);
}

}  // namespace stoker
