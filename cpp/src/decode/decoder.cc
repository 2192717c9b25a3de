#include "decode/decoder.h"

#include <arrow/table.h>
#include <arrow/util/byte_size.h>
#include <arrow/util/logging.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "catalog/row_group_reader.h"
#include "decode/cached_prefix.h"
#include "decode/convert_values.h"
#include "decode/tensor_entry.h"
#include "decode/vocabulary_ids.h"
#include "resolve/user_transform.h"
#include "util/recycling_pool.h"

namespace stoker {
namespace {

// Bytes of categorical columns' dictionaries (and their ids) a loader keeps so that later epochs
// do not look their strings up again (DictionaryIdsMemo): the strings set of the shape matrix
// (30 columns, 8 row groups, 214,274 dictionary entries) keeps about 5 MB.
constexpr int64_t kDictionaryIdsBytes = int64_t{64} << 20;

// Field sets whose block plans a decoder keeps (Decoder::BlockPlans): tasks group a row group's
// fields by its size, so a dataset has a few sets, and one of row groups of many sizes is bounded.
constexpr size_t kMaxBlockPlans = 1024;

}  // namespace

Decoder::Decoder(std::shared_ptr<const Catalog> catalog, std::shared_ptr<const OutputSpec> spec,
                 bool pack_rows)
    : catalog_(std::move(catalog)),
      spec_(std::move(spec)),
      dictionary_ids_(std::make_shared<DictionaryIdsMemo>(kDictionaryIdsBytes)),
      pack_rows_(pack_rows) {
  int64_t start = 0;
  for (const auto& rg : catalog_->row_groups()) {
    row_group_starts_.push_back(start);
    start += rg.num_rows;
  }
  for (const auto& [field, vocabulary] : spec_->vocabularies) dictionary_fields_.insert(field);
  // The first column, then the first feature, of each field (emplace keeps the first).
  for (const auto& column : spec_->columns) {
    if (column.chain) chained_.emplace(column.Field(), &column);
    if (column.conversion.active()) conversions_.emplace(column.Field(), &column.conversion);
  }
  for (const auto& feature : spec_->features) {
    if (feature.chain) chained_.emplace(feature.name, &feature);
    if (feature.conversion.active()) conversions_.emplace(feature.Field(), &feature.conversion);
  }
  for (const auto& field : spec_->file_fields) cache_names_.emplace(field, ComputeCacheName(field));
}

const ColumnSpec* Decoder::ChainedColumn(const std::string& field) const {
  const auto it = chained_.find(field);
  return it == chained_.end() ? nullptr : it->second;
}

const ValueConversion* Decoder::Conversion(const std::string& field) const {
  const auto it = conversions_.find(field);
  return it == conversions_.end() ? nullptr : it->second;
}

std::string Decoder::CacheName(const std::string& field) const {
  const auto it = cache_names_.find(field);
  return it != cache_names_.end() ? it->second : ComputeCacheName(field);
}

std::string Decoder::ComputeCacheName(const std::string& field) const {
  // A converted column's entries hold the converted values (time_unit, decimals).
  const ValueConversion* conversion = Conversion(field);
  std::string base = conversion ? field + "|" + conversion->tag : field;
  // Category ids are stored, not strings: the entry belongs to this vocabulary only.
  if (auto vocabulary = spec_->vocabularies.find(field); vocabulary != spec_->vocabularies.end()) {
    char hash[17];
    std::snprintf(hash, sizeof(hash), "%016llx",
                  static_cast<unsigned long long>(vocabulary->second->hash()));
    // The ids' width is part of the entry: entries of int64 ids (before ids were narrowed) are
    // never read as narrow ones.
    return base + "|vocabulary=" + hash + "|ids=" + DTypeName(vocabulary->second->IdDType());
  }
  const ColumnSpec* column = ChainedColumn(field);
  if (column == nullptr || column->cached_ops == 0) return base;
  // Entries written under on_error="zero" hold failed rows as nulls: never serve them to a
  // loader that must raise for those rows.
  return base + "|" + column->chain->Fingerprint(column->cached_ops) +
         (column->cached_shapes ? "|shaped-rows-v1" : "") +
         (column->options.on_error_zero ? "|on_error=zero" : "");
}

std::vector<DecodeTask> Decoder::MakeTasks(const Plan& plan, int segment, int64_t task_bytes,
                                           int min_tasks) const {
  const Segment& seg = plan.segments[segment];
  const RowGroupRef& rg = catalog_->row_groups()[seg.row_group];
  const double fraction = static_cast<double>(seg.num_rows) / static_cast<double>(rg.num_rows);
  const auto& fields = spec_->file_fields;
  // The whole row group is decoded even for a slice; its size is what a task costs. The fields
  // are grouped by it alone, so every segment of a row group (wherever an epoch's rank or
  // drop_last cut falls) gets the same groups: the ready-tensor cache keys an entry by its
  // group, and a grouping that moved with the cut missed it epoch after epoch.
  const std::vector<int64_t> bytes = catalog_->FieldBytes(rg, fields);
  int64_t total = 0;
  for (int64_t field_bytes : bytes) total += field_bytes;
  // Equal shares, not tasks filled to task_bytes and a remainder: a row group of 1.1 x task_bytes
  // was a full task and a tenth of one, so the first batch waited for the full one alone. A user
  // transform sees all its inputs at once: one task.
  int64_t count = 1;
  if (!spec_->user_transform && !fields.empty()) {
    count = std::max<int64_t>(
        {(total + task_bytes - 1) / std::max<int64_t>(task_bytes, 1), int64_t{min_tasks}, 1});
    count = std::min<int64_t>(count, static_cast<int64_t>(fields.size()));
  }
  std::vector<DecodeTask> tasks;
  DecodeTask current;
  current.segment = segment;
  int64_t index = 0, before = 0;  // the current task's share; bytes of the fields before
  for (size_t i = 0; i < fields.size(); ++i) {
    // A field goes to the share its middle falls in (one field per task when each gets one).
    const int64_t share =
        count == static_cast<int64_t>(fields.size())
            ? static_cast<int64_t>(i)
            : std::min(count - 1, total > 0 ? (2 * before + bytes[i]) * count / (2 * total) : 0);
    before += bytes[i];
    if (share != index && !current.fields.empty()) {
      tasks.push_back(std::move(current));
      current = DecodeTask{};
      current.segment = segment;
    }
    index = share;
    current.fields.push_back(fields[i]);
    current.estimated_bytes +=
        static_cast<int64_t>(std::llround(bytes[i] * std::max(fraction, 0.0)));
  }
  tasks.push_back(std::move(current));  // may be empty when only partition columns are read
  return tasks;
}

Result<DecodedColumns> Decoder::Decode(const Plan& plan, const DecodeTask& task) const {
  const Segment& seg = plan.segments[task.segment];
  STOKER_ASSIGN_OR_RAISE(DecodedColumns out, DecodeRows(seg.row_group, task.fields, seg.row_begin,
                                                        seg.num_rows, seg.head));
  if (pack_rows_) STOKER_RETURN_NOT_OK(PackRuns(task.fields, seg.num_rows, &out));
  return out;
}

std::shared_ptr<const std::vector<FeatureBlockPlan>> Decoder::BlockPlans(
    const std::vector<std::string>& fields, bool packed_runs) const {
  auto key = std::make_pair(packed_runs, fields);
  {
    std::lock_guard<std::mutex> lock(block_plans_mutex_);
    if (auto it = block_plans_.find(key); it != block_plans_.end()) return it->second;
  }
  auto plans = std::make_shared<const std::vector<FeatureBlockPlan>>(
      PlanBlocks(*spec_, fields, packed_runs));
  std::lock_guard<std::mutex> lock(block_plans_mutex_);
  if (block_plans_.size() < kMaxBlockPlans) block_plans_.emplace(std::move(key), plans);
  return plans;
}

Status Decoder::PackRuns(const std::vector<std::string>& fields, int64_t rows,
                         DecodedColumns* out) const {
  // Stacked features are BatchAssembler::Prepare's (feature_rows); only the packed runs here
  // (copied from the kept plans: a feature group's plans hold a pointer per feature).
  const std::shared_ptr<const std::vector<FeatureBlockPlan>> kept =
      BlockPlans(fields, /*packed_runs=*/true);
  std::vector<FeatureBlockPlan> plans;
  for (const FeatureBlockPlan& plan : *kept) {
    if (plan.packed) plans.push_back(plan);
  }
  if (plans.empty()) return Status::OK();
  // A run with nulls, or split between tasks, stays as columns (PackedWriter reads either).
  NamedArrays arrays = std::move(out->arrays);
  STOKER_RETURN_NOT_OK(BuildBlocks(plans, rows, &arrays));
  out->arrays.clear();
  for (auto& [name, array] : arrays) AddNamed(name, std::move(array), out);
  return Status::OK();
}

Result<std::shared_ptr<arrow::Array>> Decoder::Flatten(const arrow::ChunkedArray& column,
                                                       const std::string& field,
                                                       const std::string& where) const {
  if (auto vocabulary = spec_->vocabularies.find(field); vocabulary != spec_->vocabularies.end()) {
    return ApplyVocabulary(*vocabulary->second, column, field, where, dictionary_ids_.get());
  }
  return FlattenColumn(column, /*keep_extensions=*/false, field, where);
}

Status Decoder::AddColumn(const std::string& field, const arrow::ChunkedArray& column,
                          int row_group, int64_t row_begin, const std::string& where,
                          DecodedColumns* out) const {
  STOKER_ASSIGN_OR_RAISE(auto array, Flatten(column, field, where));
  if (const ValueConversion* conversion = Conversion(field)) {
    STOKER_ASSIGN_OR_RAISE(array, ConvertValues(*conversion, array));
  }
  if (const ColumnSpec* chained = ChainedColumn(field); chained && chained->cached_ops > 0) {
    STOKER_ASSIGN_OR_RAISE(array,
                           RunCachedPrefix(*catalog_, *chained, array, row_group, row_begin));
  }
  out->bytes += arrow::util::TotalBufferSize(*array->data());
  out->arrays.emplace_back(field, std::move(array));
  return Status::OK();
}

Result<DecodedColumns> Decoder::DecodeTransformed(int row_group, int64_t row_begin,
                                                  int64_t num_rows) const {
  const RowGroupRef& rg = catalog_->row_groups()[row_group];
  const std::string where = catalog_->Where(rg);
  // The transform sees the whole row group, whatever part of it the segment is: its output is
  // what the cache stores, and a function of the row group alone.
  STOKER_ASSIGN_OR_RAISE(auto input, ReadRowGroupBatch(*catalog_, row_group, spec_->file_fields));
  STOKER_ASSIGN_OR_RAISE(
      auto output,
      RunUserTransform(*spec_->user_transform, spec_->transform_schema.get(), input, where));
  DecodedColumns out;
  for (const auto& field : spec_->decoded_fields) {
    auto column = output->GetColumnByName(field);
    ARROW_DCHECK(column);  // RunUserTransform checked the schema
    STOKER_RETURN_NOT_OK(AddColumn(field, arrow::ChunkedArray(column->Slice(row_begin, num_rows)),
                                   row_group, row_begin, where, &out));
  }
  return out;
}

std::vector<std::string> Decoder::DecodedNames(const std::vector<std::string>& fields) const {
  return spec_->user_transform ? spec_->decoded_fields : fields;
}

std::string Decoder::CachePrefix() const {
  if (!spec_->user_transform) return "";
  std::string prefix = "transform=" + spec_->user_transform->Fingerprint() + "(";
  for (const auto& field : spec_->file_fields) prefix += field + ",";
  return prefix + ")";
}

Result<DecodedColumns> Decoder::DecodeRows(int row_group, const std::vector<std::string>& fields,
                                           int64_t row_begin, int64_t num_rows,
                                           bool partial) const {
  if (spec_->user_transform) return DecodeTransformed(row_group, row_begin, num_rows);
  DecodedColumns out;
  if (fields.empty()) return out;
  const RowGroupRef& rg = catalog_->row_groups()[row_group];
  const int64_t decoded_rows = partial ? row_begin + num_rows : rg.num_rows;
  STOKER_ASSIGN_OR_RAISE(auto table, ReadRowGroupTable(*catalog_, row_group, fields,
                                                       dictionary_fields_, decoded_rows));
  for (const auto& field : fields) {
    auto chunked = table->GetColumnByName(field);
    if (!chunked) {
      return MakeError(ErrorKind::kCorruptFile,
                       "column '" + field + "' missing after decoding " + catalog_->Where(rg));
    }
    if (chunked->length() != decoded_rows) {
      return MakeError(ErrorKind::kCorruptFile, "column '" + field + "' of " + catalog_->Where(rg) +
                                                    " has " + std::to_string(chunked->length()) +
                                                    " values, the footer says " +
                                                    std::to_string(rg.num_rows));
    }
    // Slice first so dictionaries are resolved for the segment's rows only.
    STOKER_RETURN_NOT_OK(AddColumn(field, *chunked->Slice(row_begin, num_rows), row_group,
                                   row_begin, catalog_->Where(rg), &out));
  }
  return out;
}

Result<std::shared_ptr<DecodedItem>> Decoder::Join(const Plan& plan, int segment,
                                                   const std::vector<DecodedColumns>& parts) const {
  const Segment& seg = plan.segments[segment];
  const RowGroupRef& rg = catalog_->row_groups()[seg.row_group];
  auto item = std::make_shared<DecodedItem>();
  item->segment = segment;
  item->num_rows = seg.num_rows;
  item->padding = seg.padding;
  item->where = catalog_->Where(rg);
  item->row_begin = seg.row_begin;
  item->first_row_id = row_group_starts_[seg.row_group] + seg.row_begin;
  // Null counts are of the segment's rows: say which rows when that is not the whole row group.
  const std::string where = RowsWhere(*catalog_, rg, seg.row_begin, seg.num_rows);
  // The first array of each name, in the parts' order (a scan per output was quadratic in the
  // fields: 3% of a cold epoch's CPU with 1,000 features).
  std::unordered_map<std::string_view, const std::shared_ptr<arrow::Array>*> by_name;
  for (const auto& part : parts) {
    for (const auto& [field, array] : part.arrays) by_name.emplace(field, &array);
  }
  auto find = [&](const std::string& name) -> std::shared_ptr<arrow::Array> {
    const auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : *it->second;
  };
  // Columns in a packed block have no array: their rows are the item's packed_rows.
  std::vector<bool> in_packed_block(spec_->columns.size(), false);
  for (const auto& part : parts) {
    item->bytes += part.bytes;
    for (const FeatureBlock& block : part.blocks) {
      if (!block.packed) {
        item->feature_blocks.push_back(block);
        continue;
      }
      const size_t index = static_cast<size_t>(block.group);
      if (item->packed_rows.size() <= index) item->packed_rows.resize(index + 1);
      const std::shared_ptr<arrow::Buffer>& values = block.array->data()->buffers[1];
      const int64_t row_bytes = block.array->type()->byte_width();
      item->packed_rows[index] = arrow::SliceBuffer(values, block.rows - values->data(),
                                                    block.array->length() * row_bytes);
      std::fill_n(in_packed_block.begin() + block.first, block.count, true);
    }
  }
  size_t column_index = 0;
  auto add = [&](const ColumnSpec& spec, bool feature) -> Status {
    const bool packed = !feature && in_packed_block[column_index++];
    ColumnSource source;
    if (spec.layout == SourceLayout::kPartition) {
      const int key = spec.field_index - catalog_->num_file_fields();
      const std::string& value = catalog_->files()[rg.file].partition_values[key];
      source.partition_text = value;
      if (spec.vocabulary) {
        source.partition_int = spec.vocabulary->Lookup(value);
      } else if (spec.kind == ColumnKind::kDense) {
        source.partition_int = std::stoll(value);
      }
      if (feature && spec.kind == ColumnKind::kDense) {
        // A stacked partition feature is read like a column: the value on every row.
        ARROW_ASSIGN_OR_RAISE(
            std::shared_ptr<arrow::Buffer> values,
            arrow::AllocateBuffer(seg.num_rows * sizeof(int64_t), RecyclingPool::Get()));
        std::fill_n(reinterpret_cast<int64_t*>(values->mutable_data()), seg.num_rows,
                    source.partition_int);
        source.values = values->data();
        source.array = std::make_shared<arrow::Int64Array>(seg.num_rows, values);
      }
    } else {
      auto array = find(spec.Field());
      if (!array && (feature || packed)) {
        item->sources.emplace_back();  // in a FeatureBlock (the cache's final layout)
        return Status::OK();
      }
      ARROW_DCHECK(array);
      STOKER_RETURN_NOT_OK(PrepareSource(spec, where, array, &source));
    }
    item->sources.push_back(std::move(source));
    return Status::OK();
  };
  for (const auto& spec : spec_->columns) STOKER_RETURN_NOT_OK(add(spec, false));
  for (const auto& spec : spec_->features) STOKER_RETURN_NOT_OK(add(spec, true));
  return item;
}

}  // namespace stoker
