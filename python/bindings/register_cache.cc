#include <nanobind/stl/string.h>

#include "register.h"
#include "stoker/cache.h"

namespace nb = nanobind;

namespace stoker::python {

void RegisterCache(nb::module_& m) {
  nb::class_<CacheUsage>(m, "CacheUsage")
      .def_ro("tensors_entries", &CacheUsage::tensors_entries)
      .def_ro("tensors_bytes", &CacheUsage::tensors_bytes)
      .def_ro("blocks_entries", &CacheUsage::blocks_entries)
      .def_ro("blocks_bytes", &CacheUsage::blocks_bytes);
  m.def(
      "inspect_cache",
      [](const std::string& dir) { return Blocking([&] { return InspectCache(dir); }); },
      nb::arg("dir"));
  m.def(
      "clear_cache", [](const std::string& dir) { Blocking([&] { return ClearCache(dir); }); },
      nb::arg("dir"));
}

}  // namespace stoker::python
