// FNV-1a, for fingerprints that must be stable across runs, machines and builds.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace stoker {

class Fnv1a {
 public:
  void Add(const void* data, size_t size) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < size; ++i) {
      hash_ = (hash_ ^ bytes[i]) * 0x100000001b3ULL;
    }
  }
  void Add(std::string_view text) {
    Add(text.data(), text.size());
    AddInt(text.size());  // separates "ab","c" from "a","bc"
  }
  void AddInt(uint64_t value) { Add(&value, sizeof(value)); }
  void AddDouble(double value) { Add(&value, sizeof(value)); }
  uint64_t digest() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

}  // namespace stoker
