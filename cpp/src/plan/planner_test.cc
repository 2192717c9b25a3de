#include "plan/planner.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace stoker
