// The image ops: decode_image, resize, center_crop, random_crop, random_resized_crop,
// horizontal_flip, vertical_flip, pad, normalize, to_chw. Pixel work is in image_kernels.cc and
// image_codec.cc; this file checks parameters and types and draws the random choices.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "transform/element_internal.h"
#include "transform/image.h"
#include "transform/op.h"
#include "transform/ops_internal.h"

namespace stoker::transform::internal {
namespace {

// An image type: a rank-3 [height, width, channels] tensor with known channels (1, 3 or 4 when
// `uint8_only`, any count otherwise).
Status CheckImage(const std::string& op, const ValueType& type, bool uint8_only) {
  const char* what = uint8_only ? "a uint8 image [height, width, 1|3|4] (decode_image first)"
                                : "an image tensor [height, width, channels]";
  if (type.kind != ValueKind::kTensor || type.shape.size() != 3 || type.shape[2] < 1) {
    return WrongInput(op, what, type);
  }
  if (uint8_only && (type.element != ElementType::kUInt8 ||
                     (type.shape[2] != 1 && type.shape[2] != 3 && type.shape[2] != 4))) {
    return WrongInput(op, what, type);
  }
  return Status::OK();
}

// "size": an int (a square, or for resize the shorter side) or [height, width], all positive.
Result<std::vector<int64_t>> ReadSize(ParamReader* params, const char* name = "size") {
  STOKER_ASSIGN_OR_RAISE(auto size, params->IntList(name, std::nullopt, /*scalar_ok=*/true));
  if (size.size() != 1 && size.size() != 2) {
    return params->Error(name, "must be an int or [height, width]");
  }
  for (int64_t dim : size) {
    if (dim <= 0 || dim > (int64_t{1} << 20)) return params->Error(name, "must be positive");
  }
  return size;
}

std::vector<int64_t> SquareOf(const std::vector<int64_t>& size) {
  return size.size() == 1 ? std::vector<int64_t>{size[0], size[0]} : size;
}

Result<Interpolation> ReadInterpolation(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(std::string name, params->String("interpolation", "bilinear"));
  if (name == "bilinear") return Interpolation::kBilinear;
  if (name == "area") return Interpolation::kArea;
  return params->Error("interpolation", "must be \"bilinear\" or \"area\", got \"" + name + "\"");
}

// Copies the rows `rows` and columns `cols` of `in` (a [h, w, c] tensor of any element type) into
// `out`; an index of -1 takes `fill` (one pixel of bytes) or zeros.
void Remap(const Value& in, const std::vector<int64_t>& rows, const std::vector<int64_t>& cols,
           const std::vector<uint8_t>& fill, Value* out) {
  const int64_t w = in.shape()[1], c = in.shape()[2];
  const int64_t pixel = c * ElementSize(in.element());
  const int64_t out_h = static_cast<int64_t>(rows.size()),
                out_w = static_cast<int64_t>(cols.size());
  uint8_t* dst = out->Allocate(in.element(), {out_h, out_w, c});
  const uint8_t* src = in.data();
  for (int64_t y = 0; y < out_h; ++y) {
    uint8_t* out_row = dst + y * out_w * pixel;
    for (int64_t x = 0; x < out_w; ++x) {
      uint8_t* target = out_row + x * pixel;
      if (rows[y] < 0 || cols[x] < 0) {
        if (fill.empty()) {
          std::memset(target, 0, pixel);
        } else {
          std::memcpy(target, fill.data(), pixel);
        }
      } else {
        std::memcpy(target, src + (rows[y] * w + cols[x]) * pixel, pixel);
      }
    }
  }
}

std::vector<int64_t> Range(int64_t start, int64_t count, int64_t limit) {
  std::vector<int64_t> out(count);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = start + i;
    out[i] = index >= 0 && index < limit ? index : -1;
  }
  return out;
}

void Crop(const Value& in, const CropBox& box, Value* out) {
  const int64_t h = in.shape()[0], w = in.shape()[1], c = in.shape()[2];
  if (box.top >= 0 && box.left >= 0 && box.top + box.height <= h && box.left + box.width <= w) {
    const int64_t pixel = c * ElementSize(in.element());
    uint8_t* dst = out->Allocate(in.element(), {box.height, box.width, c});
    const uint8_t* src = in.data() + (box.top * w + box.left) * pixel;
    for (int64_t y = 0; y < box.height; ++y) {
      std::memcpy(dst + y * box.width * pixel, src + y * w * pixel, box.width * pixel);
    }
    return;
  }
  Remap(in, Range(box.top, box.height, in.shape()[0]), Range(box.left, box.width, in.shape()[1]),
        {}, out);
}

// ---------------------------------------------------------------------------------------------

class DecodeImageOp : public OpBase {
 public:
  // `size`: the declared [height, width] every image must have (a Petastorm field's shape), or
  // empty for any size.
  DecodeImageOp(const ParamReader& params, ImageDecodeOptions options, std::vector<int64_t> size,
                bool dct_scaling)
      : OpBase(params, 1), options_(options), size_(std::move(size)), dct_scaling_(dct_scaling) {}

  const ImageDecodeOptions& options() const { return options_; }
  // May decode a JPEG at a reduced size for the resize that follows it (FuseImageOps): on unless
  // the user turned it off, asked for a fixed draft size, for EXIF rotation, or declared the
  // image's size (which the full-size decode checks).
  bool Fusable() const {
    return options_.min_height == 0 && options_.min_width == 0 && !options_.apply_exif &&
           size_.empty();
  }
  bool dct_scaling() const { return dct_scaling_; }

  Result<ValueType> Resolve(const ValueType& input) const override {
    if (input.kind != ValueKind::kBytes) {
      return WrongInput(Name(), "encoded bytes (a binary column)", input);
    }
    const int64_t h = size_.empty() ? kVariableDim : size_[0];
    const int64_t w = size_.empty() ? kVariableDim : size_[1];
    return ValueType::Tensor(ElementType::kUInt8, {h, w, int64_t{options_.channels}});
  }

  Status Apply(const RowContext&, const Value& in, Value* out) const override {
    STOKER_RETURN_NOT_OK(DecodeImage(in.bytes(), options_, out));
    if (!size_.empty() && (out->shape()[0] != size_[0] || out->shape()[1] != size_[1])) {
      return MakeError(ErrorKind::kCorruptFile,
                       "the image is " + std::to_string(out->shape()[0]) + "x" +
                           std::to_string(out->shape()[1]) + ", not the declared shape " +
                           std::to_string(size_[0]) + "x" + std::to_string(size_[1]));
    }
    return Status::OK();
  }

 private:
  ImageDecodeOptions options_;
  std::vector<int64_t> size_;
  bool dct_scaling_;
};

class ResizeOp : public OpBase {
 public:
  ResizeOp(const ParamReader& params, std::vector<int64_t> size, Interpolation interpolation,
           bool antialias)
      : OpBase(params, 1),
        size_(std::move(size)),
        interpolation_(interpolation),
        antialias_(antialias) {}

  Result<ValueType> Resolve(const ValueType& input) const override {
    STOKER_RETURN_NOT_OK(CheckImage(Name(), input, /*uint8_only=*/true));
    if (size_.size() == 2) {
      return ValueType::Tensor(input.element, {size_[0], size_[1], input.shape[2]});
    }
    return ValueType::Tensor(input.element, {kVariableDim, kVariableDim, input.shape[2]});
  }

  // The output size for an h x w input.
  void OutputSize(int64_t h, int64_t w, int64_t* out_h, int64_t* out_w) const {
    if (size_.size() == 2) {
      *out_h = size_[0];
      *out_w = size_[1];
    } else {  // torchvision: the shorter side becomes `size`, the longer keeps the aspect ratio
      const int64_t shorter = std::min(h, w), longer = std::max(h, w);
      const auto new_long = static_cast<int64_t>(static_cast<double>(size_[0]) * longer / shorter);
      *out_h = h <= w ? size_[0] : new_long;
      *out_w = h <= w ? new_long : size_[0];
    }
  }
  Interpolation interpolation() const { return interpolation_; }
  bool antialias() const { return antialias_; }

  Status Apply(const RowContext&, const Value& in, Value* out) const override {
    const int64_t h = in.shape()[0], w = in.shape()[1];
    const int channels = static_cast<int>(in.shape()[2]);
    int64_t out_h, out_w;
    OutputSize(h, w, &out_h, &out_w);
    // out never aliases in (Chain ping-pongs), so the kernel may read in while writing out.
    uint8_t* dst = out->Allocate(ElementType::kUInt8, {out_h, out_w, channels});
    ResizeImage(in.data(), h, w, channels, dst, out_h, out_w, interpolation_, antialias_);
    return Status::OK();
  }

 private:
  std::vector<int64_t> size_;
  Interpolation interpolation_;
  bool antialias_;
};

class CenterCropOp : public OpBase {
 public:
  CenterCropOp(const ParamReader& params, std::vector<int64_t> size)
      : OpBase(params, 1), size_(std::move(size)) {}

  Result<ValueType> Resolve(const ValueType& input) const override {
    STOKER_RETURN_NOT_OK(CheckImage(Name(), input, /*uint8_only=*/false));
    return ValueType::Tensor(input.element, {size_[0], size_[1], input.shape[2]});
  }

  // torchvision's center_crop: zero-pad a smaller image first, then round((H - h) / 2). The box
  // may reach outside the image (where the padding is).
  CropBox Box(int64_t h, int64_t w) const {
    const int64_t pad_top = size_[0] > h ? (size_[0] - h) / 2 : 0;
    const int64_t pad_left = size_[1] > w ? (size_[1] - w) / 2 : 0;
    const int64_t padded_h = std::max(h, size_[0]), padded_w = std::max(w, size_[1]);
    const auto top = static_cast<int64_t>(std::nearbyint((padded_h - size_[0]) / 2.0));
    const auto left = static_cast<int64_t>(std::nearbyint((padded_w - size_[1]) / 2.0));
    return {top - pad_top, left - pad_left, size_[0], size_[1]};
  }

  Status Apply(const RowContext&, const Value& in, Value* out) const override {
    Crop(in, Box(in.shape()[0], in.shape()[1]), out);
    return Status::OK();
  }

 private:
  std::vector<int64_t> size_;
};

class RandomCropOp : public OpBase {
 public:
  RandomCropOp(const ParamReader& params, std::vector<int64_t> size)
      : OpBase(params, 1), size_(std::move(size)) {}

  bool Deterministic() const override { return false; }

  Result<ValueType> Resolve(const ValueType& input) const override {
    STOKER_RETURN_NOT_OK(CheckImage(Name(), input, /*uint8_only=*/false));
    if ((input.shape[0] >= 0 && input.shape[0] < size_[0]) ||
        (input.shape[1] >= 0 && input.shape[1] < size_[1])) {
      return WrongInput(
          Name(), "an image at least " + std::to_string(size_[0]) + "x" + std::to_string(size_[1]),
          input);
    }
    return ValueType::Tensor(input.element, {size_[0], size_[1], input.shape[2]});
  }

  Status Apply(const RowContext& ctx, const Value& in, Value* out) const override {
    const int64_t h = in.shape()[0], w = in.shape()[1];
    if (h < size_[0] || w < size_[1]) {
      return MakeError(ErrorKind::kInvalidOption,
                       "image is " + std::to_string(h) + "x" + std::to_string(w) +
                           ", smaller than the crop " + std::to_string(size_[0]) + "x" +
                           std::to_string(size_[1]) + " (resize or pad it first)");
    }
    PhiloxStream stream = ctx.Stream();
    const auto top = static_cast<int64_t>(stream.Below(h - size_[0] + 1));
    const auto left = static_cast<int64_t>(stream.Below(w - size_[1] + 1));
    Crop(in, {top, left, size_[0], size_[1]}, out);
    return Status::OK();
  }

 private:
  std::vector<int64_t> size_;
};

class RandomResizedCropOp : public OpBase {
 public:
  RandomResizedCropOp(const ParamReader& params, std::vector<int64_t> size,
                      std::vector<double> scale, std::vector<double> ratio,
                      Interpolation interpolation, bool antialias)
      : OpBase(params, 1),
        size_(std::move(size)),
        scale_(std::move(scale)),
        ratio_(std::move(ratio)),
        interpolation_(interpolation),
        antialias_(antialias) {}

  bool Deterministic() const override { return false; }

  Result<ValueType> Resolve(const ValueType& input) const override {
    STOKER_RETURN_NOT_OK(CheckImage(Name(), input, /*uint8_only=*/true));
    return ValueType::Tensor(input.element, {size_[0], size_[1], input.shape[2]});
  }

  // The row's crop box in an h x w image (`ctx.op_index` is this op's).
  CropBox DrawBox(const RowContext& ctx, int64_t h, int64_t w) const {
    PhiloxStream stream = ctx.Stream();
    return RandomResizedCropBox(h, w, scale_[0], scale_[1], ratio_[0], ratio_[1], &stream);
  }
  const std::vector<int64_t>& size() const { return size_; }
  Interpolation interpolation() const { return interpolation_; }
  bool antialias() const { return antialias_; }

  Status Apply(const RowContext& ctx, const Value& in, Value* out) const override {
    const CropBox box = DrawBox(ctx, in.shape()[0], in.shape()[1]);
    // The box lies inside the image: the resampler reads it in place, rows `stride` bytes apart.
    const int channels = static_cast<int>(in.shape()[2]);
    const int64_t stride = in.shape()[1] * channels;
    uint8_t* dst = out->Allocate(ElementType::kUInt8, {size_[0], size_[1], channels});
    ResizeImage(in.data() + box.top * stride + box.left * channels, box.height, box.width, channels,
                dst, size_[0], size_[1], interpolation_, antialias_, stride);
    return Status::OK();
  }

 private:
  std::vector<int64_t> size_;
  std::vector<double> scale_;
  std::vector<double> ratio_;
  Interpolation interpolation_;
  bool antialias_;
};

// Mirrors each row of `P`-byte pixels.
template <int P>
void ReverseRows(const uint8_t* src, uint8_t* dst, int64_t h, int64_t w) {
  for (int64_t y = 0; y < h; ++y) {
    const uint8_t* in = src + y * w * P;
    uint8_t* out = dst + y * w * P + (w - 1) * P;
    for (int64_t x = 0; x < w; ++x, in += P, out -= P) {
      for (int b = 0; b < P; ++b) out[b] = in[b];
    }
  }
}

// [count, C] -> [C, count] for bytes: one pass over the source, C output streams.
template <int C>
void Deinterleave(const uint8_t* src, uint8_t* dst, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    for (int ch = 0; ch < C; ++ch) dst[ch * count + i] = src[i * C + ch];
  }
}

class FlipOp : public OpBase {
 public:
  FlipOp(const ParamReader& params, bool horizontal, double p)
      : OpBase(params, 1), horizontal_(horizontal), p_(p) {}

  // p = 0 or 1 draws nothing: the op is then a fixed function and may be cached.
  bool Deterministic() const override { return p_ == 0.0 || p_ == 1.0; }

  Result<ValueType> Resolve(const ValueType& input) const override {
    STOKER_RETURN_NOT_OK(CheckImage(Name(), input, /*uint8_only=*/false));
    return input;
  }

  Status Apply(const RowContext& ctx, const Value& in, Value* out) const override {
    bool flip = p_ == 1.0;
    if (p_ > 0.0 && p_ < 1.0) {
      PhiloxStream stream = ctx.Stream();
      flip = UniformDouble(&stream) < p_;
    }
    const int64_t h = in.shape()[0], w = in.shape()[1];
    const int64_t pixel = in.shape()[2] * ElementSize(in.element());
    const int64_t row = w * pixel;
    uint8_t* dst = out->Allocate(in.element(), in.shape());
    const uint8_t* src = in.data();
    if (!flip) {
      if (h * row > 0) std::memcpy(dst, src, h * row);
    } else if (!horizontal_) {
      for (int64_t y = 0; y < h; ++y) std::memcpy(dst + y * row, src + (h - 1 - y) * row, row);
    } else {
      switch (pixel) {
        case 1:
          ReverseRows<1>(src, dst, h, w);
          break;
        case 3:
          MirrorRgbRows(src, dst, h, w);
          break;
        case 4:
          ReverseRows<4>(src, dst, h, w);
          break;
        default:
          for (int64_t y = 0; y < h; ++y) {
            for (int64_t x = 0; x < w; ++x) {
              std::memcpy(dst + y * row + x * pixel, src + y * row + (w - 1 - x) * pixel, pixel);
            }
          }
          break;
      }
    }
    return Status::OK();
  }

 private:
  bool horizontal_;
  double p_;
};

enum class PadMode { kConstant, kEdge, kReflect };

class PadOp : public OpBase {
 public:
  // padding: left, top, right, bottom.
  PadOp(const ParamReader& params, std::vector<int64_t> padding, std::vector<int64_t> fill,
        PadMode mode)
      : OpBase(params, 1), padding_(std::move(padding)), fill_(std::move(fill)), mode_(mode) {}

  Result<ValueType> Resolve(const ValueType& input) const override {
    STOKER_RETURN_NOT_OK(CheckImage(Name(), input, /*uint8_only=*/false));
    const bool nonzero_fill = std::any_of(fill_.begin(), fill_.end(), [](int64_t v) { return v; });
    if (mode_ == PadMode::kConstant && nonzero_fill && input.element != ElementType::kUInt8) {
      return WrongInput(Name(), "a uint8 image for a nonzero fill", input);
    }
    if (fill_.size() > 1 && static_cast<int64_t>(fill_.size()) != input.shape[2]) {
      return MakeError(ErrorKind::kInvalidOption, "op 'pad': parameter 'fill' has " +
                                                      std::to_string(fill_.size()) +
                                                      " values for an image of " +
                                                      std::to_string(input.shape[2]) + " channels");
    }
    ValueType out = input;
    if (out.shape[0] >= 0) out.shape[0] += padding_[1] + padding_[3];
    if (out.shape[1] >= 0) out.shape[1] += padding_[0] + padding_[2];
    return out;
  }

  Status Apply(const RowContext&, const Value& in, Value* out) const override {
    const int64_t h = in.shape()[0], w = in.shape()[1], c = in.shape()[2];
    if (mode_ == PadMode::kReflect &&
        (std::max(padding_[0], padding_[2]) >= w || std::max(padding_[1], padding_[3]) >= h)) {
      return MakeError(ErrorKind::kInvalidOption,
                       "reflect padding must be smaller than the image (" + std::to_string(h) +
                           "x" + std::to_string(w) + ")");
    }
    std::vector<uint8_t> fill;
    if (mode_ == PadMode::kConstant && in.element() == ElementType::kUInt8) {
      fill.resize(c);
      for (int64_t ch = 0; ch < c; ++ch) {
        fill[ch] = static_cast<uint8_t>(fill_.size() == 1 ? fill_[0] : fill_[ch]);
      }
    }
    Remap(in, Indices(padding_[1], h, padding_[3]), Indices(padding_[0], w, padding_[2]), fill,
          out);
    return Status::OK();
  }

 private:
  std::vector<int64_t> Indices(int64_t before, int64_t size, int64_t after) const {
    std::vector<int64_t> out(before + size + after);
    for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
      int64_t index = i - before;
      if (index < 0 || index >= size) {
        switch (mode_) {
          case PadMode::kConstant:
            index = -1;
            break;
          case PadMode::kEdge:
            index = std::clamp<int64_t>(index, 0, size - 1);
            break;
          case PadMode::kReflect:  // mirror without repeating the edge (torchvision, numpy)
            index = index < 0 ? -index : 2 * (size - 1) - index;
            break;
        }
      }
      out[i] = index;
    }
    return out;
  }

  std::vector<int64_t> padding_;
  std::vector<int64_t> fill_;
  PadMode mode_;
};

class NormalizeOp : public OpBase {
 public:
  NormalizeOp(const ParamReader& params, std::vector<double> mean, std::vector<double> std,
              double scale, ElementType dtype)
      : OpBase(params, 1), dtype_(dtype) {
    // (x * scale - mean) / std == x * (scale / std) + (-mean / std), per channel, in float32.
    const size_t channels = std::max(mean.size(), std.size());
    for (size_t ch = 0; ch < channels; ++ch) {
      const double m = mean.size() == 1 ? mean[0] : mean[ch];
      const double s = std.size() == 1 ? std[0] : std[ch];
      multiply_.push_back(static_cast<float>(scale / s));
      add_.push_back(static_cast<float>(-m / s));
    }
  }

  Result<ValueType> Resolve(const ValueType& input) const override {
    if (input.kind != ValueKind::kTensor || input.element == ElementType::kBool ||
        (multiply_.size() > 1 && (input.shape.empty() || input.shape.back() < 0))) {
      return WrongInput(Name(), "a numeric tensor [..., channels] (an image)", input);
    }
    if (multiply_.size() > 1 && input.shape.back() != static_cast<int64_t>(multiply_.size())) {
      return MakeError(ErrorKind::kInvalidOption,
                       "op 'normalize': mean/std have " + std::to_string(multiply_.size()) +
                           " values for " + std::to_string(input.shape.back()) + " channels");
    }
    return ValueType::Tensor(dtype_, input.shape);
  }

  Status Apply(const RowContext&, const Value& in, Value* out) const override {
    const int64_t count = in.num_elements();
    const int64_t channels = static_cast<int64_t>(multiply_.size());
    const int in_size = ElementSize(in.element());
    uint8_t* dst = out->Allocate(dtype_, in.shape());
    const uint8_t* src = in.data();
    for (int64_t i = 0; i < count; ++i) {
      const int64_t ch = channels == 1 ? 0 : i % channels;
      const float value =
          static_cast<float>(LoadDouble(in.element(), src + i * in_size)) * multiply_[ch] +
          add_[ch];
      switch (dtype_) {
        case ElementType::kFloat32:
          std::memcpy(dst + i * 4, &value, 4);
          break;
        case ElementType::kFloat16: {
          const uint16_t half = FloatToHalf(value);
          std::memcpy(dst + i * 2, &half, 2);
          break;
        }
        default: {
          const uint16_t brain = FloatToBFloat16(value);
          std::memcpy(dst + i * 2, &brain, 2);
          break;
        }
      }
    }
    return Status::OK();
  }

 private:
  ElementType dtype_;
  std::vector<float> multiply_;
  std::vector<float> add_;
};

class ToChwOp : public OpBase {
 public:
  explicit ToChwOp(const ParamReader& params) : OpBase(params, 1) {}

  Result<ValueType> Resolve(const ValueType& input) const override {
    STOKER_RETURN_NOT_OK(CheckImage(Name(), input, /*uint8_only=*/false));
    return ValueType::Tensor(input.element, {input.shape[2], input.shape[0], input.shape[1]});
  }

  Status Apply(const RowContext&, const Value& in, Value* out) const override {
    const int64_t h = in.shape()[0], w = in.shape()[1], c = in.shape()[2];
    const int size = ElementSize(in.element());
    uint8_t* dst = out->Allocate(in.element(), {c, h, w});
    const uint8_t* src = in.data();
    const int64_t count = h * w;
    if (c == 1) {
      if (count > 0) std::memcpy(dst, src, count * size);
      return Status::OK();
    }
    if (size == 1 && c == 3) {
      DeinterleaveRgb(src, dst, count);
      return Status::OK();
    }
    if (size == 1 && c == 4) {
      Deinterleave<4>(src, dst, count);
      return Status::OK();
    }
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t i = 0; i < h * w; ++i) {
        std::memcpy(dst + (ch * h * w + i) * size, src + (i * c + ch) * size, size);
      }
    }
    return Status::OK();
  }
};

// decode_image followed by resize, center_crop + resize, or random_resized_crop, run as one step
// (FuseImageOps): when the resize shrinks the JPEG's region to at most half on both sides, the
// JPEG is decoded at 1/2, 1/4 or 1/8 scale in the DCT domain (the largest reduction that keeps the
// region at least the output size, Pillow's draft rule) and the region, mapped onto the smaller
// image with fractional edges, is resized from there (Pillow's resize with a box). The crop box
// and the output size come from the header's full size, with the same random draws as the
// unfused ops, so only the pixels change (within the tolerance documented in the user guide), and
// they depend only on the row's bytes and keys. A crop that shrinks by less than 2x is decoded
// region-only instead (the rows and columns it needs, DecodeJpegRegion), which changes no byte.
// Any other file or size runs the ops one by one.
// Per-thread scratch larger than this is freed after the row, so that one huge image does not keep
// its buffers for the loader's lifetime.
constexpr int64_t kKeepScratchBytes = int64_t{64} << 20;

struct TrimScratch {
  Value* value;
  ~TrimScratch() {
    if (value->size_bytes() > kKeepScratchBytes) *value = Value();
  }
};

class FusedDecodeResizeOp : public Op {
 public:
  FusedDecodeResizeOp(const DecodeImageOp* decode, const CenterCropOp* crop, const ResizeOp* resize,
                      const RandomResizedCropOp* random_crop)
      : decode_(decode), crop_(crop), resize_(resize), random_crop_(random_crop) {}

  const std::string& Name() const override { return decode_->Name(); }
  const std::string& Fingerprint() const override { return decode_->Fingerprint(); }
  bool SameAsUnfused() const override { return !decode_->dct_scaling(); }
  Result<ValueType> Resolve(const ValueType&) const override {
    return Status::Invalid("a fused op is never resolved");
  }

  // `ctx.op_index` is the decode's index; the ops it stands for follow it.
  Status Apply(const RowContext& ctx, const Value& in, Value* out) const override {
    int64_t height = 0, width = 0;
    if (!JpegSize(in.bytes(), &height, &width) || height <= 0 || width <= 0 ||
        height * width > decode_->options().max_pixels) {
      return Unfused(ctx, in, out);  // PNG, WebP, or the unfused decode's own error
    }
    CropBox region{0, 0, height, width};
    int64_t out_h, out_w;
    Interpolation interpolation;
    bool antialias;
    if (random_crop_ != nullptr) {
      RowContext crop_ctx = ctx;
      crop_ctx.op_index = ctx.op_index + 1;
      region = random_crop_->DrawBox(crop_ctx, height, width);
      out_h = random_crop_->size()[0];
      out_w = random_crop_->size()[1];
      interpolation = random_crop_->interpolation();
      antialias = random_crop_->antialias();
    } else {
      if (crop_ != nullptr) {
        region = crop_->Box(height, width);
        if (region.top < 0 || region.left < 0 || region.top + region.height > height ||
            region.left + region.width > width) {
          return Unfused(ctx, in, out);  // the crop pads
        }
      }
      resize_->OutputSize(region.height, region.width, &out_h, &out_w);
      interpolation = resize_->interpolation();
      antialias = resize_->antialias();
    }
    const int64_t shrink = std::min(region.height / out_h, region.width / out_w);
    int denominator = 0;
    for (int candidate : {8, 4, 2}) {
      if (decode_->dct_scaling() && shrink >= candidate && ScaleSupported(candidate)) {
        denominator = candidate;
        break;
      }
    }
    if (denominator == 0) {
      if (region.height == height && region.width == width) return Unfused(ctx, in, out);
      return RegionThenResize(in, region, out_h, out_w, interpolation, antialias, ctx, out);
    }
    ImageDecodeOptions options = decode_->options();
    options.scale_denominator = denominator;
    thread_local Value decoded;
    const TrimScratch trim{&decoded};
    STOKER_RETURN_NOT_OK(DecodeImage(in.bytes(), options, &decoded));
    const double d = denominator;
    const ResizeBox box{region.left / d, region.top / d, (region.left + region.width) / d,
                        (region.top + region.height) / d};
    const int channels = static_cast<int>(decoded.shape()[2]);
    uint8_t* dst = out->Allocate(ElementType::kUInt8, {out_h, out_w, channels});
    ResizeImageBox(decoded.data(), decoded.shape()[0], decoded.shape()[1], channels, 0, box, dst,
                   out_h, out_w, interpolation, antialias);
    return Status::OK();
  }

 private:
  // No DCT scaling: decode only the rows and columns the crop needs (DecodeJpegRegion), then the
  // same resize as the unfused op, over the same pixels: the unfused bytes.
  Status RegionThenResize(const Value& in, const CropBox& region, int64_t out_h, int64_t out_w,
                          Interpolation interpolation, bool antialias, const RowContext& ctx,
                          Value* out) const {
    thread_local Value window_pixels;
    const TrimScratch trim{&window_pixels};
    CropBox window;
    const Status status =
        DecodeJpegRegion(in.bytes(), decode_->options(), region, &window_pixels, &window);
    if (status.IsNotImplemented()) return Unfused(ctx, in, out);
    STOKER_RETURN_NOT_OK(status);
    const int channels = static_cast<int>(window_pixels.shape()[2]);
    const int64_t stride = window.width * channels;
    const uint8_t* src = window_pixels.data() + (region.top - window.top) * stride +
                         (region.left - window.left) * channels;
    uint8_t* dst = out->Allocate(ElementType::kUInt8, {out_h, out_w, channels});
    ResizeImage(src, region.height, region.width, channels, dst, out_h, out_w, interpolation,
                antialias, stride);
    return Status::OK();
  }

  static bool ScaleSupported(int denominator) {
    static const bool supported[9] = {
        false, false, JpegScaleSupported(2), false, JpegScaleSupported(4), false,
        false, false, JpegScaleSupported(8)};
    return supported[denominator];
  }

  // The ops one after the other, exactly as Chain::Apply would run them.
  Status Unfused(const RowContext& ctx, const Value& in, Value* out) const {
    thread_local Value decoded, cropped;
    const TrimScratch trim_decoded{&decoded}, trim_cropped{&cropped};
    RowContext op_ctx = ctx;
    STOKER_RETURN_NOT_OK(decode_->Apply(op_ctx, in, &decoded));
    op_ctx.op_index = ctx.op_index + 1;
    if (random_crop_ != nullptr) return random_crop_->Apply(op_ctx, decoded, out);
    if (crop_ == nullptr) return resize_->Apply(op_ctx, decoded, out);
    STOKER_RETURN_NOT_OK(crop_->Apply(op_ctx, decoded, &cropped));
    op_ctx.op_index = ctx.op_index + 2;
    return resize_->Apply(op_ctx, cropped, out);
  }

  const DecodeImageOp* decode_;
  const CenterCropOp* crop_;
  const ResizeOp* resize_;
  const RandomResizedCropOp* random_crop_;
};

Result<std::vector<double>> ReadRange(ParamReader* params, const char* name,
                                      std::vector<double> fallback, bool positive) {
  STOKER_ASSIGN_OR_RAISE(auto range, params->DoubleList(name, fallback));
  if (range.size() != 2 || range[0] > range[1] || (positive && range[0] <= 0)) {
    return params->Error(name, positive ? "must be [low, high] with 0 < low <= high"
                                        : "must be [low, high] with low <= high");
  }
  return range;
}

}  // namespace

Result<std::unique_ptr<Op>> MakeDecodeImage(ParamReader* params) {
  ImageDecodeOptions options;
  STOKER_ASSIGN_OR_RAISE(std::string mode, params->String("mode", "RGB"));
  if (mode == "L") {
    options.channels = 1;
  } else if (mode == "RGB") {
    options.channels = 3;
  } else if (mode == "RGBA") {
    options.channels = 4;
  } else {
    return params->Error("mode", "must be \"L\", \"RGB\" or \"RGBA\", got \"" + mode + "\"");
  }
  STOKER_ASSIGN_OR_RAISE(options.apply_exif, params->Bool("exif", false));
  if (params->Has("draft")) {
    STOKER_ASSIGN_OR_RAISE(auto draft, ReadSize(params, "draft"));
    draft = SquareOf(draft);
    options.min_height = draft[0];
    options.min_width = draft[1];
  } else {
    STOKER_RETURN_NOT_OK(params->Raw("draft", ParamValue()).status());
  }
  STOKER_ASSIGN_OR_RAISE(options.max_pixels, params->Int("max_pixels", int64_t{1} << 28));
  if (options.max_pixels <= 0) return params->Error("max_pixels", "must be positive");
  std::vector<int64_t> size;
  if (params->Has("shape")) {
    STOKER_ASSIGN_OR_RAISE(size, params->IntList("shape", std::nullopt));
    if (size.size() != 2 || size[0] <= 0 || size[1] <= 0) {
      return params->Error("shape", "must be [height, width] with positive sizes");
    }
    if (options.min_height > 0) {
      return params->Error("shape", "cannot be combined with draft");
    }
  } else {
    STOKER_RETURN_NOT_OK(params->Raw("shape", ParamValue()).status());
  }
  STOKER_ASSIGN_OR_RAISE(bool dct_scaling, params->Bool("dct_scaling", true));
  return std::make_unique<DecodeImageOp>(*params, options, std::move(size), dct_scaling);
}

Result<std::unique_ptr<Op>> MakeResize(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(auto size, ReadSize(params));
  STOKER_ASSIGN_OR_RAISE(Interpolation interpolation, ReadInterpolation(params));
  STOKER_ASSIGN_OR_RAISE(bool antialias, params->Bool("antialias", true));
  return std::make_unique<ResizeOp>(*params, size, interpolation, antialias);
}

Result<std::unique_ptr<Op>> MakeCenterCrop(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(auto size, ReadSize(params));
  return std::make_unique<CenterCropOp>(*params, SquareOf(size));
}

Result<std::unique_ptr<Op>> MakeRandomCrop(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(auto size, ReadSize(params));
  return std::make_unique<RandomCropOp>(*params, SquareOf(size));
}

Result<std::unique_ptr<Op>> MakeRandomResizedCrop(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(auto size, ReadSize(params));
  STOKER_ASSIGN_OR_RAISE(auto scale, ReadRange(params, "scale", {0.08, 1.0}, true));
  if (scale[1] > 1.0) return params->Error("scale", "must lie in (0, 1]");
  STOKER_ASSIGN_OR_RAISE(auto ratio, ReadRange(params, "ratio", {3.0 / 4.0, 4.0 / 3.0}, true));
  STOKER_ASSIGN_OR_RAISE(Interpolation interpolation, ReadInterpolation(params));
  STOKER_ASSIGN_OR_RAISE(bool antialias, params->Bool("antialias", true));
  return std::make_unique<RandomResizedCropOp>(*params, SquareOf(size), scale, ratio, interpolation,
                                               antialias);
}

Result<std::unique_ptr<Op>> MakeFlip(ParamReader* params, bool horizontal) {
  STOKER_ASSIGN_OR_RAISE(double p, params->Double("p", 0.5));
  if (p < 0.0 || p > 1.0) return params->Error("p", "must lie in [0, 1]");
  return std::make_unique<FlipOp>(*params, horizontal, p);
}

Result<std::unique_ptr<Op>> MakeHorizontalFlip(ParamReader* params) {
  return MakeFlip(params, true);
}

Result<std::unique_ptr<Op>> MakeVerticalFlip(ParamReader* params) {
  return MakeFlip(params, false);
}

Result<std::unique_ptr<Op>> MakePad(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(auto padding, params->IntList("padding", std::nullopt, true));
  if (padding.size() == 1) {
    padding = {padding[0], padding[0], padding[0], padding[0]};
  } else if (padding.size() == 2) {
    padding = {padding[0], padding[1], padding[0], padding[1]};
  } else if (padding.size() != 4) {
    return params->Error("padding",
                         "must be an int, [left/right, top/bottom] or "
                         "[left, top, right, bottom]");
  }
  for (int64_t value : padding) {
    if (value < 0 || value > (1 << 16)) return params->Error("padding", "must be non-negative");
  }
  STOKER_ASSIGN_OR_RAISE(auto fill, params->IntList("fill", std::vector<int64_t>{0}, true));
  if (fill.empty()) return params->Error("fill", "must not be empty");
  for (int64_t value : fill) {
    if (value < 0 || value > 255) return params->Error("fill", "must hold values in [0, 255]");
  }
  STOKER_ASSIGN_OR_RAISE(std::string mode_name, params->String("mode", "constant"));
  PadMode mode;
  if (mode_name == "constant") {
    mode = PadMode::kConstant;
  } else if (mode_name == "edge") {
    mode = PadMode::kEdge;
  } else if (mode_name == "reflect") {
    mode = PadMode::kReflect;
  } else {
    return params->Error("mode", "must be \"constant\", \"edge\" or \"reflect\"");
  }
  return std::make_unique<PadOp>(*params, padding, fill, mode);
}

Result<std::unique_ptr<Op>> MakeNormalize(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(auto mean, params->DoubleList("mean", std::nullopt, true));
  STOKER_ASSIGN_OR_RAISE(auto std, params->DoubleList("std", std::nullopt, true));
  if (mean.empty() || std.empty() ||
      (mean.size() != std.size() && mean.size() != 1 && std.size() != 1)) {
    return params->Error("std", "must have as many values as 'mean' (or one)");
  }
  for (double s : std) {
    if (s == 0.0) return params->Error("std", "must not contain 0");
  }
  STOKER_ASSIGN_OR_RAISE(double scale, params->Double("scale", 1.0 / 255.0));
  STOKER_ASSIGN_OR_RAISE(std::string dtype_name, params->String("dtype", "float32"));
  const auto dtype = ParseElementType(dtype_name);
  if (!dtype || (*dtype != ElementType::kFloat32 && *dtype != ElementType::kFloat16 &&
                 *dtype != ElementType::kBFloat16)) {
    return params->Error("dtype", "must be \"float32\", \"float16\" or \"bfloat16\"");
  }
  return std::make_unique<NormalizeOp>(*params, mean, std, scale, *dtype);
}

Result<std::unique_ptr<Op>> MakeToChw(ParamReader* params) {
  return std::make_unique<ToChwOp>(*params);
}

std::unique_ptr<Op> FuseImageOps(const std::vector<std::unique_ptr<Op>>& ops, size_t first,
                                 size_t* count) {
  const auto* decode = dynamic_cast<const DecodeImageOp*>(ops[first].get());
  if (decode == nullptr || !decode->Fusable() || first + 1 >= ops.size()) return nullptr;
  const Op* next = ops[first + 1].get();
  if (const auto* random_crop = dynamic_cast<const RandomResizedCropOp*>(next)) {
    *count = 2;
    return std::make_unique<FusedDecodeResizeOp>(decode, nullptr, nullptr, random_crop);
  }
  if (const auto* resize = dynamic_cast<const ResizeOp*>(next)) {
    *count = 2;
    return std::make_unique<FusedDecodeResizeOp>(decode, nullptr, resize, nullptr);
  }
  const auto* crop = dynamic_cast<const CenterCropOp*>(next);
  if (crop != nullptr && first + 2 < ops.size()) {
    if (const auto* resize = dynamic_cast<const ResizeOp*>(ops[first + 2].get())) {
      *count = 3;
      return std::make_unique<FusedDecodeResizeOp>(decode, crop, resize, nullptr);
    }
  }
  return nullptr;
}

}  // namespace stoker::transform::internal
