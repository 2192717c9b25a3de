// Planner: the pure function (row groups, options, epoch, rank, world size) -> this rank's work.
//
// The epoch's global row sequence is the row groups in a seeded order (or natural order without
// shuffle). Each rank takes one contiguous stretch of M rows of it, where M is the same on every
// rank: drop_last=true drops fewer than world_size * batch_size rows so M is a multiple of
// batch_size (under shuffling the stretches start at a seeded row and wrap, so the dropped rows
// are a uniformly placed stretch; without shuffle, the tail); drop_last=false wraps around to the
// start of the sequence (those rows are marked as padding). The stretch is cut into segments (a
// row group or a slice of one) and segments are grouped into shuffle windows.
// Nothing here depends on threads, caches or time.
#pragma once

#include <cstdint>
#include <vector>

#include "catalog/catalog.h"

namespace stoker {

/// The options that decide a plan, resolved by the loader (the window already in rows).
struct PlanOptions {
  int64_t batch_size = 1024;
  bool shuffle = true;
  uint64_t seed = 0;
  int64_t shuffle_window_rows = 65536;
  bool drop_last = true;
  int rank = 0;
  int world_size = 1;
};

struct Segment {
  int row_group = 0;      // index into Catalog::row_groups()
  int64_t row_begin = 0;  // first row inside the row group
  int64_t num_rows = 0;
  bool padding = false;  // rows repeated to even out ranks
  /// The epoch's head: the first batch's rows, cut from a longer first segment. Decoding reads
  /// the row group only up to this segment's end, so the first batch waits for about a batch of
  /// rows, not a whole row group.
  bool head = false;
};

struct Window {
  int segment_begin = 0;
  int segment_end = 0;
  int64_t row_begin = 0;  // offset in this rank's row stream
  int64_t num_rows = 0;
  bool shuffled = false;
  /// When not empty, the window's rows in delivery order (indices into the rows of its segments,
  /// num_rows of them, possibly fewer than the segments hold): an elastic plan's piece.
  std::vector<uint32_t> order;
};

struct Plan {
  PlanOptions options;
  int64_t epoch = 0;
  std::vector<Segment> segments;
  std::vector<Window> windows;
  int64_t rank_rows = 0;
  int64_t num_batches = 0;
};

/// Row counts of the rank stream for `total_rows` rows; shared with the Python front's len().
struct RankShape {
  int64_t rank_rows = 0;
  int64_t num_batches = 0;
};
RankShape ComputeRankShape(int64_t total_rows, const PlanOptions& options);

Plan MakePlan(const std::vector<RowGroupRef>& row_groups, const PlanOptions& options,
              int64_t epoch);

/// The rest of epoch `epoch` after `old_world` ranks each delivered `old_batches` batches (a
/// checkpoint taken at the same step on every rank), dealt to rank `options.rank` of
/// `options.world_size`. The rows the old ranks had still to deliver (their padding rows
/// excluded) form one sequence, old rank by old rank, each in its own delivery order (its window
/// permutations, the current window from its next position); it is cut into equal contiguous
/// stretches as in MakePlan: drop_last drops the tail that does not fill a batch on every rank,
/// otherwise the sequence wraps and the repeated rows are padding. Pieces keep their order
/// (windows with an explicit `order`), so nothing is shuffled twice.
Plan MakeElasticPlan(const std::vector<RowGroupRef>& row_groups, const PlanOptions& options,
                     int64_t epoch, int old_world, int64_t old_batches);

/// Index of the window holding row `row` of the rank stream (windows are sorted by row_begin).
int FindWindow(const Plan& plan, int64_t row);

/// The permutation of a shuffled window's rows (identity for an unshuffled one).
void WindowOrder(const Plan& plan, int window_index, std::vector<uint32_t>* out);

}  // namespace stoker
