// The trampoline behind `transform=`: a UserTransform (stoker/user_transform.h) that calls a
// Python function on the engine's worker threads. The function is stoker's own glue
// (python/stoker/_user_transform.py), which holds every conversion and catches every exception:
// it takes the input as Arrow C data interface capsules and returns either the output's capsules
// or an error as (kind, message). No logic here beyond crossing the boundary.
#include <arrow/c/abi.h>
#include <arrow/c/bridge.h>
#include <arrow/record_batch.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>

#include "register.h"
#include "stoker/options.h"
#include "stoker/user_transform.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

void DeleteSchemaCapsule(PyObject* capsule) noexcept {
  auto* schema = static_cast<ArrowSchema*>(PyCapsule_GetPointer(capsule, "arrow_schema"));
  if (schema != nullptr && schema->release != nullptr) schema->release(schema);
  delete schema;
}

void DeleteArrayCapsule(PyObject* capsule) noexcept {
  auto* array = static_cast<ArrowArray*>(PyCapsule_GetPointer(capsule, "arrow_array"));
  if (array != nullptr && array->release != nullptr) array->release(array);
  delete array;
}

class PyUserTransform final : public UserTransform {
 public:
  // Holds `apply` weakly: its owner is the Python Loader. A strong reference from C++ would hide
  // the usual cycle (a module-level loader whose transform's globals reach it) from Python's
  // collector, and the loader would outlive the interpreter.
  PyUserTransform(nb::handle apply, std::string fingerprint)
      : apply_(nb::steal(PyWeakref_NewRef(apply.ptr(), nullptr))),
        fingerprint_(std::move(fingerprint)) {
    if (!apply_.is_valid()) throw nb::python_error();
  }

  ~PyUserTransform() override {
    // Dropping the Python reference needs the GIL. The usual case: the options die with their
    // Python object, on a thread that holds it (also during finalization). A thread without it
    // may not ask for it once the interpreter is exiting: the reference is leaked then.
    if (Py_IsInitialized() && PyGILState_Check()) {
      apply_.reset();
      return;
    }
    if (!Py_IsInitialized() || PythonFinalizing()) {
      (void)apply_.release();
      return;
    }
    nb::gil_scoped_acquire gil;
    apply_.reset();
  }

  Result<std::shared_ptr<arrow::RecordBatch>> Apply(const std::shared_ptr<arrow::RecordBatch>& in,
                                                    const std::string& where) override {
    // A worker must not ask for the GIL once the interpreter is exiting: CPython would end or
    // freeze the thread while the engine waits to join it.
    if (PythonFinalizing()) {
      return MakeError(ErrorKind::kClosed, where + ": the interpreter is exiting");
    }
    auto schema = std::make_unique<ArrowSchema>();
    auto array = std::make_unique<ArrowArray>();
    STOKER_RETURN_NOT_OK(arrow::ExportRecordBatch(*in, array.get(), schema.get()));
    nb::gil_scoped_acquire gil;
    nb::object schema_capsule =
        nb::steal(PyCapsule_New(schema.release(), "arrow_schema", DeleteSchemaCapsule));
    nb::object array_capsule =
        nb::steal(PyCapsule_New(array.release(), "arrow_array", DeleteArrayCapsule));
    nb::object apply = nb::borrow(PyWeakref_GetObject(apply_.ptr()));
    if (apply.is_none()) {
      return MakeError(ErrorKind::kClosed, where + ": the loader that owns transform= is gone");
    }
    try {
      nb::object returned = apply(schema_capsule, array_capsule, where);
      nb::tuple pair = nb::cast<nb::tuple>(returned);
      if (nb::isinstance<nb::str>(pair[0])) {  // (kind, message): the glue caught an error
        const std::string kind = nb::cast<std::string>(pair[0]);
        const std::string message = nb::cast<std::string>(pair[1]);
        return MakeError(ParseKind(kind), message);
      }
      auto* out_schema =
          static_cast<ArrowSchema*>(PyCapsule_GetPointer(pair[0].ptr(), "arrow_schema"));
      auto* out_array =
          static_cast<ArrowArray*>(PyCapsule_GetPointer(pair[1].ptr(), "arrow_array"));
      if (out_schema == nullptr || out_array == nullptr) throw nb::python_error();
      // Moves the structs out of the capsules (their destructors then release nothing).
      return arrow::ImportRecordBatch(out_array, out_schema);
    } catch (nb::python_error& error) {
      return MakeError(ErrorKind::kTransform, where + ": transform= failed: " + error.what());
    } catch (const nb::cast_error&) {
      return MakeError(ErrorKind::kTransform, where + ": transform= glue returned a bad value");
    }
  }

  std::string Fingerprint() const override { return fingerprint_; }

 private:
  static ErrorKind ParseKind(const std::string& kind) {
    for (ErrorKind candidate :
         {ErrorKind::kTransform, ErrorKind::kWorkerCrashed, ErrorKind::kClosed,
          ErrorKind::kInvalidOption, ErrorKind::kUnsupportedType, ErrorKind::kNullValues}) {
      if (kind == ErrorKindName(candidate)) return candidate;
    }
    return ErrorKind::kTransform;
  }

  nb::object apply_;  // a weakref.ref to the glue
  const std::string fingerprint_;
};

}  // namespace

void RegisterUserTransform(nb::module_& m) {
  nb::class_<LoaderOptions> options =
      nb::borrow<nb::class_<LoaderOptions>>(m.attr("LoaderOptions"));
  options
      .def(
          "set_user_transform",
          [](LoaderOptions& self, nb::handle apply, std::string fingerprint) {
            self.columns.user_transform =
                std::make_shared<PyUserTransform>(apply, std::move(fingerprint));
          },
          nb::arg("apply"), nb::arg("fingerprint"),
          "apply(schema_capsule, array_capsule, where) -> (schema_capsule, array_capsule) or "
          "(kind, message); called on the engine's worker threads with the GIL held. Held "
          "weakly: the caller keeps it alive as long as the loader.")
      .def_prop_ro("has_user_transform",
                   [](const LoaderOptions& self) { return self.columns.user_transform != nullptr; })
      .def_prop_rw(
          "transform_columns",
          [](const LoaderOptions& self) { return self.columns.transform_columns; },
          [](LoaderOptions& self, std::vector<std::string> columns) {
            self.columns.transform_columns = std::move(columns);
          });
}

}  // namespace stoker::python
