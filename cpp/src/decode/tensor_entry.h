// The ready-tensor cache's entry: the decoded columns of one row group (a decode task's fields)
// as one Arrow IPC stream (one record batch) whose buffers are 64-byte aligned in the entry, so
// that a read maps it and points into it. Stacked features may be stored in their final layout:
// consecutive features of a group as one block (FeatureBlock), row-major and cast to the group's
// dtype, named after the group and its place in it; and so may runs of plain columns (PackedRun),
// packed by rows.
// Thread safety: pure functions; an EntryPayload is used by one thread at a time.
#pragma once

#include <arrow/array.h>
#include <arrow/buffer.h>
#include <arrow/io/interfaces.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cache/disk_cache.h"
#include "decode/decoded_item.h"
#include "resolve/column_spec.h"
#include "stoker/error.h"

namespace stoker {

/// The arrays of an entry, by name: fields (or cache names), and feature blocks.
using NamedArrays = std::vector<std::pair<std::string, std::shared_ptr<arrow::Array>>>;

/// A serialized entry: what the IPC writer wrote, as parts for one writev() (DiskCache::Put).
/// Body buffers are referenced (the decoded arrays own them), small writes (framing, metadata,
/// padding) copied, so the payload reaches the disk with no intermediate copy.
class EntryPayload : public arrow::io::OutputStream {
 public:
  Status Close() override {
    closed_ = true;
    return Status::OK();
  }
  bool closed() const override { return closed_; }
  Result<int64_t> Tell() const override { return position_; }

  Status Write(const void* data, int64_t nbytes) override {
    if (nbytes == 0) return Status::OK();
    // A deque never moves its strings, so the parts' pointers stay valid.
    copies_.emplace_back(static_cast<const char*>(data), static_cast<size_t>(nbytes));
    parts_.emplace_back(copies_.back().data(), static_cast<size_t>(nbytes));
    position_ += nbytes;
    return Status::OK();
  }

  Status Write(const std::shared_ptr<arrow::Buffer>& data) override {
    if (data->size() < kCopyBelow) return Write(data->data(), data->size());
    buffers_.push_back(data);
    parts_.emplace_back(data->data(), static_cast<size_t>(data->size()));
    position_ += data->size();
    return Status::OK();
  }

  const DiskCache::Parts& parts() const { return parts_; }

 private:
  static constexpr int64_t kCopyBelow = 4096;
  bool closed_ = false;
  int64_t position_ = 0;
  DiskCache::Parts parts_;
  std::deque<std::string> copies_;
  std::vector<std::shared_ptr<arrow::Buffer>> buffers_;
};

/// `arrays` (each of `rows` rows) as an entry.
Result<std::shared_ptr<EntryPayload>> Serialize(const NamedArrays& arrays, int64_t rows);

/// The arrays of an entry's bytes (zero-copy: they point into `payload`, which they keep alive).
Result<NamedArrays> Deserialize(std::shared_ptr<arrow::Buffer> payload);

/// Consecutive features of one group that a task stores as a FeatureBlock (when its rows have no
/// nulls): plain fixed-width columns (after their chains, which run before the cache) read by no
/// other output. Or, `packed`, a PackedRun whose columns the task reads and no other output does:
/// `group` is the run's index, `first` and `count` its columns (in OutputSpec::columns).
struct FeatureBlockPlan {
  int group = 0;
  int64_t first = 0;
  int64_t count = 0;
  DType dtype = DType::kFloat32;
  std::vector<const ColumnSpec*> specs;
  bool packed = false;
  PackedRun run;  // when packed
};

/// The blocks a task reading `fields` stores (none with a user transform); packed runs only when
/// `packed_runs`.
std::vector<FeatureBlockPlan> PlanBlocks(const OutputSpec& spec,
                                         const std::vector<std::string>& fields, bool packed_runs);

/// The name of a block's array in an entry.
std::string BlockName(const FeatureBlockPlan& plan);
/// Whether `name` is a block's (BlockName), not a field's.
bool IsBlockName(const std::string& name);
/// Adds `array` to `out` under `name`: a block's (IsBlockName) to its blocks (ParseBlock), any
/// other to its arrays.
void AddNamed(const std::string& name, std::shared_ptr<arrow::Array> array, DecodedColumns* out);
/// What the blocks add to an entry's key (their plan: groups, places and dtypes); empty without.
std::string BlocksLayout(const std::vector<FeatureBlockPlan>& plans);
/// The block an array named `name` (BlockName) holds, over `rows` (the array, or its slice).
FeatureBlock ParseBlock(const std::string& name, std::shared_ptr<arrow::Array> rows);

/// Replaces the planned features' arrays of a whole row group (`rows` rows) by block arrays
/// (row-major, cast to the group's dtype; packed runs: PackRows), where their rows allow it (no
/// nulls, plain values). The same casts as FeaturesWriter::Prepare.
Status BuildBlocks(const std::vector<FeatureBlockPlan>& plans, int64_t rows, NamedArrays* arrays);

/// Whether an entry read from disk holds what a task needs: every field in `stored`, as an array
/// or in one of the planned blocks (with the planned width), every array of `rows` rows.
bool EntryMatches(const NamedArrays& arrays, const std::vector<std::string>& stored,
                  const std::vector<FeatureBlockPlan>& plans, int64_t rows);

}  // namespace stoker
