// BatchAssembler: copies rows from decoded items into one slab per batch.
//
// The batcher hands it the rows of a batch in their final order (item, row pairs after the
// shuffle window); it sizes the slab, then fills every column with typed gathers. Features are
// cast and stacked straight into the [B, F] tensor: no intermediate copy.
// Thread safety: Assemble() is const; the pool is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "batch/slab_pool.h"
#include "decode/column_spec.h"
#include "decode/decoder.h"
#include "stoker/tensor.h"

namespace stoker {

struct RowRef {
  const DecodedItem* item;
  int64_t row;
};

class BatchAssembler {
 public:
  BatchAssembler(std::shared_ptr<const OutputSpec> spec, const LoaderOptions& options,
                 std::shared_ptr<SlabPool> pool);

  /// Per-item work done once on the worker that decoded it: transposes the feature columns into
  /// the item's row-major feature matrix (then drops the columns it no longer needs).
  Status Prepare(DecodedItem* item) const;

  Result<std::shared_ptr<Batch>> Assemble(int64_t index, const std::vector<RowRef>& rows) const;

 private:
  std::shared_ptr<const OutputSpec> spec_;
  std::shared_ptr<SlabPool> pool_;
  DType features_dtype_;
  std::string features_name_;
  bool padding_mask_;
  std::string padding_name_;
};

}  // namespace stoker
