#include "util/output_keys.h"

namespace stoker {

std::string LengthsKey(const std::string& name, int level) {
  return level > 0 ? name + "_lengths_" + std::to_string(level) : name + "_lengths";
}

std::string MaskKey(const std::string& name, int level) {
  return level > 0 ? name + "_mask_" + std::to_string(level) : name + "_mask";
}

std::string ValidKey(const std::string& name) { return name + "_valid"; }

std::vector<std::string> AddedKeys(const std::string& name, int lengths_levels, bool masked,
                                   int mask_levels, bool valid) {
  std::vector<std::string> keys;
  keys.reserve(lengths_levels + (masked ? mask_levels + 1 : 0) + (valid ? 1 : 0));
  for (int level = 0; level < lengths_levels; ++level) keys.push_back(LengthsKey(name, level));
  if (masked) {
    for (int level = 0; level <= mask_levels; ++level) keys.push_back(MaskKey(name, level));
  }
  if (valid) keys.push_back(ValidKey(name));
  return keys;
}

}  // namespace stoker
