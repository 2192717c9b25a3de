#include <cstring>
#include <string>
#include <vector>

#include "stoker/tensor.h"

namespace stoker {
namespace {

struct DTypeEntry {
  DType dtype;
  const char* name;
  int size;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::kBool, "bool", 1},         {DType::kInt8, "int8", 1},
    {DType::kInt16, "int16", 2},       {DType::kInt32, "int32", 4},
    {DType::kInt64, "int64", 8},       {DType::kUInt8, "uint8", 1},
    {DType::kUInt16, "uint16", 2},     {DType::kUInt32, "uint32", 4},
    {DType::kUInt64, "uint64", 8},     {DType::kFloat16, "float16", 2},
    {DType::kFloat32, "float32", 4},   {DType::kFloat64, "float64", 8},
    {DType::kBFloat16, "bfloat16", 2},
};

}  // namespace

int DTypeSize(DType dtype) { return kDTypes[static_cast<int>(dtype)].size; }

const char* DTypeName(DType dtype) { return kDTypes[static_cast<int>(dtype)].name; }

bool ParseDType(const std::string& name, DType* out) {
  for (const auto& entry : kDTypes) {
    if (name == entry.name) {
      *out = entry.dtype;
      return true;
    }
  }
  return false;
}

std::vector<std::string> DTypeNames() {
  std::vector<std::string> names;
  for (const auto& entry : kDTypes) names.emplace_back(entry.name);
  return names;
}

std::string KnownDTypes() {
  std::string out;
  for (const auto& entry : kDTypes) {
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  return out;
}

int64_t Tensor::num_elements() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

}  // namespace stoker
