// The names a loader's batches hold, checked once at open (ResolveColumns' last step): every
// column's name, the keys each adds beside it (ColumnInfo::added_keys, util/output_keys.h) and
// the padding flag must be distinct, and every per-column option must name a column the loader
// reads.
#pragma once

#include <vector>

#include "resolve/column_spec.h"
#include "stoker/column_info.h"
#include "stoker/error.h"
#include "stoker/options.h"

namespace stoker {

/// What `loader.columns` lists: each output column (ToColumnInfo), then each stacked feature
/// group (a dense [B, F] tensor, `<group>_mask` beside it when masked).
std::vector<ColumnInfo> ToColumnInfos(const OutputSpec& spec);

/// kInvalidOption when a per-column option (ColumnsOptions::column_options) names a column the
/// loader does not read (a struct's name stands for its fields), `padding_flag` (the padding
/// flag's name under padding_mask, else empty) is a column's name, or a key a column adds is also a
/// column's (or another added key's) name. `options` as the caller gave them; `columns` from
/// ToColumnInfos.
Status CheckOutputNames(const ColumnsOptions& options, const std::string& padding_flag,
                        const std::vector<ColumnInfo>& columns);

}  // namespace stoker
