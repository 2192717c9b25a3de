#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "register.h"
#include "stoker/describe.h"
#include "stoker/redact.h"

namespace nb = nanobind;

namespace stoker::python {

void RegisterDescribe(nb::module_& m) {
  nb::class_<FileDescription>(m, "FileDescription")
      .def_ro("path", &FileDescription::path)
      .def_ro("size", &FileDescription::size)
      .def_ro("rows", &FileDescription::rows)
      .def_ro("num_row_groups", &FileDescription::num_row_groups);

  nb::class_<RowGroupDescription>(m, "RowGroupDescription")
      .def_ro("file", &RowGroupDescription::file)
      .def_ro("index", &RowGroupDescription::index)
      .def_ro("rows", &RowGroupDescription::rows)
      .def_ro("bytes", &RowGroupDescription::bytes)
      .def_ro("compressed_bytes", &RowGroupDescription::compressed_bytes);

  nb::class_<ColumnDescription>(m, "ColumnDescription")
      .def_ro("name", &ColumnDescription::name)
      .def_ro("arrow_type", &ColumnDescription::arrow_type)
      .def_ro("partition", &ColumnDescription::partition)
      .def_ro("physical_types", &ColumnDescription::physical_types)
      .def_ro("encodings", &ColumnDescription::encodings)
      .def_ro("compression", &ColumnDescription::compression)
      .def_ro("compressed_bytes", &ColumnDescription::compressed_bytes)
      .def_ro("uncompressed_bytes", &ColumnDescription::uncompressed_bytes)
      .def_ro("null_count", &ColumnDescription::null_count)
      .def_ro("null_count_known", &ColumnDescription::null_count_known)
      .def_ro("ok", &ColumnDescription::ok)
      .def_ro("error_kind", &ColumnDescription::error_kind)
      .def_ro("error", &ColumnDescription::error)
      .def_ro("needs_list_mode", &ColumnDescription::needs_list_mode)
      .def_ro("kind", &ColumnDescription::kind)
      .def_prop_ro("dtype", [](const ColumnDescription& c) { return DTypeName(c.dtype); })
      .def_ro("inner_shape", &ColumnDescription::inner_shape)
      .def_ro("annotation", &ColumnDescription::annotation)
      .def_ro("feature_group", &ColumnDescription::feature_group)
      .def_ro("vocabulary_size", &ColumnDescription::vocabulary_size);

  nb::class_<DatasetDescription>(m, "DatasetDescription")
      .def_ro("files", &DatasetDescription::files)
      .def_ro("row_groups", &DatasetDescription::row_groups)
      .def_ro("columns", &DatasetDescription::columns)
      .def_ro("rows", &DatasetDescription::rows)
      .def_ro("fingerprint", &DatasetDescription::fingerprint);

  m.def(
      "describe",
      [](const LoaderOptions& options) { return Blocking([&] { return Describe(options); }); },
      nb::arg("options"));
  m.def("redact_uri", &RedactUri, nb::arg("uri"));
  m.def("redact_secrets", &RedactSecrets, nb::arg("text"), nb::arg("secrets"));
}

}  // namespace stoker::python
