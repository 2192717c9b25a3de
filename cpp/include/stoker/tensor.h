// Tensors handed to Python: typed views into pooled, 64-byte aligned slabs.
//
// A Batch owns shared references to its slabs; a slab goes back to its pool when the last
// reference (the batch, or a Python array made from it) is dropped. Thread safety: a Batch is
// immutable once batch assembly (batch/assembler.h) publishes it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace stoker {

enum class DType : uint8_t {
  kBool,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kUInt16,
  kUInt32,
  kUInt64,
  kFloat16,
  kFloat32,
  kFloat64,
  /// Brain float (8 exponent bits, 7 mantissa bits). numpy has no such dtype: it reaches Python
  /// only as torch.bfloat16 (output='torch').
  kBFloat16,
};

int DTypeSize(DType dtype);
/// numpy-style name ("float32").
const char* DTypeName(DType dtype);
bool ParseDType(const std::string& name, DType* out);
/// Every dtype name, in DType order.
std::vector<std::string> DTypeNames();
/// The names joined for error messages: "bool, int8, ..., bfloat16".
std::string KnownDTypes();

/// One aligned allocation. Returned to its pool by the deleter of the shared_ptr. (A batch column
/// that is a view of a decoded item's rows has a slab that only keeps the item's buffer alive.)
class Slab {
 public:
  virtual ~Slab() = default;
  virtual uint8_t* data() = 0;
  virtual int64_t capacity() const = 0;
};

struct Tensor {
  DType dtype = DType::kUInt8;
  std::vector<int64_t> shape;
  uint8_t* data = nullptr;
  std::shared_ptr<Slab> owner;

  int64_t num_elements() const;
  int64_t num_bytes() const { return num_elements() * DTypeSize(dtype); }
};

/// What the tensors of one output column mean.
enum class ColumnKind {
  kDense,    // values only: [B] or [B, ...]
  kPadded,   // values [B, L] + lengths [B]
  kRagged,   // values [N] + offsets [B + 1]
  kStrings,  // utf-8 or binary bytes [N] + offsets [B + 1]
};

struct OutputColumn {
  std::string name;
  ColumnKind kind = ColumnKind::kDense;
  Tensor values;
  Tensor offsets;  // kRagged, kStrings
  /// kRagged lists of lists (and lists of strings): one int64 offsets tensor per level below the
  /// rows', outer first. `offsets` indexes inner_offsets[0], which indexes inner_offsets[1]...,
  /// the last one `values`.
  std::vector<Tensor> inner_offsets;
  Tensor lengths;  // kPadded
  /// kPadded lists of lists: the lengths of each level below the rows', outer first; level l is
  /// int64 [B, L0, ..., Ll] (0 where padded), `values` being [B, L0, ..., Lk].
  std::vector<Tensor> inner_lengths;
  Tensor mask;  // when null_mask is on: bool [B], true where the value is valid
  bool has_mask = false;
  /// Lists under null_mask: one bool mask per level below the rows, outer first, true where an
  /// item (inner list, string or element) is present and not null. kPadded: level l has the
  /// shape of inner_lengths[l] (the last, of `values`); kRagged: one per item of
  /// inner_offsets[l] (the last, of `values`); fixed-size lists: one of `values`' shape.
  std::vector<Tensor> element_masks;
  Tensor valid;  // on_error="zero" transforms: bool [B], false where a zero tensor was substituted
  bool has_valid = false;
  /// Extra meaning for Python: "utf8" or "binary" for strings, a time unit for temporal columns.
  std::string annotation;
};

struct Batch {
  int64_t index = 0;  // batch number within the epoch for this rank
  int64_t num_rows = 0;
  std::vector<OutputColumn> columns;
};

}  // namespace stoker
