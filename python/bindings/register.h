// One Register* function per subsystem; module.cc calls them all. Bindings hold no logic: they
// convert types, release the GIL around blocking calls and turn Status into exceptions.
#pragma once

#include <nanobind/nanobind.h>

#include <type_traits>

#include "stoker/error.h"
#include "stoker/transform_spec.h"

namespace stoker::python {

/// Throws a C++ exception that the translator in register_errors.cc turns into the matching
/// stoker.errors class. No-op for OK.
void ThrowIfError(const Status& status);

/// Releases the GIL for its lifetime, like nanobind::gil_scoped_release, but safe at interpreter
/// exit: a thread that would be ended by CPython while retaking the GIL parks instead of
/// unwinding through a noexcept destructor (std::terminate). See gil.cc.
class ReleaseGil {
 public:
  ReleaseGil();
  ~ReleaseGil();
  ReleaseGil(const ReleaseGil&) = delete;
  ReleaseGil& operator=(const ReleaseGil&) = delete;

 private:
  PyThreadState* state_;
};

/// Tracks which threads iterate an engine: called after start_epoch() and next(), with `done`
/// when the epoch ended. At exit, daemon threads among them get up to a second to finish (they
/// get LoaderClosedError at their next step) before the interpreter freezes them with their
/// references. Callable with or without the GIL.
void NoteIterating(bool done);

/// Whether the interpreter is finalizing: no thread may then ask for the GIL.
bool PythonFinalizing();

/// Runs `call` (returning Status or Result<T>) with the GIL released, then raises on error;
/// returns the T of a Result.
template <typename Call>
auto Blocking(Call&& call) {
  using Returned = decltype(call());
  Returned returned;
  {
    ReleaseGil release;
    returned = call();
  }
  if constexpr (std::is_same_v<Returned, Status>) {
    ThrowIfError(returned);
  } else {
    ThrowIfError(returned.status());
    return std::move(returned).ValueUnsafe();
  }
}

/// A Python op parameter (None, bool, int, float, str, or a list/tuple of these) as a ParamValue;
/// raises TypeError for anything else.
ParamValue ToParam(nanobind::handle object);
/// An op declared as a dict {"op": name, **params}.
OpSpec ToOpSpec(nanobind::handle spec);

void RegisterErrors(nanobind::module_& m);
void RegisterOptions(nanobind::module_& m);
void RegisterTensor(nanobind::module_& m);
void RegisterLoader(nanobind::module_& m);
void RegisterCache(nanobind::module_& m);
void RegisterDescribe(nanobind::module_& m);
void RegisterExitHook(nanobind::module_& m);
void RegisterTransform(nanobind::module_& m);
void RegisterUserTransform(nanobind::module_& m);  // after RegisterOptions

}  // namespace stoker::python
