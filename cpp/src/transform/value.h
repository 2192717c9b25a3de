// The values a transform op reads and writes, one row at a time, and their static types.
//
// A Value is what one row of one column is at some point of a transform chain: encoded bytes (an
// image file, an np.save blob), a string, or a tensor (a scalar is a tensor of rank 0). A ValueType
// is what a chain knows about every row before any row is read: the kind, the element type and the
// per-row shape, where -1 marks a dimension that varies from row to row.
//
// Ownership: a Value either views bytes it does not own (the input, pointing into an Arrow buffer
// that outlives the call) or owns a buffer that it reuses across rows (`Allocate` keeps capacity).
// Thread safety: a Value is a plain value; use one per thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/tensor.h"

namespace stoker::transform {

/// Element types a transform can produce: the engine's DType itself, so a transform's output
/// needs no conversion to become a column.
using ElementType = DType;

int ElementSize(ElementType type);
/// numpy-style name ("float32", "bfloat16").
const char* ElementName(ElementType type);
std::optional<ElementType> ParseElementType(std::string_view name);
inline ElementType FromDType(DType dtype) { return dtype; }
/// The public dtype of `type` (every element type has one).
std::optional<DType> ToDType(ElementType type);
bool IsInteger(ElementType type);
bool IsFloat(ElementType type);  // float16, float32, float64, bfloat16

enum class ValueKind : uint8_t {
  kBytes,   // encoded binary data (an image file, np.save output)
  kString,  // UTF-8 text
  kTensor,  // elements of `element` type in row-major order, shape `shape`
};

constexpr int64_t kVariableDim = -1;

/// What every row of a column is at one point of a chain. Only tensors have an element type and
/// shape; a dimension of kVariableDim varies from row to row.
struct ValueType {
  ValueKind kind = ValueKind::kBytes;
  ElementType element = ElementType::kUInt8;
  std::vector<int64_t> shape;

  static ValueType Bytes() { return {ValueKind::kBytes, ElementType::kUInt8, {}}; }
  static ValueType String() { return {ValueKind::kString, ElementType::kUInt8, {}}; }
  static ValueType Tensor(ElementType element, std::vector<int64_t> shape) {
    return {ValueKind::kTensor, element, std::move(shape)};
  }

  bool FixedShape() const;
  /// "bytes", "string", "uint8[?, ?, 3]".
  std::string ToString() const;
  bool operator==(const ValueType&) const = default;
};

/// One row's value. Tensors are row-major; images are uint8 [height, width, channels].
class Value {
 public:
  Value() = default;
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;
  Value(Value&&) = default;
  Value& operator=(Value&&) = default;

  /// A view of bytes or text owned by someone else (valid while the caller keeps them).
  static Value View(ValueKind kind, const void* data, int64_t size);
  /// A view of a tensor owned by someone else.
  static Value TensorView(ElementType element, std::vector<int64_t> shape, const void* data);
  static Value Null() {
    Value value;
    value.null_ = true;
    return value;
  }

  /// Makes this an owned tensor of the given type and shape (contents unspecified) and returns its
  /// buffer; keeps the capacity of earlier rows.
  uint8_t* Allocate(ElementType element, std::vector<int64_t> shape);
  /// Makes this owned bytes or text of `size` bytes.
  uint8_t* AllocateBytes(ValueKind kind, int64_t size);
  /// Lends `dst` (`capacity` bytes, owned by the caller) to the next Allocate that fits in it:
  /// that output is written there instead of this value's own buffer, which saves copying a
  /// fixed-size row to where it belongs. Check `data() == dst` afterwards: an op may produce its
  /// output otherwise (a view, a larger size). Lend(nullptr, 0) withdraws an unused loan.
  void Lend(uint8_t* dst, int64_t capacity) {
    loan_ = dst;
    loan_capacity_ = capacity;
  }
  void SetNull() { null_ = true; }

  ValueKind kind() const { return kind_; }
  ElementType element() const { return element_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  bool is_null() const { return null_; }
  const uint8_t* data() const {
    return view_ != nullptr ? view_ : borrowed_ != nullptr ? borrowed_ : owned_.data();
  }
  int64_t size_bytes() const { return size_; }
  int64_t num_elements() const;
  std::string_view bytes() const {
    return {reinterpret_cast<const char*>(data()), static_cast<size_t>(size_)};
  }
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data());
  }
  /// Writable data; only for an owned value.
  uint8_t* mutable_data() { return borrowed_ != nullptr ? borrowed_ : owned_.data(); }
  /// The ValueType of this row (fixed shape).
  ValueType type() const;

 private:
  /// The lent buffer when the loan covers size_ (and the loan is used up), else nullptr.
  uint8_t* TakeLoan();
  ValueKind kind_ = ValueKind::kBytes;
  ElementType element_ = ElementType::kUInt8;
  std::vector<int64_t> shape_;
  bool null_ = false;
  const uint8_t* view_ = nullptr;
  uint8_t* borrowed_ = nullptr;  // the lent buffer this value's data is in (see Lend)
  uint8_t* loan_ = nullptr;
  int64_t loan_capacity_ = 0;
  int64_t size_ = 0;
  // Default-initialised bytes: a row's buffer is written whole by its op, so growing it must not
  // zero it first (a decoded image is half a megabyte per row).
  struct UninitializedAllocator : std::allocator<uint8_t> {
    template <typename U>
    struct rebind {
      using other = UninitializedAllocator;
    };
    // NOLINTNEXTLINE(readability-non-const-parameter): placement new writes the byte at p.
    void construct(uint8_t* p) noexcept { ::new (static_cast<void*>(p)) uint8_t; }
    void construct(uint8_t* p, uint8_t value) noexcept { *p = value; }
  };
  std::vector<uint8_t, UninitializedAllocator> owned_;
};

}  // namespace stoker::transform
