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

// The sums stay in int32 like Pillow's: the bilinear and box weights are non-negative and add up
// to about 1 << kPrecisionBits, so a sum is at most about 255 << kPrecisionBits (< 2^31).
// Branch-free (so loops over it vectorise) and equal to Pillow's clip8: >= 256 << kPrecisionBits
// gives 255, <= 0 gives 0.
inline uint8_t Clip8(int32_t value) {
  return static_cast<uint8_t>(std::clamp(value >> kPrecisionBits, 0, 255));
}

constexpr int32_t kHalf = int32_t{1} << (kPrecisionBits - 1);

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

// One row of the horizontal pass: `C` interleaved channels (a compile-time count for 1, 3 and 4).
template <int C>
void HorizontalRow(const uint8_t* in, uint8_t* out, const Coefficients& c, int64_t out_width) {
  const int32_t* weights = c.weights.data();
  for (int64_t xx = 0; xx < out_width; ++xx) {
    const int32_t* k = weights + xx * c.taps;
    const uint8_t* p = in + c.first[xx] * C;
    const int64_t n = c.count[xx];
    int32_t sum[C];
    for (int ch = 0; ch < C; ++ch) sum[ch] = kHalf;
    for (int64_t x = 0; x < n; ++x) {
      for (int ch = 0; ch < C; ++ch) sum[ch] += p[x * C + ch] * k[x];
    }
    for (int ch = 0; ch < C; ++ch) out[xx * C + ch] = Clip8(sum[ch]);
  }
}

void HorizontalRowAny(const uint8_t* in, uint8_t* out, const Coefficients& c, int64_t out_width,
                      int channels) {
  for (int64_t xx = 0; xx < out_width; ++xx) {
    const int32_t* k = &c.weights[xx * c.taps];
    const uint8_t* p = in + c.first[xx] * channels;
    const int64_t n = c.count[xx];
    for (int ch = 0; ch < channels; ++ch) {
      int32_t sum = kHalf;
      for (int64_t x = 0; x < n; ++x) sum += p[x * channels + ch] * k[x];
      out[xx * channels + ch] = Clip8(sum);
    }
  }
}

void HorizontalPass(const uint8_t* src, int64_t src_stride, int64_t rows, int channels,
                    const Coefficients& c, int64_t out_width, uint8_t* dst) {
  const int64_t dst_stride = out_width * channels;
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* in = src + y * src_stride;
    uint8_t* out = dst + y * dst_stride;
    switch (channels) {
      case 1:
        HorizontalRow<1>(in, out, c, out_width);
        break;
      case 3:
        HorizontalRow<3>(in, out, c, out_width);
        break;
      case 4:
        HorizontalRow<4>(in, out, c, out_width);
        break;
      default:
        HorizontalRowAny(in, out, c, out_width, channels);
        break;
    }
  }
}

// The vertical pass, one output row at a time: the taps run outermost so the inner loop is a
// contiguous multiply-add over the whole row (the compiler vectorises it).
void VerticalPass(const uint8_t* rows, int64_t row_stride, int64_t row_bytes, const Coefficients& c,
                  int64_t rows_offset, int64_t out_height, uint8_t* dst) {
  std::vector<int32_t> acc(row_bytes);
  int32_t* a = acc.data();
  for (int64_t yy = 0; yy < out_height; ++yy) {
    const int32_t* k = &c.weights[yy * c.taps];
    const int64_t ymin = c.first[yy] - rows_offset, n = c.count[yy];
    uint8_t* out = dst + yy * row_bytes;
    const uint8_t* r0 = rows + ymin * row_stride;
    const int32_t k0 = n > 0 ? k[0] : 0;
    for (int64_t i = 0; i < row_bytes; ++i) a[i] = kHalf + r0[i] * k0;
    for (int64_t y = 1; y < n; ++y) {
      const uint8_t* r = rows + (ymin + y) * row_stride;
      const int32_t ky = k[y];
      for (int64_t i = 0; i < row_bytes; ++i) a[i] += r[i] * ky;
    }
    for (int64_t i = 0; i < row_bytes; ++i) out[i] = Clip8(a[i]);
  }
}

}  // namespace

void ResizeImage(const uint8_t* src, int64_t height, int64_t width, int channels, uint8_t* dst,
                 int64_t out_height, int64_t out_width, Interpolation interpolation, bool antialias,
                 int64_t src_stride) {
  if (src_stride == 0) src_stride = width * channels;
  if (out_height == height && out_width == width) {  // Pillow returns a copy
    for (int64_t y = 0; y < height; ++y) {
      std::memcpy(dst + y * width * channels, src + y * src_stride, width * channels);
    }
    return;
  }
  std::vector<uint8_t> premultiplied;
  if (channels == 4) {
    premultiplied.resize(height * width * 4);
    for (int64_t y = 0; y < height; ++y) {
      std::memcpy(premultiplied.data() + y * width * 4, src + y * src_stride, width * 4);
    }
    Premultiply(premultiplied.data(), height * width);
    src = premultiplied.data();
    src_stride = width * 4;
  }
  const bool need_horizontal = out_width != width;
  const bool need_vertical = out_height != height;
  if (!need_vertical) {  // one horizontal pass straight into dst
    const Coefficients horizontal = Precompute(width, out_width, interpolation, antialias);
    HorizontalPass(src, src_stride, height, channels, horizontal, out_width, dst);
  } else {
    const Coefficients vertical = Precompute(height, out_height, interpolation, antialias);
    // Like Pillow: the horizontal pass runs first, over the source rows the vertical pass reads.
    const int64_t row_first = vertical.first[0];
    const int64_t row_last = vertical.first[out_height - 1] + vertical.count[out_height - 1];
    std::vector<uint8_t> temp;
    const uint8_t* rows = src;
    int64_t rows_offset = 0;
    int64_t row_stride = src_stride;
    if (need_horizontal) {
      const Coefficients horizontal = Precompute(width, out_width, interpolation, antialias);
      temp.resize((row_last - row_first) * out_width * channels);
      HorizontalPass(src + row_first * src_stride, src_stride, row_last - row_first, channels,
                     horizontal, out_width, temp.data());
      rows = temp.data();
      rows_offset = row_first;
      row_stride = out_width * channels;
    }
    VerticalPass(rows, row_stride, out_width * channels, vertical, rows_offset, out_height, dst);
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
