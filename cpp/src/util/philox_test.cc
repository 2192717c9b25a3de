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

// Many lanes at once, block for block what one at a time gives: across a whole vector of lanes,
// a partial one, and word 0 wrapping as the stream's counter does.
TEST(Philox, BlocksEqualOneBlockAtATime) {
  const PhiloxKey key = {0xa4093822, 0x299f31d0};
  for (uint32_t start : {0u, 7u, 0xfffffff0u}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{100}}) {
      const PhiloxCounter first = {start, 0x85a308d3, 0x13198a2e, 0x03707344};
      std::vector<uint32_t> got(4 * count + 1, 0xdeadbeef);
      Philox4x32Blocks(first, key, count, got.data());
      for (size_t i = 0; i < count; ++i) {
        PhiloxCounter counter = first;
        counter[0] += static_cast<uint32_t>(i);
        const PhiloxCounter expected = Philox4x32(counter, key);
        for (int w = 0; w < 4; ++w) ASSERT_EQ(got[4 * i + w], expected[w]) << start << " " << i;
      }
      EXPECT_EQ(got[4 * count], 0xdeadbeefu);  // nothing past the last block
    }
  }
}

TEST(PhiloxStream, FillEqualsNext32) {
  PhiloxStream filled(3, RandomPurpose::kWindowOrder, 11, 2);
  PhiloxStream single(3, RandomPurpose::kWindowOrder, 11, 2);
  // Lengths that start and end inside a block, cover whole vectors of blocks, and are empty.
  for (size_t n :
       {size_t{3}, size_t{0}, size_t{1}, size_t{70}, size_t{4}, size_t{257}, size_t{2}}) {
    std::vector<uint32_t> got(n);
    filled.Fill(got.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], single.Next32()) << n << " " << i;
    ASSERT_EQ(filled.Next32(), single.Next32()) << n;  // and the stream goes on from there
  }
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
