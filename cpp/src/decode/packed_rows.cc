#include "decode/packed_rows.h"

#include <algorithm>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace stoker {
namespace {

// Rows [begin, end) of `kColumns` adjacent columns of `kWidth` bytes (16 bytes of a row in all)
// into `out` (row 0's first of them; `row_bytes` apart): as many rows as a register holds are
// transposed in registers, so each row takes one 16-byte store instead of strided scalar ones
// (the scalar packing was 10% of a shuffled cold epoch of 48 columns). Shuffles move bits: every
// value is exact.
template <int kWidth>
void PackSixteen(const uint8_t* const* columns, int64_t row_bytes, int64_t begin, int64_t end,
                 uint8_t* out) {
  constexpr int kColumns = 16 / kWidth;
  int64_t r = begin;
#if defined(__SSE2__)
  static_assert(kWidth == 4 || kWidth == 8);
  auto load = [&](int c) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(columns[c] + r * kWidth));
  };
  auto store = [&](int64_t row, __m128i v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + row * row_bytes), v);
  };
  for (; r + kColumns <= end; r += kColumns) {
    if constexpr (kWidth == 8) {
      const __m128i a = load(0);  // a[r], a[r + 1]
      const __m128i b = load(1);
      store(r, _mm_unpacklo_epi64(a, b));
      store(r + 1, _mm_unpackhi_epi64(a, b));
    } else {
      const __m128i a = load(0), b = load(1), c = load(2), d = load(3);
      const __m128i ab_lo = _mm_unpacklo_epi32(a, b);  // a0 b0 a1 b1
      const __m128i ab_hi = _mm_unpackhi_epi32(a, b);  // a2 b2 a3 b3
      const __m128i cd_lo = _mm_unpacklo_epi32(c, d);
      const __m128i cd_hi = _mm_unpackhi_epi32(c, d);
      store(r, _mm_unpacklo_epi64(ab_lo, cd_lo));
      store(r + 1, _mm_unpackhi_epi64(ab_lo, cd_lo));
      store(r + 2, _mm_unpacklo_epi64(ab_hi, cd_hi));
      store(r + 3, _mm_unpackhi_epi64(ab_hi, cd_hi));
    }
  }
#endif
  for (; r < end; ++r) {
    for (int c = 0; c < kColumns; ++c) {
      CopyWidth<kWidth>(columns[c] + r * kWidth, out + r * row_bytes + int64_t{c} * kWidth);
    }
  }
}

}  // namespace

void PackRows(const PackedRun& run, const uint8_t* const* values, int64_t rows, uint8_t* out) {
  // A block of packed rows stays in cache while each column fills its part of them.
  constexpr int64_t kBlockRows = 64;
  for (int64_t begin = 0; begin < rows; begin += kBlockRows) {
    const int64_t end = std::min(rows, begin + kBlockRows);
    for (int c = 0; c < run.count;) {
      // Adjacent columns of one width that fill 16 bytes of a row (their offsets follow on).
      const int width = run.widths[c];
      const int group = 16 / width;
      if ((width == 4 || width == 8) && c + group <= run.count &&
          std::all_of(run.widths.begin() + c, run.widths.begin() + c + group,
                      [&](int w) { return w == width; })) {
        if (width == 8) {
          PackSixteen<8>(values + c, run.row_bytes, begin, end, out + run.offsets[c]);
        } else {
          PackSixteen<4>(values + c, run.row_bytes, begin, end, out + run.offsets[c]);
        }
        c += group;
        continue;
      }
      uint8_t* to = out + run.offsets[c];
      VisitWidth(width, [&](auto w) {
        constexpr int kWidth = decltype(w)::value;
        for (int64_t r = begin; r < end; ++r) {
          CopyWidth<kWidth>(values[c] + r * kWidth, to + r * run.row_bytes);
        }
      });
      ++c;
    }
  }
}

}  // namespace stoker
