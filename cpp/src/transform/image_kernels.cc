// Pixel kernels: Pillow's resampler (libImaging/Resample.c) and torchvision's random-resized-crop
// sampling rule.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "transform/image.h"
#include "transform/op.h"

namespace stoker::transform {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's PRECISION_BITS

double BilinearFilter(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

double BoxFilter(double x) { return x > -0.5 && x <= 0.5 ? 1.0 : 0.0; }

// Pillow's precompute_coeffs + normalize_coeffs_8bpc: for each output index, the first input index
// and the fixed-point weights of the inputs it reads.
struct Coefficients {
  int64_t taps = 0;
  std::vector<int64_t> first;    // per output: first input index
  std::vector<int64_t> count;    // per output: number of inputs
  std::vector<int32_t> weights;  // per output: `taps` weights
};

Coefficients Precompute(int64_t in_size, int64_t out_size, Interpolation interpolation,
                        bool antialias) {
  const double support_unit = interpolation == Interpolation::kBilinear ? 1.0 : 0.5;
  double (*filter)(double) = interpolation == Interpolation::kBilinear ? BilinearFilter : BoxFilter;
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filter_scale = antialias ? std::max(scale, 1.0) : 1.0;
  const double support = support_unit * filter_scale;
  Coefficients c;
  c.taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.weights.assign(out_size * c.taps, 0);
  std::vector<double> k(c.taps);
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filter_scale;
    int64_t xmin = static_cast<int64_t>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int64_t xmax = static_cast<int64_t>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double total = 0.0;
    for (int64_t x = 0; x < xmax; ++x) {
      k[x] = filter((x + xmin - center + 0.5) * ss);
      total += k[x];
    }
    for (int64_t x = 0; x < xmax; ++x) {
      const double w = total != 0.0 ? k[x] / total : k[x];
      c.weights[xx * c.taps + x] = static_cast<int32_t>(w < 0 ? -0.5 + w * (1 << kPrecisionBits)
                                                              : 0.5 + w * (1 << kPrecisionBits));
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

inline uint8_t Clip8(int64_t value) {
  if (value >= (int64_t{1} << kPrecisionBits << 8)) return 255;
  if (value <= 0) return 0;
  return static_cast<uint8_t>(value >> kPrecisionBits);
}

// Pillow's RGBA -> RGBa and back, used around the resampler for 4-channel images.
void Premultiply(uint8_t* pixels, int64_t count) {
  for (int64_t i = 0; i < count; ++i, pixels += 4) {
    const unsigned alpha = pixels[3];
    for (int ch = 0; ch < 3; ++ch) {
      const unsigned tmp = pixels[ch] * alpha + 128;
      pixels[ch] = static_cast<uint8_t>(((tmp >> 8) + tmp) >> 8);
    }
  }
}

void Unpremultiply(uint8_t* pixels, int64_t count) {
  for (int64_t i = 0; i < count; ++i, pixels += 4) {
    const unsigned alpha = pixels[3];
    if (alpha == 255 || alpha == 0) continue;
    for (int ch = 0; ch < 3; ++ch) {
      pixels[ch] = static_cast<uint8_t>(std::min(255u, (255u * pixels[ch]) / alpha));
    }
  }
}

}  // namespace

void ResizeImage(const uint8_t* src, int64_t height, int64_t width, int channels, uint8_t* dst,
                 int64_t out_height, int64_t out_width, Interpolation interpolation,
                 bool antialias) {
  if (out_height == height && out_width == width) {  // Pillow returns a copy
    std::memcpy(dst, src, height * width * channels);
    return;
  }
  std::vector<uint8_t> premultiplied;
  if (channels == 4) {
    premultiplied.assign(src, src + height * width * 4);
    Premultiply(premultiplied.data(), height * width);
    src = premultiplied.data();
  }
  const Coefficients horizontal = Precompute(width, out_width, interpolation, antialias);
  Coefficients vertical = Precompute(height, out_height, interpolation, antialias);
  const bool need_horizontal = out_width != width;
  const bool need_vertical = out_height != height;
  // Like Pillow: the horizontal pass runs first, over the source rows the vertical pass reads.
  const int64_t row_first = vertical.first[0];
  const int64_t row_last = vertical.first[out_height - 1] + vertical.count[out_height - 1];
  std::vector<uint8_t> temp;
  const uint8_t* rows = src;
  int64_t rows_offset = 0;
  if (need_horizontal) {
    temp.resize((row_last - row_first) * out_width * channels);
    for (int64_t y = row_first; y < row_last; ++y) {
      const uint8_t* in = src + y * width * channels;
      uint8_t* out = temp.data() + (y - row_first) * out_width * channels;
      for (int64_t xx = 0; xx < out_width; ++xx) {
        const int32_t* k = &horizontal.weights[xx * horizontal.taps];
        const int64_t xmin = horizontal.first[xx], xmax = horizontal.count[xx];
        for (int ch = 0; ch < channels; ++ch) {
          int64_t sum = int64_t{1} << (kPrecisionBits - 1);
          for (int64_t x = 0; x < xmax; ++x) sum += in[(x + xmin) * channels + ch] * int64_t{k[x]};
          out[xx * channels + ch] = Clip8(sum);
        }
      }
    }
    rows = temp.data();
    rows_offset = row_first;
  }
  const int64_t row_width = need_horizontal ? out_width : width;
  if (need_vertical) {
    for (int64_t yy = 0; yy < out_height; ++yy) {
      const int32_t* k = &vertical.weights[yy * vertical.taps];
      const int64_t ymin = vertical.first[yy] - rows_offset, ymax = vertical.count[yy];
      uint8_t* out = dst + yy * out_width * channels;
      for (int64_t xc = 0; xc < row_width * channels; ++xc) {
        int64_t sum = int64_t{1} << (kPrecisionBits - 1);
        for (int64_t y = 0; y < ymax; ++y) {
          sum += rows[(y + ymin) * row_width * channels + xc] * int64_t{k[y]};
        }
        out[xc] = Clip8(sum);
      }
    }
  } else {
    std::memcpy(dst, rows, out_height * out_width * channels);
  }
  if (channels == 4) Unpremultiply(dst, out_height * out_width);
}

CropBox RandomResizedCropBox(int64_t height, int64_t width, double scale_min, double scale_max,
                             double ratio_min, double ratio_max, PhiloxStream* stream) {
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_ratio_min = std::log(ratio_min), log_ratio_max = std::log(ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * (scale_min + (scale_max - scale_min) * UniformDouble(stream));
    const double aspect =
        std::exp(log_ratio_min + (log_ratio_max - log_ratio_min) * UniformDouble(stream));
    // Python's round() rounds half to even, as nearbyint does in the default rounding mode.
    const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(target_area * aspect)));
    const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(target_area / aspect)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const auto top = static_cast<int64_t>(stream->Below(height - h + 1));
      const auto left = static_cast<int64_t>(stream->Below(width - w + 1));
      return {top, left, h, w};
    }
  }
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < ratio_min) {
    h = static_cast<int64_t>(std::nearbyint(w / ratio_min));
  } else if (in_ratio > ratio_max) {
    w = static_cast<int64_t>(std::nearbyint(h * ratio_max));
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

}  // namespace stoker::transform
