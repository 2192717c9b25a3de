#include "util/view_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace stoker {
namespace {

TEST(ViewIndex, RenumberedStringsAreFoundAtTheirNewPositions) {
  std::vector<std::string> strings;
  ViewIndex index;
  auto view = [&](int64_t i) -> std::string_view { return strings[i]; };
  for (int i = 0; i < 5000; ++i) {  // grows from 16 slots many times
    strings.push_back("v" + std::to_string((i * 7919) % 5003));
    ASSERT_TRUE(index.Insert(strings.back(), view).second);
  }
  std::vector<int64_t> positions(strings.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::shuffle(positions.begin(), positions.end(), std::mt19937(7));
  std::vector<std::string> moved(strings.size());
  for (size_t p = 0; p < strings.size(); ++p) moved[positions[p]] = strings[p];
  index.Renumber(positions);
  strings = moved;  // `view` now follows the new positions
  for (size_t p = 0; p < strings.size(); ++p) {
    EXPECT_EQ(index.Find(strings[p], view), static_cast<int64_t>(p)) << strings[p];
  }
  EXPECT_EQ(index.Find("absent", view), -1);
  // Inserting after a renumbering: present values keep their new position, a new one comes last.
  EXPECT_EQ(index.Insert(strings[42], view), std::make_pair(int64_t{42}, false));
  strings.push_back("new");
  EXPECT_EQ(index.Insert("new", view), std::make_pair(int64_t{5000}, true));
  EXPECT_EQ(index.size(), 5001);
}

}  // namespace
}  // namespace stoker
