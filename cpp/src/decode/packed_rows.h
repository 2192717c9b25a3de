// Row-packed values of a PackedRun (resolve/column_spec.h): built once per decoded row group by
// the worker that decoded it (BuildBlocks, tensor_entry.h; the ready-tensor cache stores them as
// built) and read row by row by PackedWriter::Fill.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "resolve/column_spec.h"

namespace stoker {

/// Copies one value of kWidth bytes (1, 2, 4 or 8; `from` and `to` may be unaligned).
template <int kWidth>
inline void CopyWidth(const uint8_t* from, uint8_t* to) {
  std::memcpy(to, from, kWidth);
}

/// Calls `f` with std::integral_constant<int, width> (width 1, 2, 4 or 8).
template <typename F>
inline void VisitWidth(int width, F&& f) {
  switch (width) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    default:
      return f(std::integral_constant<int, 8>{});
  }
}

/// Writes `rows` rows of the run's columns (`values[k]`: column k's first value, run.widths[k]
/// bytes each) to `out`, [rows, run.row_bytes].
void PackRows(const PackedRun& run, const uint8_t* const* values, int64_t rows, uint8_t* out);

}  // namespace stoker
