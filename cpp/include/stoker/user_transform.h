// UserTransform: the engine's hook for user code (Python's `transform=`).
//
// The decoder calls Apply once per decoded row group, on a worker thread, after the raw columns
// are read and before the ready-tensor cache: with a cache, warm epochs read Apply's output from
// the cache and do not call it. Apply's output columns become the dataset's columns for every
// other option (columns, features, transforms, lists, fill_null, null_mask).
//
// The output schema is learned once, at open, by calling Apply on the first rows of the first row
// group; every later output must have the same column names and types (checked by the engine).
// Fingerprint() is part of the cache key and of LoaderOptions::Fingerprint: a new fingerprint
// means a cache miss and a resume state that no longer matches.
//
// Thread safety: Apply may be called from several worker threads at once; an implementation
// serialises what it must (the Python one takes the GIL).
#pragma once

#include <arrow/type_fwd.h>

#include <memory>
#include <string>

#include "stoker/error.h"

namespace stoker {

class UserTransform {
 public:
  virtual ~UserTransform() = default;

  /// Returns the transformed columns of `input` (one row group's raw columns, or the first rows
  /// of one at open), each with input->num_rows() rows. `where` names the rows ("file 'x',
  /// row group 3") and should start any error message. Errors carry ErrorKind::kTransform (or
  /// kWorkerCrashed, kClosed).
  virtual Result<std::shared_ptr<arrow::RecordBatch>> Apply(
      const std::shared_ptr<arrow::RecordBatch>& input, const std::string& where) = 0;

  /// A stable identity of the transform's code and parameters: what the cache key includes.
  virtual std::string Fingerprint() const = 0;
};

}  // namespace stoker
