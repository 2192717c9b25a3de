#include "transform/value.h"

#include <cstring>

namespace stoker::transform {
int ElementSize(ElementType type) { return DTypeSize(type); }

const char* ElementName(ElementType type) { return DTypeName(type); }

std::optional<ElementType> ParseElementType(std::string_view name) {
  DType dtype;
  if (!ParseDType(std::string(name), &dtype)) return std::nullopt;
  return dtype;
}

std::optional<DType> ToDType(ElementType type) { return type; }

bool IsInteger(ElementType type) {
  return type != ElementType::kBool &&
         static_cast<int>(type) <= static_cast<int>(ElementType::kUInt64);
}

bool IsFloat(ElementType type) { return !IsInteger(type) && type != ElementType::kBool; }

bool ValueType::FixedShape() const {
  for (int64_t dim : shape) {
    if (dim < 0) return false;
  }
  return true;
}

std::string ValueType::ToString() const {
  switch (kind) {
    case ValueKind::kBytes:
      return "bytes";
    case ValueKind::kString:
      return "string";
    case ValueKind::kTensor:
      break;
  }
  std::string text = ElementName(element);
  text += "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += shape[i] < 0 ? "?" : std::to_string(shape[i]);
  }
  return text + "]";
}

Value Value::View(ValueKind kind, const void* data, int64_t size) {
  Value value;
  value.kind_ = kind;
  value.view_ = static_cast<const uint8_t*>(data);
  value.size_ = size;
  static const uint8_t kEmpty = 0;
  if (value.view_ == nullptr) value.view_ = &kEmpty;  // an empty view is still a view
  return value;
}

Value Value::TensorView(ElementType element, std::vector<int64_t> shape, const void* data) {
  Value value = View(ValueKind::kTensor, data, 0);
  value.element_ = element;
  value.shape_ = std::move(shape);
  value.size_ = value.num_elements() * ElementSize(element);
  return value;
}

uint8_t* Value::Allocate(ElementType element, std::vector<int64_t> shape) {
  kind_ = ValueKind::kTensor;
  element_ = element;
  shape_ = std::move(shape);
  null_ = false;
  view_ = nullptr;
  size_ = num_elements() * ElementSize(element);
  if (uint8_t* lent = TakeLoan()) return lent;
  // Growing drops the old contents first: nothing is copied into the new buffer.
  if (static_cast<size_t>(size_) > owned_.capacity()) owned_.clear();
  owned_.resize(static_cast<size_t>(size_));
  return owned_.data();
}

uint8_t* Value::AllocateBytes(ValueKind kind, int64_t size) {
  kind_ = kind;
  element_ = ElementType::kUInt8;
  shape_.clear();
  null_ = false;
  view_ = nullptr;
  size_ = size;
  if (uint8_t* lent = TakeLoan()) return lent;
  if (static_cast<size_t>(size) > owned_.capacity()) owned_.clear();
  owned_.resize(static_cast<size_t>(size));
  return owned_.data();
}

uint8_t* Value::TakeLoan() {
  borrowed_ = nullptr;
  if (loan_ == nullptr || size_ > loan_capacity_) return nullptr;
  borrowed_ = loan_;
  loan_ = nullptr;
  return borrowed_;
}

int64_t Value::num_elements() const {
  int64_t n = 1;
  for (int64_t dim : shape_) n *= dim;
  return n;
}

ValueType Value::type() const { return {kind_, element_, shape_}; }

}  // namespace stoker::transform
