// Decoder: the run-time half of reading columns. Reads one task (a segment's row group, a group
// of its columns) through the catalog's row-group reader, converts values (time_unit, decimals),
// maps categories to their ids and runs the transform chains' cached prefixes; then joins a
// segment's tasks into the DecodedItem batch assembly reads (Join). Runs on the CPU workers
// (push-down), so batch assembly only copies. What each column becomes was decided at open
// (resolve/).
// Thread safety: every method is const and may run on many threads at once.
#pragma once

#include <arrow/array.h>
#include <arrow/buffer.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "catalog/catalog.h"
#include "decode/decoded_item.h"
#include "decode/tensor_entry.h"
#include "decode/vocabulary_ids.h"
#include "plan/planner.h"
#include "resolve/column_spec.h"

namespace stoker {

struct DecodeTask {
  int segment = 0;                  // index into Plan::segments
  std::vector<std::string> fields;  // file fields this task reads
  int64_t estimated_bytes = 0;
};

class Decoder {
 public:
  /// `pack_rows`: a task that holds every column of a PackedRun (resolve/column_spec.h) delivers
  /// them packed by rows, as a FeatureBlock like the ready-tensor cache's: a shuffled batch then
  /// reads each row's few cache lines instead of one miss per column. For shuffled loaders
  /// without a cache (with one, CachedDecoder packs the runs of the entries it stores).
  Decoder(std::shared_ptr<const Catalog> catalog, std::shared_ptr<const OutputSpec> spec,
          bool pack_rows = false);

  /// Splits a segment's columns into tasks of about equal uncompressed bytes, at most about
  /// `task_bytes` each, and at least `min_tasks` of them while there are columns to split.
  std::vector<DecodeTask> MakeTasks(const Plan& plan, int segment, int64_t task_bytes,
                                    int min_tasks = 1) const;

  /// A task's columns for its segment: DecodeRows of the segment's row group and rows (a head
  /// segment's row group decoded only up to the segment's end).
  Result<DecodedColumns> Decode(const Plan& plan, const DecodeTask& task) const;

  /// The row-group-level entry point: `fields` of catalog row group `row_group`, rows
  /// [row_begin, row_begin + num_rows), with extension types unwrapped and dictionaries resolved.
  /// Errors name the file, row group and columns. With a user transform, `fields` (then always
  /// its inputs) are read for the whole row group and its outputs (DecodedNames) come back.
  /// `partial`: decode the row group only up to the rows' end (no user transform: it sees
  /// whole row groups).
  Result<DecodedColumns> DecodeRows(int row_group, const std::vector<std::string>& fields,
                                    int64_t row_begin, int64_t num_rows,
                                    bool partial = false) const;

  /// The name a field's decoded arrays are cached under: the field, plus the fingerprint of the
  /// transform ops applied before the cache (so changing a transform never serves stale entries).
  std::string CacheName(const std::string& field) const;

  /// PlanBlocks(spec, fields, packed_runs), kept for the field sets asked before (a row group's
  /// tasks read the same sets every epoch; a plan is a pass over every output and a set of the
  /// task's fields: 5% of a warm epoch with 1,000 features).
  std::shared_ptr<const std::vector<FeatureBlockPlan>> BlockPlans(
      const std::vector<std::string>& fields, bool packed_runs) const;

  /// The names of the arrays DecodeRows returns for `fields`: `fields`, or with a user transform
  /// its outputs that the loader reads.
  std::vector<std::string> DecodedNames(const std::vector<std::string>& fields) const;

  /// What the cache key adds for a user transform (its fingerprint and inputs); empty without.
  std::string CachePrefix() const;

  /// Joins every task's columns of one segment into the item batch assembly reads (one
  /// ColumnSource per output slot, PrepareSource); checks nulls against the options.
  Result<std::shared_ptr<DecodedItem>> Join(const Plan& plan, int segment,
                                            const std::vector<DecodedColumns>& parts) const;

  const std::shared_ptr<const Catalog>& catalog() const { return catalog_; }
  const std::shared_ptr<const OutputSpec>& spec() const { return spec_; }

 private:
  /// FlattenColumn, or for a categorical field its ids (ApplyVocabulary).
  Result<std::shared_ptr<arrow::Array>> Flatten(const arrow::ChunkedArray& column,
                                                const std::string& field,
                                                const std::string& where) const;
  /// `column` (one field's rows from `row_begin` of `row_group`, which `where` names) as the
  /// decoder delivers it: flattened (or category ids), converted, through its cached prefix.
  Status AddColumn(const std::string& field, const arrow::ChunkedArray& column, int row_group,
                   int64_t row_begin, const std::string& where, DecodedColumns* out) const;
  /// DecodeRows with a user transform: reads its inputs of the whole row group, runs it, then
  /// slices its outputs to the rows and runs their chains' cached prefixes.
  Result<DecodedColumns> DecodeTransformed(int row_group, int64_t row_begin,
                                           int64_t num_rows) const;
  /// Replaces the packed runs' columns in `out` (a task's `fields`, `rows` rows) by their packed
  /// blocks (pack_rows).
  Status PackRuns(const std::vector<std::string>& fields, int64_t rows, DecodedColumns* out) const;
  /// The value conversion (time_unit, decimals) of `field`, or null.
  const ValueConversion* Conversion(const std::string& field) const;
  /// The spec of an output column read from `field`, when it has a transform chain.
  const ColumnSpec* ChainedColumn(const std::string& field) const;

  // What CacheName returns, computed from the spec (CacheName looks in cache_names_ first).
  std::string ComputeCacheName(const std::string& field) const;

  std::shared_ptr<const Catalog> catalog_;
  std::shared_ptr<const OutputSpec> spec_;
  std::vector<int64_t> row_group_starts_;  // dataset-wide id of each row group's first row
  // By field, made once from the spec: a cache hit asks for every field of its task (a scan of
  // the spec per field was quadratic in the fields: 300 features, 181,000 comparisons a task).
  std::unordered_map<std::string, const ValueConversion*> conversions_;
  std::unordered_map<std::string, const ColumnSpec*> chained_;
  std::unordered_map<std::string, std::string> cache_names_;
  // BlockPlans' plans by (packed_runs, fields); at most kMaxBlockPlans field sets are kept.
  mutable std::mutex block_plans_mutex_;
  mutable std::map<std::pair<bool, std::vector<std::string>>,
                   std::shared_ptr<const std::vector<FeatureBlockPlan>>>
      block_plans_;
  // Categorical fields: read as dictionaries, so ids are looked up once per distinct value.
  std::set<std::string> dictionary_fields_;
  // Their dictionaries' ids, kept from epoch to epoch (thread-safe; the decoder's methods are
  // const, the memo only saves work).
  const std::shared_ptr<DictionaryIdsMemo> dictionary_ids_;
  const bool pack_rows_;
};

}  // namespace stoker
