#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <tuple>
#include <type_traits>
#include <utility>

#include "register.h"
#include "stoker/option_values.h"
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

// A Python value as the options module takes it. Conversion only: every check is in C++.
OptionValue ToOptionValue(nb::handle object) {
  PyObject* ptr = object.ptr();
  if (object.is_none()) return OptionValue::None();
  if (PyBool_Check(ptr)) return OptionValue::Bool(ptr == Py_True);
  if (PyLong_Check(ptr)) {
    int overflow = 0;
    const int64_t value = PyLong_AsLongLongAndOverflow(ptr, &overflow);
    if (!overflow) return OptionValue::Int(value);
  } else if (PyFloat_Check(ptr)) {
    return OptionValue::Float(PyFloat_AsDouble(ptr));
  } else if (PyUnicode_Check(ptr)) {
    return OptionValue::String(nb::cast<std::string>(object));
  } else if (PyList_Check(ptr) || PyTuple_Check(ptr)) {
    std::vector<OptionValue> items;
    for (nb::handle item : object) items.push_back(ToOptionValue(item));
    return OptionValue::List(std::move(items), PyTuple_Check(ptr));
  } else {
    nb::module_ abc = nb::module_::import_("collections.abc");
    if (nb::isinstance(object, abc.attr("Mapping"))) {
      std::vector<std::pair<OptionValue, OptionValue>> entries;
      for (nb::handle key : object) {
        entries.emplace_back(ToOptionValue(key), ToOptionValue(object[key]));
      }
      return OptionValue::Dict(entries);
    }
    if (PyAnySet_Check(ptr) || (nb::isinstance(object, abc.attr("Sequence")) &&
                                !PyBytes_Check(ptr) && !PyByteArray_Check(ptr))) {
      std::vector<OptionValue> items;
      for (nb::handle item : object) items.push_back(ToOptionValue(item));
      return OptionValue::List(std::move(items));
    }
  }
  OptionValue other;
  other.kind = OptionValue::Kind::kOther;
  other.text = nb::cast<std::string>(nb::repr(object));
  other.str = nb::cast<std::string>(nb::str(object));
  other.type_name = nb::cast<std::string>(object.type().attr("__name__"));
  other.truthy = PyObject_IsTrue(ptr) == 1;
  return other;
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
      // Names, read-only: BuildLoaderOptions (cpp/src/options/) parses and checks them.
      .def_prop_ro("time_unit",
                   [](const ColumnOptions& o) { return std::string(TimeUnitName(o.time_unit)); })
      .def_prop_ro("decimals",
                   [](const ColumnOptions& o) { return std::string(DecimalModeName(o.decimals)); });

  nb::class_<FeatureGroup>(m, "FeatureGroup")
      .def(nb::init<>())
      .def_rw("name", &FeatureGroup::name)
      .def_rw("columns", &FeatureGroup::columns)
      .def_prop_ro("dtype", [](const FeatureGroup& g) { return DTypeName(g.dtype); })
      .def_rw("null_mask", &FeatureGroup::null_mask);

  nb::class_<LoaderOptions> options(m, "LoaderOptions");
  options.def(nb::init<>());
  // Python sees one flat set of attributes with the keyword names; C++ keeps them per layer.
  Field<&LoaderOptions::source, &SourceOptions::sources>(options, "sources");
  Field<&LoaderOptions::columns, &ColumnsOptions::columns>(options, "columns");
  Field<&LoaderOptions::columns, &ColumnsOptions::features>(options, "features");
  Field<&LoaderOptions::columns, &ColumnsOptions::features_name>(options, "features_name");
  options.def_prop_ro("features_dtype",
                      [](const LoaderOptions& o) { return DTypeName(o.columns.features_dtype); });
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

  // The options module (cpp/src/options/): building, parsing, the resume summary, the table.
  m.def(
      "build_loader_options",
      [](nb::handle values, const LoaderOptions& base, bool describe) {
        Result<LoaderOptions> built = BuildLoaderOptions(ToOptionValue(values), base, describe);
        ThrowIfError(built.status());
        return std::move(*built);
      },
      nb::arg("values"), nb::arg("base"), nb::arg("describe") = false);
  m.def(
      "parse_size",
      [](nb::handle value, const std::string& option) {
        Result<int64_t> bytes = ParseSize(ToOptionValue(value), option);
        ThrowIfError(bytes.status());
        return *bytes;
      },
      nb::arg("value").none(), nb::arg("option"));
  m.def("time_units", &TimeUnitNames);
  m.def("decimal_modes", &DecimalModeNames);
  m.def("option_table", [] {
    std::vector<std::tuple<std::string, std::string, bool>> out;
    for (const auto& info : OptionTable()) {
      out.emplace_back(info.name, info.part, info.fingerprinted);
    }
    return out;
  });
  m.def(
      "option_summary",
      [](const LoaderOptions& options, uint64_t dataset_fingerprint, int64_t shuffle_window_rows,
         nb::handle transforms, const std::string& transform_fingerprint, bool has_transform) {
        nb::dict out;
        for (const auto& [name, value] :
             OptionSummary(options, dataset_fingerprint, shuffle_window_rows,
                           ToOptionValue(transforms), transform_fingerprint, has_transform)) {
          out[name.c_str()] = value;
        }
        return out;
      },
      nb::arg("options"), nb::arg("dataset_fingerprint"), nb::arg("shuffle_window_rows"),
      nb::arg("transforms").none(), nb::arg("transform_fingerprint"), nb::arg("has_transform"));
  m.def(
      "option_differences",
      [](nb::handle saved, nb::dict mine) {
        std::vector<std::pair<std::string, uint64_t>> summary;
        for (auto [name, value] : mine) {
          summary.emplace_back(nb::cast<std::string>(name), nb::cast<uint64_t>(value));
        }
        return OptionDifferences(ToOptionValue(saved), summary);
      },
      nb::arg("saved").none(), nb::arg("mine"));
}

}  // namespace stoker::python
