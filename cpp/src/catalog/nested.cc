#include "catalog/nested.h"

#include <arrow/array.h>
#include <arrow/buffer.h>
#include <arrow/type.h>
#include <arrow/util/bitmap_ops.h>

#include <cstring>

#include "catalog/dictionary.h"
#include "util/convert.h"
#include "util/recycling_pool.h"

namespace stoker {
namespace {

bool NumericDType(arrow::Type::type id, DType* out) {
  switch (id) {
    case arrow::Type::INT8:
      *out = DType::kInt8;
      return true;
    case arrow::Type::INT16:
      *out = DType::kInt16;
      return true;
    case arrow::Type::INT32:
      *out = DType::kInt32;
      return true;
    case arrow::Type::INT64:
      *out = DType::kInt64;
      return true;
    case arrow::Type::UINT8:
      *out = DType::kUInt8;
      return true;
    case arrow::Type::UINT16:
      *out = DType::kUInt16;
      return true;
    case arrow::Type::UINT32:
      *out = DType::kUInt32;
      return true;
    case arrow::Type::UINT64:
      *out = DType::kUInt64;
      return true;
    case arrow::Type::FLOAT:
      *out = DType::kFloat32;
      return true;
    case arrow::Type::DOUBLE:
      *out = DType::kFloat64;
      return true;
    default:
      return false;
  }
}

// The rows' validity as a fresh bitmap starting at bit 0 (null when there are no nulls).
Result<std::shared_ptr<arrow::Buffer>> Validity(const arrow::ArrayData& data) {
  if (data.GetNullCount() == 0 || !data.buffers[0]) return nullptr;
  return arrow::internal::CopyBitmap(arrow::default_memory_pool(), data.buffers[0]->data(),
                                     data.offset, data.length);
}

// Offsets of rows [offset, offset + length] as int64, not rebased (the values are shared).
template <typename Offset>
Result<std::shared_ptr<arrow::Buffer>> WidenOffsets(const arrow::ArrayData& data) {
  ARROW_ASSIGN_OR_RAISE(auto buffer, arrow::AllocateBuffer((data.length + 1) * sizeof(int64_t),
                                                           RecyclingPool::Get()));
  const Offset* from = data.GetValues<Offset>(1);
  auto* to = reinterpret_cast<int64_t*>(buffer->mutable_data());
  for (int64_t i = 0; i <= data.length; ++i) to[i] = from[i];
  return std::shared_ptr<arrow::Buffer>(std::move(buffer));
}

bool IsLarge(arrow::Type::type id) {
  return id == arrow::Type::LARGE_STRING || id == arrow::Type::LARGE_BINARY ||
         id == arrow::Type::LARGE_LIST;
}

Status CannotConform(const arrow::DataType& from, const arrow::DataType& to,
                     const std::string& column, const std::string& where) {
  return MakeError(ErrorKind::kSchemaMismatch, "column '" + column + "' is " + from.ToString() +
                                                   " in " + where + ", which cannot be read as " +
                                                   to.ToString());
}

}  // namespace

Result<std::shared_ptr<arrow::Array>> ExtractPath(const std::shared_ptr<arrow::Array>& array,
                                                  const std::vector<PathStep>& path) {
  std::shared_ptr<arrow::Array> current = array;
  for (size_t i = 0; i < path.size(); ++i) {
    const PathStep& step = path[i];
    if (step.kind == PathStep::kChild) {
      if (current->type_id() != arrow::Type::STRUCT) {
        return Status::TypeError("expected a struct above '", step.name, "', found ",
                                 current->type()->ToString());
      }
      const auto& parent = static_cast<const arrow::StructArray&>(*current);
      const int index = parent.struct_type()->GetFieldIndex(step.name);
      if (index < 0) return Status::KeyError("struct has no child '", step.name, "'");
      // The child with the parent's nulls merged in: a null struct is a null leaf.
      ARROW_ASSIGN_OR_RAISE(current, parent.GetFlattenedField(index));
      continue;
    }
    // Into a list's (or map's) values: the rest of the path applies to the whole child, then the
    // list is rebuilt around it with the same offsets and nulls.
    std::shared_ptr<arrow::Array> child;
    const std::shared_ptr<arrow::ArrayData>& data = current->data();
    if (step.kind == PathStep::kElements) {
      if (current->type_id() != arrow::Type::LIST &&
          current->type_id() != arrow::Type::LARGE_LIST) {
        return Status::TypeError("expected a list, found ", current->type()->ToString());
      }
      child = arrow::MakeArray(data->child_data[0]);
    } else {
      if (current->type_id() != arrow::Type::MAP) {
        return Status::TypeError("expected a map, found ", current->type()->ToString());
      }
      const auto& map = static_cast<const arrow::MapArray&>(*current);
      child = step.kind == PathStep::kMapKeys ? map.keys() : map.items();
    }
    std::vector<PathStep> rest(path.begin() + i + 1, path.end());
    ARROW_ASSIGN_OR_RAISE(child, ExtractPath(child, rest));
    const bool large = current->type_id() == arrow::Type::LARGE_LIST;
    auto type = large ? arrow::large_list(child->type()) : arrow::list(child->type());
    return arrow::MakeArray(
        arrow::ArrayData::Make(type, data->length, {data->buffers[0], data->buffers[1]},
                               {child->data()}, data->null_count, data->offset));
  }
  return current;
}

Result<std::shared_ptr<arrow::Array>> ConformArray(const std::shared_ptr<arrow::Array>& array,
                                                   const std::shared_ptr<arrow::DataType>& type,
                                                   const std::string& column,
                                                   const std::string& where) {
  const arrow::DataType& from = *array->type();
  if (from.Equals(*type)) return array;
  if (from.id() == arrow::Type::NA) {
    return arrow::MakeArrayOfNull(type, array->length());
  }
  if (from.id() == arrow::Type::DICTIONARY) {
    STOKER_ASSIGN_OR_RAISE(
        auto plain,
        MaterializeDictionary(static_cast<const arrow::DictionaryArray&>(*array), column, where));
    return ConformArray(plain, type, column, where);
  }
  const arrow::ArrayData& data = *array->data();
  DType source;
  DType target;
  if (NumericDType(from.id(), &source) && NumericDType(type->id(), &target)) {
    const int64_t n = data.length;
    STOKER_ASSIGN_OR_RAISE(auto values,
                           arrow::AllocateBuffer(n * DTypeSize(target), RecyclingPool::Get()));
    VisitDType(source, [&](auto source_tag) {
      using S = decltype(source_tag);
      VisitDType(target, [&](auto target_tag) {
        using D = decltype(target_tag);
        const S* in = data.GetValues<S>(1);
        D* out = reinterpret_cast<D*>(values->mutable_data());
        for (int64_t i = 0; i < n; ++i) out[i] = Convert<D>(in[i]);
      });
    });
    STOKER_ASSIGN_OR_RAISE(auto validity, Validity(data));
    return arrow::MakeArray(arrow::ArrayData::Make(
        type, n, {std::move(validity), std::shared_ptr<arrow::Buffer>(std::move(values))},
        data.GetNullCount()));
  }
  const bool from_strings =
      from.id() == arrow::Type::STRING || from.id() == arrow::Type::LARGE_STRING ||
      from.id() == arrow::Type::BINARY || from.id() == arrow::Type::LARGE_BINARY;
  const bool from_list = from.id() == arrow::Type::LIST || from.id() == arrow::Type::LARGE_LIST;
  const bool to_large = IsLarge(type->id());
  const bool to_strings =
      type->id() == arrow::Type::STRING || type->id() == arrow::Type::LARGE_STRING ||
      type->id() == arrow::Type::BINARY || type->id() == arrow::Type::LARGE_BINARY;
  const bool to_list = type->id() == arrow::Type::LIST || type->id() == arrow::Type::LARGE_LIST;
  // Offsets widen (32 to 64 bits), never narrow.
  if (((from_strings && to_strings) || (from_list && to_list)) &&
      (to_large || !IsLarge(from.id()))) {
    std::vector<std::shared_ptr<arrow::ArrayData>> children;
    if (from_list) {
      const auto& value_type = static_cast<const arrow::BaseListType&>(*type).value_type();
      STOKER_ASSIGN_OR_RAISE(auto values, ConformArray(arrow::MakeArray(data.child_data[0]),
                                                       value_type, column, where));
      children.push_back(values->data());
    }
    if (to_large == IsLarge(from.id())) {  // same offsets: a new type over the same buffers
      auto same = data.Copy();
      same->type = type;
      same->child_data = children;
      return arrow::MakeArray(same);
    }
    STOKER_ASSIGN_OR_RAISE(auto validity, Validity(data));
    STOKER_ASSIGN_OR_RAISE(auto offsets, WidenOffsets<int32_t>(data));
    std::vector<std::shared_ptr<arrow::Buffer>> buffers = {std::move(validity), std::move(offsets)};
    if (from_strings) buffers.push_back(data.buffers[2]);
    return arrow::MakeArray(arrow::ArrayData::Make(type, data.length, std::move(buffers), children,
                                                   data.GetNullCount()));
  }
  return CannotConform(from, *type, column, where);
}

}  // namespace stoker
