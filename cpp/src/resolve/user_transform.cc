#include "resolve/user_transform.h"

#include <arrow/type.h>

#include <algorithm>
#include <set>

#include "catalog/row_group_reader.h"

namespace stoker {
namespace {

// A type as a numpy user reads it: "float32", "float32[3, 4]" (fixed-size lists), "str",
// "bytes", "list[int64]"; Arrow's own name otherwise.
std::string Describe(const arrow::DataType& type) {
  switch (type.id()) {
    case arrow::Type::HALF_FLOAT:
      return "float16";
    case arrow::Type::FLOAT:
      return "float32";
    case arrow::Type::DOUBLE:
      return "float64";
    case arrow::Type::STRING:
    case arrow::Type::LARGE_STRING:
      return "str";
    case arrow::Type::BINARY:
    case arrow::Type::LARGE_BINARY:
      return "bytes";
    case arrow::Type::FIXED_SIZE_LIST: {
      std::vector<int64_t> shape;
      const arrow::DataType* level = &type;
      while (level->id() == arrow::Type::FIXED_SIZE_LIST) {
        const auto& list = static_cast<const arrow::FixedSizeListType&>(*level);
        shape.push_back(list.list_size());
        level = list.value_type().get();
      }
      std::string out = Describe(*level) + "[";
      for (size_t i = 0; i < shape.size(); ++i) {
        out += (i ? ", " : "") + std::to_string(shape[i]);
      }
      return out + "] per row";
    }
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST:
      return "list[" + Describe(*static_cast<const arrow::BaseListType&>(type).value_type()) + "]";
    default:
      return type.ToString();
  }
}

Status TransformError(const std::string& message) {
  return MakeError(ErrorKind::kTransform, message);
}

// The transform's inputs, unless the files disagree on one of their types.
Result<std::vector<std::string>> CheckUnified(const Catalog& catalog,
                                              std::vector<std::string> inputs) {
  for (const auto& name : inputs) {
    if (std::string conflict = catalog.Conflict(name); !conflict.empty()) {
      return MakeError(ErrorKind::kSchemaMismatch,
                       conflict + " (pass transform_columns without it)");
    }
  }
  return inputs;
}

}  // namespace

Result<std::vector<std::string>> TransformInputs(
    const Catalog& catalog, const std::vector<std::string>& transform_columns) {
  const arrow::Schema& schema = *catalog.schema();
  std::vector<std::string> inputs;
  if (transform_columns.empty()) {
    for (int i = 0; i < catalog.num_file_fields(); ++i) inputs.push_back(schema.field(i)->name());
    return CheckUnified(catalog, std::move(inputs));
  }
  std::set<std::string> wanted;
  for (const auto& name : transform_columns) {
    const int index = schema.GetFieldIndex(name);
    if (index < 0 || index >= catalog.num_file_fields()) {
      std::string available;
      for (int i = 0; i < catalog.num_file_fields(); ++i) {
        available += (i ? ", " : "") + schema.field(i)->name();
      }
      return MakeError(
          index < 0 ? ErrorKind::kColumnNotFound : ErrorKind::kInvalidOption,
          "transform_columns names '" + name + "', which is " +
              (index < 0 ? "not in the dataset" : "a partition column (not passed to transform=)") +
              "; file columns: " + available);
    }
    if (!wanted.insert(name).second) {
      return MakeError(ErrorKind::kInvalidOption,
                       "column '" + name + "' is listed twice in transform_columns");
    }
  }
  for (int i = 0; i < catalog.num_file_fields(); ++i) {
    if (wanted.contains(schema.field(i)->name())) inputs.push_back(schema.field(i)->name());
  }
  return CheckUnified(catalog, std::move(inputs));
}

Result<std::shared_ptr<arrow::RecordBatch>> RunUserTransform(
    UserTransform& transform, const arrow::Schema* expected,
    const std::shared_ptr<arrow::RecordBatch>& input, const std::string& where) {
  auto result = transform.Apply(input, where);
  if (!result.ok()) {
    const Status& status = result.status();
    // The implementation names the rows; a failure without a kind is still the transform's.
    if (GetErrorKind(status)) return status;
    return TransformError(where + ": transform= failed: " + status.message());
  }
  std::shared_ptr<arrow::RecordBatch> output = std::move(*result);
  if (!output) return TransformError(where + ": transform= returned nothing");
  const arrow::Schema& schema = *output->schema();
  std::set<std::string> seen;
  for (int i = 0; i < output->num_columns(); ++i) {
    const std::string& name = schema.field(i)->name();
    if (!seen.insert(name).second) {
      return TransformError(where + ": transform= returned key '" + name + "' twice");
    }
    if (output->column(i)->length() != input->num_rows()) {
      return TransformError(where + ": transform= returned " +
                            std::to_string(output->column(i)->length()) + " rows for key '" + name +
                            "' from " + std::to_string(input->num_rows()) +
                            " input rows; every output must keep the row count (first "
                            "dimension) of its input");
    }
  }
  if (output->num_rows() != input->num_rows()) {
    return TransformError(where + ": transform= returned " + std::to_string(output->num_rows()) +
                          " rows from " + std::to_string(input->num_rows()));
  }
  if (expected == nullptr) return output;
  for (const auto& field : expected->fields()) {
    const int index = schema.GetFieldIndex(field->name());
    if (index < 0) {
      return TransformError(where + ": transform= did not return key '" + field->name() + "' (" +
                            Describe(*field->type()) +
                            "), which it returned at open; a transform must return the same keys "
                            "for every row group");
    }
    const auto& type = schema.field(index)->type();
    if (!type->Equals(*field->type())) {
      return TransformError(where + ": transform= returned key '" + field->name() + "' as " +
                            Describe(*type) + ", but as " + Describe(*field->type()) +
                            " at open; a transform must return the same dtypes and inner shapes "
                            "for every row group");
    }
  }
  for (const auto& field : schema.fields()) {
    if (expected->GetFieldIndex(field->name()) < 0) {
      return TransformError(where + ": transform= returned key '" + field->name() + "' (" +
                            Describe(*field->type()) +
                            "), which it did not return at open; a transform must return the "
                            "same keys for every row group");
    }
  }
  return output;
}

Result<std::shared_ptr<arrow::Schema>> ProbeUserTransform(
    const Catalog& catalog, UserTransform& transform,
    const std::vector<std::string>& transform_columns) {
  STOKER_ASSIGN_OR_RAISE(auto inputs, TransformInputs(catalog, transform_columns));
  if (catalog.row_groups().empty()) {
    return MakeError(ErrorKind::kEmptyDataset,
                     "the dataset has no rows: transform= cannot be run to learn its outputs");
  }
  STOKER_ASSIGN_OR_RAISE(auto whole, ReadRowGroupBatch(catalog, 0, inputs));
  auto first = whole->Slice(0, std::min<int64_t>(kTransformProbeRows, whole->num_rows()));
  const std::string where = catalog.Where(catalog.row_groups()[0]);
  STOKER_ASSIGN_OR_RAISE(
      auto output, RunUserTransform(transform, nullptr, first, where + " (first rows, at open)"));
  return output->schema();
}

}  // namespace stoker
