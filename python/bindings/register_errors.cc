#include <nanobind/stl/string.h>

#include <exception>
#include <string>

#include "register.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

// Carries a Status across the C++/Python boundary.
class StatusError : public std::exception {
 public:
  StatusError(std::string kind, std::string message)
      : kind_(std::move(kind)), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  const std::string& kind() const { return kind_; }

 private:
  std::string kind_;
  std::string message_;
};

}  // namespace

void ThrowIfError(const Status& status) {
  if (status.ok()) return;
  const auto kind = GetErrorKind(status);
  // A Status without our detail is a bug or an Arrow failure we did not classify.
  throw StatusError(kind ? ErrorKindName(*kind) : "internal", status.message());
}

void RegisterErrors(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      nb::object cls = nb::module_::import_("stoker.errors").attr("error_class")(e.kind());
      PyErr_SetString(cls.ptr(), e.what());
    }
  });
}

}  // namespace stoker::python
