// Image decoding (libjpeg-turbo, libspng, libwebp) and the pixel kernels behind the image ops.
//
// An image is a uint8 tensor [height, width, channels] with 1 (L), 3 (RGB) or 4 (RGBA) channels,
// row-major and interleaved. The kernels follow Pillow's arithmetic (the reference the tests hold
// them to): resize is Pillow's separable convolution resampler with its 22-bit fixed-point
// coefficients; RGBA is resized premultiplied like Pillow; L from colour uses ITU-R 601-2 luma with
// Pillow's rounding. All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

#include "stoker/error.h"
#include "transform/value.h"
#include "util/philox.h"

namespace stoker::transform {

enum class ImageFormat { kUnknown, kJpeg, kPng, kWebp };

/// The format from the file's magic bytes.
ImageFormat SniffImageFormat(std::string_view bytes);

struct ImageDecodeOptions {
  int channels = 3;         // 1 (L), 3 (RGB) or 4 (RGBA; alpha 255 where the file has none)
  bool apply_exif = false;  // rotate/flip by the EXIF orientation tag (JPEG, PNG, WebP)
  int64_t min_height = 0;   // JPEG only: decode at 1/2, 1/4 or 1/8 scale in the DCT domain
  int64_t min_width = 0;    //   when the result stays at least this large (Pillow's draft rule)
  int64_t max_pixels = int64_t{1} << 28;  // larger images are refused before decoding
};

/// Decodes a JPEG, PNG or WebP file into `out` (uint8 [h, w, channels]). A corrupt, truncated or
/// unsupported file is a kCorruptFile error whose message gives the reason.
Status DecodeImage(std::string_view bytes, const ImageDecodeOptions& options, Value* out);

/// The EXIF orientation (1-8) of a JPEG, PNG or WebP file; 1 when absent or unreadable.
int ImageExifOrientation(std::string_view bytes);

enum class Interpolation { kBilinear, kArea };

/// Resizes an interleaved uint8 image with Pillow's resampler: bilinear = Pillow BILINEAR, area =
/// Pillow BOX; with `antialias` the filter widens by the shrink factor (Pillow's behaviour, always
/// on in Pillow), without it the filter keeps its unit support. 4 channels: premultiplied alpha.
/// `src_stride` is the byte distance between source rows (0: width * channels), so a crop of a
/// larger image is resized in place.
void ResizeImage(const uint8_t* src, int64_t height, int64_t width, int channels, uint8_t* dst,
                 int64_t out_height, int64_t out_width, Interpolation interpolation, bool antialias,
                 int64_t src_stride = 0);

struct CropBox {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
};

/// torchvision's RandomResizedCrop.get_params: up to 10 draws of an area fraction in `scale` and a
/// log-uniform aspect ratio in `ratio`; the first box that fits wins, else the centre crop clamped
/// to the ratio range.
CropBox RandomResizedCropBox(int64_t height, int64_t width, double scale_min, double scale_max,
                             double ratio_min, double ratio_max, PhiloxStream* stream);

}  // namespace stoker::transform
