#include "resolve/output_names.h"

#include <set>
#include <string>

#include "resolve/features.h"
#include "util/output_keys.h"

namespace stoker {
namespace {

// `text` quoted as Python's repr() quotes a plain string: the messages match Python's.
std::string Quoted(const std::string& text) {
  const bool single = text.find('\'') != std::string::npos;
  const bool dbl = text.find('"') != std::string::npos;
  return single && !dbl ? "\"" + text + "\"" : "'" + text + "'";
}

Status Invalid(const std::string& message) { return MakeError(ErrorKind::kInvalidOption, message); }

}  // namespace

std::vector<ColumnInfo> ToColumnInfos(const OutputSpec& spec) {
  std::vector<ColumnInfo> out;
  for (const ColumnSpec& column : spec.columns) out.push_back(ToColumnInfo(column));
  for (const FeatureGroupSpec& group : spec.feature_groups) {
    ColumnInfo info;
    info.name = group.name;
    info.arrow_type = "stacked features";
    info.kind = ColumnKind::kDense;
    info.dtype = group.dtype;
    info.inner_shape = {static_cast<int64_t>(group.count)};
    info.added_keys = AddedKeys(group.name, 0, group.null_mask, 0, false);
    out.push_back(std::move(info));
  }
  return out;
}

Status CheckOutputNames(const ColumnsOptions& options, const std::string& padding_flag,
                        const std::vector<ColumnInfo>& columns) {
  std::set<std::string> names;
  for (const ColumnInfo& info : columns) names.insert(info.name);
  std::set<std::string> known = names;
  for (const FeatureGroup& group : EffectiveFeatureGroups(options)) {
    known.insert(group.columns.begin(), group.columns.end());
  }
  for (const auto& [name, chain] : options.transforms) known.insert(name);
  for (const auto& [name, outputs] : options.transform_outputs) known.insert(name);
  for (const auto& [name, column_options] : options.column_options) {
    // A struct's name stands for its leaves ("s" for "s.a", "s.b").
    const auto leaf = known.lower_bound(name + ".");
    const bool parent = leaf != known.end() && leaf->starts_with(name + ".");
    if (!known.contains(name) && !parent) {
      return Invalid("a per-column option names column " + Quoted(name) +
                     ", which the loader does not read");
    }
  }
  if (!padding_flag.empty() && names.contains(padding_flag)) {
    return Invalid("padding_mask=True adds " + Quoted(padding_flag) + ", which is also a column");
  }
  for (const ColumnInfo& info : columns) {
    for (const std::string& key : info.added_keys) {
      if (names.contains(key)) {
        // How to do without the added key, for the clash's message.
        std::string instead;
        if (key.starts_with(LengthsKey(info.name))) {
          instead = "lists={" + Quoted(info.name) + ": 'ragged'}";
        } else if (key == ValidKey(info.name)) {
          instead = "leave " + Quoted(info.name) + " out of on_error";
        } else {
          instead = "leave " + Quoted(info.name) + " out of null_mask";
        }
        return Invalid("output key " + Quoted(key) + " for column " + Quoted(info.name) +
                       " clashes with a column of that name; leave " + Quoted(key) +
                       " out of columns, or " + instead);
      }
      names.insert(key);
    }
  }
  return Status::OK();
}

}  // namespace stoker
