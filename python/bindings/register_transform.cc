// Transform ops (cpp/src/transform/) for tests and for declaring ops from Python: op specs are
// dicts ({"op": "resize", "size": 224}); values are bytes, str or numpy arrays. No logic here
// beyond converting types.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <vector>

#include "register.h"
#include "transform/op.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

using transform::ElementType;
using transform::Value;
using transform::ValueKind;

ElementType FromDlpack(nb::dlpack::dtype dtype) {
  using nb::dlpack::dtype_code;
  std::string name;
  switch (static_cast<dtype_code>(dtype.code)) {
    case dtype_code::Bool:
      return ElementType::kBool;
    case dtype_code::Int:
      name = "int";
      break;
    case dtype_code::UInt:
      name = "uint";
      break;
    case dtype_code::Float:
      name = "float";
      break;
    default:
      throw nb::type_error("unsupported array dtype");
  }
  const auto type = transform::ParseElementType(name + std::to_string(dtype.bits));
  if (!type) throw nb::type_error("unsupported array dtype");
  return *type;
}

nb::dlpack::dtype ToDlpack(ElementType type) {
  using nb::dlpack::dtype_code;
  dtype_code code = dtype_code::UInt;  // bfloat16 comes back as its uint16 bits
  if (type == ElementType::kBool) {
    code = dtype_code::Bool;
  } else if (transform::IsFloat(type) && type != ElementType::kBFloat16) {
    code = dtype_code::Float;
  } else if (type == ElementType::kInt8 || type == ElementType::kInt16 ||
             type == ElementType::kInt32 || type == ElementType::kInt64) {
    code = dtype_code::Int;
  }
  return {static_cast<uint8_t>(code), static_cast<uint8_t>(transform::ElementSize(type) * 8), 1};
}

nb::object ApplyOps(nb::list specs, nb::object input, uint64_t seed, uint64_t epoch, uint64_t row) {
  std::vector<std::unique_ptr<transform::Op>> ops;
  for (nb::handle spec : specs) {
    const OpSpec op = ToOpSpec(spec);
    ops.push_back(Blocking([&] { return transform::MakeOp(op.op, op.params); }));
  }
  // The input: bytes, str or a C-contiguous numpy array (kept alive by `input` during the call).
  Value in;
  std::string text;
  if (nb::isinstance<nb::bytes>(input)) {
    nb::bytes bytes = nb::cast<nb::bytes>(input);
    in = Value::View(ValueKind::kBytes, bytes.c_str(), static_cast<int64_t>(bytes.size()));
  } else if (nb::isinstance<nb::str>(input)) {
    text = nb::cast<std::string>(input);
    in = Value::View(ValueKind::kString, text.data(), static_cast<int64_t>(text.size()));
  } else {
    auto array = nb::cast<nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>>(input);
    std::vector<int64_t> shape(array.shape_ptr(), array.shape_ptr() + array.ndim());
    in = Value::TensorView(FromDlpack(array.dtype()), std::move(shape), array.data());
  }
  auto chain = Blocking([&] { return transform::Chain::Make("value", in.type(), std::move(ops)); });
  auto out = std::make_unique<Value>();
  Blocking([&] {
    Value scratch;
    transform::RowContext ctx;
    ctx.seed = seed;
    ctx.epoch = epoch;
    ctx.row = row;
    return chain.Apply(ctx, in, out.get(), &scratch);
  });
  if (out->kind() != ValueKind::kTensor) {
    return nb::bytes(reinterpret_cast<const char*>(out->data()), out->size_bytes());
  }
  std::vector<size_t> shape(out->shape().begin(), out->shape().end());
  const nb::dlpack::dtype dtype = ToDlpack(out->element());
  Value* owned = out.release();
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Value*>(p); });
  nb::ndarray<nb::numpy> array(const_cast<uint8_t*>(owned->data()), shape.size(), shape.data(),
                               owner, nullptr, dtype);
  return nb::cast(array, nb::rv_policy::reference);
}

}  // namespace

OpSpec ToOpSpec(nb::handle spec) {
  OpSpec out;
  for (auto [key, item] : nb::cast<nb::dict>(spec)) {
    const std::string name = nb::cast<std::string>(key);
    if (name == "op") {
      out.op = nb::cast<std::string>(item);
    } else {
      out.params[name] = ToParam(item);
    }
  }
  return out;
}

ParamValue ToParam(nb::handle object) {
  if (object.is_none()) return ParamValue();
  if (nb::isinstance<nb::bool_>(object)) return ParamValue(nb::cast<bool>(object));
  if (nb::isinstance<nb::int_>(object)) return ParamValue(nb::cast<int64_t>(object));
  if (nb::isinstance<nb::float_>(object)) return ParamValue(nb::cast<double>(object));
  if (nb::isinstance<nb::str>(object)) return ParamValue(nb::cast<std::string>(object));
  if (nb::isinstance<nb::list>(object) || nb::isinstance<nb::tuple>(object)) {
    ParamValue::List list;
    for (nb::handle item : object) list.push_back(ToParam(item));
    return ParamValue(std::move(list));
  }
  throw nb::type_error(
      ("op parameter of unsupported type " + nb::cast<std::string>(nb::str(object.type())))
          .c_str());
}

void RegisterTransform(nb::module_& m) {
  m.def("apply_ops", &ApplyOps, nb::arg("op_specs"), nb::arg("value"), nb::arg("seed") = 0,
        nb::arg("epoch") = 0, nb::arg("row") = 0,
        "Apply transform ops (dicts with an 'op' key and its parameters) to one value (bytes, "
        "str or a numpy array) as row `row` of epoch `epoch`; returns an array (bfloat16 as its "
        "uint16 bits) or bytes.");
  m.def("transform_op_names", &transform::OpNames);
}

}  // namespace stoker::python
