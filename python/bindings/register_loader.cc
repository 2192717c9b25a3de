#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "register.h"
#include "stoker/loader.h"
#include "stoker/system.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

// A stats struct (anything with ForEachField), a vector of them, or a plain value -> Python.
template <typename T>
nb::object StatsToPython(const T& value) {
  if constexpr (requires { value.ForEachField([](const char*, const auto&) {}); }) {
    nb::dict out;
    value.ForEachField(
        [&](const char* name, const auto& field) { out[name] = StatsToPython(field); });
    return out;
  } else if constexpr (requires {
                         value.begin();
                         value.end();
                       } &&
                       !std::is_same_v<T, std::string>) {
    nb::list out;
    for (const auto& item : value) out.append(StatsToPython(item));
    return out;
  } else {
    return nb::cast(value);
  }
}

}  // namespace

void RegisterLoader(nb::module_& m) {
  m.def("usable_cpus", &UsableCpus,
        "CPUs this process may use: its affinity mask, capped by its cgroup's CPU quota.");
  nb::class_<ColumnInfo>(m, "ColumnInfo")
      .def_ro("name", &ColumnInfo::name)
      .def_ro("arrow_type", &ColumnInfo::arrow_type)
      .def_ro("kind", &ColumnInfo::kind)
      .def_prop_ro("dtype", [](const ColumnInfo& c) { return DTypeName(c.dtype); })
      .def_ro("inner_shape", &ColumnInfo::inner_shape)
      .def_ro("annotation", &ColumnInfo::annotation)
      .def_ro("mask_levels", &ColumnInfo::mask_levels)
      .def(
          "_replace",
          // A copy with what Python changes after the engine (Petastorm's [H, W] gray images,
          // fields decoded in the consumer): loader.columns describes the batches it yields.
          [](const ColumnInfo& c, ColumnKind kind, const std::string& dtype,
             std::vector<int64_t> inner_shape, std::string annotation) {
            ColumnInfo out = c;
            if (!ParseDType(dtype, &out.dtype)) throw nb::value_error(dtype.c_str());
            out.kind = kind;
            out.inner_shape = std::move(inner_shape);
            out.annotation = std::move(annotation);
            return out;
          },
          nb::arg("kind"), nb::arg("dtype"), nb::arg("inner_shape"), nb::arg("annotation"))
      .def("__repr__", [](nb::handle self) {
        // ColumnInfo(name='ts', kind='dense', dtype='float64', shape=(), arrow_type=...).
        return nb::str(
                   "ColumnInfo(name={!r}, kind={!r}, dtype={!r}, shape={!r}, "
                   "arrow_type={!r}, annotation={!r})")
            .format(self.attr("name"), self.attr("kind").attr("name"), self.attr("dtype"),
                    nb::steal(PySequence_Tuple(self.attr("inner_shape").ptr())),
                    self.attr("arrow_type"), self.attr("annotation"));
      });

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
            Blocking([&] {
              NoteIterating(/*done=*/false);  // this thread is about to iterate
              return self.StartEpoch(epoch, start_batch);
            });
          },
          nb::arg("epoch"), nb::arg("start_batch"))
      .def(
          "start_elastic_epoch",
          [](Loader& self, int64_t epoch, int old_world_size, int64_t old_batches,
             int64_t start_batch) {
            return Blocking([&] {
              return self.StartElasticEpoch(epoch, old_world_size, old_batches, start_batch);
            });
          },
          nb::arg("epoch"), nb::arg("old_world_size"), nb::arg("old_batches"),
          nb::arg("start_batch"))
      // Returns (batch or None, done). Neither set means the timeout passed.
      .def(
          "next",
          [](Loader& self, int64_t timeout_ms) {
            std::shared_ptr<Batch> batch;
            bool done = false;
            Status status;
            {
              ReleaseGil release;
              status = self.NextFor(timeout_ms, &batch, &done);
              NoteIterating(done);
            }
            ThrowIfError(status);
            return std::make_tuple(batch, done);
          },
          nb::arg("timeout_ms"))
      .def("stop",
           [](Loader& self) {
             ReleaseGil release;
             self.Stop();
           })
      .def("close",
           [](Loader& self) {
             ReleaseGil release;
             self.Close();
           })
      .def("flush_cache",
           [](Loader& self) {
             ReleaseGil release;
             self.FlushCache();
           })
      .def_prop_ro("num_batches", &Loader::NumBatches)
      .def("num_batches_at", &Loader::NumBatchesAt, nb::arg("world_size"))
      .def_prop_ro("num_rows", &Loader::NumRows)
      .def_prop_ro("shuffle_window_rows", &Loader::ShuffleWindowRows)
      .def_prop_ro("dataset_rows", &Loader::DatasetRows)
      .def_prop_ro("num_files", &Loader::NumFiles)
      .def_prop_ro("num_row_groups", &Loader::NumRowGroups)
      .def_prop_ro("fingerprint", [](const Loader& self) { return self.Fingerprint(true); })
      .def_prop_ro("data_fingerprint", [](const Loader& self) { return self.Fingerprint(false); })
      .def_prop_ro("dataset_fingerprint", &Loader::DatasetFingerprint)
      .def("columns", &Loader::Columns)
      .def(
          "vocabulary",
          [](const Loader& self, const std::string& column) {
            auto vocabulary = self.Vocabulary(column);
            ThrowIfError(vocabulary.status());
            return *vocabulary;
          },
          nb::arg("column"))
      .def_prop_ro("seed", &Loader::Seed)
      .def("set_seed", &Loader::SetSeed, nb::arg("seed"))
      // A dict of plain values, shaped by stoker/stats.h (stages: a list in data-flow order).
      .def("stats", [](const Loader& self) { return StatsToPython(self.Stats()); });
}

}  // namespace stoker::python
