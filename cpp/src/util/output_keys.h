// The names of the keys a column adds beside its own in every batch: its lengths, masks and
// valid flags. The one place they are spelled: column resolution (ColumnInfo::added_keys and
// the clash checks at open), the decoder's messages and Python (bound as `_stoker.lengths_key`...)
// all call these.
#pragma once

#include <string>
#include <vector>

namespace stoker {

/// A padded list's lengths: level 0 the rows' (`<name>_lengths`), level l >= 1 those of the l-th
/// level below (`<name>_lengths_l`, lists of lists).
std::string LengthsKey(const std::string& name, int level = 0);

/// Validity under null_mask: level 0 the rows' (`<name>_mask`), level l >= 1 the items of the
/// l-th level below (`<name>_mask_l`: inner lists, strings, elements).
std::string MaskKey(const std::string& name, int level = 0);

/// on_error="zero" transforms: false where a zero tensor was substituted (`<name>_valid`).
std::string ValidKey(const std::string& name);

/// The keys column `name` adds, in batch order (the order of stoker::OutputColumn's arrays):
/// `lengths_levels` lengths (a padded list: 1 + its levels below the rows; 0 otherwise), the row
/// mask and `mask_levels` element masks when `masked`, and the valid flags when `valid`.
std::vector<std::string> AddedKeys(const std::string& name, int lengths_levels, bool masked,
                                   int mask_levels, bool valid);

}  // namespace stoker
