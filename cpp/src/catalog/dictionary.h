// Dictionary decoding: turns a dictionary-encoded Arrow array into a plain array of its value
// type, so batch assembly only ever sees plain layouts.
//
// Parquet readers hand back dictionary arrays for string columns that were written from
// dictionaries (pandas categoricals, pyarrow's dictionary_encode()). Each chunk may carry its own
// dictionary, so chunks are decoded one by one.
// Thread safety: a pure function of its inputs.
#pragma once

#include <arrow/array.h>

#include <memory>
#include <string>

#include "stoker/error.h"

namespace stoker {

/// Returns `dict` with every index replaced by its value: fixed-width values (numbers, temporal)
/// keep their type; string and binary values become large_utf8 / large_binary (64-bit offsets).
/// A null index, or an index that points at a null dictionary entry, is a null row (zero bytes
/// for fixed-width values, an empty string otherwise). An index outside the dictionary is a
/// kCorruptFile error and a value type without a plain layout (bool, nested) kUnsupportedType;
/// both name `column` and `where` (file and row group).
Result<std::shared_ptr<arrow::Array>> MaterializeDictionary(const arrow::DictionaryArray& dict,
                                                            const std::string& column,
                                                            const std::string& where);

}  // namespace stoker
