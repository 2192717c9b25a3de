// XXH64 (https://github.com/Cyan4973/xxHash, spec "xxhash_spec.md"), implemented in-tree so the
// cache needs no new dependency. Used for payload checksums and for entry file names.
//
// Why not FNV-1a (util/hash.h)? It is one multiply per byte (~1 GB/s); XXH64 consumes 32 bytes per
// four independent multiplies and runs at memory speed (see docs/cache.md for the numbers).
// Output matches the reference implementation bit for bit (tested against its published values).
// Thread safety: an Xxh64 object is not shared; the free function is pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace stoker {

/// Streaming XXH64: Update() any number of times, then Digest() (which does not reset).
class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0)
      : lanes_{seed + kP1 + kP2, seed + kP2, seed, seed - kP1}, seed_(seed) {}

  void Update(const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    total_ += size;
    if (buffered_ > 0) {  // top up a partial stripe first
      const size_t take = size < 32 - buffered_ ? size : 32 - buffered_;
      std::memcpy(buffer_ + buffered_, p, take);
      buffered_ += take;
      p += take;
      size -= take;
      if (buffered_ < 32) return;
      Stripe(buffer_);
      buffered_ = 0;
    }
    // Four local lanes so the compiler keeps them in registers.
    uint64_t v1 = lanes_[0], v2 = lanes_[1], v3 = lanes_[2], v4 = lanes_[3];
    for (; size >= 32; p += 32, size -= 32) {
      v1 = Round(v1, Read64(p));
      v2 = Round(v2, Read64(p + 8));
      v3 = Round(v3, Read64(p + 16));
      v4 = Round(v4, Read64(p + 24));
    }
    lanes_[0] = v1, lanes_[1] = v2, lanes_[2] = v3, lanes_[3] = v4;
    if (size > 0) std::memcpy(buffer_, p, size);
    buffered_ = size;
  }

  uint64_t Digest() const {
    uint64_t h;
    if (total_ >= 32) {
      h = Rotl(lanes_[0], 1) + Rotl(lanes_[1], 7) + Rotl(lanes_[2], 12) + Rotl(lanes_[3], 18);
      for (uint64_t lane : lanes_) h = (h ^ Round(0, lane)) * kP1 + kP4;
    } else {
      h = seed_ + kP5;
    }
    h += total_;
    const uint8_t* p = buffer_;
    size_t left = buffered_;
    for (; left >= 8; p += 8, left -= 8) h = Rotl(h ^ Round(0, Read64(p)), 27) * kP1 + kP4;
    if (left >= 4) {
      h = Rotl(h ^ (uint64_t{Read32(p)} * kP1), 23) * kP2 + kP3;
      p += 4;
      left -= 4;
    }
    for (; left > 0; ++p, --left) h = Rotl(h ^ (*p * kP5), 11) * kP1;
    h ^= h >> 33;
    h *= kP2;
    h ^= h >> 29;
    h *= kP3;
    h ^= h >> 32;
    return h;
  }

 private:
  static constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
  static constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
  static constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
  static constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
  static constexpr uint64_t kP5 = 0x27D4EB2F165667C5ULL;

  static uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  static uint64_t Round(uint64_t acc, uint64_t input) { return Rotl(acc + input * kP2, 31) * kP1; }
  // Little-endian loads; memcpy compiles to one unaligned mov. (Big-endian hosts unsupported.)
  static uint64_t Read64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  static uint32_t Read32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  void Stripe(const uint8_t* p) {
    for (int lane = 0; lane < 4; ++lane) lanes_[lane] = Round(lanes_[lane], Read64(p + 8 * lane));
  }

  uint64_t lanes_[4];
  uint64_t seed_;
  uint64_t total_ = 0;
  uint8_t buffer_[32];
  size_t buffered_ = 0;
};

/// One-shot XXH64 of `size` bytes.
inline uint64_t XxHash64(const void* data, size_t size, uint64_t seed = 0) {
  Xxh64 hash(seed);
  hash.Update(data, size);
  return hash.Digest();
}

}  // namespace stoker
