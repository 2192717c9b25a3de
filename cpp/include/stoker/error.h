// Error kinds and Status helpers.
//
// stoker's core returns arrow::Status / arrow::Result<T> everywhere. A user-facing failure carries
// an ErrorKind in its StatusDetail so that the Python front can raise one typed exception per kind
// (see python/stoker/errors.py). Messages always name the file, row group, column or option.
#pragma once

#include <arrow/result.h>
#include <arrow/status.h>

#include <optional>
#include <string>

#define STOKER_RETURN_NOT_OK(expr) ARROW_RETURN_NOT_OK(expr)
#define STOKER_ASSIGN_OR_RAISE(lhs, rexpr) ARROW_ASSIGN_OR_RAISE(lhs, rexpr)

namespace stoker {

using arrow::Result;
using arrow::Status;

/// What went wrong, from the user's point of view. Each kind maps to one Python exception.
enum class ErrorKind {
  kNotFound,         // a path or object does not exist
  kEmptyDataset,     // a source matched no Parquet files, or has no rows
  kColumnNotFound,   // a requested column is not in the schema
  kInvalidOption,    // an option value is out of range or inconsistent
  kUnsupportedType,  // a column type stoker cannot turn into a tensor (or needs an option)
  kNullValues,       // nulls found and no fill value or mask requested
  kLossyCast,        // a cast would lose information and was not allowed
  kCorruptFile,      // a file is not valid Parquet, or is truncated
  kSchemaMismatch,   // two files disagree on a column
  kStateMismatch,    // a resume state does not match the loader's options
  kStorage,          // an I/O error from the storage layer
  kClosed,           // the loader was closed (possibly by another thread), or used after fork
  kTransform,        // a user transform (transform=) raised, or broke its output schema
  kWorkerCrashed,    // a process running a user transform died
  // A valid value stoker does not decode (a 12-bit JPEG, a GIF, a complex npy): not corrupt.
  kUnsupportedInput,
};

/// Returns a Status carrying `kind`; the message is what the user reads.
Status MakeError(ErrorKind kind, std::string message);

/// Returns the kind attached by MakeError, if any.
std::optional<ErrorKind> GetErrorKind(const Status& status);

/// The kind a failure inside a file read should surface as: a storage failure (network, server,
/// permissions, a vanished object) keeps its kind; anything else there means the bytes are bad.
ErrorKind ReadFailureKind(const Status& status);

/// Stable lowercase name of a kind ("not_found", ...), used by the bindings.
const char* ErrorKindName(ErrorKind kind);

}  // namespace stoker
