// Category ids: a categorical column's strings replaced by their ids in its vocabulary
// (resolve/vocabulary.h), by the decoder, before the ready-tensor cache.
// Thread safety: a pure function of its inputs.
#pragma once

#include <arrow/array.h>
#include <arrow/chunked_array.h>

#include <memory>
#include <string>

#include "resolve/vocabulary.h"
#include "stoker/error.h"

namespace stoker {

/// The ids of `column`'s values (string, large_string or dictionary<string> chunks): an array of
/// vocabulary.IdDType() (uint8 up to 255 values, uint16 up to 65,535...) with the same nulls (a
/// null row holds 0). Narrow ids keep the decoded and cached bytes small; the column writers
/// widen them to the delivered int64. `field` and `where` name it in errors.
Result<std::shared_ptr<arrow::Array>> ApplyVocabulary(const Vocabulary& vocabulary,
                                                      const arrow::ChunkedArray& column,
                                                      const std::string& field,
                                                      const std::string& where);

}  // namespace stoker
