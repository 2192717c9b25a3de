// Encoded arrays against bytes written the way numpy writes them (np.save headers, zip archives
// deflated with zlib like zipfile does), and the shape/dtype checks.
#include "transform/array.h"

#include <zlib.h>

#include <cstring>

#include "transform/test_util_internal.h"

namespace stoker::transform {
namespace {

using test_util::MakeChain;
using test_util::RunChain;

// np.save's format 1.0: magic, version, header length, the dict padded with spaces to a multiple
// of 64 bytes and ended by a newline, then the data.
std::string Npy(const std::string& descr, const std::string& shape, const void* data, size_t size,
                bool fortran = false) {
  std::string header = "{'descr': '" + descr +
                       "', 'fortran_order': " + (fortran ? "True" : "False") +
                       ", 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + std::string(static_cast<const char*>(data), size);
}

void Put(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// A zip archive of `members` (name, contents), deflated like np.savez_compressed.
std::string Zip(const std::vector<std::pair<std::string, std::string>>& members, bool compress) {
  std::string archive, directory;
  for (const auto& [name, contents] : members) {
    std::string stored = contents;
    if (compress) {
      z_stream stream{};
      deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
      stored.resize(deflateBound(&stream, contents.size()));
      stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(contents.data()));
      stream.avail_in = contents.size();
      stream.next_out = reinterpret_cast<Bytef*>(stored.data());
      stream.avail_out = stored.size();
      deflate(&stream, Z_FINISH);
      stored.resize(stream.total_out);
      deflateEnd(&stream);
    }
    const uint32_t crc = crc32(0, reinterpret_cast<const Bytef*>(contents.data()), contents.size());
    const uint64_t offset = archive.size();
    Put(&archive, 0x04034b50, 4);
    Put(&archive, 20, 2);
    Put(&archive, 0, 2);
    Put(&archive, compress ? 8 : 0, 2);
    Put(&archive, 0, 4);  // time, date
    Put(&archive, crc, 4);
    Put(&archive, stored.size(), 4);
    Put(&archive, contents.size(), 4);
    Put(&archive, name.size(), 2);
    Put(&archive, 0, 2);
    archive += name + stored;
    Put(&directory, 0x02014b50, 4);
    Put(&directory, 20, 2);
    Put(&directory, 20, 2);
    Put(&directory, 0, 2);
    Put(&directory, compress ? 8 : 0, 2);
    Put(&directory, 0, 4);
    Put(&directory, crc, 4);
    Put(&directory, stored.size(), 4);
    Put(&directory, contents.size(), 4);
    Put(&directory, name.size(), 2);
    Put(&directory, 0, 2);  // extra
    Put(&directory, 0, 2);  // comment
    Put(&directory, 0, 2);  // disk
    Put(&directory, 0, 2);
    Put(&directory, 0, 4);
    Put(&directory, offset, 4);
    directory += name;
  }
  const uint64_t directory_offset = archive.size();
  archive += directory;
  Put(&archive, 0x06054b50, 4);
  Put(&archive, 0, 4);
  Put(&archive, members.size(), 2);
  Put(&archive, members.size(), 2);
  Put(&archive, directory.size(), 4);
  Put(&archive, directory_offset, 4);
  Put(&archive, 0, 2);
  return archive;
}

Status ApplyTo(const std::string& op, Params params, const std::string& bytes, Value* out) {
  auto chain = MakeChain(ValueType::Bytes(), {{op, std::move(params)}});
  if (!chain.ok()) return chain.status();
  return RunChain(*chain, Value::View(ValueKind::kBytes, bytes.data(), bytes.size()), out);
}

TEST(Shape, GivesTheInt64ShapeOfEachRow) {
  ASSERT_OK_AND_ASSIGN(
      const Chain chain,
      MakeChain(ValueType::Tensor(ElementType::kUInt8, {kVariableDim, kVariableDim, 3}),
                {{"shape", {}}}));
  EXPECT_EQ(chain.output_type(), ValueType::Tensor(ElementType::kInt64, {3}));
  const uint8_t pixels[2 * 5 * 3] = {};
  Value out;
  ASSERT_OK(RunChain(chain, Value::TensorView(ElementType::kUInt8, {2, 5, 3}, pixels), &out));
  ASSERT_EQ(out.shape(), (std::vector<int64_t>{3}));
  EXPECT_EQ(std::vector<int64_t>(out.as<int64_t>(), out.as<int64_t>() + 3),
            (std::vector<int64_t>{2, 5, 3}));
  EXPECT_FALSE(MakeChain(ValueType::Bytes(), {{"shape", {}}}).ok());  // decode first
}

TEST(DecodeNpy, CFortranAndBigEndian) {
  const float values[6] = {1, 2, 3, 4, 5, 6};
  Value out;
  ASSERT_OK(DecodeNpy(Npy("<f4", "(2, 3)", values, sizeof(values)), &out));
  EXPECT_EQ(out.type(), ValueType::Tensor(ElementType::kFloat32, {2, 3}));
  EXPECT_EQ(out.as<float>()[4], 5.0f);
  // Fortran order: memory holds column-major [[1,3,5],[2,4,6]] -> row-major 1 3 5 2 4 6.
  ASSERT_OK(DecodeNpy(Npy("<f4", "(2, 3)", values, sizeof(values), true), &out));
  EXPECT_EQ(out.as<float>()[1], 3.0f);
  EXPECT_EQ(out.as<float>()[3], 2.0f);
  const uint8_t big[4] = {0x00, 0x00, 0x01, 0x02};
  ASSERT_OK(DecodeNpy(Npy(">i4", "(1,)", big, 4), &out));
  EXPECT_EQ(out.as<int32_t>()[0], 0x0102);
  const int64_t scalar = -7;
  ASSERT_OK(DecodeNpy(Npy("<i8", "()", &scalar, 8), &out));
  EXPECT_EQ(out.shape(), std::vector<int64_t>{});
  EXPECT_EQ(out.as<int64_t>()[0], -7);
}

TEST(DecodeNpy, MalformedBytesAreErrors) {
  const float values[6] = {};
  const std::string npy = Npy("<f4", "(2, 3)", values, sizeof(values));
  Value out;
  EXPECT_EQ(GetErrorKind(DecodeNpy(npy.substr(0, npy.size() - 1), &out)), ErrorKind::kCorruptFile);
  EXPECT_FALSE(DecodeNpy(npy.substr(0, 20), &out).ok());
  EXPECT_FALSE(DecodeNpy("PK\x03\x04 not npy", &out).ok());
  EXPECT_EQ(GetErrorKind(DecodeNpy(Npy("<x4", "(1,)", values, 4), &out)), ErrorKind::kCorruptFile);
  EXPECT_FALSE(DecodeNpy(Npy("<f4", "(99999999999999999999,)", values, 8), &out).ok());
}

// Valid arrays of dtypes with no tensor are unsupported, never corrupt.
TEST(DecodeNpy, DtypesWithoutATensorAreUnsupported) {
  const uint8_t values[32] = {};
  Value out;
  for (const char* descr : {"<c8", "<U2", "|S2", "|O", "<M8[ns]", "<m8[s]", "|V4", "<f16"}) {
    const Status status = DecodeNpy(Npy(descr, "(1,)", values, 16), &out);
    EXPECT_EQ(GetErrorKind(status), ErrorKind::kUnsupportedInput) << descr << status.ToString();
    EXPECT_NE(status.message().find(descr), std::string::npos) << status.ToString();
  }
  // A structured dtype: a list of fields in place of the descr string (as np.save writes it).
  std::string header =
      "{'descr': [('a', '<i4'), ('b', '<f4')], 'fortran_order': False, "
      "'shape': (1,), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string npy = "\x93NUMPY\x01";
  npy += '\0';
  npy += static_cast<char>(header.size());
  npy += '\0';
  npy += header + std::string(8, '\0');
  const Status structured = DecodeNpy(npy, &out);
  EXPECT_EQ(GetErrorKind(structured), ErrorKind::kUnsupportedInput) << structured.ToString();
  EXPECT_NE(structured.message().find("structured"), std::string::npos) << structured.ToString();
}

// One Value reused across rows: a failed decode between good ones changes none of their bytes.
TEST(DecodeNpy, AFailureBetweenGoodRowsLeavesThemExact) {
  const float floats[6] = {1, 2, 3, 4, 5, 6};
  const int64_t scalar = -7;
  const std::string good = Npy("<f4", "(2, 3)", floats, sizeof(floats));
  const std::string small = Npy("<i8", "()", &scalar, 8);
  const std::vector<std::string> bad = {good.substr(0, good.size() - 3),
                                        Npy("<c8", "(1,)", floats, 8),
                                        Zip({{"a.npy", good}}, true).substr(0, 40)};
  Value out;
  for (const std::string& failing : bad) {
    ASSERT_OK(DecodeNpy(good, &out));
    EXPECT_FALSE(DecodeNpy(failing, &out).ok());
    EXPECT_FALSE(DecodeNpz(failing, "a", &out).ok());
    ASSERT_OK(DecodeNpy(small, &out));
    EXPECT_EQ(out.type(), ValueType::Tensor(ElementType::kInt64, {}));
    EXPECT_EQ(out.as<int64_t>()[0], -7);
    EXPECT_FALSE(DecodeNpy(failing, &out).ok());
    ASSERT_OK(DecodeNpz(Zip({{"a.npy", good}}, true), "a", &out));
    EXPECT_EQ(out.type(), ValueType::Tensor(ElementType::kFloat32, {2, 3}));
    EXPECT_EQ(std::memcmp(out.data(), floats, sizeof(floats)), 0);
  }
}

TEST(DecodeNpy, OpChecksDeclaredDtypeAndShape) {
  const float values[6] = {1, 2, 3, 4, 5, 6};
  const std::string npy = Npy("<f4", "(2, 3)", values, sizeof(values));
  Value out;
  ASSERT_OK(
      ApplyTo("decode_npy", {{"dtype", "float32"}, {"shape", ParamValue::List{-1, 3}}}, npy, &out));
  const Status wrong_shape =
      ApplyTo("decode_npy", {{"dtype", "float32"}, {"shape", ParamValue::List{3, 2}}}, npy, &out);
  EXPECT_EQ(GetErrorKind(wrong_shape), ErrorKind::kUnsupportedType);
  EXPECT_NE(wrong_shape.message().find("float32[2, 3]"), std::string::npos)
      << wrong_shape.message();
  EXPECT_FALSE(
      ApplyTo("decode_npy", {{"dtype", "float64"}, {"shape", ParamValue::List{2, 3}}}, npy, &out)
          .ok());
  EXPECT_FALSE(MakeOp("decode_npy", {{"dtype", "floaty"}, {"shape", ParamValue::List{2}}}).ok());
}

TEST(DecodeNpz, DeflatedAndStoredMembers) {
  const int16_t a[4] = {1, -2, 3, -4};
  const uint8_t b[2] = {9, 8};
  for (bool compress : {true, false}) {
    const std::string npz =
        Zip({{"arr.npy", Npy("<i2", "(2, 2)", a, 8)}, {"other.npy", Npy("|u1", "(2,)", b, 2)}},
            compress);
    Value out;
    ASSERT_OK(DecodeNpz(npz, "arr", &out));
    EXPECT_EQ(out.type(), ValueType::Tensor(ElementType::kInt16, {2, 2}));
    EXPECT_EQ(out.as<int16_t>()[3], -4);
    ASSERT_OK(DecodeNpz(npz, "other", &out));
    EXPECT_EQ(out.as<uint8_t>()[1], 8);
    const Status missing = DecodeNpz(npz, "nope", &out);
    EXPECT_NE(missing.message().find("arr.npy, other.npy"), std::string::npos) << missing.message();
  }
  // One member: the key may be left out.
  const std::string single = Zip({{"arr_0.npy", Npy("<i2", "(4,)", a, 8)}}, true);
  Value out;
  ASSERT_OK(
      ApplyTo("decode_npz", {{"dtype", "int16"}, {"shape", ParamValue::List{4}}}, single, &out));
  EXPECT_EQ(out.as<int16_t>()[1], -2);
}

TEST(DecodeNpz, CorruptArchivesAreErrors) {
  const int16_t a[64] = {1, 2, 3};
  const std::string npz = Zip({{"arr.npy", Npy("<i2", "(64,)", a, sizeof(a))}}, false);
  Value out;
  std::string flipped = npz;
  flipped[200] ^= 0x01;  // inside the stored data: the CRC-32 no longer matches
  const Status crc = DecodeNpz(flipped, "arr", &out);
  EXPECT_NE(crc.message().find("CRC-32"), std::string::npos) << crc.ToString();
  EXPECT_FALSE(DecodeNpz(npz.substr(0, npz.size() / 2), "arr", &out).ok());
  EXPECT_FALSE(DecodeNpz("short", "arr", &out).ok());
  const std::string deflated = Zip({{"arr.npy", Npy("<i2", "(64,)", a, sizeof(a))}}, true);
  std::string broken = deflated;
  broken[40] ^= 0x5a;  // inside the deflate stream
  EXPECT_EQ(GetErrorKind(DecodeNpz(broken, "arr", &out)), ErrorKind::kCorruptFile);
}

TEST(Reinterpret, InfersOneDimensionAndChecksTheSize) {
  const float values[6] = {1, 2, 3, 4, 5, 6};
  const std::string raw(reinterpret_cast<const char*>(values), sizeof(values));
  Value out;
  ASSERT_OK(ApplyTo("reinterpret", {{"dtype", "float32"}, {"shape", ParamValue::List{-1, 2}}}, raw,
                    &out));
  EXPECT_EQ(out.shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(out.as<float>()[5], 6.0f);
  EXPECT_FALSE(
      ApplyTo("reinterpret", {{"dtype", "float32"}, {"shape", ParamValue::List{-1, 4}}}, raw, &out)
          .ok());
  EXPECT_FALSE(
      ApplyTo("reinterpret", {{"dtype", "float64"}, {"shape", ParamValue::List{2}}}, raw, &out)
          .ok());
  EXPECT_FALSE(
      MakeOp("reinterpret", {{"dtype", "uint8"}, {"shape", ParamValue::List{-1, -1}}}).ok());
}

}  // namespace
}  // namespace stoker::transform
