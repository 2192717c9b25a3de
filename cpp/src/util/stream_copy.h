// Copies of large rows into a batch with non-temporal stores.
//
// A shuffled batch of large rows (decoded images: 786 KB each at 512 px) is a memcpy per row
// from the window into the batch's slab. A plain copy first reads every destination line into
// the cache (read for ownership) and then evicts it, although the slab is written whole and the
// batch is far larger than the caches; streaming stores write the lines without reading them.
// Thread safety: stateless.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace stoker {

/// Rows at least this large are copied into batches with StreamCopy.
constexpr int64_t kStreamCopyBytes = int64_t{64} << 10;

/// memcpy(dst, src, bytes) with non-temporal stores where the CPU has them. The stores are
/// weakly ordered: call StreamFence() before the copied bytes are handed to another thread.
inline void StreamCopy(void* dst_bytes, const void* src_bytes, int64_t bytes) {
  auto* dst = static_cast<uint8_t*>(dst_bytes);
  const auto* src = static_cast<const uint8_t*>(src_bytes);
  int64_t k = 0;
#if defined(__SSE2__)
  // Up to the first 16-byte boundary of dst with a plain copy, then 64 bytes (a line) a step.
  k = std::min<int64_t>(bytes, (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15);
  if (k > 0) std::memcpy(dst, src, static_cast<size_t>(k));
  for (; k + 64 <= bytes; k += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 48), d);
  }
#endif
  if (k < bytes) std::memcpy(dst + k, src + k, static_cast<size_t>(bytes - k));
}

/// Orders every StreamCopy store before the stores that follow (publishing the batch).
inline void StreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace stoker
