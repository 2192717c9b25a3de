#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "register.h"
#include "stoker/loader.h"

namespace nb = nanobind;

namespace stoker::python {

void RegisterLoader(nb::module_& m) {
  nb::class_<ColumnInfo>(m, "ColumnInfo")
      .def_ro("name", &ColumnInfo::name)
      .def_ro("arrow_type", &ColumnInfo::arrow_type)
      .def_ro("kind", &ColumnInfo::kind)
      .def_prop_ro("dtype", [](const ColumnInfo& c) { return DTypeName(c.dtype); })
      .def_ro("inner_shape", &ColumnInfo::inner_shape)
      .def_ro("annotation", &ColumnInfo::annotation);

  nb::class_<StageStats>(m, "StageStats")
      .def_ro("name", &StageStats::name)
      .def_ro("busy_s", &StageStats::busy_s)
      .def_ro("wait_input_s", &StageStats::wait_input_s)
      .def_ro("wait_output_s", &StageStats::wait_output_s)
      .def_ro("items", &StageStats::items)
      .def_ro("bytes", &StageStats::bytes);

  nb::class_<CacheCounters>(m, "CacheCounters")
      .def_ro("hits", &CacheCounters::hits)
      .def_ro("misses", &CacheCounters::misses)
      .def_ro("writes", &CacheCounters::writes)
      .def_ro("not_stored", &CacheCounters::not_stored)
      .def_ro("corrupt", &CacheCounters::corrupt)
      .def_ro("evictions", &CacheCounters::evictions)
      .def_ro("bytes_read", &CacheCounters::bytes_read)
      .def_ro("bytes_written", &CacheCounters::bytes_written)
      .def_ro("waits", &CacheCounters::waits);

  nb::class_<StorageStats>(m, "StorageStats")
      .def_ro("requests", &StorageStats::requests)
      .def_ro("retries", &StorageStats::retries)
      .def_ro("failures", &StorageStats::failures)
      .def_ro("backoff_s", &StorageStats::backoff_s);

  nb::class_<LoaderStats>(m, "LoaderStats")
      .def_ro("storage", &LoaderStats::storage)
      .def_ro("stages", &LoaderStats::stages)
      .def_ro("cache", &LoaderStats::cache)
      .def_ro("batches", &LoaderStats::batches)
      .def_ro("rows", &LoaderStats::rows)
      .def_ro("consumer_wait_s", &LoaderStats::consumer_wait_s)
      .def_ro("peak_inflight_bytes", &LoaderStats::peak_inflight_bytes);

  nb::class_<Loader>(m, "Engine")
      .def_static(
          "open",
          [](const LoaderOptions& options) {
            return Blocking([&] { return Loader::Open(options); });
          },
          nb::arg("options"))
      .def(
          "start_epoch",
          [](Loader& self, int64_t epoch, int64_t start_batch) {
            Blocking([&] { return self.StartEpoch(epoch, start_batch); });
          },
          nb::arg("epoch"), nb::arg("start_batch"))
      // Returns (batch or None, done). Neither set means the timeout passed.
      .def(
          "next",
          [](Loader& self, int64_t timeout_ms) {
            std::shared_ptr<Batch> batch;
            bool done = false;
            Status status;
            {
              nb::gil_scoped_release release;
              status = self.NextFor(timeout_ms, &batch, &done);
            }
            ThrowIfError(status);
            return std::make_tuple(batch, done);
          },
          nb::arg("timeout_ms"))
      .def("stop", &Loader::Stop, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("num_batches", &Loader::NumBatches)
      .def_prop_ro("num_rows", &Loader::NumRows)
      .def_prop_ro("shuffle_window_rows", &Loader::ShuffleWindowRows)
      .def_prop_ro("dataset_rows", &Loader::DatasetRows)
      .def_prop_ro("num_files", &Loader::NumFiles)
      .def_prop_ro("num_row_groups", &Loader::NumRowGroups)
      .def_prop_ro("fingerprint", &Loader::Fingerprint)
      .def("columns", &Loader::Columns)
      .def("stats", &Loader::Stats);
}

}  // namespace stoker::python
