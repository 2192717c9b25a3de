// Stacked feature groups (ColumnsOptions::features, feature_groups): which columns go into each
// [B, F] tensor, and whether their values stack into its dtype exactly.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "resolve/column_spec.h"
#include "resolve/lookup.h"
#include "stoker/error.h"
#include "stoker/options.h"

namespace stoker {

/// The feature groups `options` asks for: ColumnsOptions::feature_groups, or `features` as one
/// group named features_name (masked when null_mask is on for every column).
std::vector<FeatureGroup> EffectiveFeatureGroups(const ColumnsOptions& options);

/// Resolves the columns of `groups` (EffectiveFeatureGroups with struct parents expanded) into
/// out->features and out->feature_groups. `taken`: the names of the resolved columns, which a
/// group's name must not reuse. Every problem is appended to `problems` (one line per column, in
/// order); a lossy cast's line ends with the one option that fixes every group's.
void ResolveFeatureGroups(const Catalog& catalog, const ColumnsOptions& options,
                          const std::vector<FeatureGroup>& groups,
                          const std::set<std::string>& taken, ColumnLookup& lookup, OutputSpec* out,
                          std::vector<Status>* problems);

}  // namespace stoker
