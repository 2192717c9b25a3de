#include <nanobind/stl/string.h>

#include <cstdint>

#include "decode/cached_decoder.h"
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
  // Test-only, not API (underscored: not among the public names): the fault seam of
  // tests/unit/cache/test_cache_write_behind.py, a disk slower than decoding. Loaders opened after
  // the call pause this long before each write-behind write; 0 turns it off.
  m.def(
      "_testing_set_cache_write_delay_ms",
      [](int64_t delay_ms) { CachedDecoder::SetWriteDelayForTesting(delay_ms); },
      nb::arg("delay_ms"));
}

}  // namespace stoker::python
