#include "util/philox.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

namespace stoker {
namespace {

// Known answers from the Random123 distribution (kat_vectors, philox4x32 10 rounds).
TEST(Philox, KnownAnswerZero) {
  const PhiloxCounter out = Philox4x32({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(out[0], 0x6627e8d5u);
  EXPECT_EQ(out[1], 0xe169c58du);
  EXPECT_EQ(out[2], 0xbc57ac4cu);
  EXPECT_EQ(out[3], 0x9b00dbd8u);
}

TEST(Philox, KnownAnswerOnes) {
  const PhiloxCounter out =
      Philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff});
  EXPECT_EQ(out[0], 0x408f276du);
  EXPECT_EQ(out[1], 0x41c83b0eu);
  EXPECT_EQ(out[2], 0xa20bc7c6u);
  EXPECT_EQ(out[3], 0x6d5451fdu);
}

TEST(Philox, KnownAnswerPi) {
  const PhiloxCounter out =
      Philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0});
  EXPECT_EQ(out[0], 0xd16cfe09u);
  EXPECT_EQ(out[1], 0x94fdccebu);
  EXPECT_EQ(out[2], 0x5001e420u);
  EXPECT_EQ(out[3], 0x24126ea1u);
}

TEST(PhiloxStream, SameKeySameValues) {
  PhiloxStream a(42, RandomPurpose::kItemOrder, 7, 3);
  PhiloxStream b(42, RandomPurpose::kItemOrder, 7, 3);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.Next32(), b.Next32());
}

TEST(PhiloxStream, DifferentPurposeDifferentValues) {
  PhiloxStream a(42, RandomPurpose::kItemOrder, 7, 3);
  PhiloxStream b(42, RandomPurpose::kWindowOrder, 7, 3);
  int equal = 0;
  for (int i = 0; i < 64; ++i) equal += a.Next32() == b.Next32();
  EXPECT_LT(equal, 2);
}

TEST(PhiloxStream, BelowStaysInRangeAndCoversIt) {
  PhiloxStream s(1, RandomPurpose::kWindowOrder, 0, 0);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 7000; ++i) {
    const uint64_t v = s.Below(7);
    ASSERT_LT(v, 7u);
    ++counts[v];
  }
  for (int c : counts) EXPECT_GT(c, 800);
}

TEST(Permutation, IsAPermutationAndDependsOnKey) {
  std::vector<uint32_t> p1, p2, p3;
  PhiloxStream s1(5, RandomPurpose::kItemOrder, 0, 0);
  PhiloxStream s2(5, RandomPurpose::kItemOrder, 0, 0);
  PhiloxStream s3(6, RandomPurpose::kItemOrder, 0, 0);
  Permutation(1000, &s1, &p1);
  Permutation(1000, &s2, &p2);
  Permutation(1000, &s3, &p3);
  EXPECT_EQ(p1, p2);
  EXPECT_NE(p1, p3);
  std::vector<uint32_t> sorted = p1;
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
}

// The prefetching implementation is the textbook Fisher-Yates draw for draw: every delivered
// order (and the golden digests) depends on it.
TEST(Permutation, EqualsTheTextbookFisherYates) {
  for (uint32_t n : {0u, 1u, 2u, 31u, 32u, 33u, 1000u, 100000u}) {
    PhiloxStream s1(9, RandomPurpose::kWindowOrder, n, 3);
    PhiloxStream s2(9, RandomPurpose::kWindowOrder, n, 3);
    std::vector<uint32_t> got;
    Permutation(n, &s1, &got);
    std::vector<uint32_t> expected(n);
    std::iota(expected.begin(), expected.end(), 0u);
    for (uint32_t i = n; i > 1; --i) {
      std::swap(expected[i - 1], expected[static_cast<uint32_t>(s2.Below(i))]);
    }
    EXPECT_EQ(got, expected) << n;
    EXPECT_EQ(s1.Next32(), s2.Next32()) << n;  // the same number of draws
  }
}

}  // namespace
}  // namespace stoker
