// Helpers shared by the files of options/ (not part of the public API).
#pragma once

#include <cstdint>
#include <string>

#include "stoker/option_values.h"

namespace stoker {

/// A kInvalidOption error: `message` names the option.
inline Status Invalid(const std::string& message) {
  return MakeError(ErrorKind::kInvalidOption, message);
}

/// Python's repr(float): the shortest round-trip digits ("0.1", "1e-05", "1e+16", "nan").
std::string ReprFloat(double value);
/// Python's str(value): a string's text, another object's str(), else repr.
std::string PyStr(const OptionValue& value);
/// zlib's CRC-32 of `text`.
uint32_t Crc32(const std::string& text);

}  // namespace stoker
