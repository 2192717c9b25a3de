// Image decoding: JPEG through TurboJPEG, PNG through libspng, WebP through libwebp. Each library's
// error codes are turned into a Status where it is called. PNG and WebP are optional at build time
// (cmake/StokerCodecs.cmake): without one, such bytes are an UnsupportedInputError naming it.
#include <turbojpeg.h>

#include "stoker_codecs.h"
#if STOKER_HAVE_PNG
#include <spng.h>
#endif
#if STOKER_HAVE_WEBP
#include <webp/decode.h>
#endif

#include <algorithm>
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "transform/image.h"
#include "transform/op.h"
#include "transform/ops_internal.h"

// After <cstdio>; jpeglib.h is C.
extern "C" {
#include <jpeglib.h>
}

namespace stoker::transform {
namespace {

// The byte counts that libjpeg-turbo's and libjpeg's C APIs take (tjDecompress2, jpeg_mem_src).
using CUnsignedLong = unsigned long;  // NOLINT(google-runtime-int): the C APIs' own type

using internal::Corrupt;
using internal::Unsupported;

uint16_t Read16(const uint8_t* p, bool little) {
  return little ? static_cast<uint16_t>(p[0] | (p[1] << 8))
                : static_cast<uint16_t>((p[0] << 8) | p[1]);
}

uint32_t Read32(const uint8_t* p, bool little) {
  return little ? (uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) |
                   (uint32_t{p[3]} << 24))
                : ((uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) |
                   uint32_t{p[3]});
}

// The orientation tag (0x0112) of IFD0 in a TIFF-structured EXIF block; 1 if absent or malformed.
int TiffOrientation(const uint8_t* tiff, size_t size) {
  if (size < 8) return 1;
  bool little;
  if (tiff[0] == 'I' && tiff[1] == 'I') {
    little = true;
  } else if (tiff[0] == 'M' && tiff[1] == 'M') {
    little = false;
  } else {
    return 1;
  }
  const uint32_t ifd = Read32(tiff + 4, little);
  if (ifd > size - 2) return 1;
  const uint16_t entries = Read16(tiff + ifd, little);
  for (uint32_t i = 0; i < entries; ++i) {
    const size_t entry = ifd + 2 + size_t{12} * i;
    if (entry + 12 > size) return 1;
    if (Read16(tiff + entry, little) == 0x0112) {
      const int value = Read16(tiff + entry + 8, little);  // SHORT, stored left-justified
      return value >= 1 && value <= 8 ? value : 1;
    }
  }
  return 1;
}

int JpegOrientation(const uint8_t* data, size_t size) {
  size_t pos = 2;  // after SOI
  while (pos + 4 <= size && data[pos] == 0xFF) {
    const uint8_t marker = data[pos + 1];
    if (marker == 0xDA || marker == 0xD9) break;  // start of scan, end of image
    const size_t length = Read16(data + pos + 2, false);
    if (length < 2 || pos + 2 + length > size) break;
    if (marker == 0xE1 && length >= 8 && std::memcmp(data + pos + 4, "Exif\0\0", 6) == 0) {
      return TiffOrientation(data + pos + 10, length - 8);
    }
    pos += 2 + length;
  }
  return 1;
}

int WebpOrientation(const uint8_t* data, size_t size) {
  size_t pos = 12;  // after "RIFF" size "WEBP"
  while (pos + 8 <= size) {
    const uint32_t length = Read32(data + pos + 4, true);
    if (length > size - pos - 8) break;
    if (std::memcmp(data + pos, "EXIF", 4) == 0) {
      const uint8_t* tiff = data + pos + 8;
      size_t tiff_size = length;
      if (tiff_size >= 6 && std::memcmp(tiff, "Exif\0\0", 6) == 0) {  // some writers keep it
        tiff += 6;
        tiff_size -= 6;
      }
      return TiffOrientation(tiff, tiff_size);
    }
    pos += 8 + length + (length & 1);
  }
  return 1;
}

#if STOKER_HAVE_PNG
struct SpngDeleter {
  void operator()(spng_ctx* ctx) const { spng_ctx_free(ctx); }
};
using SpngPtr = std::unique_ptr<spng_ctx, SpngDeleter>;

int PngOrientation(const uint8_t* data, size_t size) {
  SpngPtr ctx(spng_ctx_new(0));
  if (!ctx || spng_set_png_buffer(ctx.get(), data, size) != 0) return 1;
  spng_exif exif{};
  if (spng_get_exif(ctx.get(), &exif) != 0) return 1;
  return TiffOrientation(reinterpret_cast<const uint8_t*>(exif.data), exif.length);
}
#else
int PngOrientation(const uint8_t*, size_t) { return 1; }
#endif

// Pillow's RGB -> L: L = R * 299/1000 + G * 587/1000 + B * 114/1000, in 16-bit fixed point.
inline uint8_t Luma(const uint8_t* rgb) {
  return static_cast<uint8_t>((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16);
}

// Converts `pixels` interleaved pixels of `from` channels into `to` channels.
void ConvertChannels(const uint8_t* src, int from, uint8_t* dst, int to, int64_t pixels) {
  for (int64_t i = 0; i < pixels; ++i, src += from, dst += to) {
    if (to == 1) {
      dst[0] = from == 1 ? src[0] : Luma(src);
    } else {
      if (from == 1) {
        dst[0] = dst[1] = dst[2] = src[0];
      } else {
        dst[0] = src[0];
        dst[1] = src[1];
        dst[2] = src[2];
      }
      if (to == 4) dst[3] = from == 4 ? src[3] : 255;
    }
  }
}

Status CheckSize(int64_t width, int64_t height, const ImageDecodeOptions& options) {
  if (width <= 0 || height <= 0) return Corrupt("image has no pixels");
  if (width * height > options.max_pixels) {
    return Unsupported("image is " + std::to_string(width) + "x" + std::to_string(height) +
                       ", more than the limit of " + std::to_string(options.max_pixels) +
                       " pixels (decode_image's max_pixels)");
  }
  return Status::OK();
}

// Pillow's CMYK -> RGB (cmyk2rgb) on what libjpeg decodes from a CMYK or YCCK JPEG. Pillow reads
// every CMYK JPEG as Adobe-inverted ("CMYK;I": C = 255 - raw), so with raw values r and
// nk = 255 - K = rK: R = nk - nk * (255 - rC) / 255, with Pillow's MULDIV255 rounding.
inline uint8_t CmykChannel(uint8_t raw, uint8_t raw_k) {
  const int tmp = (255 - raw) * raw_k + 128;
  return static_cast<uint8_t>(raw_k - (((tmp >> 8) + tmp) >> 8));
}

// Raw CMYK pixels (TJPF_CMYK) into `to` channels as Pillow's convert("RGB"), convert("RGBA")
// (alpha 255) and convert("L") (through RGB, Pillow's route for CMYK) give them.
void ConvertCmyk(const uint8_t* src, uint8_t* dst, int to, int64_t pixels) {
  for (int64_t i = 0; i < pixels; ++i, src += 4, dst += to) {
    const uint8_t rgb[3] = {CmykChannel(src[0], src[3]), CmykChannel(src[1], src[3]),
                            CmykChannel(src[2], src[3])};
    if (to == 1) {
      dst[0] = Luma(rgb);
    } else {
      dst[0] = rgb[0];
      dst[1] = rgb[1];
      dst[2] = rgb[2];
      if (to == 4) dst[3] = 255;
    }
  }
}

// Why libjpeg-turbo refuses a well-formed JPEG, from its frame header: a lossless or hierarchical
// process, or a sample precision other than 8 bits (12-bit JPEGs). Empty when the frame header is
// one it decodes, or cannot be found (the file is then corrupt).
std::string JpegUnsupportedReason(std::string_view bytes) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t size = bytes.size();
  size_t pos = 2;  // after SOI
  while (pos + 4 <= size && data[pos] == 0xFF) {
    const uint8_t marker = data[pos + 1];
    if (marker == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) break;
    const size_t length = Read16(data + pos + 2, false);
    if (length < 2 || pos + 2 + length > size) break;
    // SOF0-SOF15 but DHT (C4), JPG (C8) and DAC (CC).
    if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
      if (marker == 0xC3 || marker == 0xCB) return "lossless JPEG images are not supported";
      if (marker == 0xC5 || marker == 0xC6 || marker == 0xC7 || marker == 0xCD || marker == 0xCE ||
          marker == 0xCF) {
        return "hierarchical JPEG images are not supported";
      }
      if (length >= 3 && data[pos + 4] != 8) {
        return std::to_string(data[pos + 4]) +
               "-bit JPEG images are not supported (8-bit samples only)";
      }
      return "";
    }
    pos += 2 + length;
  }
  return "";
}

// A failed JPEG decode: kUnsupportedInput when the frame header says why (the file is valid),
// else kCorruptFile with libjpeg's `reason`.
Status JpegFailure(std::string_view bytes, const std::string& reason) {
  const std::string unsupported = JpegUnsupportedReason(bytes);
  return unsupported.empty() ? Corrupt(reason) : Unsupported(unsupported);
}

struct TjDeleter {
  void operator()(void* handle) const { tjDestroy(handle); }
};

// One handle per thread, reused: tjInitDecompress allocates a full libjpeg state. A failed call
// may leave that state mid-file (a libjpeg error in tjDecompressHeader3 returns without aborting
// the decompressor, and the next header read then continues the old file's marker parsing, so
// every later image on the thread fails): after any failure the handle is replaced.
std::unique_ptr<void, TjDeleter>& DecompressHandleSlot() {
  thread_local std::unique_ptr<void, TjDeleter> handle;
  return handle;
}

void* DecompressHandle() {
  auto& handle = DecompressHandleSlot();
  if (!handle) handle.reset(tjInitDecompress());
  return handle.get();
}

// The reason of the last failure on the thread's handle, which is then replaced.
std::string TakeHandleError(void* handle) {
  std::string reason = tjGetErrorStr2(handle);
  DecompressHandleSlot().reset();
  return reason;
}

struct JpegHeader {
  int width = 0;
  int height = 0;
  int subsampling = 0;
  int colorspace = 0;
};

// The header through the thread's handle: kCorruptFile (or kUnsupportedInput for a valid JPEG
// libjpeg-turbo does not decode) with the reason on failure.
Status ReadJpegHeader(std::string_view bytes, JpegHeader* header) {
  void* const handle = DecompressHandle();
  if (!handle) return Status::OutOfMemory("tjInitDecompress failed");
  if (tjDecompressHeader3(handle, reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<CUnsignedLong>(bytes.size()), &header->width, &header->height,
                          &header->subsampling, &header->colorspace) != 0) {
    return JpegFailure(bytes, "JPEG header: " + TakeHandleError(handle));
  }
  return Status::OK();
}

Status DecodeJpeg(std::string_view bytes, const ImageDecodeOptions& options, Value* out) {
  JpegHeader header;
  STOKER_RETURN_NOT_OK(ReadJpegHeader(bytes, &header));
  const int width = header.width, height = header.height, colorspace = header.colorspace;
  STOKER_RETURN_NOT_OK(CheckSize(width, height, options));
  // Pillow's draft rule: the largest of 1/8, 1/4, 1/2 that keeps both sides at least the target.
  int denominator = 1;
  if (options.scale_denominator > 0) {
    denominator = options.scale_denominator;
  } else if (options.min_width > 0 && options.min_height > 0) {
    const int64_t scale = std::min(width / options.min_width, height / options.min_height);
    for (int candidate : {8, 4, 2}) {
      if (scale >= candidate) {
        denominator = candidate;
        break;
      }
    }
  }
  const int out_width = (width + denominator - 1) / denominator;
  const int out_height = (height + denominator - 1) / denominator;
  const bool gray_source = colorspace == TJCS_GRAY;
  // CMYK and YCCK (Adobe) JPEGs come out as libjpeg's CMYK and are converted as Pillow does.
  const bool cmyk_source = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  int pixel_format, decoded_channels;
  if (cmyk_source) {
    pixel_format = TJPF_CMYK;
    decoded_channels = 4;
  } else if (gray_source || options.channels == 3) {
    pixel_format = gray_source ? TJPF_GRAY : TJPF_RGB;
    decoded_channels = gray_source ? 1 : 3;
  } else if (options.channels == 4) {
    pixel_format = TJPF_RGBA;  // libjpeg-turbo fills alpha with 255
    decoded_channels = 4;
  } else {
    pixel_format = TJPF_RGB;  // L from colour goes through RGB to match Pillow's convert("L")
    decoded_channels = 3;
  }
  std::vector<uint8_t> staging;
  uint8_t* target;
  if (decoded_channels == options.channels && !cmyk_source) {
    target = out->Allocate(ElementType::kUInt8, {out_height, out_width, options.channels});
  } else {
    staging.resize(static_cast<size_t>(out_width) * out_height * decoded_channels);
    target = staging.data();
  }
  void* const handle = DecompressHandle();
  if (!handle) return Status::OutOfMemory("tjInitDecompress failed");
  if (tjDecompress2(handle, reinterpret_cast<const unsigned char*>(bytes.data()),
                    static_cast<CUnsignedLong>(bytes.size()), target, out_width, 0, out_height,
                    pixel_format, 0) != 0) {
    // Warnings (a truncated file, extraneous bytes) fail too, as they do in Pillow.
    return JpegFailure(bytes, "JPEG data: " + TakeHandleError(handle));
  }
  if (!staging.empty()) {
    uint8_t* dst = out->Allocate(ElementType::kUInt8, {out_height, out_width, options.channels});
    const int64_t pixels = int64_t{out_width} * out_height;
    if (cmyk_source) {
      ConvertCmyk(staging.data(), dst, options.channels, pixels);
    } else {
      ConvertChannels(staging.data(), decoded_channels, dst, options.channels, pixels);
    }
  }
  return Status::OK();
}

// libjpeg's error handling as TurboJPEG does it: an error longjmps out with its message; a warning
// (a truncated file, extraneous bytes) is remembered and fails the decode at the end.
struct JpegErrors {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {};
  bool warning = false;
};

void JpegErrorExit(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

void JpegEmitMessage(j_common_ptr cinfo, int level) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (level < 0 && !errors->warning) {  // the first warning: the one tjGetErrorStr2 shows
    (*cinfo->err->format_message)(cinfo, errors->message);
    errors->warning = true;
  }
}

// One decompressor per thread, reused like the TurboJPEG handle.
struct RegionDecoder {
  jpeg_decompress_struct cinfo{};
  JpegErrors errors;
  RegionDecoder() {
    cinfo.err = jpeg_std_error(&errors.manager);
    errors.manager.error_exit = JpegErrorExit;
    errors.manager.emit_message = JpegEmitMessage;
    jpeg_create_decompress(&cinfo);
  }
  ~RegionDecoder() { jpeg_destroy_decompress(&cinfo); }
};

// The margin around the box, in pixels: more than the 2x upsampler's reach past an iMCU edge.
constexpr int64_t kRegionMargin = 16;

#if STOKER_HAVE_PNG
Status SpngError(const char* what, int code) {
  return Corrupt(std::string("PNG ") + what + ": " + spng_strerror(code));
}

Status DecodePng(std::string_view bytes, const ImageDecodeOptions& options, Value* out) {
  SpngPtr ctx(spng_ctx_new(0));
  if (!ctx) return Status::OutOfMemory("spng_ctx_new failed");
  int code = spng_set_png_buffer(ctx.get(), bytes.data(), bytes.size());
  if (code != 0) return SpngError("buffer", code);
  spng_ihdr ihdr{};
  if ((code = spng_get_ihdr(ctx.get(), &ihdr)) != 0) return SpngError("header", code);
  STOKER_RETURN_NOT_OK(CheckSize(ihdr.width, ihdr.height, options));
  spng_trns trns{};
  const bool has_trns = spng_get_trns(ctx.get(), &trns) == 0;
  const bool gray8 = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth <= 8 &&
                     !(has_trns && options.channels == 4);
  const int format = gray8 ? SPNG_FMT_G8 : SPNG_FMT_RGBA8;
  const int decoded_channels = gray8 ? 1 : 4;
  size_t decoded_size = 0;
  if ((code = spng_decoded_image_size(ctx.get(), format, &decoded_size)) != 0) {
    return SpngError("size", code);
  }
  const int64_t height = ihdr.height, width = ihdr.width;
  std::vector<uint8_t> staging;
  uint8_t* target;
  if (decoded_channels == options.channels) {
    target = out->Allocate(ElementType::kUInt8, {height, width, options.channels});
  } else {
    staging.resize(decoded_size);
    target = staging.data();
  }
  if ((code = spng_decode_image(ctx.get(), target, decoded_size, format, SPNG_DECODE_TRNS)) != 0) {
    return SpngError("data", code);
  }
  if (!staging.empty()) {
    uint8_t* dst = out->Allocate(ElementType::kUInt8, {height, width, options.channels});
    ConvertChannels(staging.data(), decoded_channels, dst, options.channels, width * height);
  }
  return Status::OK();
}

#else
Status DecodePng(std::string_view, const ImageDecodeOptions&, Value*) {
  return Unsupported(
      "PNG images are not supported by this build of stoker: it was built without libspng "
      "(install libspng-dev and rebuild, or install the stoker wheel, which includes it)");
}
#endif

#if STOKER_HAVE_WEBP
Status DecodeWebp(std::string_view bytes, const ImageDecodeOptions& options, Value* out) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  WebPBitstreamFeatures features;
  const VP8StatusCode header = WebPGetFeatures(data, bytes.size(), &features);
  if (header != VP8_STATUS_OK) return Corrupt("WebP header: status " + std::to_string(header));
  if (features.has_animation) return Unsupported("animated WebP images are not supported");
  STOKER_RETURN_NOT_OK(CheckSize(features.width, features.height, options));
  const int64_t height = features.height, width = features.width;
  const int decoded_channels = options.channels == 4 ? 4 : 3;
  std::vector<uint8_t> staging;
  uint8_t* target;
  const size_t decoded_size = static_cast<size_t>(width * height * decoded_channels);
  if (decoded_channels == options.channels) {
    target = out->Allocate(ElementType::kUInt8, {height, width, options.channels});
  } else {
    staging.resize(decoded_size);
    target = staging.data();
  }
  const int stride = static_cast<int>(width * decoded_channels);
  const uint8_t* decoded =
      decoded_channels == 4 ? WebPDecodeRGBAInto(data, bytes.size(), target, decoded_size, stride)
                            : WebPDecodeRGBInto(data, bytes.size(), target, decoded_size, stride);
  if (decoded == nullptr) return Corrupt("WebP data could not be decoded (corrupt or truncated)");
  if (!staging.empty()) {
    uint8_t* dst = out->Allocate(ElementType::kUInt8, {height, width, options.channels});
    ConvertChannels(staging.data(), decoded_channels, dst, options.channels, width * height);
  }
  return Status::OK();
}
#else
Status DecodeWebp(std::string_view, const ImageDecodeOptions&, Value*) {
  return Unsupported(
      "WebP images are not supported by this build of stoker: it was built without libwebp "
      "(install libwebp-dev and rebuild, or install the stoker wheel, which includes it)");
}
#endif

// Rotates/flips `image` in place (through a copy) by an EXIF orientation, like Pillow's
// ImageOps.exif_transpose.
void ApplyOrientation(int orientation, Value* image) {
  if (orientation <= 1) return;
  const int64_t h = image->shape()[0], w = image->shape()[1], c = image->shape()[2];
  std::vector<uint8_t> src(image->data(), image->data() + image->size_bytes());
  const bool swap = orientation >= 5;
  const int64_t oh = swap ? w : h, ow = swap ? h : w;
  uint8_t* dst = image->Allocate(ElementType::kUInt8, {oh, ow, c});
  for (int64_t y = 0; y < oh; ++y) {
    for (int64_t x = 0; x < ow; ++x) {
      int64_t sy, sx;
      switch (orientation) {
        case 2:
          sy = y, sx = w - 1 - x;
          break;
        case 3:
          sy = h - 1 - y, sx = w - 1 - x;
          break;
        case 4:
          sy = h - 1 - y, sx = x;
          break;
        case 5:
          sy = x, sx = y;
          break;
        case 6:
          sy = h - 1 - x, sx = y;
          break;
        case 7:
          sy = h - 1 - x, sx = w - 1 - y;
          break;
        default:
          sy = x, sx = w - 1 - y;
          break;  // 8
      }
      std::memcpy(dst + (y * ow + x) * c, src.data() + (sy * w + sx) * c, c);
    }
  }
}

// The name of an image format stoker does not decode, from the file's magic bytes; nullptr when
// the bytes are no image format it knows of.
const char* OtherImageFormat(std::string_view bytes) {
  const auto starts = [&](std::string_view magic, size_t at = 0) {
    return bytes.size() >= at + magic.size() && bytes.substr(at, magic.size()) == magic;
  };
  // Each with at least its fixed header (GIF's logical screen descriptor, TIFF's first IFD offset).
  if ((starts("GIF87a") || starts("GIF89a")) && bytes.size() >= 13) return "GIF";
  if (starts("BM") && bytes.size() >= 26) {  // and a known DIB header size
    const uint32_t dib = Read32(reinterpret_cast<const uint8_t*>(bytes.data()) + 14, true);
    if (dib == 12 || dib == 40 || dib == 52 || dib == 56 || dib == 64 || dib == 108 || dib == 124) {
      return "BMP";
    }
  }
  if ((starts(std::string_view("II*\0", 4)) || starts(std::string_view("MM\0*", 4))) &&
      bytes.size() >= 8) {
    return "TIFF";
  }
  if (starts(std::string_view("\0\0\0\x0cjP  \r\n\x87\n", 12)) ||
      starts(std::string_view("\xff\x4f\xff\x51", 4))) {
    return "JPEG 2000";
  }
  if (starts("ftypavif", 4) || starts("ftypavis", 4)) return "AVIF";
  if (starts("ftypheic", 4) || starts("ftypheix", 4) || starts("ftypmif1", 4)) return "HEIF";
  return nullptr;
}

}  // namespace

ImageFormat SniffImageFormat(std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF) return ImageFormat::kJpeg;
  if (bytes.size() >= 8 && std::memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0) return ImageFormat::kPng;
  if (bytes.size() >= 12 && std::memcmp(p, "RIFF", 4) == 0 && std::memcmp(p + 8, "WEBP", 4) == 0) {
    return ImageFormat::kWebp;
  }
  return ImageFormat::kUnknown;
}

Status DecodeJpegRegion(std::string_view bytes, const ImageDecodeOptions& options,
                        const CropBox& box, Value* out, CropBox* window) {
  if (options.apply_exif || options.scale_denominator > 1 || options.min_height > 0 ||
      options.min_width > 0) {
    return Status::NotImplemented("region decoding of a transformed JPEG");
  }
  thread_local RegionDecoder decoder;
  jpeg_decompress_struct* cinfo = &decoder.cinfo;
  JpegErrors& errors = decoder.errors;
  errors.warning = false;
  errors.message[0] = '\0';
  // Locals that live across setjmp stay untouched between it and a longjmp (or are volatile).
  volatile bool started = false;
  if (setjmp(errors.jump) != 0) {
    jpeg_abort_decompress(cinfo);  // back to the start state: the next file starts clean
    return JpegFailure(bytes,
                       std::string(started ? "JPEG data: " : "JPEG header: ") + errors.message);
  }
  jpeg_mem_src(cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<CUnsignedLong>(bytes.size()));
  jpeg_read_header(cinfo, TRUE);
  const int64_t height = cinfo->image_height, width = cinfo->image_width;
  const bool gray_source = cinfo->jpeg_color_space == JCS_GRAYSCALE;
  const int channels = options.channels;
  if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK ||
      (gray_source ? channels != 1 : channels == 1) || box.top < 0 || box.left < 0 ||
      box.height <= 0 || box.width <= 0 || box.top + box.height > height ||
      box.left + box.width > width) {
    jpeg_abort_decompress(cinfo);
    return Status::NotImplemented("region decoding needs the full decode here");
  }
  // The colour spaces TurboJPEG uses for TJPF_GRAY, TJPF_RGB and TJPF_RGBA: the same bytes.
  cinfo->out_color_space = gray_source ? JCS_GRAYSCALE : channels == 4 ? JCS_EXT_RGBA : JCS_EXT_RGB;
  started = true;
  jpeg_start_decompress(cinfo);
  const int64_t top = std::max<int64_t>(0, box.top - kRegionMargin);
  const int64_t bottom = std::min(height, box.top + box.height + kRegionMargin);
  JDIMENSION x = static_cast<JDIMENSION>(std::max<int64_t>(0, box.left - kRegionMargin));
  JDIMENSION w = static_cast<JDIMENSION>(std::min(width, box.left + box.width + kRegionMargin) -
                                         static_cast<int64_t>(x));
  jpeg_crop_scanline(cinfo, &x, &w);  // widens to iMCU boundaries
  if (top > 0) jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(top));
  const int64_t rows = bottom - top;
  const int64_t stride = int64_t{cinfo->output_width} * channels;
  uint8_t* dst = out->Allocate(ElementType::kUInt8, {rows, int64_t{cinfo->output_width}, channels});
  while (static_cast<int64_t>(cinfo->output_scanline) < bottom) {
    JSAMPROW row = dst + (static_cast<int64_t>(cinfo->output_scanline) - top) * stride;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  // The rest is still entropy-decoded (skipping lines short of the last one decodes the data
  // without transforming it; skipping to the end would stop reading), and the last line read:
  // errors and truncation show as they would in the full decode.
  const int64_t remaining = height - static_cast<int64_t>(cinfo->output_scanline);
  if (remaining > 1) jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(remaining - 1));
  if (remaining > 0) {
    thread_local std::vector<uint8_t> last;
    if (static_cast<int64_t>(last.size()) < stride) last.resize(stride);
    JSAMPROW row = last.data();
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  if (errors.warning) return Corrupt(std::string("JPEG data: ") + errors.message);
  *window = {top, static_cast<int64_t>(x), rows, static_cast<int64_t>(cinfo->output_width)};
  return Status::OK();
}

bool JpegSize(std::string_view bytes, int64_t* height, int64_t* width) {
  if (SniffImageFormat(bytes) != ImageFormat::kJpeg) return false;
  JpegHeader header;
  if (!ReadJpegHeader(bytes, &header).ok()) return false;
  *height = header.height;
  *width = header.width;
  return true;
}

bool JpegScaleSupported(int denominator) {
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  for (int i = 0; factors != nullptr && i < count; ++i) {
    if (factors[i].num == 1 && factors[i].denom == denominator) return true;
  }
  return false;
}

int ImageExifOrientation(std::string_view bytes) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kJpeg:
      return JpegOrientation(data, bytes.size());
    case ImageFormat::kPng:
      return PngOrientation(data, bytes.size());
    case ImageFormat::kWebp:
      return WebpOrientation(data, bytes.size());
    case ImageFormat::kUnknown:
      break;
  }
  return 1;
}

Status DecodeImage(std::string_view bytes, const ImageDecodeOptions& requested, Value* out) {
  ImageDecodeOptions options = requested;
  const int orientation = options.apply_exif ? ImageExifOrientation(bytes) : 1;
  if (orientation >= 5) std::swap(options.min_height, options.min_width);  // targets are upright
  Status status;
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kJpeg:
      status = DecodeJpeg(bytes, options, out);
      break;
    case ImageFormat::kPng:
      status = DecodePng(bytes, options, out);
      break;
    case ImageFormat::kWebp:
      status = DecodeWebp(bytes, options, out);
      break;
    case ImageFormat::kUnknown:
      if (const char* other = OtherImageFormat(bytes)) {
        return Unsupported(std::string(other) +
                           " images are not supported (JPEG, PNG and WebP are)");
      }
      return Corrupt("not a JPEG, PNG or WebP file (" + std::to_string(bytes.size()) + " bytes)");
  }
  STOKER_RETURN_NOT_OK(status);
  ApplyOrientation(orientation, out);
  return Status::OK();
}

}  // namespace stoker::transform
