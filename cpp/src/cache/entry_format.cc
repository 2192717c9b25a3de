#include "cache/entry_format.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace stoker {
namespace {

constexpr uint64_t kNameSeed2 = 0x5374b0e7c0ffee11ULL;

int64_t RoundUp(int64_t value, int64_t align) { return (value + align - 1) / align * align; }

// Covers every byte before the payload: the header, namespace, key and padding.
uint64_t HeaderChecksum(const EntryHeader& header, const uint8_t* rest) {
  EntryHeader copy = header;
  copy.header_checksum = 0;
  Xxh64Stream hash;
  hash.Update(&copy, sizeof(copy));
  hash.Update(rest, header.header_bytes - sizeof(EntryHeader));
  return hash.Digest();
}

}  // namespace

Xxh64Stream::Xxh64Stream(uint64_t seed) : state_(XXH64_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();
  XXH64_reset(state_.get(), seed);
}

KeyName NameOf(const std::string& ns, const std::string& key) {
  // The namespace has no NUL byte, so "ns\0key" is unambiguous.
  uint64_t digests[2];
  const uint64_t seeds[2] = {0, kNameSeed2};
  for (int i = 0; i < 2; ++i) {
    Xxh64Stream hash(seeds[i]);
    hash.Update(ns.data(), ns.size());
    hash.Update("", 1);
    hash.Update(key.data(), key.size());
    digests[i] = hash.Digest();
  }
  static const char kHex[] = "0123456789abcdef";
  KeyName name;
  name.hex.resize(32);
  for (int i = 0; i < 32; ++i) {
    name.hex[i] = kHex[(digests[i / 16] >> (60 - 4 * (i % 16))) & 0xF];
  }
  name.lock_offset = static_cast<off_t>(1 + (digests[0] >> 2));
  return name;
}

bool IsHex(const std::string& text, size_t size) {
  if (text.size() != size) return false;
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool IsNamespace(const std::string& ns) {
  if (ns.empty() || ns.size() > kMaxNamespaceBytes) return false;
  return std::all_of(ns.begin(), ns.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

Status CheckNameAndKey(const std::string& dir, const std::string& ns, const std::string& key) {
  if (!IsNamespace(ns)) {
    return MakeError(ErrorKind::kInvalidOption, "stoker cache " + dir + ": namespace '" + ns +
                                                    "' must be 1-64 characters of [A-Za-z0-9_-]");
  }
  if (key.size() > kMaxKeyBytes) {
    return MakeError(ErrorKind::kInvalidOption, "stoker cache " + dir + ": a key of " +
                                                    std::to_string(key.size()) +
                                                    " bytes is longer than 1 MiB");
  }
  return Status::OK();
}

int64_t HeaderBytes(size_t ns_size, size_t key_size) {
  return RoundUp(static_cast<int64_t>(sizeof(EntryHeader) + ns_size + key_size), kEntryAlign);
}

std::vector<uint8_t> EncodeEntryHead(const std::string& ns, const std::string& key,
                                     const EntryParts& parts) {
  const int64_t header_bytes = HeaderBytes(ns.size(), key.size());
  int64_t payload_size = 0;
  for (const auto& part : parts) payload_size += static_cast<int64_t>(part.second);
  std::vector<uint8_t> head(static_cast<size_t>(header_bytes), 0);
  EntryHeader header = {};
  std::memcpy(header.magic, kEntryMagic, sizeof(kEntryMagic));
  header.version = kEntryFormatVersion;
  header.header_bytes = static_cast<uint32_t>(header_bytes);
  header.ns_size = static_cast<uint32_t>(ns.size());
  header.key_size = static_cast<uint32_t>(key.size());
  header.payload_size = static_cast<uint64_t>(payload_size);
  Xxh64Stream checksum;
  for (const auto& part : parts) checksum.Update(part.first, part.second);
  header.payload_checksum = checksum.Digest();
  std::memcpy(head.data() + sizeof(header), ns.data(), ns.size());
  std::memcpy(head.data() + sizeof(header) + ns.size(), key.data(), key.size());
  header.header_checksum = HeaderChecksum(header, head.data() + sizeof(header));
  std::memcpy(head.data(), &header, sizeof(header));
  return head;
}

EntryCheck CheckEntry(const uint8_t* base, int64_t file_size, const std::string& ns,
                      const std::string& key, bool verify_payload, int64_t* payload_offset,
                      int64_t* payload_size) {
  if (file_size < static_cast<int64_t>(sizeof(EntryHeader))) return EntryCheck::kCorrupt;
  EntryHeader header;
  std::memcpy(&header, base, sizeof(header));
  if (std::memcmp(header.magic, kEntryMagic, sizeof(kEntryMagic)) != 0 ||
      header.version != kEntryFormatVersion ||
      static_cast<int64_t>(header.header_bytes) != HeaderBytes(header.ns_size, header.key_size) ||
      header.header_bytes > file_size ||
      header.payload_size != static_cast<uint64_t>(file_size - header.header_bytes)) {
    return EntryCheck::kCorrupt;
  }
  const uint8_t* stored_ns = base + sizeof(EntryHeader);
  const uint8_t* stored_key = stored_ns + header.ns_size;
  if (HeaderChecksum(header, stored_ns) != header.header_checksum) return EntryCheck::kCorrupt;
  // Another key whose name hashes the same: not ours, and not damaged either.
  if (header.ns_size != ns.size() || header.key_size != key.size() ||
      std::memcmp(stored_ns, ns.data(), ns.size()) != 0 ||
      std::memcmp(stored_key, key.data(), key.size()) != 0) {
    return EntryCheck::kOtherKey;
  }
  const uint8_t* payload = base + header.header_bytes;
  if (verify_payload && XXH64(payload, header.payload_size, 0) != header.payload_checksum) {
    return EntryCheck::kCorrupt;
  }
  *payload_offset = static_cast<int64_t>(header.header_bytes);
  *payload_size = static_cast<int64_t>(header.payload_size);
  return EntryCheck::kValid;
}

}  // namespace stoker
