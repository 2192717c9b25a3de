// Push-down transform ops: the interface, the registry and chains of ops for one column.
//
// An Op turns one row's Value into another. It is built once from a name and parameters
// (`MakeOp`, which checks every parameter), type-checked once against the column's type
// (`Resolve`, at open time, before a thread starts) and then applied to rows by any number of
// worker threads at once (`Apply` is const and keeps no state between calls).
//
// Randomness: a random op draws only from `RowContext::Stream()`, a Philox stream keyed by
// (seed, epoch, global row id, op index), so a row gets the same augmentation whatever thread,
// batch position, cache state or resume produced it, and a different one in another epoch.
//
// Errors: `Apply` returns a Status whose message is the reason only ("not a JPEG, PNG or WebP
// file", kCorruptFile); `Chain::Apply` prefixes the op and column, and the caller prefixes the
// file, row group and row, which only it knows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stoker/error.h"
#include "transform/params.h"
#include "transform/value.h"
#include "util/philox.h"

namespace stoker::transform {

/// Which row an op is applied to, and the keys of its random stream.
struct RowContext {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint64_t row = 0;       // global row id in the dataset (not the position in a batch)
  uint32_t op_index = 0;  // position of the op in its chain; set by Chain::Apply

  /// The op's random stream for this row: Philox4x32-10 keyed by a key derived from (seed,
  /// epoch), counter (row, op_index). Pure function of the four numbers.
  PhiloxStream Stream() const;
};

/// The rows of a whole column for columnar kernels: tensors stored back to back in `values`, or
/// strings/bytes as Arrow stores them (`values` plus 32- or 64-bit offsets of row 0).
struct ColumnInput {
  const uint8_t* values = nullptr;
  const int32_t* offsets32 = nullptr;
  const int64_t* offsets64 = nullptr;
};

/// Uniform double in [0, 1) with 53 random bits.
double UniformDouble(PhiloxStream* stream);

/// One transform step. Implementations live in *_ops.cc and register themselves in op.cc.
class Op {
 public:
  virtual ~Op() = default;

  /// Registry name ("resize").
  virtual const std::string& Name() const = 0;
  /// Name, every parameter (defaults included) and the op's version: equal fingerprints promise
  /// equal outputs, so the ready-tensor cache can key on them.
  virtual const std::string& Fingerprint() const = 0;
  /// False for ops that draw random numbers; a chain's cacheable part ends at the first of them.
  virtual bool Deterministic() const { return true; }
  /// True for ops that accept a null row (fill_null); other ops never see one.
  virtual bool AcceptsNull() const { return false; }
  /// For an op standing for several fused ops: whether it gives exactly their bytes (a region
  /// decode does; a DCT-scaled decode does not, so a cache must not cut between those ops).
  virtual bool SameAsUnfused() const { return true; }
  /// The output type for an input type, or why the op cannot take it (kUnsupportedType for a
  /// wrong kind or dtype). Called once, at open time.
  virtual Result<ValueType> Resolve(const ValueType& input) const = 0;
  /// Applies the op to one row. `in` has the resolved input type (with the variable dimensions
  /// filled in); `out` is reused across rows and never aliases `in`.
  virtual Status Apply(const RowContext& ctx, const Value& in, Value* out) const = 0;
  /// Optional columnar kernel, for deterministic ops whose output row depends only on its input
  /// row and whose fixed-shape output has as many elements as `input` (element-wise feature
  /// ops): applies the op to `rows` rows stored back to back, with exactly the arithmetic of
  /// `Apply`, so both paths give the same bytes. Saves the per-row Value overhead, which
  /// dominates for scalar columns. Returns false when the op has no kernel for `input`.
  /// A text input (string or bytes) comes with its offsets.
  virtual bool SupportsColumn(const ValueType& input) const { return false; }
  /// Errors carry the reason only: the caller re-runs the rows one by one to name the row.
  virtual Status ApplyColumn(const ValueType& input, const ColumnInput& in, int64_t rows,
                             uint8_t* out) const;
};

/// Base that stores the name and fingerprint made by ParamReader.
class OpBase : public Op {
 public:
  OpBase(const ParamReader& params, int version)
      : name_(params.op()), fingerprint_(params.Canonical() + "@v" + std::to_string(version)) {}
  const std::string& Name() const override { return name_; }
  const std::string& Fingerprint() const override { return fingerprint_; }

 private:
  std::string name_;
  std::string fingerprint_;
};

/// Builds an op from its registry name and parameters. Unknown names, unknown parameters and
/// wrong parameter types or values are kInvalidOption errors naming them.
Result<std::unique_ptr<Op>> MakeOp(const std::string& name, const Params& params);

/// The registered op names, sorted.
std::vector<std::string> OpNames();

/// Every parameter op `name` takes, in stoker.ops' order (empty for an unknown op).
std::vector<std::string> OpParameters(const std::string& name);

/// The ops of one column, in order. Thread safety: after `Make`, every method is const and safe to
/// call from many threads at once.
///
/// Usage: (1) `Chain::Make` with the column's name, its input type and the ops (type-checks the
/// whole chain); (2) `output_type()`, `DeterministicPrefixLength()`, `Fingerprint()` at open time;
/// (3) `Apply` per row on the workers, each with its own scratch Value.
class Chain {
 public:
  struct Options {
    /// Rows go into a dense tensor column: every output dimension must be fixed.
    bool require_fixed_shape = false;
  };

  /// Resolves every op in order. The first op whose input type it cannot take fails the chain,
  /// naming the op, its position and the column.
  static Result<Chain> Make(std::string column, const ValueType& input,
                            std::vector<std::unique_ptr<Op>> ops, const Options& options);
  static Result<Chain> Make(std::string column, const ValueType& input,
                            std::vector<std::unique_ptr<Op>> ops) {
    return Make(std::move(column), input, std::move(ops), Options{});
  }

  const std::string& column() const { return column_; }
  const ValueType& input_type() const { return types_.front(); }
  const ValueType& output_type() const { return types_.back(); }
  /// Type after op i (types()[0] is the input).
  const std::vector<ValueType>& types() const { return types_; }
  size_t size() const { return ops_.size(); }
  const Op& op(size_t i) const { return *ops_[i]; }
  /// Number of leading ops that are deterministic: their output can be cached across epochs.
  /// Never ends inside ops that run fused (decode_image with the crop or resize it decodes for),
  /// whose output would then depend on where the cache cut the chain.
  size_t DeterministicPrefixLength() const;
  /// True when `boundary` falls strictly inside a group of fused ops.
  bool SplitsFusedOps(size_t boundary) const;
  /// Fingerprint of the first `count` ops (all by default), for the cache key.
  std::string Fingerprint(size_t count = SIZE_MAX) const;

  /// Runs ops [begin, end) on one row; `ctx.op_index` is set per op. `scratch` is caller-owned
  /// and reused. An op's error comes back as "<op> (op i of column 'c'): <reason>" with its kind.
  /// Ops that fuse (decode_image + a resize, see image_ops.cc) run as one step when the range
  /// holds all of them; the split points callers use (the cached prefix) are fixed at open time,
  /// so a row always takes the same path.
  Status Apply(RowContext ctx, const Value& in, Value* out, Value* scratch, size_t begin = 0,
               size_t end = SIZE_MAX) const;

  /// True when every op in [begin, end) has a columnar kernel for its input type, and every
  /// type after `begin` is a tensor of fixed shape: ApplyColumn may then replace Apply row by row.
  bool SupportsColumn(size_t begin, size_t end) const;
  /// Runs ops [begin, end) over `rows` rows of types()[begin] (`in`), writing the rows of
  /// types()[end] back to back to `out`. `scratch` is caller-owned and reused. On an error no row
  /// is named: re-run the rows with Apply to find it.
  Status ApplyColumn(const ColumnInput& in, int64_t rows, uint8_t* out,
                     std::vector<uint8_t>* scratch, size_t begin, size_t end) const;

 private:
  Chain() = default;
  std::string column_;
  std::vector<std::unique_ptr<Op>> ops_;
  std::vector<ValueType> types_;
  // Per op index: a fused op that stands for ops [i, i + fused_count_[i]), or null.
  std::vector<std::unique_ptr<Op>> fused_;
  std::vector<size_t> fused_count_;
};

}  // namespace stoker::transform
