// A categorical column (ColumnsOptions::categories): its strings become int64 ids of a
// vocabulary (resolve/vocabulary.h), given or built here once ("auto").
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "resolve/column_spec.h"
#include "resolve/vocabulary.h"
#include "stoker/error.h"

namespace stoker {

/// Makes `spec` (a string or partition column named in categories, with `given` values, empty
/// for "auto") a dense int64 column of ids. Its vocabulary is the one already in
/// `*vocabularies` (shared by every spec of the column), else made from `given`, else built
/// from the data (an "auto" vocabulary of a partition column from its values). `transformed`:
/// the column also has transforms (refused); `user_transform`: the column is an output of
/// transform= (an "auto" vocabulary is refused).
Status ResolveCategory(const Catalog& catalog, const std::vector<std::string>& given,
                       bool transformed, bool user_transform, ColumnSpec* spec,
                       std::map<std::string, std::shared_ptr<const Vocabulary>>* vocabularies);

}  // namespace stoker
