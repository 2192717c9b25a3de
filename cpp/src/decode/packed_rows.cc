#include "decode/packed_rows.h"

#include <algorithm>

namespace stoker {

void PackRows(const PackedRun& run, const uint8_t* const* values, int64_t rows, uint8_t* out) {
  // A block of packed rows stays in cache while each column fills its part of them.
  constexpr int64_t kBlockRows = 64;
  for (int64_t begin = 0; begin < rows; begin += kBlockRows) {
    const int64_t end = std::min(rows, begin + kBlockRows);
    for (int c = 0; c < run.count; ++c) {
      uint8_t* to = out + run.offsets[c];
      VisitWidth(run.widths[c], [&](auto width) {
        constexpr int kWidth = decltype(width)::value;
        for (int64_t r = begin; r < end; ++r) {
          CopyWidth<kWidth>(values[c] + r * kWidth, to + r * run.row_bytes);
        }
      });
    }
  }
}

}  // namespace stoker
