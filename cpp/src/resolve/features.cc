#include "resolve/features.h"

#include <arrow/type.h>
#include <parquet/metadata.h>
#include <parquet/statistics.h>

#include <algorithm>
#include <map>
#include <optional>

#include "resolve/chains.h"
#include "resolve/column_checks.h"
#include "util/output_keys.h"

namespace stoker {
namespace {

// |value| without overflow (|INT64_MIN| fits a uint64).
uint64_t Magnitude(int64_t value) {
  return value < 0 ? static_cast<uint64_t>(-(value + 1)) + 1 : static_cast<uint64_t>(value);
}

// Largest |value| a feature column can hold, from what is known before reading it: the footer
// statistics (min/max of every row group), the vocabulary size of a categorical column, or the
// values of an integer partition column. nullopt when unknown (a row group without statistics).
// Integers throughout: 2^53 + 1 must not round to 2^53 on the way.
std::optional<uint64_t> MagnitudeBound(const Catalog& catalog, const ColumnSpec& spec) {
  if (spec.vocabulary) return static_cast<uint64_t>(spec.vocabulary->size());
  if (spec.layout == SourceLayout::kPartition) {
    uint64_t bound = 0;
    for (const auto& file : catalog.files()) {
      const std::string& text = file.partition_values[spec.field_index - catalog.num_file_fields()];
      bound = std::max(bound, Magnitude(std::stoll(text)));
    }
    return bound;
  }
  if (spec.chain || spec.field_index < 0 || spec.layout != SourceLayout::kFixed) {
    return std::nullopt;
  }
  const bool is_unsigned =
      spec.source_dtype == DType::kUInt8 || spec.source_dtype == DType::kUInt16 ||
      spec.source_dtype == DType::kUInt32 || spec.source_dtype == DType::kUInt64;
  uint64_t bound = 0;
  for (const RowGroupRef& rg : catalog.row_groups()) {
    const CatalogFile& file = catalog.files()[rg.file];
    const FieldLeaves& leaves = file.fields.at(spec.Field());
    if (leaves.leaves.size() != 1) return std::nullopt;
    auto chunk = file.metadata->RowGroup(rg.row_group)->ColumnChunk(leaves.leaves.front());
    auto stats = chunk->statistics();
    if (!stats) return std::nullopt;
    if (stats->HasNullCount() && stats->null_count() == chunk->num_values()) continue;
    if (!stats->HasMinMax()) return std::nullopt;
    uint64_t low = 0;
    uint64_t high = 0;
    if (stats->physical_type() == parquet::Type::INT32) {
      const auto& typed = static_cast<const parquet::Int32Statistics&>(*stats);
      low = is_unsigned ? static_cast<uint32_t>(typed.min()) : Magnitude(typed.min());
      high = is_unsigned ? static_cast<uint32_t>(typed.max()) : Magnitude(typed.max());
    } else if (stats->physical_type() == parquet::Type::INT64) {
      const auto& typed = static_cast<const parquet::Int64Statistics&>(*stats);
      low = is_unsigned ? static_cast<uint64_t>(typed.min()) : Magnitude(typed.min());
      high = is_unsigned ? static_cast<uint64_t>(typed.max()) : Magnitude(typed.max());
    } else {
      return std::nullopt;
    }
    bound = std::max({bound, low, high});
  }
  return bound;
}

bool IsFloatDType(DType dtype) {
  return dtype == DType::kFloat16 || dtype == DType::kFloat32 || dtype == DType::kFloat64 ||
         dtype == DType::kBFloat16;
}

// Whether every value of feature `spec` (of type spec.dtype) is exact in `to`: by type, or for
// integers cast to floats by the magnitude bound (2^53 for float64, 2^24 for float32).
bool FeatureCastIsExact(const Catalog& catalog, const ColumnSpec& spec, DType to,
                        std::string* why) {
  if (IsLosslessCast(spec.dtype, to)) return true;
  if (IsFloatDType(spec.dtype) || !IsFloatDType(to)) {
    *why = "";
    return false;
  }
  const uint64_t limit = to == DType::kFloat64   ? uint64_t{1} << 53
                         : to == DType::kFloat32 ? uint64_t{1} << 24
                         : to == DType::kFloat16 ? uint64_t{1} << 11
                                                 : uint64_t{1} << 8;
  const std::optional<uint64_t> bound = MagnitudeBound(catalog, spec);
  if (!bound) {
    *why = " (the footers have no min/max statistics for it to prove every value fits)";
    return false;
  }
  if (*bound <= limit) return true;
  const char* source = spec.vocabulary                           ? "its vocabulary ids reach"
                       : spec.layout == SourceLayout::kPartition ? "its partition values reach"
                                                                 : "its footer statistics reach";
  *why = std::string(" (") + source + " |v| = " + std::to_string(*bound) + ", beyond the " +
         std::to_string(limit) + " that " + DTypeName(to) + " holds exactly)";
  return false;
}

// Whether group `group` can be stacked under its name: a dtype features take, and a name (and
// mask name) that no column has. The single group (features=) keeps its option names in messages.
Status CheckGroup(const FeatureGroup& group, bool single, const std::set<std::string>& taken,
                  const arrow::Schema& schema) {
  const std::string dtype_option =
      single ? "features_dtype" : "features_dtype['" + group.name + "']";
  if (group.dtype == DType::kBFloat16) {
    return MakeError(ErrorKind::kInvalidOption,
                     dtype_option +
                         "='bfloat16' is not supported; stack the features as "
                         "float32 and cast on the device");
  }
  // A group of the dict form must not share a name with any column of the dataset (the batch key
  // would read as that column); the single group only with the requested ones.
  if (taken.contains(group.name) || (!single && schema.GetFieldIndex(group.name) >= 0)) {
    return MakeError(ErrorKind::kInvalidOption,
                     (single ? "features_name '" : "feature group '") + group.name +
                         "' clashes with a column of that name; rename the group");
  }
  if (taken.contains(MaskKey(group.name)) && group.null_mask) {
    return MakeError(ErrorKind::kInvalidOption, "feature group '" + group.name + "' adds '" +
                                                    MaskKey(group.name) +
                                                    "', which is also a column; rename the group");
  }
  return Status::OK();
}

// A list has a length per row: said before the lookup, whose advice (lists=) would not make it
// stack.
Status CheckNotList(const std::string& name, const arrow::Schema& schema) {
  const int index = schema.GetFieldIndex(name);
  if (index < 0) return Status::OK();
  const arrow::Type::type id = schema.field(index)->type()->id();
  if (id != arrow::Type::LIST && id != arrow::Type::LARGE_LIST) return Status::OK();
  return MakeError(ErrorKind::kUnsupportedType,
                   "feature column '" + name + "' has type " +
                       schema.field(index)->type()->ToString() +
                       "; features must be scalar numeric or bool columns, and a list "
                       "has a length per row: move '" +
                       name + "' from features to columns, with lists={'" + name +
                       "': 'padded'} for a [B, max_len] tensor plus lengths");
}

// A feature's chain runs whole in the decoder (it is cached) and must give one number per row,
// which is then cast and stacked like any feature column.
Status ResolveFeatureChain(const std::vector<OpSpec>& ops, const std::string& group, bool cache,
                           ColumnSpec* spec) {
  const std::string& name = spec->name;
  if (spec->layout == SourceLayout::kPartition) {
    return MakeError(ErrorKind::kUnsupportedType,
                     "transforms['" + name + "']: partition columns take no transforms");
  }
  spec->options.on_error_zero = false;  // a stacked feature has no <name>_valid
  STOKER_RETURN_NOT_OK(ResolveChain(ops, spec, true, cache));
  if (!spec->output_shape.empty()) {
    std::string shape;
    for (int64_t dim : spec->output_shape) {
      shape += (shape.empty() ? "" : ", ") + std::to_string(dim);
    }
    return MakeError(ErrorKind::kUnsupportedType, "transforms['" + name + "'] gives [" + shape +
                                                      "] per row, but feature column '" + name +
                                                      "' needs one number per row to stack into " +
                                                      group);
  }
  if (spec->cached_ops != spec->chain->size()) {
    return MakeError(ErrorKind::kInvalidOption,
                     "transforms['" + name + "'] on feature column '" + name +
                         "' has a random op; feature chains must be deterministic");
  }
  if (spec->dtype == DType::kBFloat16) {
    return MakeError(ErrorKind::kUnsupportedType,
                     "transforms['" + name + "'] gives bfloat16, which feature column '" + name +
                         "' cannot stack; end the chain in another dtype");
  }
  // The writer reads the cached scalars and casts them to features_dtype.
  spec->dtype = spec->source_dtype;
  spec->kind = ColumnKind::kDense;
  return Status::OK();
}

// Only scalar numbers and bools stack (partition columns when their values are numbers or
// category ids); masks of features are per group, not per column.
Status CheckStackable(const ColumnSpec& spec, const FeatureGroup& group) {
  const std::string& name = spec.name;
  const bool partition_number =
      spec.layout == SourceLayout::kPartition && spec.kind == ColumnKind::kDense;
  const bool scalar =
      ((spec.layout == SourceLayout::kFixed || spec.layout == SourceLayout::kBool) &&
       spec.inner == 1) ||
      partition_number;
  if (!scalar) {
    return MakeError(
        ErrorKind::kUnsupportedType,
        "feature column '" + name + "' has type " + spec.arrow_type +
            "; features must be scalar numeric or bool columns" +
            (spec.layout == SourceLayout::kString || spec.layout == SourceLayout::kPartition
                 ? " (strings become ids with categories={'" + name + "': 'auto'})"
                 : ""));
  }
  if (spec.explicit_options && spec.options.null_mask && !group.null_mask) {
    return MakeError(ErrorKind::kInvalidOption,
                     "null_mask names feature column '" + name + "'; masks of features are " +
                         "per group: name the group (null_mask=['" + group.name + "'])");
  }
  return Status::OK();
}

// Why stacking `spec` into `to` can lose information, or nullopt when every value is exact.
std::optional<std::string> LossyStacking(const Catalog& catalog, const ColumnSpec& spec, DType to) {
  // Converted values known to be exact in float32 (dates as days, small decimals) stack into
  // float32 as they are.
  if (spec.conversion.exact_in_float32 && to == DType::kFloat32) return std::nullopt;
  std::string why;
  if (FeatureCastIsExact(catalog, spec, to, &why)) return std::nullopt;
  // A raw temporal column (int64 counts of its unit) is better stacked as a count of a chosen
  // unit: say so.
  const std::string temporal_hint =
      IsTemporal(spec.annotation) && !spec.conversion.active()
          ? " (it holds " + spec.annotation + " counts; time_unit={'" + spec.name +
                "': 's'} stacks float64 seconds since the epoch, 'D' days)"
          : "";
  return "feature column '" + spec.name + "' is " + DTypeName(spec.dtype) + temporal_hint +
         " and stacking it into " + DTypeName(to) + " can lose information" + why;
}

// A dtype that every column of a group (as read) stacks into exactly, and that holds each one's
// fill_null: float64, else int64; nullopt when neither does.
std::optional<DType> ExactDType(const Catalog& catalog, const std::vector<ColumnSpec>& as_read) {
  for (DType candidate : {DType::kFloat64, DType::kInt64}) {
    bool exact = true;
    for (const ColumnSpec& original : as_read) {
      std::string ignored;
      exact = exact && FeatureCastIsExact(catalog, original, candidate, &ignored) &&
              !(original.explicit_options && FillNullApplies(original) &&
                !IsRepresentable(original.options.fill_null, candidate));
    }
    if (exact) return candidate;
  }
  return std::nullopt;
}

// The option that fixes every lossy column of every group: one features_dtype for all groups
// (the string form, which a dict of groups takes too) when the groups that need a fix agree and
// the others already stack into it, else a dtype per group; empty when some group has no exact
// dtype (then only allow_lossy_cast remains).
std::string LossyFix(const std::vector<FeatureGroup>& groups, bool single,
                     const std::map<std::string, DType>& fixed_dtypes, bool all_fixable) {
  if (!all_fixable) return "";
  const DType first_fix = fixed_dtypes.begin()->second;
  bool shared = true;
  for (const auto& group : groups) {
    auto fixed = fixed_dtypes.find(group.name);
    shared = shared && (fixed == fixed_dtypes.end() ? group.dtype : fixed->second) == first_fix;
  }
  if (single || shared) return "features_dtype='" + std::string(DTypeName(first_fix)) + "', or ";
  std::string fix = "features_dtype={";
  for (const auto& group : groups) {
    auto fixed = fixed_dtypes.find(group.name);
    fix += "'" + group.name + "': '" +
           DTypeName(fixed == fixed_dtypes.end() ? group.dtype : fixed->second) + "', ";
  }
  fix.resize(fix.size() - 2);
  return fix + "}, or ";
}

// Resolves the groups of one ResolveFeatureGroups call, collecting its problems in order.
class FeatureResolver {
 public:
  FeatureResolver(const Catalog& catalog, const ColumnsOptions& options,
                  const std::set<std::string>& taken, ColumnLookup& lookup, OutputSpec* out,
                  std::vector<Status>* problems)
      : catalog_(catalog),
        options_(options),
        taken_(taken),
        lookup_(lookup),
        out_(out),
        problems_(problems) {}

  void Resolve(const std::vector<FeatureGroup>& groups) {
    for (const FeatureGroup& group : groups) {
      if (Status status = CheckGroup(group, single_, taken_, lookup_.schema()); !status.ok()) {
        problems_->push_back(std::move(status));
        continue;
      }
      ResolveGroup(group);
    }
    if (lossy_at_.empty()) return;
    // Every lossy column of every group, each with the one suggestion that fixes them all.
    const std::string fix = LossyFix(groups, single_, fixed_dtypes_, all_fixable_);
    for (size_t index : lossy_at_) {
      (*problems_)[index] =
          MakeError(ErrorKind::kLossyCast, (*problems_)[index].message() + "; pass " + fix +
                                               "allow_lossy_cast=True to accept the rounding");
    }
  }

 private:
  void ResolveGroup(const FeatureGroup& group) {
    FeatureGroupSpec group_spec;
    group_spec.name = group.name;
    group_spec.dtype = group.dtype;
    group_spec.null_mask = group.null_mask;
    group_spec.first = out_->features.size();
    std::vector<ColumnSpec> as_read;  // the group's columns before the cast
    const size_t lossy_before = lossy_at_.size();
    for (const auto& name : group.columns) {
      if (Status status = ResolveFeature(name, group, &as_read); !status.ok()) {
        problems_->push_back(std::move(status));
      }
    }
    group_spec.count = out_->features.size() - group_spec.first;
    if (lossy_at_.size() > lossy_before) {
      if (std::optional<DType> fix = ExactDType(catalog_, as_read)) {
        fixed_dtypes_[group.name] = *fix;
      } else {
        all_fixable_ = false;
      }
    }
    out_->feature_groups.push_back(std::move(group_spec));
  }

  Status ResolveFeature(const std::string& name, const FeatureGroup& group,
                        std::vector<ColumnSpec>* as_read) {
    if (!seen_.insert(name).second) {
      return MakeError(ErrorKind::kInvalidOption,
                       "column '" + name + "' is listed twice in features");
    }
    STOKER_RETURN_NOT_OK(CheckNotList(name, lookup_.schema()));
    ColumnSpec spec;
    STOKER_RETURN_NOT_OK(lookup_.Find(name, &spec));
    spec.feature_group = group.name;
    if (spec.options.on_error_zero && spec.explicit_options) {
      return MakeError(ErrorKind::kInvalidOption,
                       "on_error={'" + name + "': 'zero'}: feature column '" + name +
                           "' has no <name>_valid in the stacked features; on_error applies "
                           "to the columns in columns");
    }
    if (auto chain = options_.transforms.find(name); chain != options_.transforms.end()) {
      STOKER_RETURN_NOT_OK(ResolveFeatureChain(chain->second, group.name, lookup_.cached(), &spec));
      spec.counters = out_->transform_counters;
    }
    STOKER_RETURN_NOT_OK(CheckStackable(spec, group));
    // The group's mask lets nulls through (zero-filled, or fill_null where given).
    spec.options.null_mask = group.null_mask;
    if (!options_.allow_lossy_cast) {
      if (std::optional<std::string> lossy = LossyStacking(catalog_, spec, group.dtype)) {
        // In order among the other problems; the fix is appended once every group is known.
        lossy_at_.push_back(problems_->size());
        problems_->push_back(MakeError(ErrorKind::kLossyCast, *lossy));
      }
    }
    as_read->push_back(spec);
    spec.dtype = group.dtype;
    STOKER_RETURN_NOT_OK(CheckOptionValues(spec));
    out_->features.push_back(std::move(spec));
    return Status::OK();
  }

  const Catalog& catalog_;
  const ColumnsOptions& options_;
  const std::set<std::string>& taken_;
  ColumnLookup& lookup_;
  OutputSpec* out_;
  std::vector<Status>* problems_;
  const bool single_ = options_.feature_groups.empty();  // the legacy single group (features=)
  std::set<std::string> seen_;                           // every group's columns so far
  std::vector<size_t> lossy_at_;  // indices in `problems_` of the lossy columns of every group
  std::map<std::string, DType> fixed_dtypes_;  // per group with lossy columns: its exact dtype
  bool all_fixable_ = true;
};

}  // namespace

std::vector<FeatureGroup> EffectiveFeatureGroups(const ColumnsOptions& options) {
  if (!options.feature_groups.empty()) return options.feature_groups;
  if (options.features.empty()) return {};
  FeatureGroup group;
  group.name = options.features_name;
  group.columns = options.features;
  group.dtype = options.features_dtype;
  group.null_mask = options.default_column_options.null_mask;
  return {group};
}

void ResolveFeatureGroups(const Catalog& catalog, const ColumnsOptions& options,
                          const std::vector<FeatureGroup>& groups,
                          const std::set<std::string>& taken, ColumnLookup& lookup, OutputSpec* out,
                          std::vector<Status>* problems) {
  FeatureResolver(catalog, options, taken, lookup, out, problems).Resolve(groups);
}

}  // namespace stoker
