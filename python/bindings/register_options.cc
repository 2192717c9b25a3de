#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "register.h"
#include "stoker/options.h"

namespace nb = nanobind;

namespace stoker::python {

void RegisterOptions(nb::module_& m) {
  nb::enum_<ListMode>(m, "ListMode")
      .value("unset", ListMode::kUnset)
      .value("padded", ListMode::kPadded)
      .value("ragged", ListMode::kRagged);

  nb::class_<ColumnOptions>(m, "ColumnOptions")
      .def(nb::init<>())
      .def_rw("list_mode", &ColumnOptions::list_mode)
      .def_rw("pad_value", &ColumnOptions::pad_value)
      .def_rw("has_fill_null", &ColumnOptions::has_fill_null)
      .def_rw("fill_null", &ColumnOptions::fill_null)
      .def_rw("null_mask", &ColumnOptions::null_mask)
      .def_rw("on_error_zero", &ColumnOptions::on_error_zero)
      // "" (unset), "D", "h", "m", "s", "ms", "us", "ns".
      .def_prop_rw(
          "time_unit",
          [](const ColumnOptions& o) { return std::string(TimeUnitName(o.time_unit)); },
          [](ColumnOptions& o, const std::string& name) {
            if (name.empty()) {
              o.time_unit = TimeUnit::kUnset;
            } else if (!ParseTimeUnit(name, &o.time_unit)) {
              ThrowIfError(MakeError(ErrorKind::kInvalidOption,
                                     "time_unit must be one of 'D', 'h', 'm', 's', 'ms', 'us', "
                                     "'ns', got '" +
                                         name + "'"));
            }
          })
      // "" (unset), "float64", "float32", "scaled_int64".
      .def_prop_rw(
          "decimals",
          [](const ColumnOptions& o) { return std::string(DecimalModeName(o.decimals)); },
          [](ColumnOptions& o, const std::string& name) {
            if (name.empty()) {
              o.decimals = DecimalMode::kUnset;
            } else if (!ParseDecimalMode(name, &o.decimals)) {
              ThrowIfError(MakeError(ErrorKind::kInvalidOption,
                                     "decimals must be 'float64', 'float32' or 'scaled_int64', "
                                     "got '" +
                                         name + "'"));
            }
          });

  nb::class_<FeatureGroup>(m, "FeatureGroup")
      .def(nb::init<>())
      .def_rw("name", &FeatureGroup::name)
      .def_rw("columns", &FeatureGroup::columns)
      .def_prop_rw(
          "dtype", [](const FeatureGroup& g) { return DTypeName(g.dtype); },
          [](FeatureGroup& g, const std::string& name) {
            if (!ParseDType(name, &g.dtype)) {
              ThrowIfError(MakeError(
                  ErrorKind::kInvalidOption,
                  "features_dtype['" + g.name + "'] '" + name +
                      "' is not a known dtype; known dtypes: " + KnownDTypes()));
            }
          })
      .def_rw("null_mask", &FeatureGroup::null_mask);

  nb::class_<LoaderOptions>(m, "LoaderOptions")
      .def(nb::init<>())
      .def_rw("sources", &LoaderOptions::sources)
      .def_rw("columns", &LoaderOptions::columns)
      .def_rw("features", &LoaderOptions::features)
      .def_rw("features_name", &LoaderOptions::features_name)
      .def_prop_rw(
          "features_dtype", [](const LoaderOptions& o) { return DTypeName(o.features_dtype); },
          [](LoaderOptions& o, const std::string& name) {
            if (!ParseDType(name, &o.features_dtype)) {
              ThrowIfError(MakeError(ErrorKind::kInvalidOption,
                                     "features_dtype '" + name +
                                         "' is not a known dtype; known dtypes: " +
                                         KnownDTypes()));
            }
          })
      .def_rw("feature_groups", &LoaderOptions::feature_groups)
      .def_rw("categories", &LoaderOptions::categories)
      .def_rw("allow_lossy_cast", &LoaderOptions::allow_lossy_cast)
      .def_rw("column_options", &LoaderOptions::column_options)
      // {column: [{"op": name, **params}, ...]}; write-only (the engine checks it at open).
      .def(
          "set_transforms",
          [](LoaderOptions& self, nb::dict transforms) {
            self.transforms.clear();
            for (auto [column, ops] : transforms) {
              auto& chain = self.transforms[nb::cast<std::string>(column)];
              for (nb::handle op : ops) chain.push_back(ToOpSpec(op));
            }
          },
          nb::arg("transforms"))
      // {column: [(output, [{"op": name, **params}, ...]), ...]}; write-only.
      .def(
          "set_transform_outputs",
          [](LoaderOptions& self, nb::dict outputs) {
            self.transform_outputs.clear();
            for (auto [column, named] : outputs) {
              auto& list = self.transform_outputs[nb::cast<std::string>(column)];
              for (nb::handle pair : named) {
                nb::tuple output = nb::cast<nb::tuple>(pair);
                std::vector<OpSpec> chain;
                for (nb::handle op : output[1]) chain.push_back(ToOpSpec(op));
                list.emplace_back(nb::cast<std::string>(output[0]), std::move(chain));
              }
            }
          },
          nb::arg("outputs"))
      .def_rw("default_column_options", &LoaderOptions::default_column_options)
      .def_rw("batch_size", &LoaderOptions::batch_size)
      .def_rw("shuffle", &LoaderOptions::shuffle)
      .def_rw("seed", &LoaderOptions::seed)
      .def_rw("shuffle_window_rows", &LoaderOptions::shuffle_window_rows)
      .def_rw("shuffle_window_bytes", &LoaderOptions::shuffle_window_bytes)
      .def_rw("drop_last", &LoaderOptions::drop_last)
      .def_rw("padding_mask", &LoaderOptions::padding_mask)
      .def_rw("padding_name", &LoaderOptions::padding_name)
      .def_rw("rank", &LoaderOptions::rank)
      .def_rw("world_size", &LoaderOptions::world_size)
      .def_rw("task_bytes", &LoaderOptions::task_bytes)
      .def_rw("num_threads", &LoaderOptions::num_threads)
      .def_rw("num_io_threads", &LoaderOptions::num_io_threads)
      .def_rw("prefetch_bytes", &LoaderOptions::prefetch_bytes)
      .def_rw("pin_memory", &LoaderOptions::pin_memory)
      .def_rw("storage_options", &LoaderOptions::storage_options)
      .def_rw("max_retries", &LoaderOptions::max_retries)
      .def_rw("retry_base_delay_s", &LoaderOptions::retry_base_delay_s)
      .def_rw("cache_dir", &LoaderOptions::cache_dir)
      .def_rw("cache_bytes", &LoaderOptions::cache_bytes)
      .def_rw("cache_min_free_bytes", &LoaderOptions::cache_min_free_bytes)
      .def("fingerprint", &LoaderOptions::Fingerprint);
}

}  // namespace stoker::python
