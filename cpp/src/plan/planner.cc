#include "plan/planner.h"

#include <algorithm>
#include <numeric>

#include "util/philox.h"

namespace stoker {

RankShape ComputeRankShape(int64_t total_rows, const PlanOptions& options) {
  const int64_t world = options.world_size;
  const int64_t batch = options.batch_size;
  RankShape shape;
  if (options.drop_last) {
    shape.rank_rows = total_rows / world / batch * batch;
    shape.num_batches = shape.rank_rows / batch;
  } else {
    shape.rank_rows = (total_rows + world - 1) / world;
    shape.num_batches = (shape.rank_rows + batch - 1) / batch;
  }
  return shape;
}

Plan MakePlan(const std::vector<RowGroupRef>& row_groups, const PlanOptions& options,
              int64_t epoch) {
  Plan plan;
  plan.options = options;
  plan.epoch = epoch;
  const int num_groups = static_cast<int>(row_groups.size());
  std::vector<uint32_t> order;
  if (options.shuffle) {
    PhiloxStream stream(options.seed, RandomPurpose::kItemOrder, static_cast<uint64_t>(epoch), 0);
    Permutation(static_cast<uint32_t>(num_groups), &stream, &order);
  } else {
    order.resize(num_groups);
    std::iota(order.begin(), order.end(), 0u);
  }
  // Row offsets of each row group in the epoch's global sequence.
  std::vector<int64_t> starts(num_groups + 1, 0);
  for (int i = 0; i < num_groups; ++i) starts[i + 1] = starts[i] + row_groups[order[i]].num_rows;
  const int64_t total = starts[num_groups];

  const RankShape shape = ComputeRankShape(total, options);
  plan.rank_rows = shape.rank_rows;
  plan.num_batches = shape.num_batches;

  // Walk this rank's stretch [begin, begin + rank_rows) of the (wrapping) global sequence.
  int64_t position = static_cast<int64_t>(options.rank) * shape.rank_rows;
  int64_t remaining = shape.rank_rows;
  while (remaining > 0) {
    const bool padding = position >= total;
    const int64_t global = position % total;
    const int slot =
        static_cast<int>(std::upper_bound(starts.begin(), starts.end(), global) - starts.begin()) -
        1;
    const int64_t offset = global - starts[slot];
    const int64_t take = std::min(remaining, row_groups[order[slot]].num_rows - offset);
    plan.segments.push_back({static_cast<int>(order[slot]), offset, take, padding});
    position += take;
    remaining -= take;
  }

  // Windows: consecutive segments until they hold shuffle_window_rows rows.
  const bool shuffled = options.shuffle && options.shuffle_window_rows > 1;
  int64_t row = 0;
  const int num_segments = static_cast<int>(plan.segments.size());
  for (int s = 0; s < num_segments;) {
    Window window;
    window.segment_begin = s;
    window.row_begin = row;
    window.shuffled = shuffled;
    do {
      window.num_rows += plan.segments[s].num_rows;
      ++s;
    } while (shuffled && s < num_segments && window.num_rows < options.shuffle_window_rows);
    window.segment_end = s;
    row += window.num_rows;
    plan.windows.push_back(window);
  }
  return plan;
}

int FindWindow(const Plan& plan, int64_t row) {
  auto it = std::upper_bound(plan.windows.begin(), plan.windows.end(), row,
                             [](int64_t r, const Window& w) { return r < w.row_begin; });
  return static_cast<int>(it - plan.windows.begin()) - 1;
}

void WindowOrder(const Plan& plan, int window_index, std::vector<uint32_t>* out) {
  const PlanOptions& options = plan.options;
  const Window& window = plan.windows[window_index];
  if (!window.shuffled) {
    out->resize(window.num_rows);
    std::iota(out->begin(), out->end(), 0u);
    return;
  }
  const uint64_t counter =
      (static_cast<uint64_t>(plan.epoch) << 32) | static_cast<uint32_t>(window_index);
  PhiloxStream stream(options.seed, RandomPurpose::kWindowOrder, counter,
                      static_cast<uint32_t>(options.rank));
  Permutation(static_cast<uint32_t>(window.num_rows), &stream, out);
}

}  // namespace stoker
