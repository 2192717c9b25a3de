#include <nanobind/nanobind.h>

#include "register.h"

NB_MODULE(_stoker, m) {
  m.doc() = "stoker's C++ engine. Use the `stoker` package, not this module.";
  stoker::python::RegisterErrors(m);
  stoker::python::RegisterOptions(m);
  stoker::python::RegisterTensor(m);
  stoker::python::RegisterLoader(m);
  stoker::python::RegisterCache(m);
  stoker::python::RegisterDescribe(m);
  stoker::python::RegisterTransform(m);
  stoker::python::RegisterUserTransform(m);
  stoker::python::RegisterExitHook(m);
}
