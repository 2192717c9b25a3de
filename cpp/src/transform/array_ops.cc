// decode_npy, decode_npz and reinterpret: encoded arrays into tensors, with shape and dtype checks.
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "transform/array.h"
#include "transform/op.h"
#include "transform/ops_internal.h"

namespace stoker::transform {
namespace {

using internal::Corrupt;
using internal::Unsupported;

static_assert(std::endian::native == std::endian::little, "stoker assumes a little-endian host");

uint64_t ReadLe(const uint8_t* p, int size) {
  uint64_t value = 0;
  for (int i = size - 1; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

// The value text of `key` in a .npy header dict ("{'descr': '<f4', 'fortran_order': False, ...}").
bool HeaderField(std::string_view header, std::string_view key, std::string_view* value) {
  std::string quoted(1, '\'');
  quoted.append(key);
  quoted.push_back('\'');
  const size_t at = header.find(quoted);
  if (at == std::string_view::npos) return false;
  size_t pos = header.find(':', at + quoted.size());
  if (pos == std::string_view::npos) return false;
  ++pos;
  while (pos < header.size() && header[pos] == ' ') ++pos;
  size_t end = pos;
  if (pos < header.size() && header[pos] == '(') {
    end = header.find(')', pos);
    if (end == std::string_view::npos) return false;
    ++end;
  } else if (pos < header.size() && header[pos] == '\'') {
    end = header.find('\'', pos + 1);
    if (end == std::string_view::npos) return false;
    ++end;
  } else {
    while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  }
  *value = header.substr(pos, end - pos);
  return true;
}

// What numpy calls a dtype kind stoker has no tensor for (a valid .npy all the same).
const char* UnsupportedKind(char kind) {
  switch (kind) {
    case 'c':
      return "complex";
    case 'U':
      return "unicode string";
    case 'S':
    case 'a':
      return "byte string";
    case 'V':
      return "void (raw bytes)";
    case 'O':
      return "object (pickled Python objects)";
    case 'M':
      return "datetime64";
    case 'm':
      return "timedelta64";
    default:
      return nullptr;
  }
}

Result<ElementType> ParseDescr(std::string_view descr, bool* swap) {
  // '<f4', '|u1', '>i8', '|b1'; a list of fields is a structured dtype.
  if (!descr.empty() && descr.front() == '[') {
    return Unsupported("npy dtype is structured (a record of named fields), which has no tensor");
  }
  if (descr.size() < 4 || descr.front() != '\'' || descr.back() != '\'') {
    return Corrupt("npy header: bad dtype " + std::string(descr));
  }
  const std::string_view code = descr.substr(1, descr.size() - 2);
  const char order = code[0];
  const char kind = code[1];
  const std::string size(code.substr(2));
  *swap = order == '>' && size != "1";
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    return Corrupt("npy header: bad byte order in " + std::string(descr));
  }
  if (const char* what = UnsupportedKind(kind)) {
    return Unsupported("npy dtype " + std::string(descr) + " (" + what +
                       ") has no tensor dtype in stoker");
  }
  std::string name;
  if (kind == 'b' && size == "1") {
    return ElementType::kBool;
  } else if (kind == 'i') {
    name = "int";
  } else if (kind == 'u') {
    name = "uint";
  } else if (kind == 'f') {
    name = "float";
  } else {
    return Corrupt("npy header: bad dtype " + std::string(descr));
  }
  char* end = nullptr;
  const long bytes = std::strtol(size.c_str(), &end, 10);
  const auto type = ParseElementType(name + std::to_string(bytes * 8));
  if (!type || *end != '\0') {
    if (kind == 'f' && *end == '\0' && (bytes == 10 || bytes == 12 || bytes == 16)) {
      return Unsupported("npy dtype " + std::string(descr) +
                         " (extended-precision float) has no tensor dtype in stoker");
    }
    return Corrupt("npy header: bad dtype " + std::string(descr));
  }
  return *type;
}

Result<std::vector<int64_t>> ParseShape(std::string_view text) {
  // "(3, 4)", "(5,)", "()"
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') {
    return Corrupt("npy header: bad shape " + std::string(text));
  }
  std::vector<int64_t> shape;
  std::string item;
  for (char c : text.substr(1, text.size() - 2)) {
    if (c >= '0' && c <= '9') {
      item += c;
      if (item.size() > 15) return Corrupt("npy header: shape too large");
    } else if (c == ',') {
      if (item.empty()) return Corrupt("npy header: bad shape " + std::string(text));
      shape.push_back(std::stoll(item));
      item.clear();
    } else if (c != ' ' && c != 'L') {
      return Corrupt("npy header: bad shape " + std::string(text));
    }
  }
  if (!item.empty()) shape.push_back(std::stoll(item));
  return shape;
}

}  // namespace

Status DecodeNpy(std::string_view bytes, Value* out) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < 10 || std::memcmp(data, "\x93NUMPY", 6) != 0) {
    return Corrupt("not .npy data (no \\x93NUMPY magic)");
  }
  const int major = data[6];
  if (major < 1 || major > 3) return Corrupt("npy format version " + std::to_string(major));
  const size_t length_size = major == 1 ? 2 : 4;
  const size_t start = 8 + length_size;
  if (bytes.size() < start) return Corrupt("npy header truncated");
  const uint64_t header_length = ReadLe(data + 8, static_cast<int>(length_size));
  if (header_length > bytes.size() - start) return Corrupt("npy header truncated");
  const std::string_view header = bytes.substr(start, header_length);
  std::string_view descr, fortran, shape_text;
  if (!HeaderField(header, "descr", &descr) || !HeaderField(header, "fortran_order", &fortran) ||
      !HeaderField(header, "shape", &shape_text)) {
    return Corrupt("npy header is not a dict of descr, fortran_order and shape");
  }
  bool swap = false;
  STOKER_ASSIGN_OR_RAISE(ElementType element, ParseDescr(descr, &swap));
  STOKER_ASSIGN_OR_RAISE(std::vector<int64_t> shape, ParseShape(shape_text));
  const bool fortran_order = fortran == "True";
  if (!fortran_order && fortran != "False") return Corrupt("npy header: bad fortran_order");
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim > 0 && count > (int64_t{1} << 40) / dim) return Corrupt("npy shape too large");
    count *= dim;
  }
  const int size = ElementSize(element);
  const uint64_t payload = bytes.size() - start - header_length;
  if (payload != static_cast<uint64_t>(count) * size) {
    return Corrupt("npy data has " + std::to_string(payload) + " bytes, the header says " +
                   std::to_string(count * size) + " (truncated or corrupt)");
  }
  const uint8_t* src = data + start + header_length;
  uint8_t* dst = out->Allocate(element, shape);
  if (!fortran_order || shape.size() < 2) {
    std::memcpy(dst, src, count * size);
  } else {
    // Fortran order: element (i0, ..., in) sits at sum(i_k * stride_k) with stride_0 = 1.
    const size_t rank = shape.size();
    std::vector<int64_t> index(rank, 0);
    std::vector<int64_t> f_stride(rank, 1);
    for (size_t k = 1; k < rank; ++k) f_stride[k] = f_stride[k - 1] * shape[k - 1];
    for (int64_t i = 0; i < count; ++i) {
      int64_t offset = 0;
      for (size_t k = 0; k < rank; ++k) offset += index[k] * f_stride[k];
      std::memcpy(dst + i * size, src + offset * size, size);
      for (size_t k = rank; k-- > 0;) {  // C-order increment: last index fastest
        if (++index[k] < shape[k]) break;
        index[k] = 0;
      }
    }
  }
  if (swap) {
    for (int64_t i = 0; i < count; ++i) std::reverse(dst + i * size, dst + (i + 1) * size);
  }
  return Status::OK();
}

Status DecodeNpz(std::string_view bytes, const std::string& key, Value* out) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t size = bytes.size();
  // End of central directory: the last "PK\5\6" within the final 64 KiB + 22 bytes.
  if (size < 22) return Corrupt("not .npz data (too short for a zip archive)");
  size_t eocd = size - 22;
  const size_t lowest = size > 65557 ? size - 65557 : 0;
  while (ReadLe(data + eocd, 4) != 0x06054b50) {
    if (eocd == lowest) return Corrupt("not .npz data (no zip end-of-directory record)");
    --eocd;
  }
  uint64_t entries = ReadLe(data + eocd + 10, 2);
  uint64_t directory = ReadLe(data + eocd + 16, 4);
  if ((entries == 0xffff || directory == 0xffffffff) && eocd >= 20 &&
      ReadLe(data + eocd - 20, 4) == 0x07064b50) {  // zip64 locator
    const uint64_t record = ReadLe(data + eocd - 20 + 8, 8);
    if (record > size - 56 || ReadLe(data + record, 4) != 0x06064b50) {
      return Corrupt("npz: bad zip64 end-of-directory record");
    }
    entries = ReadLe(data + record + 32, 8);
    directory = ReadLe(data + record + 48, 8);
  }
  const std::string wanted = key + ".npy";
  std::string names;
  size_t pos = directory;
  for (uint64_t i = 0; i < entries; ++i) {
    if (pos > size - 46 || ReadLe(data + pos, 4) != 0x02014b50) {
      return Corrupt("npz: corrupt zip central directory");
    }
    const uint64_t method = ReadLe(data + pos + 10, 2);
    const uint32_t crc = static_cast<uint32_t>(ReadLe(data + pos + 16, 4));
    uint64_t compressed = ReadLe(data + pos + 20, 4);
    uint64_t uncompressed = ReadLe(data + pos + 24, 4);
    const size_t name_length = ReadLe(data + pos + 28, 2);
    const size_t extra_length = ReadLe(data + pos + 30, 2);
    const size_t comment_length = ReadLe(data + pos + 32, 2);
    uint64_t local = ReadLe(data + pos + 42, 4);
    if (pos + 46 + name_length + extra_length > size) return Corrupt("npz: truncated directory");
    const std::string name(bytes.substr(pos + 46, name_length));
    // The zip64 extra field holds, in order, whichever of the three sizes overflowed 32 bits.
    for (size_t e = pos + 46 + name_length; e + 4 <= pos + 46 + name_length + extra_length;) {
      const uint64_t id = ReadLe(data + e, 2), length = ReadLe(data + e + 2, 2);
      if (id == 0x0001) {
        size_t field = e + 4;
        for (uint64_t* value : {&uncompressed, &compressed, &local}) {
          if (*value == 0xffffffff && field + 8 <= e + 4 + length) {
            *value = ReadLe(data + field, 8);
            field += 8;
          }
        }
      }
      e += 4 + length;
    }
    pos += 46 + name_length + extra_length + comment_length;
    names += (names.empty() ? "" : ", ") + name;
    if (!(name == wanted || (key.empty() && entries == 1))) continue;

    if (local > size - 30 || ReadLe(data + local, 4) != 0x04034b50) {
      return Corrupt("npz: corrupt local header of " + name);
    }
    const uint64_t begin = local + 30 + ReadLe(data + local + 26, 2) + ReadLe(data + local + 28, 2);
    if (begin > size || compressed > size - begin) return Corrupt("npz: " + name + " is truncated");
    if (uncompressed > (uint64_t{1} << 40)) return Corrupt("npz: " + name + " is too large");
    std::string inflated;
    if (method == 0) {
      inflated.assign(bytes.substr(begin, compressed));
    } else if (method == 8) {
      inflated.resize(uncompressed);
      z_stream stream{};
      if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) return Status::OutOfMemory("inflateInit2");
      stream.next_in = const_cast<Bytef*>(data + begin);
      stream.avail_in = static_cast<uInt>(compressed);
      stream.next_out = reinterpret_cast<Bytef*>(inflated.data());
      stream.avail_out = static_cast<uInt>(uncompressed);
      const int code = inflate(&stream, Z_FINISH);
      const uint64_t produced = stream.total_out;
      inflateEnd(&stream);
      if (code != Z_STREAM_END || produced != uncompressed) {
        return Corrupt("npz: " + name + " does not inflate (corrupt or truncated)");
      }
    } else {
      return Unsupported("npz: " + name + " uses zip compression method " + std::to_string(method) +
                         " (stored and deflate only)");
    }
    const uint32_t actual = static_cast<uint32_t>(crc32(
        0, reinterpret_cast<const Bytef*>(inflated.data()), static_cast<uInt>(inflated.size())));
    if (actual != crc) return Corrupt("npz: " + name + " fails its CRC-32 check");
    return DecodeNpy(inflated, out);
  }
  return Corrupt("npz: no member '" + wanted + "' (members: " + (names.empty() ? "none" : names) +
                 ")");
}

namespace internal {
namespace {

// "dtype" and "shape" of an array op: the declared type every row must have.
struct DeclaredArray {
  ElementType element;
  std::vector<int64_t> shape;  // -1: any
};

Result<DeclaredArray> ReadDeclared(ParamReader* params) {
  DeclaredArray declared;
  STOKER_ASSIGN_OR_RAISE(std::string dtype, params->String("dtype", std::nullopt));
  const auto element = ParseElementType(dtype);
  if (!element || *element == ElementType::kBFloat16) {
    return params->Error("dtype", "is not a numpy dtype name: \"" + dtype +
                                      "\"; known dtypes: " + KnownDTypes() + " (not bfloat16)");
  }
  declared.element = *element;
  STOKER_ASSIGN_OR_RAISE(declared.shape, params->IntList("shape", std::nullopt));
  for (int64_t dim : declared.shape) {
    if (dim < -1) return params->Error("shape", "must hold sizes or -1 (any)");
  }
  return declared;
}

Status CheckDeclared(const DeclaredArray& declared, const Value& value) {
  bool ok = value.element() == declared.element && value.shape().size() == declared.shape.size();
  for (size_t i = 0; ok && i < declared.shape.size(); ++i) {
    ok = declared.shape[i] < 0 || declared.shape[i] == value.shape()[i];
  }
  if (ok) return Status::OK();
  return MakeError(ErrorKind::kUnsupportedType,
                   "the array is " + value.type().ToString() + ", the op declares " +
                       ValueType::Tensor(declared.element, declared.shape).ToString());
}

class DecodeArrayOp : public OpBase {
 public:
  DecodeArrayOp(const ParamReader& params, DeclaredArray declared, bool zipped, std::string key)
      : OpBase(params, 1), declared_(std::move(declared)), zipped_(zipped), key_(std::move(key)) {}

  Result<ValueType> Resolve(const ValueType& input) const override {
    if (input.kind != ValueKind::kBytes) return WrongInput(Name(), "encoded bytes", input);
    return ValueType::Tensor(declared_.element, declared_.shape);
  }

  Status Apply(const RowContext&, const Value& in, Value* out) const override {
    STOKER_RETURN_NOT_OK(zipped_ ? DecodeNpz(in.bytes(), key_, out) : DecodeNpy(in.bytes(), out));
    return CheckDeclared(declared_, *out);
  }

 private:
  DeclaredArray declared_;
  bool zipped_;
  std::string key_;
};

class ReinterpretOp : public OpBase {
 public:
  ReinterpretOp(const ParamReader& params, DeclaredArray declared)
      : OpBase(params, 1), declared_(std::move(declared)) {}

  Result<ValueType> Resolve(const ValueType& input) const override {
    if (input.kind != ValueKind::kBytes) return WrongInput(Name(), "bytes", input);
    return ValueType::Tensor(declared_.element, declared_.shape);
  }

  Status Apply(const RowContext&, const Value& in, Value* out) const override {
    const int size = ElementSize(declared_.element);
    int64_t known = 1;
    int free_dim = -1;
    for (size_t i = 0; i < declared_.shape.size(); ++i) {
      if (declared_.shape[i] < 0) {
        free_dim = static_cast<int>(i);
      } else {
        known *= declared_.shape[i];
      }
    }
    std::vector<int64_t> shape = declared_.shape;
    const int64_t bytes = in.size_bytes();
    if (free_dim >= 0) {
      if (known == 0 || bytes % (known * size) != 0) {
        return Corrupt(std::to_string(bytes) + " bytes are not a whole number of " +
                       ValueType::Tensor(declared_.element, declared_.shape).ToString() + " rows");
      }
      shape[free_dim] = bytes / (known * size);
    } else if (bytes != known * size) {
      return Corrupt(std::to_string(bytes) + " bytes, expected " + std::to_string(known * size) +
                     " for " + ValueType::Tensor(declared_.element, declared_.shape).ToString());
    }
    std::memcpy(out->Allocate(declared_.element, shape), in.data(), bytes);
    return Status::OK();
  }

 private:
  DeclaredArray declared_;
};

// The int64 shape of a tensor (an image's [height, width, channels] before a crop).
class ShapeOp : public OpBase {
 public:
  explicit ShapeOp(const ParamReader& params) : OpBase(params, 1) {}

  Result<ValueType> Resolve(const ValueType& input) const override {
    if (input.kind != ValueKind::kTensor) return WrongInput(Name(), "a tensor", input);
    return ValueType::Tensor(ElementType::kInt64, {static_cast<int64_t>(input.shape.size())});
  }

  Status Apply(const RowContext&, const Value& in, Value* out) const override {
    const std::vector<int64_t>& shape = in.shape();
    uint8_t* data = out->Allocate(ElementType::kInt64, {static_cast<int64_t>(shape.size())});
    std::memcpy(data, shape.data(), shape.size() * sizeof(int64_t));
    return Status::OK();
  }
};

}  // namespace

Result<std::unique_ptr<Op>> MakeDecodeNpy(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(DeclaredArray declared, ReadDeclared(params));
  return std::make_unique<DecodeArrayOp>(*params, std::move(declared), false, "");
}

Result<std::unique_ptr<Op>> MakeDecodeNpz(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(DeclaredArray declared, ReadDeclared(params));
  STOKER_ASSIGN_OR_RAISE(std::string key, params->String("key", ""));
  return std::make_unique<DecodeArrayOp>(*params, std::move(declared), true, key);
}

Result<std::unique_ptr<Op>> MakeReinterpret(ParamReader* params) {
  STOKER_ASSIGN_OR_RAISE(DeclaredArray declared, ReadDeclared(params));
  if (std::count(declared.shape.begin(), declared.shape.end(), -1) > 1) {
    return params->Error("shape", "may have at most one -1 (inferred from the byte count)");
  }
  return std::make_unique<ReinterpretOp>(*params, std::move(declared));
}

Result<std::unique_ptr<Op>> MakeShape(ParamReader* params) {
  return std::make_unique<ShapeOp>(*params);
}

}  // namespace internal
}  // namespace stoker::transform
