// BatchAssembler: copies rows from decoded items into one slab per batch.
//
// The sequencer hands it the rows of a batch in their final order (stretches of shuffled window
// orders). It resolves them once (BatchRows), asks every column writer to size its
// tensors, takes one slab for all of them from the pool, then lets every writer fill its part.
// The writers are built once, from the OutputSpec, when the assembler is made.
// Thread safety: Prepare() and Assemble() are const and run on many workers at once; the pool is
// thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "batch/column_writers.h"
#include "batch/slab_pool.h"
#include "decode/decoder.h"
#include "resolve/column_spec.h"
#include "stoker/tensor.h"

namespace stoker {

class BatchAssembler {
 public:
  BatchAssembler(std::shared_ptr<const OutputSpec> spec, const WriterOptions& options,
                 std::shared_ptr<SlabPool> pool);

  /// Per-item work done once on the worker that decoded it (each writer's Prepare: the features
  /// writer transposes the feature columns into the item's row-major matrix, then drops them).
  Status Prepare(DecodedItem* item) const;

  /// Batch `index` of these rows; `seed` and `epoch` key the transforms' random ops.
  Result<std::shared_ptr<Batch>> Assemble(int64_t index, const std::vector<RowStretch>& rows,
                                          uint64_t seed = 0, int64_t epoch = 0) const;

 private:
  std::shared_ptr<const OutputSpec> spec_;
  std::shared_ptr<SlabPool> pool_;
  ColumnWriters writers_;
};

}  // namespace stoker
