#include "batch/assembler.h"

namespace stoker {

BatchAssembler::BatchAssembler(std::shared_ptr<const OutputSpec> spec, const WriterOptions& options,
                               std::shared_ptr<SlabPool> pool)
    : spec_(std::move(spec)),
      pool_(std::move(pool)),
      writers_(MakeColumnWriters(*spec_, options)) {}

Status BatchAssembler::Prepare(DecodedItem* item) const {
  for (const auto& writer : writers_.writers) ARROW_RETURN_NOT_OK(writer->Prepare(item));
  return Status::OK();
}

Result<std::shared_ptr<Batch>> BatchAssembler::Assemble(int64_t index,
                                                        const std::vector<RowStretch>& rows,
                                                        uint64_t seed, int64_t epoch) const {
  BatchRows batch_rows(rows);
  batch_rows.seed = seed;
  batch_rows.epoch = epoch;
  auto batch = std::make_shared<Batch>();
  batch->index = index;
  batch->num_rows = batch_rows.size();
  // Sized once: the layout keeps pointers to these columns' tensors until Bind.
  batch->columns.resize(writers_.num_outputs);

  SlabLayout layout;
  for (const auto& writer : writers_.writers) {
    writer->Size(batch_rows, &batch->columns[writer->output()], &layout);
  }
  layout.Bind(pool_->Acquire(layout.total_bytes()));
  for (const auto& writer : writers_.writers) {
    STOKER_RETURN_NOT_OK(writer->Fill(batch_rows, &batch->columns[writer->output()]));
  }
  return batch;
}

}  // namespace stoker
