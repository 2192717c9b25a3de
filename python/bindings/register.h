// One Register* function per subsystem; module.cc calls them all. Bindings hold no logic: they
// convert types, release the GIL around blocking calls and turn Status into exceptions.
#pragma once

#include <type_traits>

#include <nanobind/nanobind.h>

#include "stoker/error.h"

namespace stoker::python {

/// Throws a C++ exception that the translator in register_errors.cc turns into the matching
/// stoker.errors class. No-op for OK.
void ThrowIfError(const Status& status);

/// Runs `call` (returning Status or Result<T>) with the GIL released, then raises on error;
/// returns the T of a Result.
template <typename Call>
auto Blocking(Call&& call) {
  using Returned = decltype(call());
  Returned returned;
  {
    nanobind::gil_scoped_release release;
    returned = call();
  }
  if constexpr (std::is_same_v<Returned, Status>) {
    ThrowIfError(returned);
  } else {
    ThrowIfError(returned.status());
    return std::move(returned).ValueUnsafe();
  }
}

void RegisterErrors(nanobind::module_& m);
void RegisterOptions(nanobind::module_& m);
void RegisterTensor(nanobind::module_& m);
void RegisterLoader(nanobind::module_& m);
void RegisterCache(nanobind::module_& m);
void RegisterDescribe(nanobind::module_& m);
void RegisterTransform(nanobind::module_& m);

}  // namespace stoker::python
