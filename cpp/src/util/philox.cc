#include "util/philox.h"

#include <algorithm>
#include <numeric>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace stoker {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53;
constexpr uint32_t kMul1 = 0xCD9E8D57;
constexpr uint32_t kWeyl0 = 0x9E3779B9;
constexpr uint32_t kWeyl1 = 0xBB67AE85;

inline void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product);
}

using BlocksFunction = void (*)(PhiloxCounter, PhiloxKey, size_t, uint32_t*);

void BlocksPortable(PhiloxCounter first, PhiloxKey key, size_t num_blocks, uint32_t* out) {
  for (size_t i = 0; i < num_blocks; ++i) {
    PhiloxCounter counter = first;
    counter[0] += static_cast<uint32_t>(i);
    const PhiloxCounter block = Philox4x32(counter, key);
    std::copy(block.begin(), block.end(), out + 4 * i);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// AVX2, picked at run time where the CPU has it (the build targets baseline x86-64). Each 64-bit
// lane holds one 32-bit word of one block, so `mul_epu32` gives a round's full products; kGroups
// independent vectors of 4 blocks hide the multiplies' latency.
__attribute__((target("avx2"))) void BlocksAvx2(PhiloxCounter first, PhiloxKey key,
                                                size_t num_blocks, uint32_t* out) {
  constexpr size_t kGroups = 4;
  constexpr size_t kStep = 4 * kGroups;
  const __m256i mul0 = _mm256_set1_epi64x(kMul0);
  const __m256i mul1 = _mm256_set1_epi64x(kMul1);
  const __m256i low = _mm256_set1_epi64x(0xffffffff);
  const __m256i lanes = _mm256_set_epi64x(3, 2, 1, 0);
  size_t start = 0;
  for (; start + kStep <= num_blocks; start += kStep) {
    __m256i c0[kGroups], c1[kGroups], c2[kGroups], c3[kGroups];
    for (size_t g = 0; g < kGroups; ++g) {
      const auto base = static_cast<uint32_t>(first[0] + start + 4 * g);
      // Word 0 of each block, wrapping at 32 bits as the stream's counter does.
      c0[g] = _mm256_and_si256(_mm256_add_epi64(_mm256_set1_epi64x(base), lanes), low);
      c1[g] = _mm256_set1_epi64x(first[1]);
      c2[g] = _mm256_set1_epi64x(first[2]);
      c3[g] = _mm256_set1_epi64x(first[3]);
    }
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; ++round) {
      const __m256i key0 = _mm256_set1_epi64x(k0);
      const __m256i key1 = _mm256_set1_epi64x(k1);
      for (size_t g = 0; g < kGroups; ++g) {
        const __m256i p0 = _mm256_mul_epu32(c0[g], mul0);
        const __m256i p1 = _mm256_mul_epu32(c2[g], mul1);
        c0[g] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1[g]), key0);
        c2[g] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3[g]), key1);
        c1[g] = _mm256_and_si256(p1, low);
        c3[g] = _mm256_and_si256(p0, low);
      }
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    alignas(32) uint64_t words[4][kStep];
    for (size_t g = 0; g < kGroups; ++g) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(words[0] + 4 * g), c0[g]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(words[1] + 4 * g), c1[g]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(words[2] + 4 * g), c2[g]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(words[3] + 4 * g), c3[g]);
    }
    for (size_t l = 0; l < kStep; ++l) {
      for (int w = 0; w < 4; ++w) out[4 * (start + l) + w] = static_cast<uint32_t>(words[w][l]);
    }
  }
  PhiloxCounter rest = first;
  rest[0] += static_cast<uint32_t>(start);
  BlocksPortable(rest, key, num_blocks - start, out + 4 * start);
}
#endif

BlocksFunction PickBlocks() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return BlocksAvx2;
#endif
  return BlocksPortable;
}

// Lemire, "Fast Random Integer Generation in an Interval" (2019): a uniform integer in
// [0, bound) from the 64-bit values `next64` gives, unbiased by rejection.
template <typename Next64>
uint64_t BoundedDraw(uint64_t bound, Next64&& next64) {
  unsigned __int128 m = static_cast<unsigned __int128>(next64()) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = -bound % bound;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next64()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

// A stream's values taken in bulk for `draws` bounded draws: each refill takes no more than
// the draws still to come need at least (two values each), so the stream ends exactly where
// `draws` calls of Below() would leave it.
class BulkDraws {
 public:
  BulkDraws(PhiloxStream* stream, uint64_t draws) : stream_(stream), at_least_(2 * draws) {}

  uint64_t Below(uint64_t bound) {
    return BoundedDraw(bound, [this] {
      const uint64_t hi = Next32();
      return (hi << 32) | Next32();
    });
  }

 private:
  uint32_t Next32() {
    if (next_ == count_) {
      count_ = static_cast<size_t>(std::clamp<uint64_t>(at_least_, 1, kBuffer));
      stream_->Fill(values_, count_);
      next_ = 0;
    }
    if (at_least_ > 0) --at_least_;
    return values_[next_++];
  }

  static constexpr size_t kBuffer = 1024;
  PhiloxStream* stream_;
  uint64_t at_least_;  // values the remaining draws take at least
  uint32_t values_[kBuffer];
  size_t next_ = 0;
  size_t count_ = 0;
};

}  // namespace

PhiloxCounter Philox4x32(PhiloxCounter ctr, PhiloxKey key) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(kMul0, ctr[0], &hi0, &lo0);
    MulHiLo(kMul1, ctr[2], &hi1, &lo1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return ctr;
}

void Philox4x32Blocks(PhiloxCounter first, PhiloxKey key, size_t num_blocks, uint32_t* out) {
  static const BlocksFunction blocks = PickBlocks();
  blocks(first, key, num_blocks, out);
}

PhiloxStream::PhiloxStream(uint64_t seed, RandomPurpose purpose, uint64_t a, uint32_t b)
    : key_{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)},
      counter_{0, static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32),
               (static_cast<uint32_t>(purpose) << 24) ^ b} {}

uint32_t PhiloxStream::Next32() {
  if (used_ == 4) {
    block_ = Philox4x32(counter_, key_);
    ++counter_[0];  // 2^32 blocks per stream: far beyond any window or epoch we shuffle
    used_ = 0;
  }
  return block_[used_++];
}

uint64_t PhiloxStream::Next64() {
  const uint64_t hi = Next32();
  return (hi << 32) | Next32();
}

uint64_t PhiloxStream::Below(uint64_t bound) {
  return BoundedDraw(bound, [this] { return Next64(); });
}

void PhiloxStream::Fill(uint32_t* out, size_t n) {
  for (; n > 0 && used_ < 4; --n) *out++ = block_[used_++];
  const size_t blocks = n / 4;
  Philox4x32Blocks(counter_, key_, blocks, out);
  counter_[0] += static_cast<uint32_t>(blocks);
  for (size_t k = 4 * blocks; k < n; ++k) out[k] = Next32();
}

void Permutation(uint32_t n, PhiloxStream* stream, std::vector<uint32_t>* out) {
  out->resize(n);
  std::iota(out->begin(), out->end(), 0u);
  uint32_t* data = out->data();
  // Fisher-Yates. Step i's swap partner j depends only on the stream, not on the array, so the
  // partners are drawn kAhead steps early and their slots prefetched: a window larger than the
  // caches then waits for memory once per kAhead swaps instead of once per swap (4x faster at
  // 4M rows), and the output is the same. The draws' values come in bulk (many blocks at once).
  constexpr uint32_t kAhead = 32;
  uint32_t ahead[kAhead];
  uint32_t next_draw = n;  // the next step whose partner is drawn
  uint32_t pending = 0;    // partners drawn, not yet used
  uint32_t head = 0;       // where the next one to use is in `ahead`
  BulkDraws draws(stream, n > 1 ? n - 1 : 0);
  for (uint32_t i = n; i > 1; --i) {
    while (pending < kAhead && next_draw > 1) {
      const auto j = static_cast<uint32_t>(draws.Below(next_draw--));
      __builtin_prefetch(data + j, /*rw=*/1);
      ahead[(head + pending++) % kAhead] = j;
    }
    const uint32_t j = ahead[head];
    head = (head + 1) % kAhead;
    --pending;
    std::swap(data[i - 1], data[j]);
  }
}

}  // namespace stoker
