#include "resolve/column_checks.h"

#include <arrow/type.h>

#include <sstream>

namespace stoker {

Status Unsupported(const std::string& column, const arrow::DataType& type, const std::string& why) {
  return MakeError(ErrorKind::kUnsupportedType,
                   "column '" + column + "' has type " + type.ToString() +
                       ", which stoker cannot turn into a tensor" + why);
}

std::string FormatValue(double value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

// fill_null and pad_value are written into the delivered dtype; a value that dtype cannot hold
// would change silently, so it is refused up front.
Status CheckOptionValues(const ColumnSpec& spec) {
  if (spec.explicit_options && (FillNullApplies(spec) || ElementFillApplies(spec)) &&
      !IsRepresentable(spec.options.fill_null, spec.dtype)) {
    return MakeError(ErrorKind::kInvalidOption,
                     "fill_null=" + FormatValue(spec.options.fill_null) + " for column '" +
                         spec.name + "' cannot be stored exactly as " + DTypeName(spec.dtype) +
                         "; pass fill_null={'" + spec.name + "': value} with a value it holds");
  }
  if (spec.kind == ColumnKind::kPadded && !IsRepresentable(spec.options.pad_value, spec.dtype)) {
    return MakeError(ErrorKind::kInvalidOption,
                     "pad_value=" + FormatValue(spec.options.pad_value) + " for column '" +
                         spec.name + "' cannot be stored exactly as " + DTypeName(spec.dtype) +
                         "; pass pad_value={'" + spec.name + "': value} with a value it holds");
  }
  return Status::OK();
}

Status CombineProblems(const std::vector<Status>& problems) {
  if (problems.size() == 1) return problems[0];
  std::string message = std::to_string(problems.size()) +
                        " problems with the requested columns (fix them all, then open again):";
  for (const Status& problem : problems) message += "\n  - " + problem.message();
  return MakeError(GetErrorKind(problems[0]).value_or(ErrorKind::kInvalidOption),
                   std::move(message));
}

}  // namespace stoker
