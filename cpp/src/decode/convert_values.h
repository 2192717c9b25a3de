// The value conversions ResolveConversion chose (resolve/value_conversion.h), run by the decoder
// on each decoded array before the ready-tensor cache.
// Thread safety: a pure function of its inputs.
#pragma once

#include <arrow/array.h>

#include <memory>

#include "resolve/value_conversion.h"
#include "stoker/error.h"

namespace stoker {

/// `array` (of the type ResolveConversion saw) converted: float64, float32 or int64 values,
/// the same validity (null slots hold 0). A list's elements are converted, its offsets kept.
Result<std::shared_ptr<arrow::Array>> ConvertValues(const ValueConversion& conversion,
                                                    const std::shared_ptr<arrow::Array>& array);

}  // namespace stoker
