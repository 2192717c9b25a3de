#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <type_traits>
#include <utility>

#include "register.h"
#include "stoker/options.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

// A read-write attribute `name` for field `Member` of the part `Part` of LoaderOptions.
template <auto Part, auto Member>
void Field(nb::class_<LoaderOptions>& cls, const char* name) {
  using Value = std::remove_cvref_t<decltype(std::declval<LoaderOptions&>().*Part.*Member)>;
  cls.def_prop_rw(
      name, [](const LoaderOptions& o) -> Value { return o.*Part.*Member; },
      [](LoaderOptions& o, Value value) { o.*Part.*Member = std::move(value); });
}

}  // namespace

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
              ThrowIfError(MakeError(ErrorKind::kInvalidOption,
                                     "features_dtype['" + g.name + "'] '" + name +
                                         "' is not a known dtype; known dtypes: " + KnownDTypes()));
            }
          })
      .def_rw("null_mask", &FeatureGroup::null_mask);

  nb::class_<LoaderOptions> options(m, "LoaderOptions");
  options.def(nb::init<>());
  // Python sees one flat set of attributes with the keyword names; C++ keeps them per layer.
  Field<&LoaderOptions::source, &SourceOptions::sources>(options, "sources");
  Field<&LoaderOptions::columns, &ColumnsOptions::columns>(options, "columns");
  Field<&LoaderOptions::columns, &ColumnsOptions::features>(options, "features");
  Field<&LoaderOptions::columns, &ColumnsOptions::features_name>(options, "features_name");
  options.def_prop_rw(
      "features_dtype", [](const LoaderOptions& o) { return DTypeName(o.columns.features_dtype); },
      [](LoaderOptions& o, const std::string& name) {
        if (!ParseDType(name, &o.columns.features_dtype)) {
          ThrowIfError(MakeError(ErrorKind::kInvalidOption,
                                 "features_dtype '" + name +
                                     "' is not a known dtype; known dtypes: " + KnownDTypes()));
        }
      });
  Field<&LoaderOptions::columns, &ColumnsOptions::feature_groups>(options, "feature_groups");
  Field<&LoaderOptions::columns, &ColumnsOptions::categories>(options, "categories");
  Field<&LoaderOptions::columns, &ColumnsOptions::allow_lossy_cast>(options, "allow_lossy_cast");
  Field<&LoaderOptions::columns, &ColumnsOptions::column_options>(options, "column_options");
  // {column: [{"op": name, **params}, ...]}; write-only (the engine checks it at open).
  options.def(
      "set_transforms",
      [](LoaderOptions& self, nb::dict transforms) {
        self.columns.transforms.clear();
        for (auto [column, ops] : transforms) {
          auto& chain = self.columns.transforms[nb::cast<std::string>(column)];
          for (nb::handle op : ops) chain.push_back(ToOpSpec(op));
        }
      },
      nb::arg("transforms"));
  // {column: [(output, [{"op": name, **params}, ...]), ...]}; write-only.
  options.def(
      "set_transform_outputs",
      [](LoaderOptions& self, nb::dict outputs) {
        self.columns.transform_outputs.clear();
        for (auto [column, named] : outputs) {
          auto& list = self.columns.transform_outputs[nb::cast<std::string>(column)];
          for (nb::handle pair : named) {
            nb::tuple output = nb::cast<nb::tuple>(pair);
            std::vector<OpSpec> chain;
            for (nb::handle op : output[1]) chain.push_back(ToOpSpec(op));
            list.emplace_back(nb::cast<std::string>(output[0]), std::move(chain));
          }
        }
      },
      nb::arg("outputs"));
  Field<&LoaderOptions::columns, &ColumnsOptions::default_column_options>(options,
                                                                          "default_column_options");
  Field<&LoaderOptions::order, &OrderOptions::batch_size>(options, "batch_size");
  Field<&LoaderOptions::order, &OrderOptions::shuffle>(options, "shuffle");
  Field<&LoaderOptions::order, &OrderOptions::seed>(options, "seed");
  Field<&LoaderOptions::order, &OrderOptions::shuffle_window_rows>(options, "shuffle_window_rows");
  Field<&LoaderOptions::order, &OrderOptions::shuffle_window_bytes>(options,
                                                                    "shuffle_window_bytes");
  Field<&LoaderOptions::order, &OrderOptions::drop_last>(options, "drop_last");
  Field<&LoaderOptions::order, &OrderOptions::padding_mask>(options, "padding_mask");
  Field<&LoaderOptions::order, &OrderOptions::padding_name>(options, "padding_name");
  Field<&LoaderOptions::order, &OrderOptions::rank>(options, "rank");
  Field<&LoaderOptions::order, &OrderOptions::world_size>(options, "world_size");
  Field<&LoaderOptions::execution, &ExecutionOptions::task_bytes>(options, "task_bytes");
  Field<&LoaderOptions::execution, &ExecutionOptions::num_threads>(options, "num_threads");
  Field<&LoaderOptions::execution, &ExecutionOptions::num_io_threads>(options, "num_io_threads");
  Field<&LoaderOptions::execution, &ExecutionOptions::prefetch_bytes>(options, "prefetch_bytes");
  Field<&LoaderOptions::execution, &ExecutionOptions::pin_memory>(options, "pin_memory");
  Field<&LoaderOptions::storage, &StorageOptions::storage_options>(options, "storage_options");
  Field<&LoaderOptions::storage, &StorageOptions::max_retries>(options, "max_retries");
  Field<&LoaderOptions::storage, &StorageOptions::retry_base_delay_s>(options,
                                                                      "retry_base_delay_s");
  Field<&LoaderOptions::cache, &CacheOptions::dir>(options, "cache_dir");
  Field<&LoaderOptions::cache, &CacheOptions::bytes>(options, "cache_bytes");
  Field<&LoaderOptions::cache, &CacheOptions::min_free_bytes>(options, "cache_min_free_bytes");
  options.def("fingerprint", &LoaderOptions::Fingerprint);
}

}  // namespace stoker::python
