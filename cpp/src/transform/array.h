// Encoded arrays: np.save (.npy) and np.savez / np.savez_compressed (.npz) bytes, which are what
// Petastorm's NdarrayCodec and CompressedNdarrayCodec store. Pure functions, thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "stoker/error.h"
#include "transform/value.h"

namespace stoker::transform {

/// Decodes .npy bytes (format 1.0, 2.0 or 3.0; bool, int, uint and float dtypes of either byte
/// order; C or Fortran order) into a C-order, native-endian tensor. Malformed bytes are a
/// kCorruptFile error with the reason; a valid array of a dtype with no tensor (complex, strings,
/// objects, datetimes, structured) kUnsupportedInput.
Status DecodeNpy(std::string_view bytes, Value* out);

/// Finds the member `key` + ".npy" of a .npz archive (stored or deflated; `key` may be empty when
/// the archive has one member), checks its CRC-32 and decodes it with DecodeNpy. A member
/// compressed otherwise (bzip2, lzma) is kUnsupportedInput.
Status DecodeNpz(std::string_view bytes, const std::string& key, Value* out);

}  // namespace stoker::transform
