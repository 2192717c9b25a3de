// Feature ops on numeric tensors (scalars are rank-0 tensors) and strings: cast, clip, log1p,
// standardize, min_max, bucketize, hash_bucket, vocabulary, fill_null.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "transform/element_internal.h"
#include "transform/op.h"
#include "transform/ops_internal.h"

namespace stoker::transform::internal {
namespace {

bool IsNumericTensor(const ValueType& type) { return type.kind == ValueKind::kTensor; }

// The representable range of an integer element type, as long double (exact on x86-64).
void IntegerRange(ElementType type, long double* low, long double* high) {
  switch (type) {
    case ElementType::kInt8:
      *low = INT8_MIN, *high = INT8_MAX;
      break;
    case ElementType::kInt16:
      *low = INT16_MIN, *high = INT16_MAX;
      break;
    case ElementType::kInt32:
      *low = INT32_MIN, *high = INT32_MAX;
      break;
    case ElementType::kInt64:
      *low = static_cast<long double>(INT64_MIN), *high = static_cast<long double>(INT64_MAX);
      break;
    case ElementType::kUInt8:
      *low = 0, *high = UINT8_MAX;
      break;
    case ElementType::kUInt16:
      *low = 0, *high = UINT16_MAX;
      break;
    case ElementType::kUInt32:
      *low = 0, *high = UINT32_MAX;
      break;
    case ElementType::kUInt64:
      *low = 0, *high = static_cast<long double>(UINT64_MAX);
      break;
    default:
      *low = 0, *high = 1;  // bool
      break;
  }
}

// The float type a computing op returns: float64 stays float64, everything else becomes float32.
ElementType FloatResult(ElementType input) {
  return input == ElementType::kFloat64 ? ElementType::kFloat64 : ElementType::kFloat32;
}

std::string Number(long double value) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.17Lg", value);
  return text;
}

// An elementwise op: output element type from the input's, f(value) per element.
class ElementwiseOp : public OpBase {
 public:
  using OpBase::OpBase;

  Result<ValueType> Resolve(const ValueType& input) const override {
    if (!IsNumericTensor(input)) return WrongInput(Name(), "a numeric column", input);
    STOKER_ASSIGN_OR_RAISE(ElementType element, OutputElement(input.element));
    return ValueType::Tensor(element, input.shape);
  }

  Status Apply(const RowContext&, const Value& in, Value* out) const override {
    const ElementType out_element = OutputElement(in.element()).ValueOrDie();
    const int in_size = ElementSize(in.element()), out_size = ElementSize(out_element);
    const int64_t count = in.num_elements();
    uint8_t* dst = out->Allocate(out_element, in.shape());
    for (int64_t i = 0; i < count; ++i) {
      long double value = LoadValue(in.element(), in.data() + i * in_size);
      STOKER_RETURN_NOT_OK(Compute(&value));
      StoreValue(out_element, dst + i * out_size, value);
    }
    return Status::OK();
  }

  bool SupportsColumn(const ValueType& input) const override {
    return IsNumericTensor(input) && OutputElement(input.element).ok();
  }

  // The same per-element arithmetic as Apply, over every element of every row.
  Status ApplyColumn(const ValueType& input, const ColumnInput& in, int64_t rows,
                     uint8_t* out) const override {
    const ElementType out_element = OutputElement(input.element).ValueOrDie();
    const int in_size = ElementSize(input.element), out_size = ElementSize(out_element);
    int64_t count = rows;
    for (int64_t dim : input.shape) count *= dim;
    for (int64_t i = 0; i < count; ++i) {
      long double value = LoadValue(input.element, in.values + i * in_size);
      STOKER_RETURN_NOT_OK(Compute(&value));
      StoreValue(out_element, out + i * out_size, value);
    }
    return Status::OK();
  }

 protected:
  virtual Result<ElementType> OutputElement(ElementType input) const = 0;
  virtual Status Compute(long double* value) const = 0;
};

class CastOp : public ElementwiseOp {
 public:
  CastOp(const ParamReader& params, ElementType target, bool lossy)
      : ElementwiseOp(params, 1), target_(target), lossy_(lossy) {
    if (!IsFloat(target)) IntegerRange(target, &low_, &high_);
  }

 protected:
  Result<ElementType> OutputElement(ElementType) const override { return target_; }

  Status Compute(long double* value) const override {
    if (IsFloat(target_)) {
      // Rounding to a narrower float is the point of a float cast; overflow to inf is not.
      const bool overflow = std::isfinite(*value) &&
                            ((target_ == ElementType::kFloat16 && std::fabs(*value) >= 65520.0L) ||
                             (target_ == ElementType::kFloat32 || target_ == ElementType::kBFloat16
                                  ? std::fabs(*value) > std::numeric_limits<float>::max()
                                  : false));
      if (overflow && !lossy_) return Lossy(*value);
      return Status::OK();
    }
    if (std::isnan(*value)) {
      if (!lossy_) return Lossy(*value);
      *value = 0;
      return Status::OK();
    }
    const long double truncated = std::trunc(*value);
    if (truncated != *value || truncated < low_ || truncated > high_) {
      if (!lossy_) return Lossy(*value);
      *value = std::clamp(truncated, low_, high_);  // saturate
      return Status::OK();
    }
    *value = truncated;
    if (target_ == ElementType::kBool) *value = *value != 0;
    return Status::OK();
  }

 private:
  Status Lossy(long double value) const {
    return MakeError(ErrorKind::kLossyCast, "value " + Number(value) + " does not fit " +
                                                ElementName(target_) +
                                                " (set lossy=True to saturate or round)");
  }

  ElementType target_;
  bool lossy_;
  long double low_ = 0, high_ = 0;
};

class ClipOp : public ElementwiseOp {
 public:
  ClipOp(const ParamReader& params, double low, double high)
      : ElementwiseOp(params, 1), low_(low), high_(high) {}

 protected:
  Result<ElementType> OutputElement(ElementType input) const override { return input; }
  Status Compute(long double* value) const override {
    if (!std::isnan(*value)) *value = std::clamp<long double>(*value, low_, high_);
    return Status::OK();
  }

 private:
  double low_, high_;
};

// out = (x - subtract) * multiply, or log1p(x), in the float result type.
class AffineOp : public ElementwiseOp {
 public:
  AffineOp(const ParamReader& params, bool log1p, double subtract, double multiply, bool clip)
      : ElementwiseOp(params, 1),
        log1p_(log1p),
        subtract_(subtract),
        multiply_(multiply),
        clip_(clip) {}

 protected:
  Result<ElementType> OutputElement(ElementType input) const override { return FloatResult(input); }
  Status Compute(long double* value) const override {
    if (log1p_) {
      *value = std::log1p(static_cast<double>(*value));
    } else {
      *value = (static_cast<double>(*value) - subtract_) * multiply_;
      if (clip_ && !std::isnan(*value)) *value = std::clamp<long double>(*value, 0.0L, 1.0L);
    }
    return Status::OK();
  }

  // Column fast path: the same double arithmetic as Compute, without the per-element virtual
  // call and long double round trip, for the element types features usually have. Stores round
  // once from the same double, so results are bit-identical to Apply.
  Status ApplyColumn(const ValueType& input, const ColumnInput& in, int64_t rows,
                     uint8_t* out) const override {
    int64_t count = rows;
    for (int64_t dim : input.shape) count *= dim;
    switch (input.element) {
      case ElementType::kFloat32:
        return Map<float, float>(in.values, count, out);
      case ElementType::kFloat64:
        return Map<double, double>(in.values, count, out);
      case ElementType::kInt32:
        return Map<int32_t, float>(in.values, count, out);
      case ElementType::kInt64:
        return Map<int64_t, float>(in.values, count, out);
      default:
        return ElementwiseOp::ApplyColumn(input, in, rows, out);
    }
  }

 private:
  template <typename In, typename Out>
  Status Map(const uint8_t* src, int64_t count, uint8_t* dst) const {
    static_assert(std::is_same_v<Out, float> || std::is_same_v<Out, double>);
    const auto load = [src](int64_t i) {
      In x;
      std::memcpy(&x, src + i * sizeof(In), sizeof(In));
      return static_cast<double>(x);
    };
    const auto store = [dst](int64_t i, double v) {
      const Out o = static_cast<Out>(v);
      std::memcpy(dst + i * sizeof(Out), &o, sizeof(Out));
    };
    if (log1p_) {
      for (int64_t i = 0; i < count; ++i) store(i, std::log1p(load(i)));
    } else if (clip_) {
      for (int64_t i = 0; i < count; ++i) {
        const double v = (load(i) - subtract_) * multiply_;
        store(i, std::isnan(v) ? v : std::clamp(v, 0.0, 1.0));
      }
    } else {
      for (int64_t i = 0; i < count; ++i) store(i, (load(i) - subtract_) * multiply_);
    }
    return Status::OK();
  }

  bool log1p_;
  double subtract_, multiply_;
  bool clip_;
};

class BucketizeOp : public ElementwiseOp {
 public:
  BucketizeOp(const ParamReader& params, std::vector<double> boundaries)
      : ElementwiseOp(params, 1), boundaries_(std::move(boundaries)) {}

 protected:
  Result<ElementType> OutputElement(ElementType) const override { return ElementType::kInt64; }
  Status Compute(long double* value) const override {
    // Bucket i holds boundaries[i-1] <= x < boundaries[i]; NaN goes to the last bucket.
    const double x = static_cast<double>(*value);
    *value = static_cast<long double>(std::upper_bound(boundaries_.begin(), boundaries_.end(), x) -
                                      boundaries_.begin());
    return Status::OK();
  }

 private:
  std::vector<double> boundaries_;
};

// FNV-1a 64 of the bytes, with no length suffix (unlike util/hash.h's Add(string_view)).
uint64_t Fnv1a64(const uint8_t* data, size_t size) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 0x100000001b3ULL;
  return hash;
}

// An integer element as int64 (uint64 values keep their bit pattern).
int64_t LoadInt64(ElementType type, const uint8_t* p) {
  if (type == ElementType::kUInt64) return static_cast<int64_t>(LoadAs<uint64_t>(p));
  return static_cast<int64_t>(LoadValue(type, p));
}

// A lookup from strings or integers to int64: hash_bucket and vocabulary.
class LookupOp : public OpBase {
 public:
  using OpBase::OpBase;

  Result<ValueType> Resolve(const ValueType& input) const override {
    const bool text = input.kind == ValueKind::kString || input.kind == ValueKind::kBytes;
    const bool integers = input.kind == ValueKind::kTensor && IsInteger(input.element);
    if (!(text && AcceptsText()) && !(integers && AcceptsIntegers())) {
      return WrongInput(Name(), Accepted(), input);
    }
    return ValueType::Tensor(ElementType::kInt64, text ? std::vector<int64_t>{} : input.shape);
  }

  Status Apply(const RowContext&, const Value& in, Value* out) const override {
    if (in.kind() != ValueKind::kTensor) {
      const int64_t id = LookupText(in.bytes());
      std::memcpy(out->Allocate(ElementType::kInt64, {}), &id, sizeof(id));
      return Status::OK();
    }
    const int size = ElementSize(in.element());
    const int64_t count = in.num_elements();
    uint8_t* dst = out->Allocate(ElementType::kInt64, in.shape());
    for (int64_t i = 0; i < count; ++i) {
      const int64_t id = LookupInteger(LoadInt64(in.element(), in.data() + i * size));
      std::memcpy(dst + i * 8, &id, 8);
    }
    return Status::OK();
  }

  bool SupportsColumn(const ValueType& input) const override { return Resolve(input).ok(); }

  // The same lookups as Apply, over a whole column.
  Status ApplyColumn(const ValueType& input, const ColumnInput& in, int64_t rows,
                     uint8_t* out) const override {
    if (input.kind != ValueKind::kTensor) {
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t begin = in.offsets32 ? in.offsets32[row] : in.offsets64[row];
        const int64_t end = in.offsets32 ? in.offsets32[row + 1] : in.offsets64[row + 1];
        const int64_t id = LookupText(std::string_view(
            reinterpret_cast<const char*>(in.values) + begin, static_cast<size_t>(end - begin)));
        std::memcpy(out + row * 8, &id, 8);
      }
      return Status::OK();
    }
    const int size = ElementSize(input.element);
    int64_t count = rows;
    for (int64_t dim : input.shape) count *= dim;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t id = LookupInteger(LoadInt64(input.element, in.values + i * size));
      std::memcpy(out + i * 8, &id, 8);
    }
    return Status::OK();
  }

 protected:
  virtual bool AcceptsText() const = 0;
  virtual bool AcceptsIntegers() const = 0;
  virtual std::string Accepted() const = 0;
  virtual int64_t LookupText(std::string_view text) const = 0;
  virtual int64_t LookupInteger(int64_t value) const = 0;
};

class HashBucketOp : public LookupOp {
 public:
  HashBucketOp(const ParamReader& params, int64_t buckets)
      : LookupOp(params, 1), buckets_(buckets) {}

 protected:
  bool AcceptsText() const override { return true; }
  bool AcceptsIntegers() const override { return true; }
  std::string Accepted() const override { return "a string, binary or integer column"; }
  int64_t LookupText(std::string_view text) const override {
    return static_cast<int64_t>(
        Fnv1a64(reinterpret_cast<const uint8_t*>(text.data()), text.size()) % buckets_);
  }
  int64_t LookupInteger(int64_t value) const override {
    uint8_t bytes[8];
    std::memcpy(bytes, &value, 8);  // little-endian host (checked in array_ops.cc)
    return static_cast<int64_t>(Fnv1a64(bytes, 8) % buckets_);
  }

 private:
  uint64_t buckets_;
};

class VocabularyOp : public LookupOp {
 public:
  VocabularyOp(const ParamReader& params, std::unordered_map<std::string, int64_t> text,
               std::unordered_map<int64_t, int64_t> integers, bool is_text, int64_t oov)
      : LookupOp(params, 1),
        text_(std::move(text)),
        integers_(std::move(integers)),
        is_text_(is_text),
        oov_(oov) {}

 protected:
  bool AcceptsText() const override { return is_text_; }
  bool AcceptsIntegers() const override { return !is_text_; }
  std::string Accepted() const override {
    return is_text_ ? "a string or binary column (the vocabulary is strings)"
                    : "an integer column (the vocabulary is integers)";
  }
  int64_t LookupText(std::string_view text) const override {
    auto it = text_.find(std::string(text));
    return it == text_.end() ? oov_ : it->second;
  }
  int64_t LookupInteger(int64_t value) const override {
    auto it = integers_.find(value);
    return it == integers_.end() ? oov_ : it->second;
  }

 private:
  std::unordered_map<std::string, int64_t> text_;
  std::unordered_map<int64_t, int64_t> integers_;
  bool is_text_;
  int64_t oov_;
};

class FillNullOp : public OpBase {
 public:
  FillNullOp(const ParamReader& params, ParamValue fill)
      : OpBase(params, 1), fill_(std::move(fill)) {}

  bool AcceptsNull() const override { return true; }

  Result<ValueType> Resolve(const ValueType& input) const override {
    if (input.kind != ValueKind::kTensor) {
      if (!std::holds_alternative<std::string>(fill_.value)) {
        return WrongInput(Name(), "a str 'value' for", input);
      }
      resolved_ = input;
      return input;
    }
    long double number;
    if (const auto* i = std::get_if<int64_t>(&fill_.value)) {
      number = *i;
    } else if (const auto* d = std::get_if<double>(&fill_.value)) {
      number = *d;
    } else if (const auto* b = std::get_if<bool>(&fill_.value)) {
      number = *b;
    } else {
      return WrongInput(Name(), "a numeric 'value' for", input);
    }
    if (!input.FixedShape()) {
      return WrongInput(Name(), "a fixed shape (to know the size of a filled row)", input);
    }
    if (!IsFloat(input.element)) {
      long double low, high;
      IntegerRange(input.element, &low, &high);
      if (number != std::trunc(number) || number < low || number > high) {
        return MakeError(ErrorKind::kLossyCast, "op 'fill_null': value " + Number(number) +
                                                    " does not fit " + ElementName(input.element));
      }
    }
    fill_number_ = number;
    resolved_ = input;
    return input;
  }

  Status Apply(const RowContext&, const Value& in, Value* out) const override {
    if (!in.is_null()) {
      if (in.kind() == ValueKind::kTensor) {
        std::memcpy(out->Allocate(in.element(), in.shape()), in.data(), in.size_bytes());
      } else {
        std::memcpy(out->AllocateBytes(in.kind(), in.size_bytes()), in.data(), in.size_bytes());
      }
      return Status::OK();
    }
    if (resolved_.kind != ValueKind::kTensor) {
      const std::string& text = std::get<std::string>(fill_.value);
      std::memcpy(out->AllocateBytes(resolved_.kind, text.size()), text.data(), text.size());
      return Status::OK();
    }
    uint8_t* dst = out->Allocate(resolved_.element, resolved_.shape);
    const int size = ElementSize(resolved_.element);
    for (int64_t i = 0; i < out->num_elements(); ++i) {
      StoreValue(resolved_.element, dst + i * size, fill_number_);
    }
    return Status::OK();
  }

 private:
  ParamValue fill_;
  // Set by Resolve, which a Chain calls once, at open time, before any Apply.
  mutable ValueType resolved_;
  mutable long double fill_number_ = 0;
};

}  // namespace

Result<std::unique_ptr<Op>> MakeCast(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(std::string dtype, params->String("dtype", std::nullopt));
  const auto target = ParseElementType(dtype);
  if (!target) {
    return params->Error("dtype",
                         "is not a dtype name: \"" + dtype + "\"; known dtypes: " + KnownDTypes());
  }
  STOKER_ASSIGN_OR_RAISE(bool lossy, params->Bool("lossy", false));
  return std::make_unique<CastOp>(*params, *target, lossy);
}

Result<std::unique_ptr<Op>> MakeClip(ParamReader* params) {
  double low = -HUGE_VAL, high = HUGE_VAL;
  if (params->Has("min")) {
    STOKER_ASSIGN_OR_RAISE(low, params->Double("min", std::nullopt));
  } else {
    STOKER_RETURN_NOT_OK(params->Raw("min", ParamValue()).status());
  }
  if (params->Has("max")) {
    STOKER_ASSIGN_OR_RAISE(high, params->Double("max", std::nullopt));
  } else {
    STOKER_RETURN_NOT_OK(params->Raw("max", ParamValue()).status());
  }
  if (!params->Has("min") && !params->Has("max")) {
    return params->Error("min", "or 'max' is required");
  }
  if (low > high) return params->Error("max", "must not be below 'min'");
  return std::make_unique<ClipOp>(*params, low, high);
}

Result<std::unique_ptr<Op>> MakeLog1p(ParamReader* params) {
  return std::make_unique<AffineOp>(*params, true, 0.0, 1.0, false);
}

Result<std::unique_ptr<Op>> MakeStandardize(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(double mean, params->Double("mean", std::nullopt));
  STOKER_ASSIGN_OR_RAISE(double std, params->Double("std", std::nullopt));
  if (std <= 0) return params->Error("std", "must be positive");
  return std::make_unique<AffineOp>(*params, false, mean, 1.0 / std, false);
}

Result<std::unique_ptr<Op>> MakeMinMax(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(double low, params->Double("min", std::nullopt));
  STOKER_ASSIGN_OR_RAISE(double high, params->Double("max", std::nullopt));
  if (!(high > low)) return params->Error("max", "must be above 'min'");
  STOKER_ASSIGN_OR_RAISE(bool clip, params->Bool("clip", false));
  return std::make_unique<AffineOp>(*params, false, low, 1.0 / (high - low), clip);
}

Result<std::unique_ptr<Op>> MakeBucketize(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(auto boundaries, params->DoubleList("boundaries", std::nullopt));
  if (boundaries.empty()) return params->Error("boundaries", "must not be empty");
  for (size_t i = 1; i < boundaries.size(); ++i) {
    if (!(boundaries[i] > boundaries[i - 1])) {
      return params->Error("boundaries", "must be strictly increasing");
    }
  }
  return std::make_unique<BucketizeOp>(*params, std::move(boundaries));
}

Result<std::unique_ptr<Op>> MakeHashBucket(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(int64_t buckets, params->Int("num_buckets", std::nullopt));
  if (buckets <= 0) return params->Error("num_buckets", "must be positive");
  return std::make_unique<HashBucketOp>(*params, buckets);
}

Result<std::unique_ptr<Op>> MakeVocabulary(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(ParamValue raw, params->Raw("vocabulary", std::nullopt));
  const auto* list = std::get_if<ParamValue::List>(&raw.value);
  if (list == nullptr || list->empty()) {
    return params->Error("vocabulary", "must be a non-empty list of str or of int");
  }
  const bool is_text = std::holds_alternative<std::string>(list->front().value);
  std::unordered_map<std::string, int64_t> text;
  std::unordered_map<int64_t, int64_t> integers;
  for (size_t i = 0; i < list->size(); ++i) {
    const ParamValue& item = (*list)[i];
    bool inserted;
    if (is_text && std::holds_alternative<std::string>(item.value)) {
      inserted = text.emplace(std::get<std::string>(item.value), i).second;
    } else if (!is_text && std::holds_alternative<int64_t>(item.value)) {
      inserted = integers.emplace(std::get<int64_t>(item.value), i).second;
    } else {
      return params->Error("vocabulary", "must be all str or all int");
    }
    if (!inserted) return params->Error("vocabulary", "has a duplicate: " + item.ToString());
  }
  STOKER_ASSIGN_OR_RAISE(int64_t oov, params->Int("oov_id", static_cast<int64_t>(list->size())));
  return std::make_unique<VocabularyOp>(*params, std::move(text), std::move(integers), is_text,
                                        oov);
}

Result<std::unique_ptr<Op>> MakeFillNull(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(ParamValue fill, params->Raw("value", std::nullopt));
  if (std::holds_alternative<ParamValue::List>(fill.value)) {
    return params->Error("value", "must be a number or a str");
  }
  return std::make_unique<FillNullOp>(*params, std::move(fill));
}

}  // namespace stoker::transform::internal
