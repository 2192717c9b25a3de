// Checks and messages shared by the steps of column resolution (resolve/*.cc).
#pragma once

#include <arrow/type_fwd.h>

#include <string>
#include <vector>

#include "resolve/column_spec.h"
#include "stoker/error.h"

namespace stoker {

/// kUnsupportedType: "column 'x' has type T, which stoker cannot turn into a tensor" + `why`.
Status Unsupported(const std::string& column, const arrow::DataType& type, const std::string& why);

/// Whether a fixed-width column carries an annotation (its unit: temporal types as stored; also
/// fixed-size binaries, tensors, categories and converted values).
inline bool IsTemporal(const std::string& annotation) { return !annotation.empty(); }

/// `value` with 17 significant digits, as messages show option values.
std::string FormatValue(double value);

/// The column's fill_null and pad_value fit its delivered dtype. A fill value given for all
/// columns at once (fill_null=nan) is checked only where a column really has nulls (the
/// decoder), so that it does not trip over integer columns without any.
Status CheckOptionValues(const ColumnSpec& spec);

/// One error for every problem found while resolving the columns, one line each: the kind (and
/// so the Python exception type) of the first.
Status CombineProblems(const std::vector<Status>& problems);

}  // namespace stoker
