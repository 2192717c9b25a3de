#include "stoker/error.h"

#include <memory>

namespace stoker {
namespace {

class ErrorDetail : public arrow::StatusDetail {
 public:
  explicit ErrorDetail(ErrorKind kind) : kind_(kind) {}
  const char* type_id() const override { return kTypeId; }
  std::string ToString() const override { return ErrorKindName(kind_); }
  ErrorKind kind() const { return kind_; }

  static constexpr const char* kTypeId = "stoker::ErrorDetail";

 private:
  ErrorKind kind_;
};

arrow::StatusCode CodeFor(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kNotFound:
    case ErrorKind::kCorruptFile:
    case ErrorKind::kStorage:
      return arrow::StatusCode::IOError;
    case ErrorKind::kColumnNotFound:
      return arrow::StatusCode::KeyError;
    case ErrorKind::kUnsupportedType:
    case ErrorKind::kUnsupportedInput:
      return arrow::StatusCode::TypeError;
    default:
      return arrow::StatusCode::Invalid;
  }
}

}  // namespace

Status MakeError(ErrorKind kind, std::string message) {
  return Status(CodeFor(kind), std::move(message), std::make_shared<ErrorDetail>(kind));
}

std::optional<ErrorKind> GetErrorKind(const Status& status) {
  const auto& detail = status.detail();
  if (detail && std::string(detail->type_id()) == ErrorDetail::kTypeId) {
    return static_cast<const ErrorDetail&>(*detail).kind();
  }
  return std::nullopt;
}

ErrorKind ReadFailureKind(const Status& status) {
  const auto kind = GetErrorKind(status);
  if (kind == ErrorKind::kStorage || kind == ErrorKind::kNotFound) return *kind;
  return ErrorKind::kCorruptFile;
}

const char* ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kNotFound:
      return "not_found";
    case ErrorKind::kEmptyDataset:
      return "empty_dataset";
    case ErrorKind::kColumnNotFound:
      return "column_not_found";
    case ErrorKind::kInvalidOption:
      return "invalid_option";
    case ErrorKind::kUnsupportedType:
      return "unsupported_type";
    case ErrorKind::kNullValues:
      return "null_values";
    case ErrorKind::kLossyCast:
      return "lossy_cast";
    case ErrorKind::kCorruptFile:
      return "corrupt_file";
    case ErrorKind::kSchemaMismatch:
      return "schema_mismatch";
    case ErrorKind::kStateMismatch:
      return "state_mismatch";
    case ErrorKind::kStorage:
      return "storage";
    case ErrorKind::kClosed:
      return "closed";
    case ErrorKind::kTransform:
      return "transform";
    case ErrorKind::kWorkerCrashed:
      return "worker_crashed";
    case ErrorKind::kUnsupportedInput:
      return "unsupported_input";
  }
  return "unknown";
}

}  // namespace stoker
