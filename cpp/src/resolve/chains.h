// The transform chain of a column (ColumnsOptions::transforms, transform_outputs): its ops built
// and type-checked against the column's values, and the prefix the decoder runs before the
// ready-tensor cache chosen.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "resolve/column_spec.h"
#include "resolve/lookup.h"
#include "stoker/error.h"
#include "stoker/transform_spec.h"

namespace stoker {

/// Builds `ops` into `spec`'s chain against the column's values and makes the spec the chain's
/// output: a dense tensor, or for a list column a list of the chain's numbers (the chain then
/// runs whole, per element, in the decoder). `allow_cache`: a prefix may run before the cache
/// (the longest deterministic one ending in a fixed-shape tensor, or in any tensor with
/// `variable_cache`, i.e. a cache_dir).
Status ResolveChain(const std::vector<OpSpec>& ops, ColumnSpec* spec, bool allow_cache,
                    bool variable_cache);

/// Makes ops [0, cached) of `spec`'s chain its cached prefix: the spec then describes what the
/// decoder stores and the writer reads (fixed-shape tensors, or tensors with their shapes).
void SetCachedPrefix(size_t cached, ColumnSpec* spec);

/// The outputs of `column` with several chains (`outputs`: name and ops), group number `group`:
/// one dense ColumnSpec each in out->columns, read from the column, with the deterministic prefix
/// the chains share run once per row (with a cache_dir, `cache`: before the cache). Output names
/// go into `*seen_outputs`; a name taken already is an error.
Status ResolveOutputs(const std::vector<std::pair<std::string, std::vector<OpSpec>>>& outputs,
                      const std::string& column, int group, bool cache, ColumnLookup& lookup,
                      std::set<std::string>* seen_outputs, OutputSpec* out);

}  // namespace stoker
