// Feature columns into a row-major [rows, F] matrix: the transpose both the batch builder
// (FeaturesWriter::Prepare) and the tensor cache's blocks (BuildBlocks) run on every row group.
//
// Thread safety: stateless.
#pragma once

#include <cstdint>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

namespace stoker {

/// Rows per block of a feature transpose: a block of the [rows, F] matrix stays in L1/L2 while
/// every feature column writes into it (one pass per column over all rows would evict and
/// refetch each matrix line F times).
constexpr int64_t kFeatureBlockRows = 64;

/// Rows [begin, end) of four 4-byte feature columns into matrix columns 0..3 of `out` (`stride`
/// elements per matrix row). Four rows at a time are transposed in registers, so each row takes
/// one 16-byte store instead of four strided 4-byte ones: the scalar transpose was 12% of a cold
/// epoch of 300 float features. Shuffles move bits, so every value (NaN payloads too) is exact.
inline void TransposeFour(const uint32_t* const columns[4], uint32_t* out, int64_t stride,
                          int64_t begin, int64_t end) {
  int64_t r = begin;
#if defined(__SSE2__)
  for (; r + 4 <= end; r += 4) {
    __m128 a = _mm_loadu_ps(reinterpret_cast<const float*>(columns[0] + r));
    __m128 b = _mm_loadu_ps(reinterpret_cast<const float*>(columns[1] + r));
    __m128 c = _mm_loadu_ps(reinterpret_cast<const float*>(columns[2] + r));
    __m128 d = _mm_loadu_ps(reinterpret_cast<const float*>(columns[3] + r));
    _MM_TRANSPOSE4_PS(a, b, c, d);
    _mm_storeu_ps(reinterpret_cast<float*>(out + r * stride), a);
    _mm_storeu_ps(reinterpret_cast<float*>(out + (r + 1) * stride), b);
    _mm_storeu_ps(reinterpret_cast<float*>(out + (r + 2) * stride), c);
    _mm_storeu_ps(reinterpret_cast<float*>(out + (r + 3) * stride), d);
  }
#endif
  for (; r < end; ++r) {
    for (int k = 0; k < 4; ++k) out[r * stride + k] = columns[k][r];
  }
}

}  // namespace stoker
