#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "register.h"
#include "stoker/tensor.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

nb::dlpack::dtype ToDlpack(DType dtype) {
  using nb::dlpack::dtype_code;
  auto code = [&]() {
    switch (dtype) {
      case DType::kBool:
        return dtype_code::Bool;
      case DType::kInt8:
      case DType::kInt16:
      case DType::kInt32:
      case DType::kInt64:
        return dtype_code::Int;
      case DType::kFloat16:
      case DType::kFloat32:
      case DType::kFloat64:
        return dtype_code::Float;
      case DType::kBFloat16:  // numpy has no bfloat16: int16 bits, viewed as bfloat16 by torch
        return dtype_code::Int;
      default:
        return dtype_code::UInt;
    }
  }();
  return {static_cast<uint8_t>(code), static_cast<uint8_t>(DTypeSize(dtype) * 8), 1};
}

// A numpy array viewing the slab; the capsule keeps the slab out of the pool until numpy (and
// anything made from the array, such as a torch tensor via DLPack) lets go.
nb::object ToNumpy(const Tensor& tensor) {
  if (tensor.owner == nullptr) return nb::none();
  auto* keep = new std::shared_ptr<Slab>(tensor.owner);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<Slab>*>(p); });
  std::vector<size_t> shape(tensor.shape.begin(), tensor.shape.end());
  nb::ndarray<nb::numpy> array(tensor.data, shape.size(), shape.data(), owner, nullptr,
                               ToDlpack(tensor.dtype));
  return nb::cast(array, nb::rv_policy::reference);
}

}  // namespace

void RegisterTensor(nb::module_& m) {
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
      .def_ro("columns", &Batch::columns);
}

}  // namespace stoker::python
