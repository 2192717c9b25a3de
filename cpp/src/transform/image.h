// Image decoding (libjpeg-turbo, libspng, libwebp) and the pixel kernels behind the image ops.
//
// An image is a uint8 tensor [height, width, channels] with 1 (L), 3 (RGB) or 4 (RGBA) channels,
// row-major and interleaved. The kernels follow Pillow's arithmetic (the reference the tests hold
// them to): resize is Pillow's separable convolution resampler with its 22-bit fixed-point
// coefficients; RGBA is resized premultiplied like Pillow; L from colour uses ITU-R 601-2 luma with
// Pillow's rounding. All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "stoker/error.h"
#include "transform/value.h"
#include "util/philox.h"

namespace stoker::transform {

enum class ImageFormat { kUnknown, kJpeg, kPng, kWebp };

struct CropBox {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
};

/// The format from the file's magic bytes.
ImageFormat SniffImageFormat(std::string_view bytes);

struct ImageDecodeOptions {
  int channels = 3;         // 1 (L), 3 (RGB) or 4 (RGBA; alpha 255 where the file has none)
  bool apply_exif = false;  // rotate/flip by the EXIF orientation tag (JPEG, PNG, WebP)
  int64_t min_height = 0;   // JPEG only: decode at 1/2, 1/4 or 1/8 scale in the DCT domain
  int64_t min_width = 0;    //   when the result stays at least this large (Pillow's draft rule)
  int64_t max_pixels = int64_t{1} << 28;  // larger images are refused before decoding
  int scale_denominator = 0;  // JPEG only: decode at exactly 1/n (a JpegScaleSupported n) when set
};

/// Decodes a JPEG, PNG or WebP file into `out` (uint8 [h, w, channels]); CMYK and YCCK JPEGs are
/// converted as Pillow's convert("RGB") / ("L") / ("RGBA") does. A corrupt or truncated file is a
/// kCorruptFile error, a valid one stoker does not decode (lossless, hierarchical or 12-bit JPEG,
/// animated WebP, GIF, BMP, TIFF, JPEG 2000, AVIF, HEIF, more than max_pixels) kUnsupportedInput;
/// the message gives the reason. A failure leaves nothing behind that changes how the thread
/// decodes its next image.
Status DecodeImage(std::string_view bytes, const ImageDecodeOptions& requested, Value* out);

/// Decodes the part of a JPEG that `box` (inside the image) needs, at full size: rows above the box
/// are skipped and columns outside it cropped (libjpeg's jpeg_skip_scanlines and
/// jpeg_crop_scanline, to iMCU boundaries, with a margin so that the upsampler's edges fall outside
/// the box). The pixels inside the box are the full decode's, byte for byte; the rest of the file
/// is still entropy-decoded, so a corrupt or truncated file fails as DecodeImage does. `out` is the
/// decoded window [h, w, C]; `window` its place in the image. kNotImplemented when the options
/// need the full decode (a channel conversion, EXIF, a scale).
Status DecodeJpegRegion(std::string_view bytes, const ImageDecodeOptions& options,
                        const CropBox& box, Value* out, CropBox* window);

/// A JPEG's size from its header (no decoding); false when `bytes` is not a readable JPEG.
bool JpegSize(std::string_view bytes, int64_t* height, int64_t* width);

/// Whether libjpeg-turbo decodes at 1/n in the DCT domain (tjGetScalingFactors lists 1/n).
bool JpegScaleSupported(int denominator);

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

/// A source rectangle in pixel coordinates, fractional (Pillow's `box`): [left, right) x [top,
/// bottom).
struct ResizeBox {
  double left = 0.0;
  double top = 0.0;
  double right = 0.0;
  double bottom = 0.0;
};

/// ResizeImage of the region `box` of the image, Pillow's `Image.resize(size, filter, box)`: the
/// filter is centred on the box's sample points and may read pixels just outside the box (clamped
/// to the image). Used after a DCT-scaled JPEG decode, where a crop's edges fall between pixels.
void ResizeImageBox(const uint8_t* src, int64_t height, int64_t width, int channels,
                    int64_t src_stride, const ResizeBox& box, uint8_t* dst, int64_t out_height,
                    int64_t out_width, Interpolation interpolation, bool antialias);

/// The instruction sets the resampler can use, in increasing order. Every level gives the same
/// bytes (integer arithmetic in the same order of taps); they differ only in speed.
enum class SimdLevel { kScalar = 0, kSse41 = 1 };

/// The level ResizeImage runs at: the best this CPU supports (checked once, at first use), capped
/// by SetSimdLevelForTesting.
SimdLevel ActiveSimdLevel();

/// Caps the level (tests compare every level with the scalar kernels); nullopt removes the cap.
void SetSimdLevelForTesting(std::optional<SimdLevel> level);

/// Mirrors each row of an [h, w, 3] uint8 image (horizontal flip), SSE4.1 where active.
void MirrorRgbRows(const uint8_t* src, uint8_t* dst, int64_t h, int64_t w);

/// [count, 3] -> [3, count] bytes (HWC -> CHW), SSE4.1 where active.
void DeinterleaveRgb(const uint8_t* src, uint8_t* dst, int64_t count);

/// torchvision's RandomResizedCrop.get_params: up to 10 draws of an area fraction in `scale` and a
/// log-uniform aspect ratio in `ratio`; the first box that fits wins, else the centre crop clamped
/// to the ratio range.
CropBox RandomResizedCropBox(int64_t height, int64_t width, double scale_min, double scale_max,
                             double ratio_min, double ratio_max, PhiloxStream* stream);

}  // namespace stoker::transform
