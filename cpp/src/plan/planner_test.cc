#include "plan/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace stoker {
namespace {

std::vector<RowGroupRef> Groups(std::vector<int64_t> rows) {
  std::vector<RowGroupRef> out;
  for (size_t i = 0; i < rows.size(); ++i) out.push_back({0, static_cast<int>(i), rows[i]});
  return out;
}

// Global row ids of a rank's stream, with each row group's rows numbered by its natural offset.
std::vector<int64_t> StreamIds(const std::vector<RowGroupRef>& groups, const Plan& plan) {
  std::vector<int64_t> starts(groups.size() + 1, 0);
  for (size_t i = 0; i < groups.size(); ++i) starts[i + 1] = starts[i] + groups[i].num_rows;
  std::vector<int64_t> ids;
  for (const auto& seg : plan.segments) {
    for (int64_t r = 0; r < seg.num_rows; ++r)
      ids.push_back(starts[seg.row_group] + seg.row_begin + r);
  }
  return ids;
}

TEST(Planner, RanksPartitionTheEpochWithEqualRows) {
  const auto groups = Groups({10, 33, 7, 50, 21, 5});
  for (int world = 1; world <= 4; ++world) {
    std::multiset<int64_t> seen;
    int64_t rank_rows = -1;
    for (int rank = 0; rank < world; ++rank) {
      PlanOptions options;
      options.batch_size = 8;
      options.seed = 3;
      options.drop_last = false;
      options.rank = rank;
      options.world_size = world;
      const Plan plan = MakePlan(groups, options, 1);
      if (rank_rows >= 0) {
        EXPECT_EQ(plan.rank_rows, rank_rows);
      }
      rank_rows = plan.rank_rows;
      for (int64_t id : StreamIds(groups, plan)) seen.insert(id);
    }
    // 126 rows: every id at least once, and only the wrap-around padding twice.
    for (int64_t id = 0; id < 126; ++id) EXPECT_GE(seen.count(id), 1u) << id;
    EXPECT_EQ(static_cast<int64_t>(seen.size()), rank_rows * world);
    EXPECT_LT(static_cast<int64_t>(seen.size()) - 126, world);
  }
}

TEST(Planner, DropLastGivesFullBatchesOnly) {
  const auto groups = Groups({10, 33, 7, 50, 21, 5});
  PlanOptions options;
  options.batch_size = 8;
  options.world_size = 3;
  options.rank = 2;
  const Plan plan = MakePlan(groups, options, 0);
  EXPECT_EQ(plan.rank_rows, 40);  // 126 / 3 = 42 -> 40
  EXPECT_EQ(plan.num_batches, 5);
  for (const auto& seg : plan.segments) EXPECT_FALSE(seg.padding);
}

TEST(Planner, WindowsCoverTheStreamInOrder) {
  const auto groups = Groups({10, 33, 7, 50, 21, 5});
  PlanOptions options;
  options.batch_size = 4;
  options.shuffle_window_rows = 40;
  const Plan plan = MakePlan(groups, options, 0);
  int64_t row = 0;
  int segment = 0;
  for (const auto& window : plan.windows) {
    EXPECT_EQ(window.row_begin, row);
    EXPECT_EQ(window.segment_begin, segment);
    EXPECT_TRUE(window.shuffled);
    row += window.num_rows;
    segment = window.segment_end;
  }
  EXPECT_EQ(row, plan.rank_rows);
  EXPECT_EQ(FindWindow(plan, 0), 0);
  EXPECT_EQ(FindWindow(plan, plan.rank_rows - 1), static_cast<int>(plan.windows.size()) - 1);
}

TEST(Planner, OrderDependsOnSeedAndEpochOnly) {
  const auto groups = Groups({10, 10, 10, 10, 10, 10, 10, 10});
  PlanOptions options;
  options.batch_size = 5;
  auto ids = [&](uint64_t seed, int64_t epoch) {
    options.seed = seed;
    return StreamIds(groups, MakePlan(groups, options, epoch));
  };
  EXPECT_EQ(ids(1, 0), ids(1, 0));
  EXPECT_NE(ids(1, 0), ids(2, 0));
  EXPECT_NE(ids(1, 0), ids(1, 1));
  options.shuffle = false;
  const auto natural = ids(1, 0);
  for (size_t i = 0; i < natural.size(); ++i) EXPECT_EQ(natural[i], static_cast<int64_t>(i));
}

TEST(Planner, WindowOrderIsAPermutation) {
  const auto groups = Groups({100, 100});
  PlanOptions options;
  options.batch_size = 200;  // the first window is a whole shuffle window
  options.shuffle_window_rows = 200;
  const Plan plan = MakePlan(groups, options, 0);
  std::vector<uint32_t> order;
  WindowOrder(plan, 0, &order);
  ASSERT_EQ(order.size(), 200u);
  std::set<uint32_t> unique(order.begin(), order.end());
  EXPECT_EQ(unique.size(), 200u);
  EXPECT_EQ(*unique.rbegin(), 199u);
}

// The first windows grow from one batch, doubling up to shuffle_window_rows, so the first batch
// waits for one batch's segments; without shuffling there is one window per segment.
TEST(Planner, FirstWindowsGrowFromOneBatch) {
  const auto groups = Groups(std::vector<int64_t>(20, 10));
  PlanOptions options;
  options.batch_size = 10;
  options.shuffle_window_rows = 80;
  const Plan plan = MakePlan(groups, options, 0);
  std::vector<int64_t> sizes;
  for (const auto& window : plan.windows) sizes.push_back(window.num_rows);
  EXPECT_EQ(sizes, (std::vector<int64_t>{10, 20, 40, 80, 50}));
  options.batch_size = 100;  // a batch beyond the window: every window is whole
  sizes.clear();
  for (const auto& window : MakePlan(groups, options, 0).windows) sizes.push_back(window.num_rows);
  EXPECT_EQ(sizes, (std::vector<int64_t>{80, 80, 40}));
}

// The ids that no rank of `world` delivers in `epoch` (drop_last), sorted.
std::vector<int64_t> DroppedIds(const std::vector<RowGroupRef>& groups, PlanOptions options,
                                int64_t epoch) {
  int64_t total = 0;
  for (const auto& group : groups) total += group.num_rows;
  std::vector<bool> kept(total, false);
  for (int rank = 0; rank < options.world_size; ++rank) {
    options.rank = rank;
    for (int64_t id : StreamIds(groups, MakePlan(groups, options, epoch))) {
      EXPECT_FALSE(kept[id]) << "row " << id << " delivered twice";
      kept[id] = true;
    }
  }
  std::vector<int64_t> dropped;
  for (int64_t id = 0; id < total; ++id) {
    if (!kept[id]) dropped.push_back(id);
  }
  return dropped;
}

// Issue 22.9: the dropped rows were the tail of the last row group, so rows near a row group's
// start were never dropped and two epochs dropped the same rows for 1 seed in 4. Now each row's
// count over the seeds is Binomial(seeds, D/T), and epochs drop sets that overlap as much as two
// random ones would. Seeds are fixed: the bounds (6 standard deviations) were checked once.
// Under a sanitizer a quarter of the seeds (the -O0 ASan build took 11.6 s for 2000, the longest
// test of `make test-asan`): the same code and memory accesses, bounds that scale with the seeds;
// the ordinary build (`make test-cpp`) checks the 2000.
TEST(Planner, DropLastUnderShuffleDropsAUniformlyPlacedSet) {
  const auto groups = Groups({2500, 2500, 2500, 2500});
  PlanOptions options;
  options.batch_size = 1024;
  options.world_size = 2;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int kSeeds = 500;
#else
  constexpr int kSeeds = 2000;
#endif
  constexpr int64_t kRows = 10000, kDropped = 10000 - 8192;
  std::vector<int> counts(kRows, 0);
  int64_t overlap = 0;
  int same = 0;
  for (int seed = 0; seed < kSeeds; ++seed) {
    options.seed = seed;
    const auto first = DroppedIds(groups, options, 0);
    const auto second = DroppedIds(groups, options, 1);
    ASSERT_EQ(static_cast<int64_t>(first.size()), kDropped);
    ASSERT_EQ(static_cast<int64_t>(second.size()), kDropped);
    for (int64_t id : first) ++counts[id];
    std::vector<int64_t> both;
    std::set_intersection(first.begin(), first.end(), second.begin(), second.end(),
                          std::back_inserter(both));
    overlap += static_cast<int64_t>(both.size());
    same += first == second;
  }
  const double p = static_cast<double>(kDropped) / kRows;
  const double mean = kSeeds * p, sd = std::sqrt(kSeeds * p * (1 - p));  // 361.6, 17.2 (2000)
  const auto [low, high] = std::minmax_element(counts.begin(), counts.end());
  EXPECT_GE(*low, mean - 6 * sd);
  EXPECT_LE(*high, mean + 6 * sd);
  for (int64_t start = 0; start < kRows; start += 2500) EXPECT_GE(counts[start], mean - 6 * sd);
  EXPECT_LE(same, kSeeds / 100);
  // Two independent uniform stretches overlap by D^2 / T rows on average (326.9).
  const double expected = static_cast<double>(kDropped) * kDropped / kRows;
  EXPECT_NEAR(static_cast<double>(overlap) / kSeeds, expected, 0.2 * expected);
}

TEST(Planner, DropLastKeepsTheOtherRowsOnceWithEqualRanks) {
  const auto groups = Groups({10, 33, 7, 50, 21, 5, 64, 1});
  for (int world = 1; world <= 4; ++world) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      PlanOptions options;
      options.batch_size = 8;
      options.seed = seed;
      options.world_size = world;
      const int64_t rank_rows = 191 / world / 8 * 8;
      for (int rank = 0; rank < world; ++rank) {
        options.rank = rank;
        const Plan plan = MakePlan(groups, options, 3);
        EXPECT_EQ(plan.rank_rows, rank_rows);
        EXPECT_EQ(static_cast<int64_t>(StreamIds(groups, plan).size()), rank_rows);
        for (const auto& seg : plan.segments) EXPECT_FALSE(seg.padding);
      }
      EXPECT_EQ(static_cast<int64_t>(DroppedIds(groups, options, 3).size()),
                191 - rank_rows * world);
    }
  }
}

TEST(Planner, DropLastWithoutShuffleDropsTheTail) {
  const auto groups = Groups({10, 33, 7, 50, 21, 5});
  PlanOptions options;
  options.batch_size = 8;
  options.shuffle = false;
  options.world_size = 3;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    options.seed = seed;
    EXPECT_EQ(DroppedIds(groups, options, seed),
              (std::vector<int64_t>{120, 121, 122, 123, 124, 125}));
  }
}

// When nothing is dropped the sequence starts at its first row, as it always did.
TEST(Planner, NothingToDropKeepsTheStart) {
  const auto groups = Groups({64, 32, 32});
  PlanOptions options;
  options.batch_size = 32;
  options.world_size = 2;
  options.seed = 4;
  const Plan plan = MakePlan(groups, options, 0);
  ASSERT_GE(plan.segments.size(), 2u);
  EXPECT_EQ(plan.segments[0].row_begin, 0);
  // The first row group from its first row (a 64-row one is cut after its head batch).
  int64_t rows = plan.segments[0].num_rows;
  if (plan.segments[0].head) {
    EXPECT_EQ(plan.segments[1].row_group, plan.segments[0].row_group);
    rows += plan.segments[1].num_rows;
  }
  EXPECT_EQ(rows, groups[plan.segments[0].row_group].num_rows);
}

TEST(Planner, TheFirstBatchOfALongFirstSegmentIsAHeadWindow) {
  const auto groups = Groups({100, 100, 100});
  PlanOptions options;
  options.batch_size = 16;
  options.shuffle_window_rows = 64;
  options.drop_last = false;
  options.seed = 9;
  const Plan plan = MakePlan(groups, options, 0);
  ASSERT_GE(plan.segments.size(), 4u);
  const Segment& head = plan.segments[0];
  const Segment& rest = plan.segments[1];
  EXPECT_TRUE(head.head);
  EXPECT_EQ(head.row_begin, 0);
  EXPECT_EQ(head.num_rows, 16);
  EXPECT_FALSE(rest.head);
  EXPECT_EQ(rest.row_group, head.row_group);
  EXPECT_EQ(rest.row_begin, 16);
  EXPECT_EQ(rest.num_rows, 84);
  for (size_t s = 1; s < plan.segments.size(); ++s) EXPECT_FALSE(plan.segments[s].head);
  // The head is the first window, alone; the rest of its row group starts the second.
  ASSERT_GE(plan.windows.size(), 2u);
  EXPECT_EQ(plan.windows[0].segment_begin, 0);
  EXPECT_EQ(plan.windows[0].segment_end, 1);
  EXPECT_EQ(plan.windows[0].num_rows, 16);
  EXPECT_EQ(plan.windows[1].segment_begin, 1);
  EXPECT_EQ(plan.rank_rows, 300);
}

TEST(Planner, NoHeadWhenTheFirstSegmentIsABatchOrLess) {
  PlanOptions options;
  options.batch_size = 32;
  options.drop_last = false;
  const Plan plan = MakePlan(Groups({32, 100}), options, 0);
  for (const Segment& segment : plan.segments) EXPECT_FALSE(segment.head);
}

TEST(Planner, UnshuffledHeadKeepsTheNaturalOrder) {
  const auto groups = Groups({50, 30});
  PlanOptions options;
  options.batch_size = 8;
  options.shuffle = false;
  options.drop_last = false;
  const Plan plan = MakePlan(groups, options, 0);
  ASSERT_TRUE(plan.segments[0].head);
  // Rows in delivery order: (row group, row) walks the row groups in file order.
  std::vector<std::pair<int, int64_t>> rows;
  std::vector<uint32_t> order;
  for (int w = 0; w < static_cast<int>(plan.windows.size()); ++w) {
    const Window& window = plan.windows[w];
    std::vector<std::pair<int, int64_t>> window_rows;
    for (int s = window.segment_begin; s < window.segment_end; ++s) {
      const Segment& seg = plan.segments[s];
      for (int64_t r = 0; r < seg.num_rows; ++r)
        window_rows.emplace_back(seg.row_group, seg.row_begin + r);
    }
    WindowOrder(plan, w, &order);
    for (uint32_t i : order) rows.push_back(window_rows[i]);
  }
  ASSERT_EQ(rows.size(), 80u);
  for (int64_t i = 0; i < 80; ++i) {
    EXPECT_EQ(rows[i], (std::pair<int, int64_t>{i < 50 ? 0 : 1, i < 50 ? i : i - 50}));
  }
}

}  // namespace
}  // namespace stoker
