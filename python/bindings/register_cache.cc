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
      [](const std::string& dir) {
        Result<CacheUsage> usage;
        {
          nb::gil_scoped_release release;
          usage = InspectCache(dir);
        }
        ThrowIfError(usage.status());
        return *usage;
      },
      nb::arg("dir"));
  m.def(
      "clear_cache",
      [](const std::string& dir) {
        Status status;
        {
          nb::gil_scoped_release release;
          status = ClearCache(dir);
        }
        ThrowIfError(status);
      },
      nb::arg("dir"));
}

}  // namespace stoker::python
