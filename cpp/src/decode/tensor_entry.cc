#include "decode/tensor_entry.h"

#include <arrow/io/memory.h>
#include <arrow/ipc/reader.h>
#include <arrow/ipc/writer.h>
#include <arrow/record_batch.h>

#include <algorithm>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "decode/packed_rows.h"
#include "util/convert.h"
#include "util/recycling_pool.h"
#include "util/transpose.h"

namespace stoker {
namespace {

// Names of block arrays in an entry: the prefix, then "<group> <first> <count>".
constexpr const char* kBlockPrefix =
    "\x01"
    "features ";
constexpr const char* kPackedPrefix =
    "\x01"
    "packed ";

int FindArray(const NamedArrays& arrays, const std::string& name) {
  for (size_t i = 0; i < arrays.size(); ++i) {
    if (arrays[i].first == name) return static_cast<int>(i);
  }
  return -1;
}

// The flat values of a fixed-width array without nulls whose elements are `dtype`, or null.
const uint8_t* PlainValues(const arrow::Array& array, DType dtype) {
  const arrow::DataType& type = *array.type();
  if (array.null_count() != 0 || !arrow::is_fixed_width(type.id()) ||
      type.id() == arrow::Type::BOOL || type.id() == arrow::Type::FIXED_SIZE_BINARY ||
      type.id() == arrow::Type::FIXED_SIZE_LIST || type.id() == arrow::Type::DICTIONARY ||
      type.id() == arrow::Type::EXTENSION || type.byte_width() != DTypeSize(dtype) ||
      array.data()->buffers.size() < 2 || !array.data()->buffers[1]) {
    return nullptr;
  }
  return array.data()->buffers[1]->data() + array.offset() * DTypeSize(dtype);
}

}  // namespace

Result<std::shared_ptr<EntryPayload>> Serialize(const NamedArrays& arrays, int64_t rows) {
  std::vector<std::shared_ptr<arrow::Field>> fields;
  std::vector<std::shared_ptr<arrow::Array>> columns;
  for (const auto& [name, array] : arrays) {
    fields.push_back(arrow::field(name, array->type()));
    columns.push_back(array);
  }
  auto batch = arrow::RecordBatch::Make(arrow::schema(fields), rows, columns);
  auto options = arrow::ipc::IpcWriteOptions::Defaults();
  options.alignment = 64;  // every buffer lands 64-byte aligned in the mapping
  options.allow_64bit = true;
  options.use_threads = false;
  auto sink = std::make_shared<EntryPayload>();
  ARROW_ASSIGN_OR_RAISE(auto writer, arrow::ipc::MakeStreamWriter(sink, batch->schema(), options));
  ARROW_RETURN_NOT_OK(writer->WriteRecordBatch(*batch));
  ARROW_RETURN_NOT_OK(writer->Close());
  return sink;
}

Result<NamedArrays> Deserialize(std::shared_ptr<arrow::Buffer> payload) {
  auto input = std::make_shared<arrow::io::BufferReader>(std::move(payload));
  auto options = arrow::ipc::IpcReadOptions::Defaults();
  options.use_threads = false;
  ARROW_ASSIGN_OR_RAISE(auto reader, arrow::ipc::RecordBatchStreamReader::Open(input, options));
  std::shared_ptr<arrow::RecordBatch> batch;
  ARROW_RETURN_NOT_OK(reader->ReadNext(&batch));
  if (!batch) return Status::Invalid("cache entry holds no record batch");
  NamedArrays out;
  for (int i = 0; i < batch->num_columns(); ++i) {
    out.emplace_back(batch->schema()->field(i)->name(), batch->column(i));
  }
  return out;
}

std::vector<FeatureBlockPlan> PlanBlocks(const OutputSpec& spec,
                                         const std::vector<std::string>& fields, bool packed_runs) {
  std::vector<FeatureBlockPlan> plans;
  if (spec.user_transform) return plans;
  std::unordered_map<std::string, int> uses;
  for (const auto& column : spec.columns) ++uses[column.Field()];
  for (const auto& feature : spec.features) ++uses[feature.Field()];
  const std::unordered_set<std::string> in_task(fields.begin(), fields.end());
  for (size_t g = 0; g < spec.feature_groups.size(); ++g) {
    const FeatureGroupSpec& group = spec.feature_groups[g];
    FeatureBlockPlan current;
    auto close = [&] {
      if (current.count > 0) plans.push_back(current);
      current = FeatureBlockPlan{};
    };
    for (size_t f = 0; f < group.count; ++f) {
      const ColumnSpec& feature = spec.features[group.first + f];
      const bool eligible = feature.layout == SourceLayout::kFixed && feature.inner == 1 &&
                            uses[feature.Field()] == 1 && in_task.contains(feature.Field());
      if (!eligible) {
        close();
        continue;
      }
      if (current.count == 0) {
        current.group = static_cast<int>(g);
        current.first = static_cast<int64_t>(f);
        current.dtype = group.dtype;
      }
      current.specs.push_back(&feature);
      ++current.count;
    }
    close();
  }
  const std::vector<PackedRun> runs = packed_runs ? PackedRuns(spec) : std::vector<PackedRun>{};
  for (size_t r = 0; r < runs.size(); ++r) {
    FeatureBlockPlan plan;
    plan.group = static_cast<int>(r);
    plan.first = runs[r].first;
    plan.count = runs[r].count;
    plan.packed = true;
    plan.run = runs[r];
    bool eligible = true;
    for (int k = 0; k < runs[r].count && eligible; ++k) {
      const ColumnSpec& column = spec.columns[runs[r].first + k];
      eligible = uses[column.Field()] == 1 && in_task.contains(column.Field());
      plan.specs.push_back(&column);
    }
    if (eligible) plans.push_back(std::move(plan));
  }
  return plans;
}

std::string BlockName(const FeatureBlockPlan& plan) {
  return (plan.packed ? kPackedPrefix : kBlockPrefix) + std::to_string(plan.group) + " " +
         std::to_string(plan.first) + " " + std::to_string(plan.count);
}

bool IsBlockName(const std::string& name) {
  return name.rfind(kBlockPrefix, 0) == 0 || name.rfind(kPackedPrefix, 0) == 0;
}

void AddNamed(const std::string& name, std::shared_ptr<arrow::Array> array, DecodedColumns* out) {
  if (IsBlockName(name)) {
    out->blocks.push_back(ParseBlock(name, std::move(array)));
  } else {
    out->arrays.emplace_back(name, std::move(array));
  }
}

std::string BlocksLayout(const std::vector<FeatureBlockPlan>& plans) {
  if (plans.empty()) return "";
  std::string layout = "blocks";
  for (const auto& plan : plans) {
    if (!plan.packed) {
      layout += '|' + BlockName(plan).substr(std::char_traits<char>::length(kBlockPrefix)) + ' ' +
                DTypeName(plan.dtype);
      continue;
    }
    // "packed <run> <first> <count>", then the columns' dtypes (a row's bytes).
    layout += '|' + BlockName(plan).substr(1);
    for (const ColumnSpec* spec : plan.specs) layout += std::string(" ") + DTypeName(spec->dtype);
  }
  return layout;
}

FeatureBlock ParseBlock(const std::string& name, std::shared_ptr<arrow::Array> rows) {
  FeatureBlock block;
  block.packed = name.rfind(kPackedPrefix, 0) == 0;
  const size_t prefix = std::char_traits<char>::length(block.packed ? kPackedPrefix : kBlockPrefix);
  std::istringstream(name.substr(prefix)) >> block.group >> block.first >> block.count;
  const int64_t row_bytes = rows->type()->byte_width();
  block.rows = rows->data()->buffers[1]->data() + rows->offset() * row_bytes;
  block.array = std::move(rows);
  return block;
}

Status BuildBlocks(const std::vector<FeatureBlockPlan>& plans, int64_t rows, NamedArrays* arrays) {
  for (const FeatureBlockPlan& plan : plans) {
    std::vector<int> index(plan.count);
    std::vector<const uint8_t*> values(plan.count);
    bool usable = true;
    for (int64_t k = 0; k < plan.count && usable; ++k) {
      index[k] = FindArray(*arrays, plan.specs[k]->Field());
      if (index[k] < 0 || (*arrays)[index[k]].second->length() != rows) {
        usable = false;
        break;
      }
      values[k] = PlainValues(*(*arrays)[index[k]].second, plan.specs[k]->source_dtype);
      usable = values[k] != nullptr;
    }
    if (!usable) continue;
    auto replace = [&](const std::shared_ptr<arrow::Buffer>& block, int64_t row_bytes) {
      std::sort(index.begin(), index.end());
      for (auto it = index.rbegin(); it != index.rend(); ++it) arrays->erase(arrays->begin() + *it);
      arrays->emplace_back(
          BlockName(plan),
          std::make_shared<arrow::FixedSizeBinaryArray>(
              arrow::fixed_size_binary(static_cast<int32_t>(row_bytes)), rows, block));
    };
    if (plan.packed) {
      ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::Buffer> packed,
                            arrow::AllocateBuffer(std::max<int64_t>(1, rows * plan.run.row_bytes),
                                                  RecyclingPool::Get()));
      PackRows(plan.run, values.data(), rows, packed->mutable_data());
      replace(packed, plan.run.row_bytes);
      continue;
    }
    const int width = DTypeSize(plan.dtype);
    const int64_t count = plan.count;
    // From the recycling pool: a block lives until it is written, and reusing freed blocks spares
    // the kernel zeroing fresh pages for each row group.
    ARROW_ASSIGN_OR_RAISE(
        std::shared_ptr<arrow::Buffer> matrix,
        arrow::AllocateBuffer(std::max<int64_t>(1, rows * count * width), RecyclingPool::Get()));
    uint8_t* out = matrix->mutable_data();
    // Features copied bit for bit (4 bytes, no cast): four in a row take TransposeFour, as in
    // FeaturesWriter::Prepare. The scalar loop alone was 11% of a filling epoch of 300 floats.
    std::vector<bool> plain(count);
    for (int64_t k = 0; k < count; ++k) {
      plain[k] = width == 4 && plan.specs[k]->source_dtype == plan.dtype;
    }
    for (int64_t begin = 0; begin < rows; begin += kFeatureBlockRows) {
      const int64_t end = std::min(rows, begin + kFeatureBlockRows);
      for (int64_t k = 0; k < count; ++k) {
        if (k + 4 <= count && plain[k] && plain[k + 1] && plain[k + 2] && plain[k + 3]) {
          const uint32_t* columns[4];
          for (int j = 0; j < 4; ++j) columns[j] = reinterpret_cast<const uint32_t*>(values[k + j]);
          TransposeFour(columns, reinterpret_cast<uint32_t*>(out) + k, count, begin, end);
          k += 3;
          continue;
        }
        VisitDType(plan.dtype, [&](auto out_tag) {
          using D = decltype(out_tag);
          D* dst = reinterpret_cast<D*>(out) + k;
          VisitDType(plan.specs[k]->source_dtype, [&](auto source_tag) {
            using S = decltype(source_tag);
            const S* src = reinterpret_cast<const S*>(values[k]);
            for (int64_t r = begin; r < end; ++r) dst[r * count] = Convert<D>(src[r]);
          });
        });
      }
    }
    replace(matrix, count * width);
  }
  return Status::OK();
}

bool EntryMatches(const NamedArrays& arrays, const std::vector<std::string>& stored,
                  const std::vector<FeatureBlockPlan>& plans, int64_t rows) {
  std::unordered_set<std::string> present;
  for (const auto& [name, array] : arrays) {
    if (array->length() != rows) return false;
    if (!IsBlockName(name)) {
      present.insert(name);
      continue;
    }
    const FeatureBlockPlan* match = nullptr;
    for (const auto& plan : plans) {
      if (BlockName(plan) == name) match = &plan;
    }
    const int64_t row_bytes = match == nullptr ? 0
                              : match->packed  ? match->run.row_bytes
                                               : match->count * DTypeSize(match->dtype);
    if (match == nullptr || array->type()->id() != arrow::Type::FIXED_SIZE_BINARY ||
        array->type()->byte_width() != row_bytes) {
      return false;
    }
    for (const ColumnSpec* spec : match->specs) present.insert(spec->Field());
  }
  for (const auto& field : stored) {
    if (!present.contains(field)) return false;
  }
  return true;
}

}  // namespace stoker
