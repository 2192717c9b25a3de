// Image ops against references: files written by libjpeg-turbo, libspng and libwebp themselves,
// hand-computed resampling of small gradients, exact crops/flips/pads, Philox determinism.
#include "transform/image.h"

#include <spng.h>
#include <turbojpeg.h>
#include <webp/encode.h>

#include <cmath>
#include <cstdio>  // jpeglib.h needs FILE
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>

#include "transform/test_util_internal.h"

extern "C" {
#include <jpeglib.h>
}

namespace stoker::transform {
namespace {

using test_util::Bytes;
using test_util::MakeChain;
using test_util::RunChain;
using test_util::Spec;

// A smooth RGB test pattern.
std::vector<uint8_t> Pattern(int h, int w, int c) {
  std::vector<uint8_t> pixels(h * w * c);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int ch = 0; ch < c; ++ch) {
        pixels[(y * w + x) * c + ch] = static_cast<uint8_t>(
            ch == 3 ? 255 - (x + y) % 64 : (x * 255 / w + y * 7 + ch * 40) % 256);
      }
    }
  }
  return pixels;
}

std::string EncodeJpeg(const std::vector<uint8_t>& pixels, int h, int w, int c, int quality = 100,
                       int subsampling = TJSAMP_444, int flags = 0) {
  tjhandle handle = tjInitCompress();
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const int format = c == 1 ? TJPF_GRAY : TJPF_RGB;
  if (c == 1) subsampling = TJSAMP_GRAY;
  EXPECT_EQ(tjCompress2(handle, pixels.data(), w, 0, h, format, &buffer, &size, subsampling,
                        quality, flags),
            0);
  std::string out(reinterpret_cast<char*>(buffer), size);
  tjFree(buffer);
  tjDestroy(handle);
  return out;
}

std::string EncodePng(const std::vector<uint8_t>& pixels, int h, int w, int c) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = w;
  ihdr.height = h;
  ihdr.bit_depth = 8;
  ihdr.color_type = c == 1   ? SPNG_COLOR_TYPE_GRAYSCALE
                    : c == 3 ? SPNG_COLOR_TYPE_TRUECOLOR
                             : SPNG_COLOR_TYPE_TRUECOLOR_ALPHA;
  spng_set_ihdr(ctx, &ihdr);
  EXPECT_EQ(
      spng_encode_image(ctx, pixels.data(), pixels.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE), 0);
  size_t size = 0;
  int error = 0;
  void* buffer = spng_get_png_buffer(ctx, &size, &error);
  std::string out(static_cast<char*>(buffer), size);
  std::free(buffer);
  spng_ctx_free(ctx);
  return out;
}

std::string EncodeWebpLossless(const std::vector<uint8_t>& pixels, int h, int w, int c) {
  uint8_t* buffer = nullptr;
  const size_t size = c == 4 ? WebPEncodeLosslessRGBA(pixels.data(), w, h, w * 4, &buffer)
                             : WebPEncodeLosslessRGB(pixels.data(), w, h, w * 3, &buffer);
  std::string out(reinterpret_cast<char*>(buffer), size);
  WebPFree(buffer);
  return out;
}

Value Decode(const std::string& file, const std::string& mode, Params extra = {}) {
  extra["mode"] = mode;
  auto chain = MakeChain(ValueType::Bytes(), {{"decode_image", extra}});
  EXPECT_TRUE(chain.ok()) << chain.status().ToString();
  Value out;
  const Status status =
      RunChain(*chain, Value::View(ValueKind::kBytes, file.data(), file.size()), &out);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return out;
}

Status DecodeStatus(const std::string& file) {
  auto chain = MakeChain(ValueType::Bytes(), {{"decode_image", {}}});
  Value out;
  return RunChain(*chain, Value::View(ValueKind::kBytes, file.data(), file.size()), &out);
}

int MaxDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  int diff = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(int{a[i]} - int{b[i]}));
  }
  return diff;
}

Value Image(int h, int w, int c, const std::vector<uint8_t>& pixels) {
  return Value::TensorView(ElementType::kUInt8, {h, w, c}, pixels.data());
}

TEST(DecodeImage, PngRoundTripsExactlyInEveryMode) {
  for (int c : {1, 3, 4}) {
    const auto pixels = Pattern(13, 21, c);
    const Value out = Decode(EncodePng(pixels, 13, 21, c), c == 1 ? "L" : c == 3 ? "RGB" : "RGBA");
    EXPECT_EQ(out.shape(), (std::vector<int64_t>{13, 21, c}));
    EXPECT_EQ(Bytes(out), pixels) << c;
  }
}

TEST(DecodeImage, DeclaredShapeIsFixedAndCheckedPerRow) {
  const auto pixels = Pattern(13, 21, 3);
  const std::string png = EncodePng(pixels, 13, 21, 3);
  Params params;
  params["shape"] = ParamValue::List{13, 21};
  auto chain = MakeChain(ValueType::Bytes(), {{"decode_image", params}});
  ASSERT_TRUE(chain.ok()) << chain.status().ToString();
  EXPECT_EQ(chain->output_type().shape, (std::vector<int64_t>{13, 21, 3}));
  Value out;
  ASSERT_TRUE(RunChain(*chain, Value::View(ValueKind::kBytes, png.data(), png.size()), &out).ok());
  EXPECT_EQ(Bytes(out), pixels);
  params["shape"] = ParamValue::List{13, 20};
  auto wrong = MakeChain(ValueType::Bytes(), {{"decode_image", params}});
  ASSERT_TRUE(wrong.ok());
  const Status status =
      RunChain(*wrong, Value::View(ValueKind::kBytes, png.data(), png.size()), &out);
  EXPECT_EQ(GetErrorKind(status), ErrorKind::kCorruptFile);
  EXPECT_NE(status.message().find("13x21, not the declared shape 13x20"), std::string::npos)
      << status.ToString();
  params["shape"] = ParamValue::List{13};
  EXPECT_FALSE(MakeChain(ValueType::Bytes(), {{"decode_image", params}}).ok());
}

TEST(DecodeImage, ModeConversionsFollowPillow) {
  const auto rgb = Pattern(5, 7, 3);
  const std::string png = EncodePng(rgb, 5, 7, 3);
  const Value gray = Decode(png, "L");
  ASSERT_EQ(gray.shape(), (std::vector<int64_t>{5, 7, 1}));
  for (int i = 0; i < 35; ++i) {  // L = R*299/1000 + G*587/1000 + B*114/1000, rounded
    const double luma = rgb[i * 3] * 0.299 + rgb[i * 3 + 1] * 0.587 + rgb[i * 3 + 2] * 0.114;
    EXPECT_NEAR(gray.data()[i], luma, 0.5 + 1e-3) << i;
  }
  const Value rgba = Decode(png, "RGBA");
  for (int i = 0; i < 35; ++i) {
    EXPECT_EQ(rgba.data()[i * 4 + 3], 255);
    EXPECT_EQ(rgba.data()[i * 4], rgb[i * 3]);
  }
  const auto g = Pattern(4, 6, 1);
  const Value expanded = Decode(EncodePng(g, 4, 6, 1), "RGB");
  for (int i = 0; i < 24; ++i) EXPECT_EQ(expanded.data()[i * 3 + 2], g[i]);
}

TEST(DecodeImage, WebpLosslessRoundTripsExactly) {
  for (int c : {3, 4}) {
    const auto pixels = Pattern(11, 17, c);
    const Value out = Decode(EncodeWebpLossless(pixels, 11, 17, c), c == 3 ? "RGB" : "RGBA");
    EXPECT_EQ(Bytes(out), pixels);
  }
}

TEST(DecodeImage, JpegDecodesCloseToTheSource) {
  const auto pixels = Pattern(19, 27, 3);
  const Value out = Decode(EncodeJpeg(pixels, 19, 27, 3), "RGB");
  EXPECT_EQ(out.shape(), (std::vector<int64_t>{19, 27, 3}));
  EXPECT_LE(MaxDiff(Bytes(out), pixels), 12);  // quality 100, 4:4:4: only rounding noise
  const auto gray = Pattern(19, 27, 1);
  const Value gray_out = Decode(EncodeJpeg(gray, 19, 27, 1), "L");
  EXPECT_LE(MaxDiff(Bytes(gray_out), gray), 4);
}

TEST(DecodeImage, JpegDctScalingFollowsPillowsDraftRule) {
  const auto pixels = Pattern(100, 130, 3);
  const std::string jpeg = EncodeJpeg(pixels, 100, 130, 3);
  // scale = min(130 // w, 100 // h); the largest of 8, 4, 2 not above it; size ceil(dim / s).
  struct Case {
    int64_t h, w, out_h, out_w;
  } cases[] = {{60, 60, 100, 130}, {50, 65, 50, 65}, {30, 30, 50, 65},
               {25, 30, 25, 33},   {12, 16, 13, 17}, {5, 5, 13, 17}};
  for (const Case& c : cases) {
    const Value out = Decode(jpeg, "RGB", {{"draft", ParamValue::List{c.h, c.w}}});
    EXPECT_EQ(out.shape(), (std::vector<int64_t>{c.out_h, c.out_w, 3})) << c.h << "x" << c.w;
  }
  // PNG ignores the hint.
  const Value png = Decode(EncodePng(pixels, 100, 130, 3), "RGB", {{"draft", 10}});
  EXPECT_EQ(png.shape(), (std::vector<int64_t>{100, 130, 3}));
}

// Inserts an APP1 EXIF segment with one orientation tag right after the SOI marker.
std::string WithOrientation(const std::string& jpeg, int orientation) {
  const uint8_t tiff[] = {'I',
                          'I',
                          42,
                          0,
                          8,
                          0,
                          0,
                          0,  // little-endian, IFD0 at 8
                          1,
                          0,  // one entry
                          0x12,
                          0x01,
                          3,
                          0,
                          1,
                          0,
                          0,
                          0,  // tag 0x0112, SHORT, count 1
                          static_cast<uint8_t>(orientation),
                          0,
                          0,
                          0,
                          0,
                          0,
                          0,
                          0};  // no next IFD
  std::string segment = "\xFF\xE1";
  const size_t length = 2 + 6 + sizeof(tiff);
  segment += static_cast<char>(length >> 8);
  segment += static_cast<char>(length & 0xff);
  segment.append("Exif\0\0", 6);
  segment.append(reinterpret_cast<const char*>(tiff), sizeof(tiff));
  return jpeg.substr(0, 2) + segment + jpeg.substr(2);
}

TEST(DecodeImage, ExifOrientationRotatesWhenAsked) {
  // Left half black, right half white, 16x32 (h x w).
  std::vector<uint8_t> pixels(16 * 32);
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 32; ++x) pixels[y * 32 + x] = x < 16 ? 0 : 255;
  }
  const std::string jpeg = WithOrientation(EncodeJpeg(pixels, 16, 32, 1), 6);
  EXPECT_EQ(ImageExifOrientation(jpeg), 6);
  const Value plain = Decode(jpeg, "L");
  EXPECT_EQ(plain.shape(), (std::vector<int64_t>{16, 32, 1}));
  const Value rotated = Decode(jpeg, "L", {{"exif", true}});
  ASSERT_EQ(rotated.shape(), (std::vector<int64_t>{32, 16, 1}));
  // Orientation 6 means rotate 90 degrees clockwise: the left half goes to the top.
  EXPECT_LT(rotated.data()[2 * 16 + 8], 20);
  EXPECT_GT(rotated.data()[29 * 16 + 8], 235);
}

TEST(DecodeImage, CorruptAndTruncatedFilesAreErrors) {
  const auto pixels = Pattern(32, 32, 3);
  const std::string files[] = {EncodeJpeg(pixels, 32, 32, 3), EncodePng(pixels, 32, 32, 3),
                               EncodeWebpLossless(pixels, 32, 32, 3)};
  for (const std::string& file : files) {
    const Status truncated = DecodeStatus(file.substr(0, file.size() / 2));
    EXPECT_FALSE(truncated.ok());
    EXPECT_EQ(GetErrorKind(truncated), ErrorKind::kCorruptFile) << truncated.ToString();
    EXPECT_NE(truncated.message().find("decode_image (op 0 of column 'col')"), std::string::npos)
        << truncated.message();
  }
  std::string png = files[1];
  png[png.size() / 2] ^= 0x55;  // a flipped byte inside IDAT fails the CRC
  EXPECT_EQ(GetErrorKind(DecodeStatus(png)), ErrorKind::kCorruptFile);
  const Status garbage = DecodeStatus("hello, not an image");
  EXPECT_NE(garbage.message().find("not a JPEG, PNG or WebP"), std::string::npos);
  EXPECT_FALSE(DecodeStatus("").ok());
}

TEST(DecodeImage, RefusesImagesAboveThePixelLimit) {
  const auto pixels = Pattern(40, 40, 3);
  auto chain = MakeChain(ValueType::Bytes(), {{"decode_image", {{"max_pixels", 1000}}}});
  ASSERT_TRUE(chain.ok());
  const std::string png = EncodePng(pixels, 40, 40, 3);
  Value out;
  const Status status =
      RunChain(*chain, Value::View(ValueKind::kBytes, png.data(), png.size()), &out);
  EXPECT_NE(status.message().find("more than the limit"), std::string::npos) << status.ToString();
}

TEST(Resize, MatchesHandComputedPillowResampling) {
  // Box (area) 4 -> 2 averages pairs.
  const std::vector<uint8_t> row = {0, 10, 20, 30};
  std::vector<uint8_t> out(2);
  ResizeImage(row.data(), 1, 4, 1, out.data(), 1, 2, Interpolation::kArea, true);
  EXPECT_EQ(out, (std::vector<uint8_t>{5, 25}));
  // Bilinear 4 -> 2 with antialias: triangle of support 2, centre 1.0: weights .75 .75 .25 / 1.75
  // -> 12.5 / 1.75 = 7.14 -> 7; centre 3.0: inputs 1..3 weights .25 .75 .75 -> 40 / 1.75 = 22.9.
  ResizeImage(row.data(), 1, 4, 1, out.data(), 1, 2, Interpolation::kBilinear, true);
  EXPECT_EQ(out, (std::vector<uint8_t>{7, 23}));
  // Without antialias the triangle keeps support 1: centre 1.0 reads inputs 0..1 ->
  // weights .5 .5 -> 5; centre 3.0 -> 25.
  ResizeImage(row.data(), 1, 4, 1, out.data(), 1, 2, Interpolation::kBilinear, false);
  EXPECT_EQ(out, (std::vector<uint8_t>{5, 25}));
  // Bilinear 2 -> 4 upsampling: centres .25 .75 1.25 1.75 -> 0, 25, 75, 100.
  const std::vector<uint8_t> two = {0, 100};
  std::vector<uint8_t> four(4);
  ResizeImage(two.data(), 1, 2, 1, four.data(), 1, 4, Interpolation::kBilinear, true);
  EXPECT_EQ(four, (std::vector<uint8_t>{0, 25, 75, 100}));
  // Vertical works the same way (a column).
  ResizeImage(row.data(), 4, 1, 1, out.data(), 2, 1, Interpolation::kArea, true);
  EXPECT_EQ(out, (std::vector<uint8_t>{5, 25}));
}

TEST(Resize, OpSizesAndConstantImages) {
  const std::vector<uint8_t> flat(30 * 50 * 3, 77);
  auto chain =
      MakeChain(ValueType::Tensor(ElementType::kUInt8, {-1, -1, 3}), {{"resize", {{"size", 20}}}});
  ASSERT_TRUE(chain.ok());
  Value out;
  ASSERT_OK(RunChain(*chain, Image(30, 50, 3, flat), &out));
  // The shorter side becomes 20, the longer int(20 * 50 / 30) = 33.
  EXPECT_EQ(out.shape(), (std::vector<int64_t>{20, 33, 3}));
  for (int64_t i = 0; i < out.size_bytes(); ++i) ASSERT_EQ(out.data()[i], 77);
  auto fixed =
      MakeChain(ValueType::Tensor(ElementType::kUInt8, {-1, -1, 4}),
                {{"resize", {{"size", ParamValue::List{7, 9}}, {"interpolation", "area"}}}});
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->output_type(), ValueType::Tensor(ElementType::kUInt8, {7, 9, 4}));
}

TEST(Resize, OpaqueRgbaResizesLikeRgb) {
  const auto rgba = Pattern(23, 31, 4);
  std::vector<uint8_t> opaque = rgba, rgb(23 * 31 * 3);
  for (int i = 0; i < 23 * 31; ++i) {
    opaque[i * 4 + 3] = 255;
    std::memcpy(&rgb[i * 3], &rgba[i * 4], 3);
  }
  std::vector<uint8_t> out4(10 * 12 * 4), out3(10 * 12 * 3);
  ResizeImage(opaque.data(), 23, 31, 4, out4.data(), 10, 12, Interpolation::kBilinear, true);
  ResizeImage(rgb.data(), 23, 31, 3, out3.data(), 10, 12, Interpolation::kBilinear, true);
  for (int i = 0; i < 120; ++i) {
    EXPECT_EQ(0, std::memcmp(&out4[i * 4], &out3[i * 3], 3));
    EXPECT_EQ(out4[i * 4 + 3], 255);
  }
}

// A 4x5 single-channel image with values 10*y + x.
std::vector<uint8_t> Grid() {
  std::vector<uint8_t> pixels(20);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 5; ++x) pixels[y * 5 + x] = static_cast<uint8_t>(10 * y + x);
  }
  return pixels;
}

std::vector<uint8_t> ApplyOne(const std::string& name, Params params,
                              const std::vector<uint8_t>& pixels, int h, int w, int c,
                              std::vector<int64_t>* shape = nullptr, uint64_t row = 0,
                              uint64_t epoch = 0) {
  auto chain =
      MakeChain(ValueType::Tensor(ElementType::kUInt8, {-1, -1, c}), {{name, std::move(params)}});
  EXPECT_TRUE(chain.ok()) << chain.status().ToString();
  Value out;
  const Status status = RunChain(*chain, Image(h, w, c, pixels), &out, row, epoch);
  EXPECT_TRUE(status.ok()) << status.ToString();
  if (shape != nullptr) *shape = out.shape();
  return Bytes(out);
}

// A lent buffer receives the chain's last output in place; earlier steps may take the loan
// (then the output lands in the value's own buffer), or the last op may return a view: the
// bytes are the same either way, and the caller copies when data() is not the lent buffer.
TEST(Value, LentBufferGetsTheLastOutputOrIsLeftAlone) {
  const auto rgb = Pattern(4, 5, 3);
  const std::vector<std::vector<Spec>> chains = {
      {{"to_chw", {}}},
      {{"horizontal_flip", {{"p", 1.0}}}, {"to_chw", {}}},
      {{"horizontal_flip", {{"p", 1.0}}}, {"vertical_flip", {{"p", 1.0}}}, {"to_chw", {}}},
      {{"to_chw", {}}, {"horizontal_flip", {{"p", 0.0}}}},  // the last op returns a view
  };
  for (const auto& specs : chains) {
    auto chain = MakeChain(ValueType::Tensor(ElementType::kUInt8, {4, 5, 3}), specs);
    ASSERT_TRUE(chain.ok()) << chain.status().ToString();
    Value plain;
    ASSERT_OK(RunChain(*chain, Image(4, 5, 3, rgb), &plain));
    std::vector<uint8_t> slot(plain.size_bytes(), 0xAB);
    Value lent;
    lent.Lend(slot.data(), static_cast<int64_t>(slot.size()));
    ASSERT_OK(RunChain(*chain, Image(4, 5, 3, rgb), &lent));
    lent.Lend(nullptr, 0);
    EXPECT_EQ(Bytes(lent), Bytes(plain));
    if (lent.data() == slot.data()) {
      EXPECT_EQ(slot, Bytes(plain));
    }
    // A loan too small for the output is not taken.
    std::vector<uint8_t> small(4, 0xAB);
    Value refused;
    refused.Lend(small.data(), static_cast<int64_t>(small.size()));
    ASSERT_OK(RunChain(*chain, Image(4, 5, 3, rgb), &refused));
    EXPECT_NE(refused.data(), small.data());
    EXPECT_EQ(small, std::vector<uint8_t>(4, 0xAB));
    EXPECT_EQ(Bytes(refused), Bytes(plain));
  }
  // The single-op chain writes straight into the loan.
  auto chw = MakeChain(ValueType::Tensor(ElementType::kUInt8, {4, 5, 3}), {{"to_chw", {}}});
  ASSERT_TRUE(chw.ok());
  std::vector<uint8_t> slot(60);
  Value out;
  out.Lend(slot.data(), 60);
  ASSERT_OK(RunChain(*chw, Image(4, 5, 3, rgb), &out));
  EXPECT_EQ(out.data(), slot.data());
}

TEST(Geometry, CropFlipPadAndChwAreExact) {
  const auto grid = Grid();
  std::vector<int64_t> shape;
  EXPECT_EQ(ApplyOne("center_crop", {{"size", ParamValue::List{2, 3}}}, grid, 4, 5, 1, &shape),
            (std::vector<uint8_t>{11, 12, 13, 21, 22, 23}));
  // Larger than the image: torchvision pads with zeros ((6-4)//2 = 1 row above).
  EXPECT_EQ(ApplyOne("center_crop", {{"size", ParamValue::List{6, 5}}}, grid, 4, 5, 1),
            (std::vector<uint8_t>{0,  0,  0,  0,  0,  0,  1,  2,  3,  4,  10, 11, 12, 13, 14,
                                  20, 21, 22, 23, 24, 30, 31, 32, 33, 34, 0,  0,  0,  0,  0}));
  EXPECT_EQ(ApplyOne("horizontal_flip", {{"p", 1.0}}, grid, 4, 5, 1)[0], 4);
  EXPECT_EQ(ApplyOne("vertical_flip", {{"p", 1.0}}, grid, 4, 5, 1)[0], 30);
  EXPECT_EQ(ApplyOne("horizontal_flip", {{"p", 0.0}}, grid, 4, 5, 1), grid);
  const auto padded =
      ApplyOne("pad", {{"padding", ParamValue::List{1, 2}}, {"fill", 9}}, grid, 4, 5, 1, &shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{8, 7, 1}));
  EXPECT_EQ(padded[0], 9);
  EXPECT_EQ(padded[2 * 7 + 1], 0);   // the old (0, 0)
  EXPECT_EQ(padded[5 * 7 + 5], 34);  // the old (3, 4)
  const auto edge = ApplyOne("pad", {{"padding", 2}, {"mode", "edge"}}, grid, 4, 5, 1);
  EXPECT_EQ(edge[0], 0);
  ASSERT_EQ(edge.size(), 8u * 9u);
  EXPECT_EQ(edge[7 * 9 + 8], 34);
  const auto reflect = ApplyOne("pad", {{"padding", 1}, {"mode", "reflect"}}, grid, 4, 5, 1);
  EXPECT_EQ(reflect[0], 11);  // mirror of (1, 1)
  const auto rgb = Pattern(2, 3, 3);
  const auto chw = ApplyOne("to_chw", {}, rgb, 2, 3, 3, &shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{3, 2, 3}));
  for (int ch = 0; ch < 3; ++ch) {
    for (int i = 0; i < 6; ++i) EXPECT_EQ(chw[ch * 6 + i], rgb[i * 3 + ch]);
  }
}

TEST(Normalize, Float32Float16AndBFloat16) {
  const std::vector<uint8_t> pixels = {0, 255, 51, 255, 0, 102};  // 1x2 RGB
  Params params = {{"mean", ParamValue::List{0.5, 0.0, 0.2}},
                   {"std", ParamValue::List{0.5, 1.0, 0.2}}};
  auto chain =
      MakeChain(ValueType::Tensor(ElementType::kUInt8, {1, 2, 3}), {{"normalize", params}});
  ASSERT_TRUE(chain.ok());
  EXPECT_EQ(chain->output_type(), ValueType::Tensor(ElementType::kFloat32, {1, 2, 3}));
  Value out;
  ASSERT_OK(RunChain(*chain, Image(1, 2, 3, pixels), &out));
  const float* f = out.as<float>();
  EXPECT_FLOAT_EQ(f[0], -1.0f);  // (0 - .5) / .5
  EXPECT_FLOAT_EQ(f[1], 1.0f);   // (1 - 0) / 1
  EXPECT_FLOAT_EQ(f[2], 0.0f);   // (.2 - .2) / .2
  EXPECT_FLOAT_EQ(f[3], 1.0f);
  EXPECT_FLOAT_EQ(f[5], 1.0f);  // (.4 - .2) / .2
  params["dtype"] = "float16";
  auto half = MakeChain(ValueType::Tensor(ElementType::kUInt8, {1, 2, 3}), {{"normalize", params}});
  ASSERT_OK(RunChain(*half, Image(1, 2, 3, pixels), &out));
  EXPECT_EQ(out.as<uint16_t>()[0], 0xBC00);  // -1.0
  EXPECT_EQ(out.as<uint16_t>()[1], 0x3C00);  // 1.0
  params["dtype"] = "bfloat16";
  auto brain =
      MakeChain(ValueType::Tensor(ElementType::kUInt8, {1, 2, 3}), {{"normalize", params}});
  ASSERT_OK(RunChain(*brain, Image(1, 2, 3, pixels), &out));
  EXPECT_EQ(out.element(), ElementType::kBFloat16);
  EXPECT_EQ(out.as<uint16_t>()[0], 0xBF80);  // -1.0
  EXPECT_EQ(out.as<uint16_t>()[1], 0x3F80);  // 1.0
  // Three means for a one-channel image: an error at open time.
  auto wrong =
      MakeChain(ValueType::Tensor(ElementType::kUInt8, {-1, -1, 1}), {{"normalize", params}});
  EXPECT_EQ(GetErrorKind(wrong.status()), ErrorKind::kInvalidOption);
}

TEST(RandomOps, SameKeySameCropOtherEpochOtherCrop) {
  const auto pixels = Pattern(40, 50, 3);
  std::set<std::string> across_epochs;  // (a set of vectors trips a GCC 12 -O3 warning)
  for (uint64_t epoch = 0; epoch < 6; ++epoch) {
    const auto a = ApplyOne("random_crop", {{"size", 16}}, pixels, 40, 50, 3, nullptr, 5, epoch);
    const auto b = ApplyOne("random_crop", {{"size", 16}}, pixels, 40, 50, 3, nullptr, 5, epoch);
    EXPECT_EQ(a, b);
    across_epochs.insert(std::string(a.begin(), a.end()));
  }
  EXPECT_GT(across_epochs.size(), 3u);
  std::set<std::string> across_rows;
  for (uint64_t row = 0; row < 6; ++row) {
    const auto crop = ApplyOne("random_crop", {{"size", 16}}, pixels, 40, 50, 3, nullptr, row);
    across_rows.insert(std::string(crop.begin(), crop.end()));
  }
  EXPECT_GT(across_rows.size(), 3u);
  // The op index is part of the key: the same op at another position draws differently.
  RowContext ctx{7, 0, 5, 0};
  RowContext other = ctx;
  other.op_index = 1;
  EXPECT_NE(ctx.Stream().Next64(), other.Stream().Next64());
  RowContext same = ctx;
  EXPECT_EQ(ctx.Stream().Next64(), same.Stream().Next64());
}

TEST(RandomOps, RandomResizedCropBoxesFollowTorchvisionsRule) {
  int fallbacks = 0;
  for (uint64_t row = 0; row < 500; ++row) {
    PhiloxStream stream = RowContext{1, 0, row, 0}.Stream();
    const CropBox box = RandomResizedCropBox(120, 90, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, &stream);
    ASSERT_GE(box.top, 0);
    ASSERT_GE(box.left, 0);
    ASSERT_GT(box.height, 0);
    ASSERT_GT(box.width, 0);
    ASSERT_LE(box.top + box.height, 120);
    ASSERT_LE(box.left + box.width, 90);
    const double area = static_cast<double>(box.height) * box.width / (120.0 * 90.0);
    const double ratio = static_cast<double>(box.width) / box.height;
    if (box.height == 120 && box.width == 90) {
      ++fallbacks;
      continue;
    }
    // Rounding of w and h to integers moves area and ratio slightly.
    EXPECT_GE(area, 0.08 * 0.9);
    EXPECT_LE(area, 1.0);
    EXPECT_GE(ratio, 0.75 * 0.9);
    EXPECT_LE(ratio, 4.0 / 3.0 * 1.1);
  }
  EXPECT_LT(fallbacks, 50);
  // No draw can fit (area 100% at ratio 2 on a square): the centre fallback clamps the ratio.
  PhiloxStream stream = RowContext{}.Stream();
  const CropBox box = RandomResizedCropBox(64, 64, 1.0, 1.0, 2.0, 2.0, &stream);
  EXPECT_EQ(box.width, 64);
  EXPECT_EQ(box.height, 32);  // round(64 / 2)
  EXPECT_EQ(box.top, 16);
  EXPECT_EQ(box.left, 0);
}

TEST(RandomOps, RandomResizedCropOpOutputsTheSizeAndIsKeyed) {
  const auto pixels = Pattern(60, 80, 3);
  std::vector<int64_t> shape;
  const auto a = ApplyOne("random_resized_crop", {{"size", ParamValue::List{24, 32}}}, pixels, 60,
                          80, 3, &shape, 9);
  EXPECT_EQ(shape, (std::vector<int64_t>{24, 32, 3}));
  EXPECT_EQ(a, ApplyOne("random_resized_crop", {{"size", ParamValue::List{24, 32}}}, pixels, 60, 80,
                        3, nullptr, 9));
  EXPECT_NE(a, ApplyOne("random_resized_crop", {{"size", ParamValue::List{24, 32}}}, pixels, 60, 80,
                        3, nullptr, 9, 1));
}

TEST(ImageOps, WrongInputsAreErrorsAtOpenTime) {
  auto on_bytes = MakeChain(ValueType::Bytes(), {{"resize", {{"size", 8}}}});
  ASSERT_FALSE(on_bytes.ok());
  EXPECT_EQ(GetErrorKind(on_bytes.status()), ErrorKind::kUnsupportedType);
  EXPECT_NE(on_bytes.status().message().find("column 'col', op 0 'resize'"), std::string::npos)
      << on_bytes.status().message();
  auto float_resize =
      MakeChain(ValueType::Tensor(ElementType::kFloat32, {-1, -1, 3}), {{"resize", {{"size", 8}}}});
  EXPECT_FALSE(float_resize.ok());
  auto too_small = MakeChain(ValueType::Tensor(ElementType::kUInt8, {10, 10, 3}),
                             {{"random_crop", {{"size", 16}}}});
  EXPECT_FALSE(too_small.ok());
  auto bad_mode = MakeOp("decode_image", {{"mode", "CMYK"}});
  EXPECT_NE(bad_mode.status().message().find("parameter 'mode'"), std::string::npos);
  auto bad_scale =
      MakeOp("random_resized_crop", {{"size", 8}, {"scale", ParamValue::List{0.5, 0.1}}});
  EXPECT_FALSE(bad_scale.ok());
  auto bad_p = MakeOp("horizontal_flip", {{"p", 2}});
  EXPECT_FALSE(bad_p.ok());
  // A variable-size output where a fixed one is needed.
  auto variable = MakeChain(ValueType::Bytes(), {{"decode_image", {}}, {"resize", {{"size", 8}}}},
                            {.require_fixed_shape = true});
  ASSERT_FALSE(variable.ok());
  EXPECT_NE(variable.status().message().find("needs a fixed shape"), std::string::npos);
  auto fixed =
      MakeChain(ValueType::Bytes(),
                {{"decode_image", {}}, {"resize", {{"size", 8}}}, {"center_crop", {{"size", 8}}}},
                {.require_fixed_shape = true});
  EXPECT_TRUE(fixed.ok()) << fixed.status().ToString();
}

// ------------------------------------------------------------------- SIMD resampler == scalar

// Noise, so that every tap's weight shows in the sum.
std::vector<uint8_t> Noise(int64_t h, int64_t w, int c, uint32_t seed) {
  std::vector<uint8_t> pixels(h * w * c);
  uint32_t state = seed * 2654435761u + 1;
  for (auto& p : pixels) {
    state = state * 1664525u + 1013904223u;
    p = static_cast<uint8_t>(state >> 24);
  }
  return pixels;
}

TEST(Resize, EverySimdLevelGivesTheScalarBytes) {
  struct Case {
    int64_t h, w, out_h, out_w;
  } cases[] = {{375, 500, 224, 224},
               {120, 97, 31, 224},
               {7, 5, 3, 2},
               {1, 3, 1, 1},
               {5, 2, 9, 1},
               {64, 64, 64, 17},
               {40, 9, 40, 3},
               {33, 257, 5, 200},
               // Many vertical taps (odd and even counts), and more than the SIMD row takes.
               {300, 50, 20, 50},
               {301, 18, 14, 18},
               {1200, 17, 9, 17}};
  const SimdLevel best = ActiveSimdLevel();
  for (const Case& k : cases) {
    for (int c : {1, 3, 4}) {
      for (auto interpolation : {Interpolation::kBilinear, Interpolation::kArea}) {
        for (bool antialias : {true, false}) {
          // A crop of a wider image (stride) whose right edge is the buffer's end.
          const int64_t pad = 3, stride = (k.w + pad) * c;
          const auto src = Noise(k.h, k.w + pad, c, static_cast<uint32_t>(k.h * 131 + k.w + c));
          const uint8_t* region = src.data() + pad * c;
          std::vector<uint8_t> want(k.out_h * k.out_w * c), got(want.size());
          SetSimdLevelForTesting(SimdLevel::kScalar);
          ResizeImage(region, k.h, k.w, c, want.data(), k.out_h, k.out_w, interpolation, antialias,
                      stride);
          for (SimdLevel level : {SimdLevel::kSse41}) {
            if (level > best) continue;
            SetSimdLevelForTesting(level);
            std::fill(got.begin(), got.end(), 0);
            ResizeImage(region, k.h, k.w, c, got.data(), k.out_h, k.out_w, interpolation, antialias,
                        stride);
            EXPECT_EQ(got, want) << k.h << "x" << k.w << "->" << k.out_h << "x" << k.out_w
                                 << " c=" << c << " level=" << static_cast<int>(level);
          }
        }
      }
    }
  }
  SetSimdLevelForTesting(std::nullopt);
  EXPECT_EQ(ActiveSimdLevel(), best);
}

TEST(Geometry, SimdFlipAndChwGiveTheScalarBytes) {
  for (int64_t w : {1, 5, 6, 7, 11, 16, 17, 31, 224, 225}) {
    const int64_t h = 3;
    const auto src = Noise(h, w, 3, static_cast<uint32_t>(w));
    std::vector<uint8_t> mirrored(src.size()), chw(src.size());
    for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kSse41}) {
      SetSimdLevelForTesting(level);
      MirrorRgbRows(src.data(), mirrored.data(), h, w);
      DeinterleaveRgb(src.data(), chw.data(), h * w);
      for (int64_t y = 0; y < h; ++y) {
        for (int64_t x = 0; x < w; ++x) {
          for (int ch = 0; ch < 3; ++ch) {
            ASSERT_EQ(mirrored[(y * w + x) * 3 + ch], src[(y * w + (w - 1 - x)) * 3 + ch])
                << "w=" << w << " level=" << static_cast<int>(level);
            ASSERT_EQ(chw[ch * h * w + y * w + x], src[(y * w + x) * 3 + ch]) << "w=" << w;
          }
        }
      }
    }
  }
  SetSimdLevelForTesting(std::nullopt);
}

TEST(Resize, BoxResizeOfTheWholeImageIsResize) {
  const auto src = Noise(50, 70, 3, 5);
  std::vector<uint8_t> a(20 * 30 * 3), b(a.size()), shifted(a.size());
  ResizeImage(src.data(), 50, 70, 3, a.data(), 20, 30, Interpolation::kBilinear, true);
  ResizeImageBox(src.data(), 50, 70, 3, 0, {0, 0, 70, 50}, b.data(), 20, 30,
                 Interpolation::kBilinear, true);
  EXPECT_EQ(a, b);
  ResizeImageBox(src.data(), 50, 70, 3, 0, {0.5, 0.25, 69.5, 49.75}, shifted.data(), 20, 30,
                 Interpolation::kBilinear, true);
  EXPECT_NE(a, shifted);
}

// ------------------------------------------------- decode_image fused with the resize after it

// A photo-like RGB image: smooth gradients, a few edges and fine texture.
std::vector<uint8_t> Photo(int h, int w) {
  std::vector<uint8_t> pixels(h * w * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const double u = static_cast<double>(x) / w, v = static_cast<double>(y) / h;
      const bool disc = (u - 0.6) * (u - 0.6) + (v - 0.4) * (v - 0.4) < 0.04;
      for (int ch = 0; ch < 3; ++ch) {
        double value = 128 + 90 * std::sin(6.0 * u + 2.0 * ch) * std::cos(4.0 * v - ch) +
                       12 * std::sin(0.9 * x + 0.7 * y + ch);
        if (disc) value = 40 + 60 * ch;
        pixels[(y * w + x) * 3 + ch] = static_cast<uint8_t>(std::clamp(value, 0.0, 255.0));
      }
    }
  }
  return pixels;
}

struct Compared {
  double mean = 0;
  int max = 0;
};

Compared Compare(const Value& a, const Value& b) {
  EXPECT_EQ(a.shape(), b.shape());
  Compared out;
  const int64_t n = std::min(a.size_bytes(), b.size_bytes());
  for (int64_t i = 0; i < n; ++i) {
    const int diff = std::abs(int{a.data()[i]} - int{b.data()[i]});
    out.mean += diff;
    out.max = std::max(out.max, diff);
  }
  out.mean /= std::max<int64_t>(n, 1);
  return out;
}

Value RunSpecs(const std::string& file, std::vector<test_util::Spec> specs, bool dct_scaling,
               uint64_t row = 0, Status* status_out = nullptr) {
  specs[0].params["dct_scaling"] = dct_scaling;
  auto chain = MakeChain(ValueType::Bytes(), specs);
  EXPECT_TRUE(chain.ok()) << chain.status().ToString();
  Value out;
  const Status status =
      RunChain(*chain, Value::View(ValueKind::kBytes, file.data(), file.size()), &out, row);
  if (status_out != nullptr) {
    *status_out = status;
  } else {
    EXPECT_TRUE(status.ok()) << status.ToString();
  }
  return out;
}

const std::vector<test_util::Spec> kRandomResizedCrop = {{"decode_image", {}},
                                                         {"random_resized_crop", {{"size", 48}}}};

TEST(DctScaling, FusedRandomResizedCropIsCloseToTheFullDecode) {
  const std::string jpeg = EncodeJpeg(Photo(300, 400), 300, 400, 3, 90);
  double mean_sum = 0;
  int fused_rows = 0;
  for (uint64_t row = 0; row < 40; ++row) {
    const Value fused = RunSpecs(jpeg, kRandomResizedCrop, true, row);
    const Value full = RunSpecs(jpeg, kRandomResizedCrop, false, row);
    ASSERT_EQ(fused.shape(), (std::vector<int64_t>{48, 48, 3}));
    const Compared diff = Compare(fused, full);
    // The documented tolerance (docs/user-guide.md): mean <= 4 levels, no pixel off by > 64.
    EXPECT_LE(diff.mean, 4.0) << row;
    EXPECT_LE(diff.max, 64) << row;
    if (diff.max > 0) ++fused_rows;
    mean_sum += diff.mean;
  }
  EXPECT_GT(fused_rows, 20);  // most boxes are >= 96 pixels: those decode at a reduced size
  EXPECT_LE(mean_sum / 40, 1.0);
}

TEST(DctScaling, FusedOutputIsDeterministicAcrossRunsAndThreads) {
  const std::string jpeg = EncodeJpeg(Photo(240, 320), 240, 320, 3, 90);
  std::vector<std::vector<uint8_t>> first(16);
  for (uint64_t row = 0; row < 16; ++row)
    first[row] = Bytes(RunSpecs(jpeg, kRandomResizedCrop, true, row));
  std::vector<std::vector<std::vector<uint8_t>>> per_thread(3,
                                                            std::vector<std::vector<uint8_t>>(16));
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 16; ++i) {
        const uint64_t row = (i * 7 + t * 5) % 16;  // another order per thread
        per_thread[t][row] = Bytes(RunSpecs(jpeg, kRandomResizedCrop, true, row));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 3; ++t) EXPECT_EQ(per_thread[t], first) << "thread " << t;
}

TEST(DctScaling, ResizeAndCenterCropResizeKeepTheirSizes) {
  const std::string jpeg = EncodeJpeg(Photo(301, 407), 301, 407, 3, 90);
  const std::vector<std::vector<test_util::Spec>> chains = {
      {{"decode_image", {}}, {"resize", {{"size", 64}}}},  // shorter side: 64 x int(64*407/301)
      {{"decode_image", {}}, {"resize", {{"size", ParamValue::List{40, 50}}}}},
      {{"decode_image", {}}, {"center_crop", {{"size", 280}}}, {"resize", {{"size", 32}}}},
      {{"decode_image", {}}, {"resize", {{"size", 40}, {"interpolation", "area"}}}}};
  for (const auto& specs : chains) {
    const Value fused = RunSpecs(jpeg, specs, true);
    const Value full = RunSpecs(jpeg, specs, false);
    const Compared diff = Compare(fused, full);
    EXPECT_GT(diff.max, 0) << specs[1].name;  // it did decode at a reduced size
    EXPECT_LE(diff.mean, 4.0) << specs[1].name;
    EXPECT_LE(diff.max, 64) << specs[1].name;
  }
  EXPECT_EQ(RunSpecs(jpeg, chains[0], true).shape(), (std::vector<int64_t>{64, 86, 3}));
}

TEST(DctScaling, SmallShrinksPngWebpAndPaddingCropsAreUnchanged) {
  const auto photo = Photo(120, 160);
  const std::string files[] = {EncodePng(photo, 120, 160, 3),
                               EncodeWebpLossless(photo, 120, 160, 3)};
  for (const std::string& file : files) {
    for (uint64_t row = 0; row < 8; ++row) {
      EXPECT_EQ(Bytes(RunSpecs(file, kRandomResizedCrop, true, row)),
                Bytes(RunSpecs(file, kRandomResizedCrop, false, row)));
    }
  }
  const std::string jpeg = EncodeJpeg(photo, 120, 160, 3, 90);
  // Less than half: the full decode, byte for byte.
  const std::vector<test_util::Spec> mild = {{"decode_image", {}}, {"resize", {{"size", 70}}}};
  EXPECT_EQ(Bytes(RunSpecs(jpeg, mild, true)), Bytes(RunSpecs(jpeg, mild, false)));
  // A centre crop larger than the image pads: the ops run one by one.
  const std::vector<test_util::Spec> padded = {
      {"decode_image", {}}, {"center_crop", {{"size", 200}}}, {"resize", {{"size", 20}}}};
  EXPECT_EQ(Bytes(RunSpecs(jpeg, padded, true)), Bytes(RunSpecs(jpeg, padded, false)));
}

TEST(DctScaling, ParameterIsInTheFingerprintAndErrorsAreUnchanged) {
  auto on = MakeChain(ValueType::Bytes(), {{"decode_image", {}}, {"resize", {{"size", 8}}}});
  auto off = MakeChain(ValueType::Bytes(),
                       {{"decode_image", {{"dct_scaling", false}}}, {"resize", {{"size", 8}}}});
  ASSERT_TRUE(on.ok() && off.ok());
  EXPECT_NE(on->Fingerprint(), off->Fingerprint());
  EXPECT_NE(on->Fingerprint().find("dct_scaling=true"), std::string::npos) << on->Fingerprint();
  auto bad = MakeOp("decode_image", {{"dct_scaling", "yes"}});
  EXPECT_NE(bad.status().message().find("dct_scaling"), std::string::npos);
  const std::string jpeg = EncodeJpeg(Photo(200, 200), 200, 200, 3, 90);
  Status fused_status, full_status;
  RunSpecs(jpeg.substr(0, jpeg.size() / 2), kRandomResizedCrop, true, 0, &fused_status);
  RunSpecs(jpeg.substr(0, jpeg.size() / 2), kRandomResizedCrop, false, 0, &full_status);
  EXPECT_FALSE(fused_status.ok());
  EXPECT_EQ(fused_status.message(), full_status.message());
  EXPECT_EQ(GetErrorKind(fused_status), ErrorKind::kCorruptFile);
}

TEST(DctScaling, SplitRangesRunTheOpsOneByOne) {
  // A caller that runs [0, 1) and then [1, 2) (a cached prefix) gets the full decode's bytes.
  const std::string jpeg = EncodeJpeg(Photo(200, 260), 200, 260, 3, 90);
  auto chain = MakeChain(ValueType::Bytes(), kRandomResizedCrop);
  ASSERT_TRUE(chain.ok());
  const Value in = Value::View(ValueKind::kBytes, jpeg.data(), jpeg.size());
  Value decoded, out, scratch;
  RowContext ctx{7, 0, 3, 0};
  ASSERT_OK(chain->Apply(ctx, in, &decoded, &scratch, 0, 1));
  ASSERT_OK(chain->Apply(ctx, decoded, &out, &scratch, 1));
  EXPECT_EQ(Bytes(out), Bytes(RunSpecs(jpeg, kRandomResizedCrop, false, 3)));
}

TEST(DctScaling, RegionDecodeGivesTheFullDecodesPixelsInTheBox) {
  const auto photo = Photo(173, 261);
  std::vector<uint8_t> gray(173 * 261);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = photo[i * 3 + 1];
  struct File {
    std::string bytes;
    int channels;
  };
  std::vector<File> files;
  for (int subsampling : {TJSAMP_420, TJSAMP_422, TJSAMP_444, TJSAMP_440}) {
    files.push_back({EncodeJpeg(photo, 173, 261, 3, 90, subsampling), 3});
    files.push_back({EncodeJpeg(photo, 173, 261, 3, 90, subsampling), 4});
  }
  files.push_back({EncodeJpeg(photo, 173, 261, 3, 85, TJSAMP_420, TJFLAG_PROGRESSIVE), 3});
  files.push_back({EncodeJpeg(gray, 173, 261, 1, 90), 1});
  uint32_t state = 12345;
  auto below = [&](int64_t n) {
    state = state * 1664525u + 1013904223u;
    return static_cast<int64_t>((state >> 8) % static_cast<uint32_t>(n));
  };
  for (const File& file : files) {
    ImageDecodeOptions options;
    options.channels = file.channels;
    Value full;
    ASSERT_OK(DecodeImage(file.bytes, options, &full));
    for (int trial = 0; trial < 25; ++trial) {
      CropBox box;
      box.height = 1 + below(173);
      box.width = 1 + below(261);
      box.top = below(173 - box.height + 1);
      box.left = below(261 - box.width + 1);
      Value window_pixels;
      CropBox window;
      ASSERT_OK(DecodeJpegRegion(file.bytes, options, box, &window_pixels, &window));
      ASSERT_LE(window.top, box.top);
      ASSERT_LE(window.left, box.left);
      ASSERT_GE(window.top + window.height, box.top + box.height);
      ASSERT_GE(window.left + window.width, box.left + box.width);
      const int c = file.channels;
      for (int64_t y = 0; y < box.height; ++y) {
        const uint8_t* want = full.data() + ((box.top + y) * 261 + box.left) * c;
        const uint8_t* got =
            window_pixels.data() +
            ((box.top + y - window.top) * window.width + box.left - window.left) * c;
        ASSERT_EQ(0, std::memcmp(want, got, box.width * c))
            << "channels " << c << " box " << box.top << "," << box.left << " " << box.height << "x"
            << box.width << " row " << y;
      }
    }
  }
  // A file cut short after the box fails as the full decode does.
  const std::string& jpeg = files[0].bytes;
  const std::string cut = jpeg.substr(0, jpeg.size() * 2 / 3);
  ImageDecodeOptions options;
  Value ignored;
  CropBox window;
  const Status region = DecodeJpegRegion(cut, options, {0, 0, 10, 10}, &ignored, &window);
  const Status whole = DecodeImage(cut, options, &ignored);
  ASSERT_FALSE(whole.ok());
  EXPECT_FALSE(region.ok());
  EXPECT_EQ(region.message(), whole.message());
  // Options that need the full decode say so.
  options.apply_exif = true;
  EXPECT_TRUE(
      DecodeJpegRegion(jpeg, options, {0, 0, 10, 10}, &ignored, &window).IsNotImplemented());
}

TEST(DctScaling, FusedCropsThatShrinkLessThanTwiceAreTheUnfusedBytes) {
  // Region decoding (no DCT scaling) for random_resized_crop and center_crop + resize.
  const std::string jpeg = EncodeJpeg(Photo(150, 200), 150, 200, 3, 90, TJSAMP_420);
  const std::vector<test_util::Spec> rrc = {{"decode_image", {}},
                                            {"random_resized_crop", {{"size", 120}}}};
  for (uint64_t row = 0; row < 30; ++row) {
    auto fused = MakeChain(ValueType::Bytes(), rrc);
    Value a, b, scratch;
    const Value in = Value::View(ValueKind::kBytes, jpeg.data(), jpeg.size());
    RowContext ctx{7, 0, row, 0};
    ASSERT_OK(fused->Apply(ctx, in, &a, &scratch));
    ASSERT_OK(fused->Apply(ctx, in, &b, &scratch, 0, 1));  // decode alone, then the crop
    Value c;
    ASSERT_OK(fused->Apply(ctx, b, &c, &scratch, 1));
    EXPECT_EQ(Bytes(a), Bytes(c)) << row;
  }
  const std::vector<test_util::Spec> crop = {
      {"decode_image", {}}, {"center_crop", {{"size", 100}}}, {"resize", {{"size", 64}}}};
  auto chain = MakeChain(ValueType::Bytes(), crop);
  Value a, b, c, scratch;
  const Value in = Value::View(ValueKind::kBytes, jpeg.data(), jpeg.size());
  ASSERT_OK(chain->Apply(RowContext{}, in, &a, &scratch));
  ASSERT_OK(chain->Apply(RowContext{}, in, &b, &scratch, 0, 1));
  ASSERT_OK(chain->Apply(RowContext{}, b, &c, &scratch, 1));
  EXPECT_EQ(Bytes(a), Bytes(c));
}

// ------------------------------------------------------------ CMYK and YCCK (Adobe) JPEGs

// A CMYK JPEG written by libjpeg itself, stored as CMYK or (Adobe transform 2) YCCK, 4:4:4,
// quality 100; `cmyk` holds the raw samples libjpeg stores.
std::string EncodeCmykJpeg(const std::vector<uint8_t>& cmyk, int h, int w, bool ycck) {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr errors{};
  cinfo.err = jpeg_std_error(&errors);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = w;
  cinfo.image_height = h;
  cinfo.input_components = 4;
  cinfo.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_colorspace(&cinfo, ycck ? JCS_YCCK : JCS_CMYK);  // writes the Adobe marker
  jpeg_set_quality(&cinfo, 100, TRUE);
  for (int i = 0; i < cinfo.num_components; ++i) {
    cinfo.comp_info[i].h_samp_factor = cinfo.comp_info[i].v_samp_factor = 1;
  }
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(cmyk.data()) + size_t{cinfo.next_scanline} * w * 4;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buffer), size);
  std::free(buffer);
  return out;
}

TEST(DecodeImage, CmykAndYcckJpegsDecodeAsPillowConvertsThem) {
  // Raw (Adobe-inverted) CMYK samples and the RGB Pillow gives for them, by hand: Pillow reads
  // C = 255 - raw, and R = (255 - K) - (255 - K) * C / 255.
  struct Case {
    uint8_t raw[4];
    uint8_t rgb[3];
  } cases[] = {{{255, 0, 0, 255}, {255, 0, 0}},         {{0, 0, 0, 255}, {0, 0, 0}},
               {{255, 255, 255, 0}, {0, 0, 0}},         {{255, 255, 255, 255}, {255, 255, 255}},
               {{128, 255, 255, 255}, {128, 255, 255}}, {{255, 255, 255, 128}, {128, 128, 128}},
               {{255, 0, 255, 200}, {200, 0, 200}}};
  for (bool ycck : {false, true}) {
    for (const Case& c : cases) {
      std::vector<uint8_t> cmyk(16 * 16 * 4);
      for (size_t i = 0; i < cmyk.size(); ++i) cmyk[i] = c.raw[i % 4];
      const std::string jpeg = EncodeCmykJpeg(cmyk, 16, 16, ycck);
      const Value rgb = Decode(jpeg, "RGB");
      ASSERT_EQ(rgb.shape(), (std::vector<int64_t>{16, 16, 3}));
      const Value rgba = Decode(jpeg, "RGBA");
      const Value gray = Decode(jpeg, "L");
      ASSERT_EQ(gray.shape(), (std::vector<int64_t>{16, 16, 1}));
      const double luma = c.rgb[0] * 0.299 + c.rgb[1] * 0.587 + c.rgb[2] * 0.114;
      for (int p = 0; p < 256; p += 37) {
        for (int ch = 0; ch < 3; ++ch) {
          // A flat block survives quality 100 (and YCCK's colour transform) within 2 levels.
          EXPECT_NEAR(rgb.data()[p * 3 + ch], c.rgb[ch], 2) << ycck << " " << int{c.raw[0]};
          EXPECT_EQ(rgba.data()[p * 4 + ch], rgb.data()[p * 3 + ch]);
        }
        EXPECT_EQ(rgba.data()[p * 4 + 3], 255);
        EXPECT_NEAR(gray.data()[p], luma, 3);
      }
    }
  }
}

TEST(DecodeImage, CmykJpegsTakeTheFusedAndRegionPaths) {
  const auto photo = Photo(96, 128);
  std::vector<uint8_t> cmyk(96 * 128 * 4);
  for (int i = 0; i < 96 * 128; ++i) {
    for (int ch = 0; ch < 3; ++ch) cmyk[i * 4 + ch] = photo[i * 3 + ch];
    cmyk[i * 4 + 3] = static_cast<uint8_t>(200 + i % 56);
  }
  for (bool ycck : {false, true}) {
    const std::string jpeg = EncodeCmykJpeg(cmyk, 96, 128, ycck);
    const std::vector<Spec> resize = {{"decode_image", {}},
                                      {"resize", {{"size", ParamValue::List{24, 32}}}}};
    const Compared scaled = Compare(RunSpecs(jpeg, resize, true), RunSpecs(jpeg, resize, false));
    EXPECT_LE(scaled.mean, 4.0);  // the documented dct_scaling tolerance
    // A crop shrinking by less than 2x: the region decoder declines CMYK, the bytes are unfused.
    const std::vector<Spec> crop = {
        {"decode_image", {}}, {"center_crop", {{"size", 80}}}, {"resize", {{"size", 64}}}};
    EXPECT_EQ(Bytes(RunSpecs(jpeg, crop, true)), Bytes(RunSpecs(jpeg, crop, false)));
  }
}

// --------------------------------------------- a failure leaves the thread's decoders clean

// The issue's repro: a valid JPEG with an unknown marker (0xFFBE) spliced into its header.
std::string WithBadMarker(const std::string& jpeg) {
  return jpeg.substr(0, 20) + "\xff\xbe" + jpeg.substr(20);
}

// A JPEG whose frame header claims `precision`-bit samples (libjpeg-turbo decodes 8 only).
std::string WithPrecision(const std::string& jpeg, uint8_t precision) {
  std::string out = jpeg;
  const size_t sof = out.find("\xff\xc0");
  EXPECT_NE(sof, std::string::npos);
  out[sof + 4] = static_cast<char>(precision);
  return out;
}

struct ReuseFixture {
  std::vector<std::string> good;  // JPEG 4:2:0, JPEG 4:4:4 progressive, grey JPEG, PNG, WebP
  std::vector<std::string> bad;   // each fails in a different place of a decoder
};

ReuseFixture MakeReuseFixture() {
  const auto photo = Photo(96, 128);
  std::vector<uint8_t> gray(96 * 128);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = photo[i * 3 + 1];
  ReuseFixture f;
  const std::string jpeg = EncodeJpeg(photo, 96, 128, 3, 90, TJSAMP_420);
  f.good = {jpeg, EncodeJpeg(photo, 96, 128, 3, 85, TJSAMP_444, TJFLAG_PROGRESSIVE),
            EncodeJpeg(gray, 96, 128, 1, 90), EncodePng(photo, 96, 128, 3),
            EncodeWebpLossless(photo, 96, 128, 3)};
  std::string flipped = jpeg;  // entropy-coded data damaged past the middle
  for (size_t i = flipped.size() * 2 / 3; i < flipped.size() * 2 / 3 + 64; ++i) flipped[i] ^= 0x5A;
  const std::string& png = f.good[3];
  std::string bad_png = png;
  bad_png[png.size() / 2] ^= 0x55;
  const std::string& webp = f.good[4];
  f.bad = {WithBadMarker(jpeg),
           jpeg.substr(0, jpeg.size() / 2),  // truncated: a data warning
           flipped,
           WithPrecision(jpeg, 12),  // valid-looking but unsupported
           WithBadMarker(f.good[1]).substr(0, 300),
           bad_png,
           png.substr(0, png.size() / 2),
           webp.substr(0, webp.size() / 2),
           "not an image at all"};
  return f;
}

// The paths an image goes through: the plain decode in each mode, decode + resize (DCT-scaled),
// decode + center_crop + resize (the region decoder) and JpegSize. Every output's bytes in order.
std::vector<std::vector<uint8_t>> DecodeEveryWay(const std::string& file, Status* failure) {
  const std::vector<std::vector<Spec>> chains = {
      {{"decode_image", {{"mode", "RGB"}}}},
      {{"decode_image", {{"mode", "L"}}}},
      {{"decode_image", {{"mode", "RGBA"}}}},
      {{"decode_image", {}}, {"resize", {{"size", ParamValue::List{32, 32}}}}},
      {{"decode_image", {}}, {"center_crop", {{"size", 80}}}, {"resize", {{"size", 64}}}},
  };
  std::vector<std::vector<uint8_t>> out;
  for (const auto& specs : chains) {
    auto chain = MakeChain(ValueType::Bytes(), specs);
    EXPECT_TRUE(chain.ok()) << chain.status().ToString();
    Value value;
    const Status status =
        RunChain(*chain, Value::View(ValueKind::kBytes, file.data(), file.size()), &value);
    if (!status.ok() && failure->ok()) *failure = status;
    out.push_back(status.ok() ? Bytes(value) : std::vector<uint8_t>{});
  }
  int64_t h = 0, w = 0;
  const bool sized = JpegSize(file, &h, &w);
  out.push_back({static_cast<uint8_t>(sized), static_cast<uint8_t>(h), static_cast<uint8_t>(w)});
  return out;
}

// Runs `body` on a new thread (fresh thread_local decoders) and waits for it.
template <typename F>
void OnFreshThread(F body) {
  std::thread thread(body);
  thread.join();
}

TEST(ReuseAfterFailure, EveryFailureIsFollowedByExactGoodDecodesOnTheSameThread) {
  const ReuseFixture f = MakeReuseFixture();
  // The reference: each good file decoded on a thread that has never failed.
  std::vector<std::vector<std::vector<uint8_t>>> reference(f.good.size());
  for (size_t g = 0; g < f.good.size(); ++g) {
    OnFreshThread([&] {
      Status none;
      reference[g] = DecodeEveryWay(f.good[g], &none);
      EXPECT_TRUE(none.ok()) << g << ": " << none.ToString();
    });
  }
  // One thread, or two at once: each failing file, then every good file, on the same thread.
  for (int threads : {1, 2}) {
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (size_t b = 0; b < f.bad.size(); ++b) {
          Status failure;
          DecodeEveryWay(f.bad[(b + t) % f.bad.size()], &failure);
          EXPECT_FALSE(failure.ok()) << "bad file " << (b + t) % f.bad.size();
          for (size_t g = 0; g < f.good.size(); ++g) {
            Status none;
            EXPECT_EQ(DecodeEveryWay(f.good[g], &none), reference[g])
                << "good file " << g << " after bad file " << (b + t) % f.bad.size() << ": "
                << none.ToString();
          }
        }
      });
    }
    for (auto& worker : workers) worker.join();
  }
}

TEST(ReuseAfterFailure, TheIssuesRepro) {
  // [bad, good, good, good] through decode_image + resize([32, 32]) on one thread.
  const std::string good = EncodeJpeg(Photo(64, 80), 64, 80, 3, 90, TJSAMP_420);
  const std::vector<std::string> rows = {WithBadMarker(good), good, good, good};
  OnFreshThread([&] {
    auto chain = MakeChain(ValueType::Bytes(), {{"decode_image", {}},
                                                {"resize", {{"size", ParamValue::List{32, 32}}}}});
    ASSERT_TRUE(chain.ok());
    std::vector<bool> valid;
    for (const std::string& row : rows) {
      Value out;
      valid.push_back(
          RunChain(*chain, Value::View(ValueKind::kBytes, row.data(), row.size()), &out).ok());
    }
    EXPECT_EQ(valid, (std::vector<bool>{false, true, true, true}));
  });
}

TEST(DecodeImage, ValidButUnsupportedFilesAreNotCorrupt) {
  const std::string jpeg = EncodeJpeg(Photo(32, 48), 32, 48, 3, 90);
  const Status twelve = DecodeStatus(WithPrecision(jpeg, 12));
  EXPECT_EQ(GetErrorKind(twelve), ErrorKind::kUnsupportedInput) << twelve.ToString();
  EXPECT_NE(twelve.message().find("12-bit JPEG"), std::string::npos) << twelve.ToString();
  std::string lossless = jpeg;  // SOF3: the lossless process
  lossless[lossless.find("\xff\xc0") + 1] = static_cast<char>(0xC3);
  const Status sof3 = DecodeStatus(lossless);
  EXPECT_EQ(GetErrorKind(sof3), ErrorKind::kUnsupportedInput) << sof3.ToString();
  EXPECT_NE(sof3.message().find("lossless JPEG"), std::string::npos) << sof3.ToString();
  // The pixel limit refuses a valid image: unsupported, and the message names the parameter.
  auto chain = MakeChain(ValueType::Bytes(), {{"decode_image", {{"max_pixels", 1000}}}});
  ASSERT_TRUE(chain.ok());
  Value out;
  const Status large =
      RunChain(*chain, Value::View(ValueKind::kBytes, jpeg.data(), jpeg.size()), &out);
  EXPECT_EQ(GetErrorKind(large), ErrorKind::kUnsupportedInput) << large.ToString();
  EXPECT_NE(large.message().find("max_pixels"), std::string::npos) << large.ToString();
  // Other image formats, by their magic bytes (tests/unit/transforms/test_image_cmyk.py decodes
  // real files).
  const Status gif = DecodeStatus(std::string("GIF89a\x10\x00\x10\x00\x80\x00\x00", 13));
  EXPECT_EQ(GetErrorKind(gif), ErrorKind::kUnsupportedInput) << gif.ToString();
  EXPECT_NE(gif.message().find("GIF images are not supported"), std::string::npos);
  // Damaged files stay corrupt.
  EXPECT_EQ(GetErrorKind(DecodeStatus(WithBadMarker(jpeg))), ErrorKind::kCorruptFile);
  EXPECT_EQ(GetErrorKind(DecodeStatus(jpeg.substr(0, jpeg.size() / 2))), ErrorKind::kCorruptFile);
}

// A lent output slot after a failed row: the failure writes nothing into the previous row's
// slot, and the next row's bytes are the plain run's, in its own slot or copied from the value.
TEST(ReuseAfterFailure, LentValueAfterAFailedRow) {
  const ReuseFixture f = MakeReuseFixture();
  auto chain = MakeChain(
      ValueType::Bytes(),
      {{"decode_image", {}}, {"resize", {{"size", ParamValue::List{16, 16}}}}, {"to_chw", {}}});
  ASSERT_TRUE(chain.ok());
  Value plain;
  ASSERT_OK(
      RunChain(*chain, Value::View(ValueKind::kBytes, f.good[0].data(), f.good[0].size()), &plain));
  const std::vector<uint8_t> want = Bytes(plain);
  std::vector<std::vector<uint8_t>> slots(3, std::vector<uint8_t>(want.size(), 0xAB));
  Value out;
  const std::string* rows[3] = {&f.good[0], &f.bad[0], &f.good[0]};
  for (int r = 0; r < 3; ++r) {
    out.Lend(slots[r].data(), static_cast<int64_t>(slots[r].size()));
    const Status status =
        RunChain(*chain, Value::View(ValueKind::kBytes, rows[r]->data(), rows[r]->size()), &out);
    out.Lend(nullptr, 0);
    EXPECT_EQ(status.ok(), r != 1);
    if (status.ok() && out.data() != slots[r].data()) {
      std::memcpy(slots[r].data(), out.data(), want.size());
    }
  }
  EXPECT_EQ(slots[0], want);
  EXPECT_EQ(slots[2], want);
}

}  // namespace
}  // namespace stoker::transform
