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

  // drop_last under shuffling: the ranks' stretches start at a random row `first` of the
  // sequence and wrap around, so the rows dropped (those just before `first`) are a uniformly
  // placed stretch: every row is dropped with the same probability, and each epoch drops another
  // set. The tail dropped by a fixed start would always be the end of the last row group.
  const int64_t dropped = options.drop_last ? total - shape.rank_rows * options.world_size : 0;
  int64_t first = 0;
  if (options.shuffle && dropped > 0) {
    PhiloxStream stream(options.seed, RandomPurpose::kItemOrder, static_cast<uint64_t>(epoch), 1);
    first = static_cast<int64_t>(stream.Below(static_cast<uint64_t>(total)));
  }

  // Walk this rank's stretch [begin, begin + rank_rows) of the (wrapping) global sequence.
  int64_t position = first + static_cast<int64_t>(options.rank) * shape.rank_rows;
  int64_t remaining = shape.rank_rows;
  while (remaining > 0) {
    const bool padding = position - first >= total;
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

  // The head: when the first segment holds more than a batch, its first batch of rows becomes a
  // segment of its own (decoded only up to there), so the first batch waits for a batch of rows,
  // not a whole row group. The rest is the next segment. (Unshuffled windows keep their order.)
  const int64_t head_rows = std::max<int64_t>(options.batch_size, 1);
  if (!plan.segments.empty() && plan.segments[0].num_rows > head_rows) {
    Segment rest = plan.segments[0];
    rest.row_begin += head_rows;
    rest.num_rows -= head_rows;
    plan.segments[0].num_rows = head_rows;
    plan.segments[0].head = true;
    plan.segments.insert(plan.segments.begin() + 1, rest);
  }

  // Windows: consecutive segments until they hold `target` rows. The first windows grow from one
  // batch, doubling up to shuffle_window_rows: the first batch waits for the segments of a
  // batch, not for a whole window, and the order stays a function of the options.
  const bool shuffled = options.shuffle && options.shuffle_window_rows > 1;
  int64_t target = std::min(options.shuffle_window_rows, head_rows);
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
    } while (shuffled && s < num_segments && window.num_rows < target);
    window.segment_end = s;
    row += window.num_rows;
    plan.windows.push_back(window);
    target = std::min(options.shuffle_window_rows, target * 2);
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
  if (!window.order.empty()) {
    *out = window.order;
    return;
  }
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

namespace {

// Rows of one old window still to be delivered, in delivery order.
struct Piece {
  int old_rank = 0;
  int window = 0;
  std::vector<uint32_t> rows;  // indices into the window's segment rows
};

}  // namespace

Plan MakeElasticPlan(const std::vector<RowGroupRef>& row_groups, const PlanOptions& options,
                     int64_t epoch, int old_world, int64_t old_batches) {
  std::vector<Plan> old_plans;
  std::vector<Piece> pieces;
  int64_t total = 0;
  for (int r = 0; r < old_world; ++r) {
    PlanOptions old_options = options;
    old_options.rank = r;
    old_options.world_size = old_world;
    old_plans.push_back(MakePlan(row_groups, old_options, epoch));
    const Plan& old = old_plans.back();
    const int64_t skip = std::min(old_batches * options.batch_size, old.rank_rows);
    std::vector<uint32_t> order;
    for (int w = 0; w < static_cast<int>(old.windows.size()); ++w) {
      const Window& window = old.windows[w];
      if (window.row_begin + window.num_rows <= skip) continue;
      // Which rows of the window are padding (repeated to even out the old ranks).
      std::vector<bool> padding;
      for (int s = window.segment_begin; s < window.segment_end; ++s) {
        padding.insert(padding.end(), old.segments[s].num_rows, old.segments[s].padding);
      }
      WindowOrder(old, w, &order);
      Piece piece{r, w, {}};
      for (int64_t p = std::max<int64_t>(0, skip - window.row_begin); p < window.num_rows; ++p) {
        if (!padding[order[p]]) piece.rows.push_back(order[p]);
      }
      total += static_cast<int64_t>(piece.rows.size());
      if (!piece.rows.empty()) pieces.push_back(std::move(piece));
    }
  }

  Plan plan;
  plan.options = options;
  plan.epoch = epoch;
  const RankShape shape = ComputeRankShape(total, options);
  plan.rank_rows = total == 0 ? 0 : shape.rank_rows;
  plan.num_batches = total == 0 ? 0 : shape.num_batches;
  // Walk this rank's stretch of the (wrapping) remaining sequence, piece by piece.
  int64_t position = static_cast<int64_t>(options.rank) * plan.rank_rows;
  int64_t remaining = plan.rank_rows;
  std::vector<int64_t> starts(pieces.size() + 1, 0);
  for (size_t i = 0; i < pieces.size(); ++i) {
    starts[i + 1] = starts[i] + static_cast<int64_t>(pieces[i].rows.size());
  }
  int64_t row = 0;
  while (remaining > 0) {
    const bool padding = position >= total;
    const int64_t global = position % total;
    const size_t k = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), global) -
                                         starts.begin() - 1);
    const Piece& piece = pieces[k];
    const int64_t offset = global - starts[k];
    const int64_t take =
        std::min<int64_t>(remaining, static_cast<int64_t>(piece.rows.size()) - offset);
    const Plan& old = old_plans[piece.old_rank];
    const Window& old_window = old.windows[piece.window];
    Window window;
    window.segment_begin = static_cast<int>(plan.segments.size());
    for (int s = old_window.segment_begin; s < old_window.segment_end; ++s) {
      Segment segment = old.segments[s];
      segment.padding = padding;
      plan.segments.push_back(segment);
    }
    window.segment_end = static_cast<int>(plan.segments.size());
    window.row_begin = row;
    window.num_rows = take;
    window.shuffled = true;
    window.order.assign(piece.rows.begin() + offset, piece.rows.begin() + offset + take);
    plan.windows.push_back(std::move(window));
    row += take;
    position += take;
    remaining -= take;
  }
  return plan;
}

}  // namespace stoker
