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
#include "stoker/options.h"

namespace stoker {

/// "auto" vocabularies built ahead, by field name (BuildAutoVocabularies).
using BuiltVocabularies = std::map<std::string, Result<std::shared_ptr<const Vocabulary>>>;

/// The "auto" vocabularies of the file string columns that `options` names in categories, built
/// together on up to `num_threads` threads (BuildVocabularies): what ResolveCategory would build
/// column by column, error included. Columns it cannot tell are plain string columns of every
/// file are left to ResolveCategory.
BuiltVocabularies BuildAutoVocabularies(const Catalog& catalog, const ColumnsOptions& options,
                                        int num_threads);

/// Makes `spec` (a string or partition column named in categories, with `given` values, empty
/// for "auto") a dense int64 column of ids (a file column's read as the vocabulary's narrow
/// Vocabulary::IdDType, its source_dtype). Its vocabulary is the one already in
/// `*vocabularies` (shared by every spec of the column), else made from `given`, else built
/// from the data (an "auto" vocabulary of a partition column from its values). `transformed`:
/// the column also has transforms (refused); `user_transform`: the column is an output of
/// transform= (an "auto" vocabulary is refused). `built`: "auto" vocabularies built ahead, taken
/// instead of building (null: none).
Status ResolveCategory(const Catalog& catalog, const std::vector<std::string>& given,
                       bool transformed, bool user_transform, ColumnSpec* spec,
                       std::map<std::string, std::shared_ptr<const Vocabulary>>* vocabularies,
                       const BuiltVocabularies* built = nullptr);

}  // namespace stoker
