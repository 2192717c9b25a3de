// The DiskCache entry format: how one entry file is laid out, named and verified. Pure byte
// work, no I/O (the files themselves are handled in cache_files.h).
//
// An entry file is an EntryHeader, the namespace bytes, the key bytes, zero padding to a multiple
// of 64, then the payload. Fields are native-endian (the cache is node-local). Two XXH64
// checksums cover every byte: one of the head (header, namespace, key and padding), one of the
// payload. An entry lives at <dir>/<namespace>/<2 hex>/<32 hex>, the 32 hex digits being two
// XXH64 hashes of (namespace, key); the key stored in the head rules out collisions.
//
// Changing anything here changes what is on disk: bump kFormatVersion (which drops every cache
// on disk), and see DiskCacheTest.EntryFileBytesMatchFormatVersion1.
// Thread safety: free functions on their arguments; Xxh64Stream is one hash, for one thread.
#pragma once

#include <sys/types.h>
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoker/error.h"

namespace stoker {

inline constexpr char kEntryMagic[8] = {'S', 'T', 'K', 'C', 'A', 'C', 'H', 'E'};
inline constexpr uint32_t kEntryFormatVersion = 1;
/// The payload's offset in an entry file is a multiple of this (as is the alignment of payloads
/// copied to memory).
inline constexpr int64_t kEntryAlign = 64;
inline constexpr size_t kMaxKeyBytes = size_t{1} << 20;
inline constexpr size_t kMaxNamespaceBytes = 64;

struct EntryHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // offset of the payload, a multiple of kEntryAlign
  uint32_t ns_size;
  uint32_t key_size;
  uint64_t payload_size;
  uint64_t payload_checksum;  // XXH64 of the payload
  uint64_t header_checksum;   // XXH64 of the bytes before the payload (with this field 0)
  uint8_t reserved[16];
};
static_assert(sizeof(EntryHeader) == 64, "the payload offset math assumes a 64-byte header");

/// Payload pieces, concatenated in order (DiskCache::Parts is the same type).
using EntryParts = std::vector<std::pair<const void*, size_t>>;

/// Streaming XXH64 (libxxhash). The state is the library's own allocation: its layout is not part
/// of the shared library's ABI (XXH_STATIC_LINKING_ONLY would tie the build to one version).
class Xxh64Stream {
 public:
  explicit Xxh64Stream(uint64_t seed = 0);
  void Update(const void* data, size_t size) { XXH64_update(state_.get(), data, size); }
  uint64_t Digest() const { return XXH64_digest(state_.get()); }

 private:
  struct Free {
    void operator()(XXH64_state_t* state) const { XXH64_freeState(state); }
  };
  std::unique_ptr<XXH64_state_t, Free> state_;
};

/// Where an entry lives: its file name, and the byte of the folder's lock file that is its key's
/// fill lock (>= 1; byte 0 is the folder lock).
struct KeyName {
  std::string hex;  // 32 hex digits: the file name
  off_t lock_offset;
};
KeyName NameOf(const std::string& ns, const std::string& key);

/// Whether `text` is `size` lowercase hex digits (shard folders: 2, entry files: 32).
bool IsHex(const std::string& text, size_t size);
/// Whether `ns` is a namespace name: [A-Za-z0-9_-]{1,64}.
bool IsNamespace(const std::string& ns);
/// kInvalidOption for a bad namespace or a key over kMaxKeyBytes (`dir` names the cache).
Status CheckNameAndKey(const std::string& dir, const std::string& ns, const std::string& key);

/// Bytes before the payload: the header, namespace, key and padding.
int64_t HeaderBytes(size_t ns_size, size_t key_size);

/// The head of the entry file for (ns, key) with payload `parts`: HeaderBytes() bytes, both
/// checksums set.
std::vector<uint8_t> EncodeEntryHead(const std::string& ns, const std::string& key,
                                     const EntryParts& parts);

enum class EntryCheck {
  kValid,     // this key's entry, every byte verified (or its payload known to be)
  kOtherKey,  // a sound entry of another key whose name hashes the same
  kCorrupt,   // damaged, truncated, or not an entry of this format
};

/// Verifies the `file_size` bytes at `base` (a whole entry file) as the entry of (ns, key): the
/// header always, the payload's checksum when `verify_payload` (false only for a file whose
/// payload this process has already verified). When kValid, `*payload_offset` and
/// `*payload_size` locate the payload.
EntryCheck CheckEntry(const uint8_t* base, int64_t file_size, const std::string& ns,
                      const std::string& key, bool verify_payload, int64_t* payload_offset,
                      int64_t* payload_size);

}  // namespace stoker
