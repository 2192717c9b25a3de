// PackRows against a byte-by-byte reference: runs of every width, with adjacent 4- and 8-byte
// columns (packed 16 bytes of a row at a time) beside ones that are not, row counts around the
// blocks' and the registers' sizes, and columns that do not start on their alignment.
#include "decode/packed_rows.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace stoker {
namespace {

PackedRun RunOf(const std::vector<int>& widths) {
  PackedRun run;
  run.count = static_cast<int>(widths.size());
  for (int width : widths) {
    run.widths.push_back(width);
    run.offsets.push_back(run.row_bytes);
    run.row_bytes += width;
  }
  return run;
}

TEST(PackRows, EveryValueLandsAtItsRowAndOffset) {
  const std::vector<std::vector<int>> layouts = {
      {8, 8, 8, 4, 4, 4, 4, 4, 4, 2, 1, 4, 4, 4, 4, 8, 8},  // pairs, fours and their tails
      {4, 4, 4, 8, 4, 4, 4, 4, 1, 8},                       // a four after a break
      {1, 2, 1, 2, 1, 2, 1, 2},                             // nothing to pack 16 at a time
      {8, 8},
      {4, 4, 4, 4}};
  std::mt19937 random(3);
  for (const auto& widths : layouts) {
    const PackedRun run = RunOf(widths);
    for (int64_t rows : {0, 1, 3, 4, 5, 63, 64, 65, 130}) {
      for (int shift : {0, 1}) {  // shift 1: every column starts one byte past its alignment
        std::vector<std::vector<uint8_t>> columns(widths.size());
        std::vector<const uint8_t*> values(widths.size());
        for (size_t c = 0; c < widths.size(); ++c) {
          columns[c].resize(shift + rows * widths[c] + 1);
          for (auto& byte : columns[c]) byte = static_cast<uint8_t>(random());
          values[c] = columns[c].data() + shift;
        }
        std::vector<uint8_t> out(rows * run.row_bytes + 1, 0xAB);
        PackRows(run, values.data(), rows, out.data());
        for (int64_t r = 0; r < rows; ++r) {
          for (size_t c = 0; c < widths.size(); ++c) {
            ASSERT_EQ(std::memcmp(out.data() + r * run.row_bytes + run.offsets[c],
                                  values[c] + r * widths[c], widths[c]),
                      0)
                << "row " << r << " of " << rows << ", column " << c << ", shift " << shift;
          }
        }
        EXPECT_EQ(out.back(), 0xAB) << "wrote past " << rows << " rows";
      }
    }
  }
}

}  // namespace
}  // namespace stoker
