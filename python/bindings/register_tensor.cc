#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

// The NumPy C API, used by this file alone (its import runs in RegisterTensor).
#define NPY_NO_DEPRECATED_API NPY_1_21_API_VERSION
#include <numpy/arrayobject.h>

#include "register.h"
#include "stoker/tensor.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

// numpy's own type numbers (int64 is NPY_LONG on Linux, so torch.from_numpy takes every array
// as it is; DLPack and the buffer protocol gave "long long" dtypes, which it refuses for uint64).
int NumpyType(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return NPY_BOOL;
    case DType::kInt8:
      return NPY_INT8;
    case DType::kInt16:
    case DType::kBFloat16:  // numpy has no bfloat16: int16 bits, viewed as bfloat16 by torch
      return NPY_INT16;
    case DType::kInt32:
      return NPY_INT32;
    case DType::kInt64:
      return NPY_INT64;
    case DType::kUInt8:
      return NPY_UINT8;
    case DType::kUInt16:
      return NPY_UINT16;
    case DType::kUInt32:
      return NPY_UINT32;
    case DType::kUInt64:
      return NPY_UINT64;
    case DType::kFloat16:
      return NPY_FLOAT16;
    case DType::kFloat32:
      return NPY_FLOAT32;
    case DType::kFloat64:
      return NPY_FLOAT64;
  }
  return NPY_UINT8;
}

// A writable numpy array viewing the slab; its base, a capsule, keeps the slab out of the pool
// until numpy (and anything viewing the array, such as a torch tensor) lets go. Made through
// numpy's C API: 48 columns a batch cost the consumer's thread 0.16 ms through nanobind's
// ndarray export (numpy.array() over the buffer protocol, per array).
nb::object ToNumpy(const Tensor& tensor) {
  if (tensor.owner == nullptr) return nb::none();
  auto* keep = new std::shared_ptr<Slab>(tensor.owner);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<Slab>*>(p); });
  std::vector<npy_intp> shape(tensor.shape.begin(), tensor.shape.end());
  // Given no data, numpy would allocate its own; an empty tensor may have none.
  alignas(16) static uint8_t empty[16];
  void* data = tensor.data != nullptr ? tensor.data : empty;
  PyObject* array =
      PyArray_New(&PyArray_Type, static_cast<int>(shape.size()), shape.data(),
                  NumpyType(tensor.dtype), nullptr, data, 0, NPY_ARRAY_CARRAY, nullptr);
  if (array == nullptr) throw nb::python_error();
  // Takes the capsule's reference, also when it fails (numpy then releases it).
  if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject*>(array), owner.release().ptr()) < 0) {
    Py_DECREF(array);
    throw nb::python_error();
  }
  return nb::steal(array);
}

}  // namespace

void RegisterTensor(nb::module_& m) {
  if (PyArray_ImportNumPyAPI() < 0) throw nb::python_error();
  m.def("dtype_names", &DTypeNames);
  nb::enum_<ColumnKind>(m, "ColumnKind")
      .value("dense", ColumnKind::kDense)
      .value("padded", ColumnKind::kPadded)
      .value("ragged", ColumnKind::kRagged)
      .value("strings", ColumnKind::kStrings)
      // A kind also equals its documented name ("dense", "padded", "ragged", "strings"); Enum's
      // hash is its name's, so the two stay consistent in sets and dicts.
      .def("__eq__",
           [](nb::handle self, nb::handle other) {
             return nb::isinstance<nb::str>(other) ? self.attr("name").equal(other)
                                                   : self.is(other);
           })
      .def("__ne__",
           [](nb::handle self, nb::handle other) {
             return !(nb::isinstance<nb::str>(other) ? self.attr("name").equal(other)
                                                     : self.is(other));
           })
      .def("__hash__", [](nb::handle self) { return nb::hash(self.attr("name")); });

  nb::class_<OutputColumn>(m, "OutputColumn")
      .def_ro("name", &OutputColumn::name)
      .def_ro("kind", &OutputColumn::kind)
      .def_ro("annotation", &OutputColumn::annotation)
      .def_ro("has_mask", &OutputColumn::has_mask)
      .def_ro("has_valid", &OutputColumn::has_valid)
      .def_prop_ro("bfloat16",
                   [](const OutputColumn& c) { return c.values.dtype == DType::kBFloat16; })
      .def_prop_ro("values", [](const OutputColumn& c) { return ToNumpy(c.values); })
      .def_prop_ro("offsets", [](const OutputColumn& c) { return ToNumpy(c.offsets); })
      .def_prop_ro("inner_offsets",
                   [](const OutputColumn& c) {
                     nb::list out;
                     for (const Tensor& t : c.inner_offsets) out.append(ToNumpy(t));
                     return out;
                   })
      .def_prop_ro("lengths", [](const OutputColumn& c) { return ToNumpy(c.lengths); })
      .def_prop_ro("inner_lengths",
                   [](const OutputColumn& c) {
                     nb::list out;
                     for (const Tensor& t : c.inner_lengths) out.append(ToNumpy(t));
                     return out;
                   })
      .def_prop_ro("mask", [](const OutputColumn& c) { return ToNumpy(c.mask); })
      .def_prop_ro("element_masks",
                   [](const OutputColumn& c) {
                     nb::list out;
                     for (const Tensor& t : c.element_masks) out.append(ToNumpy(t));
                     return out;
                   })
      .def_prop_ro("valid", [](const OutputColumn& c) { return ToNumpy(c.valid); });

  nb::class_<Batch>(m, "Batch")
      .def_ro("index", &Batch::index)
      .def_ro("num_rows", &Batch::num_rows)
      .def_ro("columns", &Batch::columns)
      .def(
          "values",
          [](const Batch& batch) {
            nb::dict out;
            for (const OutputColumn& column : batch.columns) {
              out[nb::str(column.name.data(), column.name.size())] = ToNumpy(column.values);
            }
            return out;
          },
          "{name: values} of every column, in order: the whole batch where every column is "
          "dense values alone");
}

}  // namespace stoker::python
