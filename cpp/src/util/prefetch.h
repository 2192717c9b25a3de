// Software prefetch of cache lines, in a form the optimizer keeps.
//
// GCC 12 takes __builtin_prefetch to have no side effects: a lambda that only prefetches is
// found to be `const`, and calls to it are deleted as unused (FeaturesWriter::Fill's prefetch of
// the rows ahead compiled to nothing). An asm volatile prefetch is never deleted; a prefetch
// never faults, whatever the address.
// Thread safety: stateless.
#pragma once

#include <cstdint>

namespace stoker {

/// Asks for the 64-byte line holding `address`.
inline void PrefetchLine(const void* address) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(address)));
#else
  __builtin_prefetch(address);
#endif
}

/// Asks for every line of [from, from + bytes).
inline void PrefetchLines(const void* from, int64_t bytes) {
  if (bytes <= 0) return;
  const char* start = static_cast<const char*>(from);
  const char* end = start + bytes;
  for (const char* line = start - (reinterpret_cast<uintptr_t>(start) & 63); line < end;
       line += 64) {
    PrefetchLine(line);
  }
}

}  // namespace stoker
