// Pixel kernels: Pillow's resampler (libImaging/Resample.c) and torchvision's random-resized-crop
// sampling rule.
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
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

// The source span [in0, in1) (Pillow's box, fractional) of `in_size` inputs maps onto `out_size`
// outputs; taps are clamped to [0, in_size) like Pillow's.
Coefficients Precompute(int64_t in_size, double in0, double in1, int64_t out_size,
                        Interpolation interpolation, bool antialias) {
  const double support_unit = interpolation == Interpolation::kBilinear ? 1.0 : 0.5;
  double (*filter)(double) = interpolation == Interpolation::kBilinear ? BilinearFilter : BoxFilter;
  const double scale = (in1 - in0) / static_cast<double>(out_size);
  const double filter_scale = antialias ? std::max(scale, 1.0) : 1.0;
  const double support = support_unit * filter_scale;
  Coefficients c;
  c.taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.weights.assign(out_size * c.taps, 0);
  std::vector<double> k(c.taps);
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filter_scale;
    // Pillow's resample.c rounds the window's ends this way (truncation, then clamped): kept for
    // bit-exact parity with Pillow.
    int64_t xmin =
        static_cast<int64_t>(center - support + 0.5);  // NOLINT(bugprone-incorrect-roundings)
    if (xmin < 0) xmin = 0;
    int64_t xmax =
        static_cast<int64_t>(center + support + 0.5);  // NOLINT(bugprone-incorrect-roundings)
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
// Output pixels [begin, end) only, so the SIMD rows can hand their right edge to it.
template <int C>
void HorizontalRow(const uint8_t* in, uint8_t* out, const Coefficients& c, int64_t begin,
                   int64_t end) {
  const int32_t* weights = c.weights.data();
  for (int64_t xx = begin; xx < end; ++xx) {
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

// The SIMD horizontal row (x86-64, SSE4.1): the same int32 multiply-adds as HorizontalRow, one
// pixel's channels in the four lanes, so the sums (and the bytes) are identical. A pixel's
// channels are loaded as 4 bytes (RGB reads one byte of the next pixel, whose lane is dropped), so
// output pixels whose loads would pass the end of the row go to the scalar row. (An AVX2 row of
// two taps per step measured 3x slower than this one on the AMD EPYC it was tried on, and was
// dropped; the vertical pass gained nothing measurable from an AVX2 copy.)
#if defined(__x86_64__)

// pmaddwd multiplies 16-bit numbers, so a pair of int32 weights (k0, k1) is split into 11-bit
// halves (k = hi * 2048 + lo, 0 <= lo < 2048) and packed as two 32-bit lanes (k1's half << 16 |
// k0's half): sum_hi * 2048 + sum_lo is then the exact int32 sum of the scalar passes.
struct SplitPair {
  int32_t high, low;
};
inline SplitPair SplitWeights(int32_t k0, int32_t k1) {
  const int32_t h0 = k0 >> 11, h1 = k1 >> 11;
  const int32_t l0 = k0 - h0 * 2048, l1 = k1 - h1 * 2048;
  auto pack = [](int32_t first, int32_t second) {
    return static_cast<int32_t>((static_cast<uint32_t>(second) << 16) |
                                (static_cast<uint32_t>(first) & 0xFFFF));
  };
  return {pack(h0, h1), pack(l0, l1)};
}

// Output pixels [0, result) whose taps (rounded up to `group` taps, read `load` bytes per tap
// group) stay inside a row of `in_width` pixels.
template <int C>
int64_t SimdSafeEnd(const Coefficients& c, int64_t out_width, int64_t in_width, int group,
                    int load) {
  int64_t end = out_width;
  while (end > 0) {
    const int64_t xx = end - 1;
    const int64_t taps = (c.count[xx] + group - 1) / group * group;
    const int64_t last_group = c.first[xx] + taps - group;
    if (c.count[xx] == 0 || last_group * C + load <= in_width * C) break;
    --end;
  }
  return end;
}

// Pillow's clip8 on four int32 sums: >> 22, then saturate to [0, 255] (packs to int16 cannot
// saturate first: the shifted sums lie within about [-512, 512]).
__attribute__((target("sse4.1"))) inline uint32_t Pack4(__m128i sum) {
  const __m128i shifted = _mm_srai_epi32(sum, kPrecisionBits);
  const __m128i words = _mm_packs_epi32(shifted, shifted);
  return static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_packus_epi16(words, words)));
}

template <int C>
__attribute__((target("sse4.1"))) void HorizontalRowSse41(const uint8_t* in, uint8_t* out,
                                                          const Coefficients& c, int64_t out_width,
                                                          int64_t in_width) {
  static_assert(C == 3 || C == 4);
  const int64_t safe = SimdSafeEnd<C>(c, out_width, in_width, 1, 4);
  const int32_t* weights = c.weights.data();
  for (int64_t xx = 0; xx < safe; ++xx) {
    const int32_t* k = weights + xx * c.taps;
    const uint8_t* p = in + c.first[xx] * C;
    const int64_t n = c.count[xx];
    __m128i sum = _mm_set1_epi32(kHalf);
    for (int64_t x = 0; x < n; ++x) {
      int32_t pixel;
      std::memcpy(&pixel, p + x * C, 4);
      const __m128i wide = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(pixel));
      sum = _mm_add_epi32(sum, _mm_mullo_epi32(wide, _mm_set1_epi32(k[x])));
    }
    const uint32_t packed = Pack4(sum);
    std::memcpy(out + xx * C, &packed, C);
  }
  HorizontalRow<C>(in, out, c, safe, out_width);
}

// Two taps per step with pmaddwd: a pixel pair's channels shuffled into 16-bit lanes
// [c0 of tap x, c0 of tap x+1, c1 ..., c1 ..., ...] times the pair's SplitWeights (exact int32
// sums, so the scalar bytes). Each step
// loads 8 bytes (two RGB pixels and two bytes past them, or two RGBA pixels); an odd last tap
// is paired with a zero weight. `high`/`low` hold the split weights per output pixel and pair.
template <int C>
__attribute__((target("sse4.1"))) void HorizontalRowPairs(const uint8_t* in, uint8_t* out,
                                                          const Coefficients& c,
                                                          const int32_t* high, const int32_t* low,
                                                          int64_t pairs, int64_t out_width,
                                                          int64_t in_width) {
  static_assert(C == 3 || C == 4);
  const int64_t safe = SimdSafeEnd<C>(c, out_width, in_width, 2, 8);
  const __m128i shuffle =
      C == 3 ? _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1)
             : _mm_setr_epi8(0, -1, 4, -1, 1, -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1);
  const __m128i half = _mm_set1_epi32(kHalf);
  for (int64_t xx = 0; xx < safe; ++xx) {
    const uint8_t* p = in + c.first[xx] * C;
    const int64_t steps = (c.count[xx] + 1) / 2;
    const int32_t* h = high + xx * pairs * 4;
    const int32_t* l = low + xx * pairs * 4;
    __m128i sum_high = _mm_setzero_si128(), sum_low = _mm_setzero_si128();
    for (int64_t s = 0; s < steps; ++s) {
      const __m128i pixels = _mm_shuffle_epi8(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 2 * s * C)), shuffle);
      const __m128i wh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 4 * s));
      const __m128i wl = _mm_loadu_si128(reinterpret_cast<const __m128i*>(l + 4 * s));
      sum_high = _mm_add_epi32(sum_high, _mm_madd_epi16(pixels, wh));
      sum_low = _mm_add_epi32(sum_low, _mm_madd_epi16(pixels, wl));
    }
    const __m128i sum = _mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(sum_high, 11), sum_low), half);
    const uint32_t packed = Pack4(sum);
    std::memcpy(out + xx * C, &packed, C);
  }
  HorizontalRow<C>(in, out, c, safe, out_width);
}

// The split pair weights HorizontalRowPairs reads, per output pixel: ceil(taps / 2) pairs, each
// a 16-byte vector of four copies of (hi or lo of the second tap << 16 | that of the first).
void SplitPairWeights(const Coefficients& c, int64_t out_width, std::vector<int32_t>* high,
                      std::vector<int32_t>* low) {
  const int64_t pairs = (c.taps + 1) / 2;
  high->resize(out_width * pairs * 4);
  low->resize(out_width * pairs * 4);
  for (int64_t xx = 0; xx < out_width; ++xx) {
    const int32_t* k = c.weights.data() + xx * c.taps;
    for (int64_t s = 0; s < pairs; ++s) {
      const int64_t x0 = 2 * s, x1 = 2 * s + 1;
      const SplitPair split =
          SplitWeights(x0 < c.count[xx] ? k[x0] : 0, x1 < c.count[xx] ? k[x1] : 0);
      std::fill_n(high->data() + (xx * pairs + s) * 4, 4, split.high);
      std::fill_n(low->data() + (xx * pairs + s) * 4, 4, split.low);
    }
  }
}

#endif  // __x86_64__

std::atomic<int> g_simd_override{-1};

SimdLevel DetectSimdLevel() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("sse4.1")) return SimdLevel::kSse41;
#endif
  return SimdLevel::kScalar;
}

template <int C>
void HorizontalRowBest(SimdLevel level, const uint8_t* in, uint8_t* out, const Coefficients& c,
                       int64_t out_width, int64_t in_width) {
#if defined(__x86_64__)
  if constexpr (C == 3 || C == 4) {
    if (level >= SimdLevel::kSse41) return HorizontalRowSse41<C>(in, out, c, out_width, in_width);
  }
#endif
  (void)level;
  (void)in_width;
  HorizontalRow<C>(in, out, c, 0, out_width);
}

void HorizontalPass(const uint8_t* src, int64_t src_stride, int64_t rows, int channels,
                    const Coefficients& c, int64_t in_width, int64_t out_width, uint8_t* dst) {
  const int64_t dst_stride = out_width * channels;
  const SimdLevel level = ActiveSimdLevel();
#if defined(__x86_64__)
  if (level >= SimdLevel::kSse41 && (channels == 3 || channels == 4) && c.taps <= 64) {
    thread_local std::vector<int32_t> high, low;
    SplitPairWeights(c, out_width, &high, &low);
    const int64_t pairs = (c.taps + 1) / 2;
    for (int64_t y = 0; y < rows; ++y) {
      const uint8_t* in = src + y * src_stride;
      uint8_t* out = dst + y * dst_stride;
      if (channels == 3) {
        HorizontalRowPairs<3>(in, out, c, high.data(), low.data(), pairs, out_width, in_width);
      } else {
        HorizontalRowPairs<4>(in, out, c, high.data(), low.data(), pairs, out_width, in_width);
      }
    }
    return;
  }
#endif
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* in = src + y * src_stride;
    uint8_t* out = dst + y * dst_stride;
    switch (channels) {
      case 1:
        HorizontalRowBest<1>(level, in, out, c, out_width, in_width);
        break;
      case 3:
        HorizontalRowBest<3>(level, in, out, c, out_width, in_width);
        break;
      case 4:
        HorizontalRowBest<4>(level, in, out, c, out_width, in_width);
        break;
      default:
        HorizontalRowAny(in, out, c, out_width, channels);
        break;
    }
  }
}

// Per-thread scratch larger than this is freed after the image, so that one huge image does not
// keep its buffers for the loader's lifetime.
constexpr size_t kKeepScratchBytes = size_t{64} << 20;

template <typename T>
struct TrimScratch {
  std::vector<T>* buffer;
  ~TrimScratch() {
    if (buffer->capacity() * sizeof(T) > kKeepScratchBytes) std::vector<T>().swap(*buffer);
  }
};

#if defined(__x86_64__)

// One output row of the vertical pass with SSE2's pmaddwd: 16 bytes at a time, two taps (rows)
// per multiply-add, on SplitWeights: the same int32 sums as the scalar pass, so the same bytes.
// (The compiler's vectorisation of the scalar loop multiplies int32 lanes with pmuludq shuffles on
// plain x86-64, several times slower.) Returns how many bytes it wrote; the rest is the caller's.
int64_t VerticalRowSse2(const uint8_t* rows, int64_t row_stride, int64_t row_bytes,
                        const int32_t* k, int64_t n, uint8_t* out) {
  constexpr int kMaxPairs = 64;
  const int64_t pairs = (n + 1) / 2;
  if (n <= 0 || pairs > kMaxPairs) return 0;
  __m128i high[kMaxPairs], low[kMaxPairs];
  const uint8_t* first[kMaxPairs];
  const uint8_t* second[kMaxPairs];
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t y0 = 2 * p, y1 = std::min(2 * p + 1, n - 1);
    const SplitPair split = SplitWeights(k[y0], 2 * p + 1 < n ? k[y1] : 0);
    high[p] = _mm_set1_epi32(split.high);
    low[p] = _mm_set1_epi32(split.low);
    first[p] = rows + y0 * row_stride;
    second[p] = rows + y1 * row_stride;
  }
  const __m128i zero = _mm_setzero_si128();
  const __m128i half = _mm_set1_epi32(kHalf);
  int64_t i = 0;
  for (; i + 16 <= row_bytes; i += 16) {
    __m128i sum_high[4] = {zero, zero, zero, zero};
    __m128i sum_low[4] = {zero, zero, zero, zero};
    for (int64_t p = 0; p < pairs; ++p) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(first[p] + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(second[p] + i));
      const __m128i ab_low = _mm_unpacklo_epi8(a, b), ab_high = _mm_unpackhi_epi8(a, b);
      const __m128i words[4] = {_mm_unpacklo_epi8(ab_low, zero), _mm_unpackhi_epi8(ab_low, zero),
                                _mm_unpacklo_epi8(ab_high, zero), _mm_unpackhi_epi8(ab_high, zero)};
      for (int j = 0; j < 4; ++j) {
        sum_high[j] = _mm_add_epi32(sum_high[j], _mm_madd_epi16(words[j], high[p]));
        sum_low[j] = _mm_add_epi32(sum_low[j], _mm_madd_epi16(words[j], low[p]));
      }
    }
    __m128i sums[4];
    for (int j = 0; j < 4; ++j) {
      const __m128i sum =
          _mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(sum_high[j], 11), sum_low[j]), half);
      sums[j] = _mm_srai_epi32(sum, kPrecisionBits);
    }
    // Saturating packs: Clip8's clamp to [0, 255] (the shifted sums lie within int16).
    const __m128i bytes =
        _mm_packus_epi16(_mm_packs_epi32(sums[0], sums[1]), _mm_packs_epi32(sums[2], sums[3]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), bytes);
  }
  return i;
}

#endif  // __x86_64__

// The vertical pass, one output row at a time: the taps run outermost so the inner loop is a
// contiguous multiply-add over the whole row (the compiler vectorises it). With SIMD, the row's
// first multiple of 16 bytes goes to VerticalRowSse2 and the rest comes here.
void VerticalPass(const uint8_t* rows, int64_t row_stride, int64_t row_bytes, const Coefficients& c,
                  int64_t rows_offset, int64_t out_height, uint8_t* dst) {
#if defined(__x86_64__)
  const bool simd = ActiveSimdLevel() >= SimdLevel::kSse41;
#endif
  // Per thread, kept: a fresh buffer per image costs page faults and zeroing.
  thread_local std::vector<int32_t> acc;
  const TrimScratch<int32_t> trim{&acc};
  if (static_cast<int64_t>(acc.size()) < row_bytes) acc.resize(row_bytes);
  int32_t* a = acc.data();
  for (int64_t yy = 0; yy < out_height; ++yy) {
    const int32_t* k = &c.weights[yy * c.taps];
    const int64_t ymin = c.first[yy] - rows_offset, n = c.count[yy];
    uint8_t* out = dst + yy * row_bytes;
    int64_t done = 0;
#if defined(__x86_64__)
    if (simd) done = VerticalRowSse2(rows + ymin * row_stride, row_stride, row_bytes, k, n, out);
#endif
    const uint8_t* r0 = rows + ymin * row_stride;
    const int32_t k0 = n > 0 ? k[0] : 0;
    for (int64_t i = done; i < row_bytes; ++i) a[i] = kHalf + r0[i] * k0;
    for (int64_t y = 1; y < n; ++y) {
      const uint8_t* r = rows + (ymin + y) * row_stride;
      const int32_t ky = k[y];
      for (int64_t i = done; i < row_bytes; ++i) a[i] += r[i] * ky;
    }
    for (int64_t i = done; i < row_bytes; ++i) out[i] = Clip8(a[i]);
  }
}

}  // namespace

SimdLevel ActiveSimdLevel() {
  static const SimdLevel best = DetectSimdLevel();
  const int forced = g_simd_override.load(std::memory_order_relaxed);
  return forced < 0 ? best : std::min(best, static_cast<SimdLevel>(forced));
}

void SetSimdLevelForTesting(std::optional<SimdLevel> level) {
  g_simd_override.store(level ? static_cast<int>(*level) : -1, std::memory_order_relaxed);
}

void ResizeImageBox(const uint8_t* src, int64_t height, int64_t width, int channels,
                    int64_t src_stride, const ResizeBox& box, uint8_t* dst, int64_t out_height,
                    int64_t out_width, Interpolation interpolation, bool antialias) {
  if (src_stride == 0) src_stride = width * channels;
  const bool whole_width = box.left == 0.0 && box.right == static_cast<double>(width);
  const bool whole_height = box.top == 0.0 && box.bottom == static_cast<double>(height);
  const bool need_horizontal = out_width != width || !whole_width;
  const bool need_vertical = out_height != height || !whole_height;
  if (!need_horizontal && !need_vertical) {  // Pillow returns a copy
    for (int64_t y = 0; y < height; ++y) {
      std::memcpy(dst + y * width * channels, src + y * src_stride, width * channels);
    }
    return;
  }
  // Scratch per thread, kept across images (a fresh buffer per image costs page faults).
  thread_local std::vector<uint8_t> premultiplied, temp;
  const TrimScratch<uint8_t> trim_premultiplied{&premultiplied}, trim_temp{&temp};
  if (channels == 4) {
    if (static_cast<int64_t>(premultiplied.size()) < height * width * 4) {
      premultiplied.resize(height * width * 4);
    }
    for (int64_t y = 0; y < height; ++y) {
      std::memcpy(premultiplied.data() + y * width * 4, src + y * src_stride, width * 4);
    }
    Premultiply(premultiplied.data(), height * width);
    src = premultiplied.data();
    src_stride = width * 4;
  }
  if (!need_vertical) {  // one horizontal pass straight into dst
    const Coefficients horizontal =
        Precompute(width, box.left, box.right, out_width, interpolation, antialias);
    HorizontalPass(src, src_stride, height, channels, horizontal, width, out_width, dst);
  } else {
    const Coefficients vertical =
        Precompute(height, box.top, box.bottom, out_height, interpolation, antialias);
    // Like Pillow: the horizontal pass runs first, over the source rows the vertical pass reads.
    const int64_t row_first = vertical.first[0];
    const int64_t row_last = vertical.first[out_height - 1] + vertical.count[out_height - 1];
    const uint8_t* rows = src;
    int64_t rows_offset = 0;
    int64_t row_stride = src_stride;
    if (need_horizontal) {
      const Coefficients horizontal =
          Precompute(width, box.left, box.right, out_width, interpolation, antialias);
      const int64_t temp_size = (row_last - row_first) * out_width * channels;
      if (static_cast<int64_t>(temp.size()) < temp_size) temp.resize(temp_size);
      HorizontalPass(src + row_first * src_stride, src_stride, row_last - row_first, channels,
                     horizontal, width, out_width, temp.data());
      rows = temp.data();
      rows_offset = row_first;
      row_stride = out_width * channels;
    }
    VerticalPass(rows, row_stride, out_width * channels, vertical, rows_offset, out_height, dst);
  }
  if (channels == 4) Unpremultiply(dst, out_height * out_width);
}

void ResizeImage(const uint8_t* src, int64_t height, int64_t width, int channels, uint8_t* dst,
                 int64_t out_height, int64_t out_width, Interpolation interpolation, bool antialias,
                 int64_t src_stride) {
  const ResizeBox whole{0.0, 0.0, static_cast<double>(width), static_cast<double>(height)};
  ResizeImageBox(src, height, width, channels, src_stride, whole, dst, out_height, out_width,
                 interpolation, antialias);
}

// ------------------------------------------------------------------ flips and CHW for RGB bytes

namespace {

void MirrorRgbRowScalar(const uint8_t* in, uint8_t* out, int64_t begin, int64_t w) {
  for (int64_t x = begin; x < w; ++x) {
    std::memcpy(out + (w - 1 - x) * 3, in + x * 3, 3);
  }
}

#if defined(__x86_64__)
// Five pixels (15 bytes) per step, reversed by one shuffle and stored one byte early: the spare
// byte lands on a pixel that a later step (or the scalar tail) writes.
__attribute__((target("sse4.1"))) void MirrorRgbRowSse41(const uint8_t* in, uint8_t* out,
                                                         int64_t w) {
  const __m128i reverse = _mm_setr_epi8(-128, 12, 13, 14, 9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1, 2);
  int64_t x = 0;
  for (; x + 6 <= w; x += 5) {
    const __m128i pixels = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + x * 3));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (w - 5 - x) * 3 - 1),
                     _mm_shuffle_epi8(pixels, reverse));
  }
  MirrorRgbRowScalar(in, out, x, w);
}

// For each output plane, where its 16 bytes come from in the 48 bytes of 16 pixels.
struct DeinterleaveMasks {
  alignas(16) int8_t mask[3][3][16];  // [channel][source vector][byte]
  DeinterleaveMasks() {
    for (int ch = 0; ch < 3; ++ch) {
      for (int part = 0; part < 3; ++part) {
        for (int j = 0; j < 16; ++j) {
          const int byte = 3 * j + ch;
          mask[ch][part][j] = static_cast<int8_t>(byte / 16 == part ? byte % 16 : -128);
        }
      }
    }
  }
};

__attribute__((target("sse4.1"))) int64_t DeinterleaveRgbSse41(const uint8_t* src, uint8_t* dst,
                                                               int64_t count) {
  static const DeinterleaveMasks masks;
  const auto* m = reinterpret_cast<const __m128i*>(&masks.mask[0][0][0]);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const auto* p = reinterpret_cast<const __m128i*>(src + i * 3);
    const __m128i a = _mm_loadu_si128(p), b = _mm_loadu_si128(p + 1), c = _mm_loadu_si128(p + 2);
    for (int64_t ch = 0; ch < 3; ++ch) {
      const __m128i plane =
          _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, _mm_load_si128(m + ch * 3)),
                                    _mm_shuffle_epi8(b, _mm_load_si128(m + ch * 3 + 1))),
                       _mm_shuffle_epi8(c, _mm_load_si128(m + ch * 3 + 2)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + ch * count + i), plane);
    }
  }
  return i;
}
#endif

}  // namespace

void MirrorRgbRows(const uint8_t* src, uint8_t* dst, int64_t h, int64_t w) {
  const bool simd = ActiveSimdLevel() >= SimdLevel::kSse41;
  for (int64_t y = 0; y < h; ++y) {
    const uint8_t* in = src + y * w * 3;
    uint8_t* out = dst + y * w * 3;
#if defined(__x86_64__)
    if (simd) {
      MirrorRgbRowSse41(in, out, w);
      continue;
    }
#endif
    (void)simd;
    MirrorRgbRowScalar(in, out, 0, w);
  }
}

void DeinterleaveRgb(const uint8_t* src, uint8_t* dst, int64_t count) {
  int64_t i = 0;
#if defined(__x86_64__)
  if (ActiveSimdLevel() >= SimdLevel::kSse41) i = DeinterleaveRgbSse41(src, dst, count);
#endif
  for (; i < count; ++i) {
    for (int ch = 0; ch < 3; ++ch) dst[ch * count + i] = src[i * 3 + ch];
  }
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
