// One Register* function per subsystem; module.cc calls them all. Bindings hold no logic: they
// convert types, release the GIL around blocking calls and turn Status into exceptions.
#pragma once

#include <nanobind/nanobind.h>

#include "stoker/error.h"

namespace stoker::python {

/// Throws a C++ exception that the translator in register_errors.cc turns into the matching
/// stoker.errors class. No-op for OK.
void ThrowIfError(const Status& status);

void RegisterErrors(nanobind::module_& m);
void RegisterOptions(nanobind::module_& m);
void RegisterTensor(nanobind::module_& m);
void RegisterLoader(nanobind::module_& m);
void RegisterCache(nanobind::module_& m);

}  // namespace stoker::python
