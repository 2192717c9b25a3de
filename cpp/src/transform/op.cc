#include "transform/op.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "transform/ops_internal.h"

namespace stoker::transform {
namespace {

struct Registered {
  const char* name;
  internal::OpFactory factory;
  // Every parameter the factory reads, in stoker.ops' order: the list an unknown parameter's
  // error gives, whatever else is wrong (a factory stops at its first problem, so what it has
  // read by then is no list). op_test.cc OpRegistry.DeclaredParametersAreTheFactorysOwn keeps them
  // in step.
  const char* parameters;
};

// An explicit table rather than self-registering static objects: stoker_core is a static library,
// and the linker drops object files that nothing references, registrars included.
constexpr Registered kOps[] = {
    {"bucketize", internal::MakeBucketize, "boundaries"},
    {"cast", internal::MakeCast, "dtype, lossy"},
    {"center_crop", internal::MakeCenterCrop, "size"},
    {"clip", internal::MakeClip, "min, max"},
    {"decode_image", internal::MakeDecodeImage,
     "mode, exif, draft, shape, dct_scaling, max_pixels"},
    {"decode_npy", internal::MakeDecodeNpy, "dtype, shape"},
    {"decode_npz", internal::MakeDecodeNpz, "dtype, shape, key"},
    {"fill_null", internal::MakeFillNull, "value"},
    {"hash_bucket", internal::MakeHashBucket, "num_buckets"},
    {"horizontal_flip", internal::MakeHorizontalFlip, "p"},
    {"log1p", internal::MakeLog1p, ""},
    {"min_max", internal::MakeMinMax, "min, max, clip"},
    {"normalize", internal::MakeNormalize, "mean, std, scale, dtype"},
    {"pad", internal::MakePad, "padding, fill, mode"},
    {"random_crop", internal::MakeRandomCrop, "size"},
    {"random_resized_crop", internal::MakeRandomResizedCrop,
     "size, scale, ratio, interpolation, antialias"},
    {"reinterpret", internal::MakeReinterpret, "dtype, shape"},
    {"resize", internal::MakeResize, "size, interpolation, antialias"},
    {"shape", internal::MakeShape, ""},
    {"standardize", internal::MakeStandardize, "mean, std"},
    {"to_chw", internal::MakeToChw, ""},
    {"vertical_flip", internal::MakeVerticalFlip, "p"},
    {"vocabulary", internal::MakeVocabulary, "vocabulary, oov_id"},
};

std::vector<std::string> SplitParameters(const char* list) {
  std::vector<std::string> out;
  std::string name;
  for (const char* c = list;; ++c) {
    if (*c == ',' || *c == '\0') {
      if (!name.empty()) out.push_back(name);
      name.clear();
      if (*c == '\0') break;
    } else if (*c != ' ') {
      name += *c;
    }
  }
  return out;
}

// The first parameter of `params` that `entry` does not take, as an error listing those it does.
Status CheckParameterNames(const Registered& entry, const Params& params) {
  const std::vector<std::string> known = SplitParameters(entry.parameters);
  for (const auto& [name, value] : params) {
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    const std::string takes = known.empty() ? std::string("it takes no parameters")
                                            : "parameters: " + std::string(entry.parameters);
    return MakeError(
        ErrorKind::kInvalidOption,
        "op '" + std::string(entry.name) + "': unknown parameter '" + name + "' (" + takes + ")");
  }
  return Status::OK();
}

void CopyValue(const Value& in, Value* out) {
  if (in.is_null()) {
    out->SetNull();
  } else if (in.kind() == ValueKind::kTensor) {
    std::memcpy(out->Allocate(in.element(), in.shape()), in.data(), in.size_bytes());
  } else {
    std::memcpy(out->AllocateBytes(in.kind(), in.size_bytes()), in.data(), in.size_bytes());
  }
}

}  // namespace

namespace internal {

Status WrongInput(const std::string& op, const std::string& what, const ValueType& got) {
  return MakeError(ErrorKind::kUnsupportedType,
                   "op '" + op + "' needs " + what + ", got " + got.ToString());
}

Status Corrupt(const std::string& reason) { return MakeError(ErrorKind::kCorruptFile, reason); }

Status Unsupported(const std::string& reason) {
  return MakeError(ErrorKind::kUnsupportedInput, reason);
}

}  // namespace internal

PhiloxStream RowContext::Stream() const {
  // The epoch goes into the key (one Philox block of (seed, epoch)) so that both the row id and
  // the epoch keep their full 64 bits; the counter then holds (row, op index).
  const PhiloxCounter derived =
      Philox4x32({static_cast<uint32_t>(epoch), static_cast<uint32_t>(epoch >> 32), 0,
                  static_cast<uint32_t>(RandomPurpose::kTransformKey) << 24},
                 {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  const uint64_t key = (static_cast<uint64_t>(derived[1]) << 32) | derived[0];
  return PhiloxStream(key, RandomPurpose::kTransform, row, op_index & 0xffffff);
}

double UniformDouble(PhiloxStream* stream) {
  return static_cast<double>(stream->Next64() >> 11) * 0x1.0p-53;
}

Result<std::unique_ptr<Op>> MakeOp(const std::string& name, const Params& params) {
  for (const Registered& entry : kOps) {
    if (name == entry.name) {
      ParamReader reader(name, params);
      auto op = entry.factory(&reader);
      // A misspelt parameter is the likelier cause of a missing one: name it first.
      const Status unknown = CheckParameterNames(entry, params);
      if (!op.ok()) {
        if (!unknown.ok()) {
          return MakeError(ErrorKind::kInvalidOption,
                           unknown.message() + "; " + op.status().message());
        }
        return op.status();
      }
      STOKER_RETURN_NOT_OK(unknown);
      STOKER_RETURN_NOT_OK(reader.Finish());
      return op;
    }
  }
  std::string names;
  for (const Registered& entry : kOps) {
    names += (names.empty() ? "" : ", ") + std::string(entry.name);
  }
  return MakeError(ErrorKind::kInvalidOption,
                   "unknown transform op '" + name + "' (ops: " + names + ")");
}

std::vector<std::string> OpNames() {
  std::vector<std::string> names;
  for (const Registered& entry : kOps) names.emplace_back(entry.name);
  return names;
}

std::vector<std::string> OpParameters(const std::string& name) {
  for (const Registered& entry : kOps) {
    if (name == entry.name) return SplitParameters(entry.parameters);
  }
  return {};
}

Result<Chain> Chain::Make(std::string column, const ValueType& input,
                          std::vector<std::unique_ptr<Op>> ops, const Options& options) {
  Chain chain;
  chain.column_ = std::move(column);
  chain.types_.push_back(input);
  for (size_t i = 0; i < ops.size(); ++i) {
    auto resolved = ops[i]->Resolve(chain.types_.back());
    if (!resolved.ok()) {
      const auto kind = GetErrorKind(resolved.status()).value_or(ErrorKind::kUnsupportedType);
      return MakeError(kind, "column '" + chain.column_ + "', op " + std::to_string(i) + " '" +
                                 ops[i]->Name() + "': " + resolved.status().message());
    }
    chain.types_.push_back(*std::move(resolved));
  }
  if (options.require_fixed_shape && !chain.types_.back().FixedShape()) {
    std::string hint = chain.types_.back().kind == ValueKind::kTensor
                           ? " (add a resize or crop to a fixed size)"
                           : " (decode it with an op)";
    return MakeError(ErrorKind::kUnsupportedType,
                     "column '" + chain.column_ + "': the transforms give " +
                         chain.types_.back().ToString() +
                         " per row, which varies, and this column needs a fixed shape" + hint);
  }
  chain.ops_ = std::move(ops);
  chain.fused_.resize(chain.ops_.size());
  chain.fused_count_.assign(chain.ops_.size(), 1);
  for (size_t i = 0; i < chain.ops_.size(); ++i) {
    chain.fused_[i] = internal::FuseImageOps(chain.ops_, i, &chain.fused_count_[i]);
  }
  return chain;
}

size_t Chain::DeterministicPrefixLength() const {
  size_t count = 0;
  while (count < ops_.size() && ops_[count]->Deterministic()) ++count;
  while (count > 0 && SplitsFusedOps(count)) --count;
  return count;
}

bool Chain::SplitsFusedOps(size_t boundary) const {
  for (size_t i = 0; i < boundary && i < fused_.size(); ++i) {
    if (fused_[i] != nullptr && !fused_[i]->SameAsUnfused() && i + fused_count_[i] > boundary) {
      return true;
    }
  }
  return false;
}

std::string Chain::Fingerprint(size_t count) const {
  std::string text = "chain[" + types_.front().ToString() + "]";
  for (size_t i = 0; i < std::min(count, ops_.size()); ++i) {
    text += "|" + ops_[i]->Fingerprint();
  }
  return text;
}

Status Chain::Apply(RowContext ctx, const Value& in, Value* out, Value* scratch, size_t begin,
                    size_t end) const {
  end = std::min(end, ops_.size());
  if (begin >= end) {
    CopyValue(in, out);
    return Status::OK();
  }
  // A step is one op, or a fused run of ops lying wholly inside [begin, end).
  auto step_length = [&](size_t i) {
    return fused_[i] != nullptr && i + fused_count_[i] <= end ? fused_count_[i] : size_t{1};
  };
  size_t steps = 0;
  for (size_t i = begin; i < end; i += step_length(i)) ++steps;
  // Ping-pong between `out` and `scratch` so that the last step writes `out`.
  Value* target = steps % 2 == 1 ? out : scratch;
  const Value* source = &in;
  for (size_t i = begin; i < end;) {
    const size_t length = step_length(i);
    const Op& op = length > 1 ? *fused_[i] : *ops_[i];
    Status status;
    if (source->is_null() && !op.AcceptsNull()) {
      status = MakeError(ErrorKind::kNullValues, "a null value (add fill_null before this op)");
    } else {
      ctx.op_index = static_cast<uint32_t>(i);
      status = op.Apply(ctx, *source, target);
    }
    if (!status.ok()) {
      const auto kind = GetErrorKind(status).value_or(ErrorKind::kCorruptFile);
      return MakeError(kind, op.Name() + " (op " + std::to_string(i) + " of column '" + column_ +
                                 "'): " + status.message());
    }
    source = target;
    target = target == out ? scratch : out;
    i += length;
  }
  return Status::OK();
}

Status Op::ApplyColumn(const ValueType&, const ColumnInput&, int64_t, uint8_t*) const {
  return Status::NotImplemented(Name() + " has no columnar kernel");
}

bool Chain::SupportsColumn(size_t begin, size_t end) const {
  end = std::min(end, ops_.size());
  if (begin >= end) return false;
  for (size_t i = begin; i < end; ++i) {
    const ValueType& input = types_[i];
    const bool text = input.kind != ValueKind::kTensor;
    if ((text && i != begin) || (!text && !input.FixedShape()) || !ops_[i]->SupportsColumn(input)) {
      return false;
    }
  }
  return true;
}

Status Chain::ApplyColumn(const ColumnInput& in, int64_t rows, uint8_t* out,
                          std::vector<uint8_t>* scratch, size_t begin, size_t end) const {
  end = std::min(end, ops_.size());
  // Ping-pong between `out` and two halves of `scratch` so that the last op writes `out`.
  int64_t largest = 0;
  for (size_t i = begin + 1; i < end; ++i) {
    int64_t elements = 1;
    for (int64_t dim : types_[i].shape) elements *= dim;
    largest = std::max(largest, elements * ElementSize(types_[i].element));
  }
  scratch->resize(static_cast<size_t>(2 * largest * rows));
  uint8_t* halves[2] = {scratch->data(), scratch->data() + largest * rows};
  ColumnInput source = in;
  for (size_t i = begin; i < end; ++i) {
    uint8_t* target = i + 1 == end ? out : halves[(i - begin) % 2];
    const Status status = ops_[i]->ApplyColumn(types_[i], source, rows, target);
    if (!status.ok()) {
      const auto kind = GetErrorKind(status).value_or(ErrorKind::kCorruptFile);
      return MakeError(kind, ops_[i]->Name() + " (op " + std::to_string(i) + " of column '" +
                                 column_ + "'): " + status.message());
    }
    source = ColumnInput{target};
  }
  return Status::OK();
}

}  // namespace stoker::transform
