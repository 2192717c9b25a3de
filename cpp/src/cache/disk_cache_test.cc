#include "cache/disk_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "cache/cache_budget.h"
#include "cache/cache_files.h"
#include "cache/write_backlog.h"
#include "util/hash.h"
#include "util/test_status_internal.h"

// GCC 12 at -O3 reports a false -Wrestrict in std::string's operator+ once enough of this file is
// inlined together (GCC bug 105651).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

namespace stoker {
namespace {

namespace fs = std::filesystem;

// Deterministic bytes that differ by seed and position.
std::string Pattern(size_t size, uint64_t seed) {
  std::string out(size, '\0');
  uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (size_t i = 0; i < size; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    out[i] = static_cast<char>(state >> 56);
  }
  return out;
}

DiskCache::Parts PartsOf(const std::string& payload) { return {{payload.data(), payload.size()}}; }

std::optional<std::string> GetString(DiskCache& cache, const std::string& ns,
                                     const std::string& key) {
  auto entry = cache.Get(ns, key);
  EXPECT_TRUE(entry.ok()) << entry.status().ToString();
  if (!entry.ok() || *entry == nullptr) return std::nullopt;
  return std::string(reinterpret_cast<const char*>((*entry)->data()), (*entry)->size());
}

int64_t FolderBytes(const std::string& dir) {
  int64_t total = 0;
  std::error_code error;
  for (auto it = fs::recursive_directory_iterator(dir, error); it != fs::end(it);
       it.increment(error)) {
    if (it->is_regular_file(error)) total += static_cast<int64_t>(it->file_size(error));
  }
  return total;
}

std::vector<std::string> TempFiles(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& item : fs::directory_iterator(dir + "/.tmp")) {
    names.push_back(item.path().filename());
  }
  return names;
}

// The file of a 1000-byte payload under a short key in "blocks": a 128-byte head, then the payload.
constexpr int64_t kEntryFileBytes = 128 + 1000;

class DiskCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/stoker-disk-cache-XXXXXX";
    ASSERT_NE(mkdtemp(path), nullptr);
    dir_ = path;
  }
  void TearDown() override {
    std::error_code error;
    fs::remove_all(dir_, error);
  }
  DiskCacheOptions Options(int64_t max_bytes = int64_t{1} << 30) const {
    DiskCacheOptions options;
    options.dir = dir_;
    options.max_bytes = max_bytes;
    options.min_free_bytes = 0;
    return options;
  }
  std::shared_ptr<DiskCache> OpenOrDie(const DiskCacheOptions& options) {
    auto cache = DiskCache::Open(options);
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    return cache.ok() ? *cache : nullptr;
  }

  std::string dir_;
};

// ---------------------------------------------------------------------------------------------
// Checksum

// XXH64 of `size` bytes fed to libxxhash's streaming API `piece` bytes at a time.
uint64_t StreamedXxh64(const char* data, size_t size, size_t piece) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  for (size_t offset = 0; offset < size; offset += piece) {
    XXH64_update(state, data + offset, std::min(piece, size - offset));
  }
  const uint64_t digest = XXH64_digest(state);
  XXH64_freeState(state);
  return digest;
}

// The checksum and entry names are XXH64 (libxxhash, before that an in-tree implementation that
// was checked against the same values): these pin the algorithm of cache format version 1.
TEST(DiskCacheChecksum, MatchesReferenceXxh64) {
  EXPECT_EQ(XXH64("", 0, 0), 0xEF46DB3751D8E999ULL);
  const std::string text = "Nobody inspects the spammish repetition";
  EXPECT_EQ(XXH64(text.data(), text.size(), 0), 0xFBCEA83C8A378BF1ULL);
  // Reference values from the xxhash Python package, for every tail-handling branch.
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 7 + 3) & 0xFF);
  const struct {
    size_t size;
    uint64_t seed0, seed42;
  } kCases[] = {
      {1, 0x1f25c8d0bc1f4bb6ULL, 0x4d71bef0290052dbULL},
      {3, 0x31d2363f52e564c9ULL, 0xbf4dd3c814a1fb9eULL},
      {4, 0x9bb64b7d66ee9fdaULL, 0xbcb54295ab591e0dULL},
      {8, 0xdab99d95c6f90092ULL, 0x9fe8789ac2a1a649ULL},
      {31, 0xa2aa5f33cc4a6119ULL, 0x10ab8a7706d8ba37ULL},
      {32, 0x23c3c17ef790fd97ULL, 0x232e8071e826d4bfULL},
      {33, 0x50a7cfc7ba588784ULL, 0x9d08407e35697b1fULL},
      {63, 0x5e3e54b431c7493cULL, 0x052fa6d3609a695fULL},
      {64, 0x0eb64b3ef6eeb01fULL, 0xdf21b2dd545076e0ULL},
      {100, 0xa61f8d4c170fe531ULL, 0x7dd00be8513c25a2ULL},
      {1000, 0x5f235fa033f1a3fbULL, 0xd776e8028586ff61ULL},
  };
  for (const auto& c : kCases) {
    EXPECT_EQ(XXH64(data.data(), c.size, 0), c.seed0) << c.size;
    EXPECT_EQ(XXH64(data.data(), c.size, 42), c.seed42) << c.size;
  }
  // Streaming in uneven pieces gives the one-shot digest.
  for (size_t piece : {1, 5, 31, 32, 33, 100}) {
    EXPECT_EQ(StreamedXxh64(data.data(), data.size(), piece), 0x5f235fa033f1a3fbULL) << piece;
  }
}

// A measurement, not a test: run with --gtest_also_run_disabled_tests --gtest_filter='*Throughput'.
TEST(DiskCacheChecksum, DISABLED_Throughput) {
  const std::string data = Pattern(size_t{256} << 20, 1);
  auto measure = [&](const char* name, const std::function<uint64_t()>& run) {
    uint64_t digest = run();  // warm up
    const auto start = std::chrono::steady_clock::now();
    constexpr int kRounds = 4;
    for (int i = 0; i < kRounds; ++i) digest ^= run();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s: %.2f GB/s (digest %016llx)\n", name, kRounds * data.size() / seconds / 1e9,
                static_cast<unsigned long long>(digest));
  };
  measure("xxh64", [&] { return XXH64(data.data(), data.size(), 0); });
  measure("xxh3_64", [&] { return XXH3_64bits(data.data(), data.size()); });
  measure("fnv1a", [&] {
    Fnv1a fnv;
    fnv.Add(data.data(), data.size());
    return fnv.digest();
  });
  EXPECT_EQ(StreamedXxh64(data.data(), data.size(), 1 << 20), XXH64(data.data(), data.size(), 0));
}

// A measurement, not a test: Put and warm Get (page cache) throughput of 64 MiB entries.
TEST(DiskCacheChecksum, DISABLED_PutGetThroughput) {
  char path[] = "/tmp/stoker-disk-cache-bench-XXXXXX";
  ASSERT_NE(mkdtemp(path), nullptr);
  DiskCacheOptions options;
  options.dir = path;
  options.max_bytes = int64_t{4} << 30;
  options.min_free_bytes = 0;
  auto cache = DiskCache::Open(options);
  ASSERT_TRUE(cache.ok());
  const std::string payload = Pattern(size_t{64} << 20, 1);
  constexpr int kEntries = 8;
  auto seconds_since = [](auto start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kEntries; ++i) {
    ASSERT_TRUE((*cache)->Put("blocks", std::to_string(i), PartsOf(payload)).ok());
  }
  std::printf("put: %.2f GB/s\n", kEntries * payload.size() / seconds_since(start) / 1e9);
  for (int round = 0; round < 2; ++round) {  // the first round warms the page cache
    start = std::chrono::steady_clock::now();
    int64_t sum = 0;
    for (int i = 0; i < kEntries; ++i) {
      auto entry = (*cache)->Get("blocks", std::to_string(i));
      ASSERT_TRUE(entry.ok() && *entry);
      sum += (*entry)->data()[i];
    }
    std::printf("get (verified, mapped): %.2f GB/s [%lld]\n",
                kEntries * payload.size() / seconds_since(start) / 1e9,
                static_cast<long long>(sum));
  }
  EXPECT_EQ((*cache)->stats().hits, 2 * kEntries);
  fs::remove_all(path);
}

// ---------------------------------------------------------------------------------------------
// Entries, keys, namespaces

TEST_F(DiskCacheTest, RoundTripsPartsAlignedAndCountsStats) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  const std::string a = Pattern(1000, 1), b = Pattern(3, 2), c = Pattern(70000, 3);
  ASSERT_OK(cache->Put("blocks", "key",
                       {{a.data(), a.size()}, {b.data(), 0}, {b.data(), 3}, {c.data(), c.size()}}));
  ASSERT_OK_AND_ASSIGN(auto entry, cache->Get("blocks", "key"));
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(entry->data()) % 64, 0u);
  ASSERT_EQ(entry->size(), static_cast<int64_t>(a.size() + b.size() + c.size()));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(entry->data()), entry->size()), a + b + c);

  ASSERT_OK_AND_ASSIGN(auto missing, cache->Get("blocks", "other"));
  EXPECT_EQ(missing, nullptr);
  ASSERT_OK(cache->Put("blocks", "empty", {}));
  EXPECT_EQ(GetString(*cache, "blocks", "empty"), std::string());

  const CacheStats stats = cache->stats();
  EXPECT_EQ(stats.hits, 2);
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.writes, 2);
  EXPECT_EQ(stats.bytes_written, static_cast<int64_t>(a.size() + b.size() + c.size()));
  EXPECT_EQ(stats.bytes_read, entry->size());
  EXPECT_EQ(stats.corrupt + stats.evictions + stats.not_stored + stats.waits, 0);
  // The payload starts on a 64-byte boundary of the file too (so any mapping offset works).
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(cache->EntryPath("blocks", "key"))),
            128 + entry->size());
  ASSERT_OK_AND_ASSIGN(const int64_t used, cache->UsedBytes());
  EXPECT_EQ(used, 128 + entry->size() + 128);
}

TEST_F(DiskCacheTest, ArbitraryKeysAreDistinctEntries) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  const std::vector<std::string> keys = {"",
                                         "a",
                                         "a/b/../c",
                                         std::string("nul\0inside", 10),
                                         std::string("nul\0", 4),
                                         "nul",
                                         "\xff\xfe binary",
                                         "ключ",
                                         std::string(100000, 'k'),
                                         std::string(100001, 'k')};
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_OK(cache->Put("tensors", keys[i], PartsOf(Pattern(100 + i, i))));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(GetString(*cache, "tensors", keys[i]), Pattern(100 + i, i)) << i;
  }
  EXPECT_EQ(cache->stats().hits, static_cast<int64_t>(keys.size()));
}

TEST_F(DiskCacheTest, NamespacesAreSeparateFolders) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  ASSERT_OK(cache->Put("blocks", "k", PartsOf("block bytes")));
  ASSERT_OK(cache->Put("tensors", "k", PartsOf("tensor bytes")));
  EXPECT_EQ(GetString(*cache, "blocks", "k"), "block bytes");
  EXPECT_EQ(GetString(*cache, "tensors", "k"), "tensor bytes");
  EXPECT_EQ(cache->EntryPath("blocks", "k").rfind(dir_ + "/blocks/", 0), 0u);
  EXPECT_TRUE(fs::exists(cache->EntryPath("blocks", "k")));
  EXPECT_TRUE(fs::exists(cache->EntryPath("tensors", "k")));
  EXPECT_EQ(GetString(*cache, "other", "k"), std::nullopt);
}

// The entry file of a fixed (namespace, key, payload), pinned byte for byte with the values that
// format version 1 wrote when XXH64 was implemented in-tree (before libxxhash): its name (two
// XXH64 seeds of the key), the payload and header checksums, and an FNV-1a digest of every byte.
// A change here means caches already on disk would be dropped as corrupt or missed.
TEST_F(DiskCacheTest, EntryFileBytesMatchFormatVersion1) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  const std::string payload = Pattern(100003, 7);
  ASSERT_OK(cache->Put("blocks", "compat-key",
                       {{payload.data(), 17}, {payload.data() + 17, payload.size() - 17}}));
  const std::string path = cache->EntryPath("blocks", "compat-key");
  EXPECT_EQ(fs::path(path).filename().string(), "ff7f37ab0e0b543e238af4546af54a18");
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), 128 + payload.size());
  uint64_t payload_checksum, header_checksum;
  std::memcpy(&payload_checksum, bytes.data() + 32, 8);
  std::memcpy(&header_checksum, bytes.data() + 40, 8);
  EXPECT_EQ(payload_checksum, 0x6e61c483e3a85a0eULL);
  EXPECT_EQ(header_checksum, 0x4efa96731fb54e4fULL);
  Fnv1a fnv;
  fnv.Add(bytes.data(), bytes.size());
  EXPECT_EQ(fnv.digest(), 0x0f4c4be3b6079affULL);
  ASSERT_OK_AND_ASSIGN(auto entry, cache->Get("blocks", "compat-key"));
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(entry->data()), entry->size()), payload);
}

TEST_F(DiskCacheTest, RejectsBadNamespacesAndHugeKeys) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  for (const std::string& ns :
       std::vector<std::string>{"", ".tmp", "a/b", "..", std::string(65, 'n')}) {
    const Status status = cache->Put(ns, "k", PartsOf("x"));
    EXPECT_EQ(GetErrorKind(status), ErrorKind::kInvalidOption) << ns;
    EXPECT_EQ(GetErrorKind(cache->Get(ns, "k").status()), ErrorKind::kInvalidOption) << ns;
  }
  const Status status = cache->Put("blocks", std::string((1 << 20) + 1, 'k'), PartsOf("x"));
  EXPECT_EQ(GetErrorKind(status), ErrorKind::kInvalidOption);
  EXPECT_NE(status.message().find(dir_), std::string::npos) << status.message();
}

TEST_F(DiskCacheTest, AnotherKeysFileAtTheSamePathIsAMiss) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  ASSERT_OK(cache->Put("blocks", "b", PartsOf("bytes of b")));
  // Simulate a hash collision: b's entry file sits where a's would be.
  const std::string a_path = cache->EntryPath("blocks", "a");
  fs::create_directories(fs::path(a_path).parent_path());
  fs::copy_file(cache->EntryPath("blocks", "b"), a_path);
  EXPECT_EQ(GetString(*cache, "blocks", "a"), std::nullopt);
  EXPECT_EQ(cache->stats().corrupt, 0);
  EXPECT_TRUE(fs::exists(a_path));  // a valid entry of another key is not deleted
  ASSERT_OK(cache->Put("blocks", "a", PartsOf("bytes of a")));
  EXPECT_EQ(GetString(*cache, "blocks", "a"), "bytes of a");
  EXPECT_EQ(GetString(*cache, "blocks", "b"), "bytes of b");
}

TEST_F(DiskCacheTest, CorruptOrTruncatedEntriesAreDroppedCountedAndRefilled) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  const std::string payload = Pattern(1000, 7);
  auto flip = [](int64_t offset) {
    return [offset](std::string* bytes) { (*bytes)[offset] ^= 0x01; };
  };
  const std::vector<std::pair<std::string, std::function<void(std::string*)>>> kDamage = {
      {"payload byte", flip(128 + 500)},
      {"last payload byte", flip(128 + 999)},
      {"magic", flip(0)},
      {"version", flip(8)},
      {"payload size", flip(24)},
      {"checksum", flip(32)},
      {"key byte", flip(64 + 6)},
      {"padding", flip(100)},
      {"truncated payload", [](std::string* bytes) { bytes->pop_back(); }},
      {"truncated header", [](std::string* bytes) { bytes->resize(40); }},
      {"empty file", [](std::string* bytes) { bytes->clear(); }},
      {"trailing byte", [](std::string* bytes) { bytes->push_back('x'); }},
  };
  int64_t corrupt = 0;
  for (const auto& [what, damage] : kDamage) {
    SCOPED_TRACE(what);
    ASSERT_OK(cache->Put("blocks", "key", PartsOf(payload)));
    const std::string path = cache->EntryPath("blocks", "key");
    std::string bytes;
    {
      std::ifstream in(path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    ASSERT_EQ(static_cast<int64_t>(bytes.size()), kEntryFileBytes);
    damage(&bytes);
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    EXPECT_EQ(GetString(*cache, "blocks", "key"), std::nullopt);
    EXPECT_EQ(cache->stats().corrupt, ++corrupt);
    EXPECT_FALSE(fs::exists(path));
    ASSERT_OK(cache->Put("blocks", "key", PartsOf(payload)));
    EXPECT_EQ(GetString(*cache, "blocks", "key"), payload);
  }
  ASSERT_OK_AND_ASSIGN(const int64_t used, cache->UsedBytes());
  EXPECT_EQ(used, kEntryFileBytes);
}

// Readers that find one corrupt entry file at once (two segments of a row group) remove it once
// and count it once; the budget drops by its size once.
TEST_F(DiskCacheTest, ACorruptEntryFoundByManyReadersAtOnceIsCountedOnce) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  // Large enough that hashing it keeps the readers' checks overlapping.
  std::string payload(8 << 20, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 131 + (i >> 9));
  ASSERT_OK(cache->Put("blocks", "key", PartsOf(payload)));
  const std::string path = cache->EntryPath("blocks", "key");
  {
    const int fd = open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    const off_t at = static_cast<off_t>(fs::file_size(path)) - 1000;
    char byte = 0;
    ASSERT_EQ(pread(fd, &byte, 1, at), 1);
    byte = static_cast<char>(byte ^ 0x01);
    ASSERT_EQ(pwrite(fd, &byte, 1, at), 1);
    close(fd);
  }
  constexpr int kReaders = 6;
  std::atomic<int> ready{0};
  std::atomic<int> served{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&] {
      ready.fetch_add(1);
      while (ready.load() < kReaders) std::this_thread::yield();
      if (GetString(*cache, "blocks", "key").has_value()) served.fetch_add(1);
    });
  }
  for (auto& reader : readers) reader.join();
  EXPECT_EQ(served.load(), 0);
  EXPECT_EQ(cache->stats().corrupt, 1);
  EXPECT_EQ(cache->stats().misses, kReaders);
  EXPECT_FALSE(fs::exists(path));
  ASSERT_OK_AND_ASSIGN(const int64_t used, cache->UsedBytes());
  EXPECT_EQ(used, 0);
}

// The payload is hashed on the first Get of an entry file this object did not write; later Gets
// of the same file skip the hash (a warm epoch reads each entry's bytes once, and the epoch after
// the one that filled the cache reads them once too), and a write to the file, even one in place
// that keeps its inode and size, makes the next Get verify it again (the write moved its mtime).
TEST_F(DiskCacheTest, PayloadIsHashedOncePerVersionOfAnEntryFile) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  const std::string payload = Pattern(1000, 3);
  const std::string path = cache->EntryPath("blocks", "key");
  // One payload byte flipped in place: same inode, same size.
  auto flip_in_place = [&]() {
    struct stat before;
    ASSERT_EQ(stat(path.c_str(), &before), 0);
    const int fd = open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    const char flipped = static_cast<char>(payload[500] ^ 0x01);
    ASSERT_EQ(pwrite(fd, &flipped, 1, kEntryFileBytes - 1000 + 500), 1);
    close(fd);
    struct stat after;
    ASSERT_EQ(stat(path.c_str(), &after), 0);
    ASSERT_EQ(after.st_ino, before.st_ino);
    ASSERT_EQ(after.st_size, before.st_size);
  };

  ASSERT_OK(cache->Put("blocks", "key", PartsOf(payload)));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(GetString(*cache, "blocks", "key"), payload);
  EXPECT_EQ(cache->stats().payload_checks, 0);  // its own write
  EXPECT_EQ(cache->stats().hits, 3);

  auto other = OpenOrDie(Options());  // another object (another process) verifies on its own
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(GetString(*other, "blocks", "key"), payload);
  EXPECT_EQ(other->stats().payload_checks, 1);
  EXPECT_EQ(GetString(*cache, "blocks", "key"), payload);  // its read moved only the atime
  EXPECT_EQ(cache->stats().payload_checks, 0);

  flip_in_place();
  EXPECT_EQ(GetString(*cache, "blocks", "key"), std::nullopt);
  EXPECT_EQ(cache->stats().corrupt, 1);
  EXPECT_EQ(cache->stats().payload_checks, 1);

  // Written again by this object: not hashed; damaged right after its write (within the
  // kernel's time tick): caught.
  ASSERT_OK(cache->Put("blocks", "key", PartsOf(payload)));
  EXPECT_EQ(GetString(*cache, "blocks", "key"), payload);
  EXPECT_EQ(GetString(*cache, "blocks", "key"), payload);
  EXPECT_EQ(cache->stats().payload_checks, 1);
  ASSERT_OK(cache->Put("blocks", "key", PartsOf(payload)));  // replaces the file
  flip_in_place();
  EXPECT_EQ(GetString(*cache, "blocks", "key"), std::nullopt);
  EXPECT_EQ(cache->stats().corrupt, 2);
  EXPECT_EQ(cache->stats().payload_checks, 2);
}

TEST_F(DiskCacheTest, KeptMappingsAreReusedUntilTheirFileChanges) {
  DiskCacheOptions options = Options();
  options.kept_mapping_bytes = 10 * kEntryFileBytes;
  auto cache = OpenOrDie(options);
  ASSERT_NE(cache, nullptr);
  const std::string payload = Pattern(1000, 3), other = Pattern(1000, 4);
  const std::string path = cache->EntryPath("blocks", "key");
  auto bytes = [](const std::shared_ptr<CacheEntry>& entry) {
    return std::string(reinterpret_cast<const char*>(entry->data()), entry->size());
  };

  // The mapping Put made is the one every Get returns while the file is unchanged (two live
  // entries of separate mappings would have separate addresses).
  ASSERT_OK(cache->Put("blocks", "key", PartsOf(payload)));
  EXPECT_EQ(cache->kept_mapping_bytes(), kEntryFileBytes);
  ASSERT_OK_AND_ASSIGN(auto first, cache->Get("blocks", "key"));
  ASSERT_OK_AND_ASSIGN(auto second, cache->Get("blocks", "key"));
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(first->data(), second->data());
  EXPECT_EQ(bytes(second), payload);
  EXPECT_EQ(cache->stats().payload_checks, 0);

  // Replaced by another object (another process): the new file is mapped, hashed and kept in
  // place of the old one, whose mapping still shows the old bytes to whoever holds it.
  auto writer = OpenOrDie(Options());
  ASSERT_NE(writer, nullptr);
  ASSERT_OK(writer->Put("blocks", "key", PartsOf(other)));
  ASSERT_OK_AND_ASSIGN(auto third, cache->Get("blocks", "key"));
  ASSERT_NE(third, nullptr);
  EXPECT_NE(third->data(), first->data());
  EXPECT_EQ(bytes(third), other);
  EXPECT_EQ(bytes(first), payload);
  EXPECT_EQ(cache->stats().payload_checks, 1);
  EXPECT_EQ(cache->kept_mapping_bytes(), kEntryFileBytes);
  ASSERT_OK_AND_ASSIGN(auto fourth, cache->Get("blocks", "key"));
  EXPECT_EQ(fourth->data(), third->data());
  EXPECT_EQ(cache->stats().payload_checks, 1);

  // A byte flipped in place (same inode and size, new times): hashed again, caught, and the
  // mapping kept for the old version is dropped with it.
  {
    const int fd = open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    const char flipped = static_cast<char>(other[500] ^ 0x01);
    ASSERT_EQ(pwrite(fd, &flipped, 1, kEntryFileBytes - 1000 + 500), 1);
    close(fd);
  }
  EXPECT_EQ(GetString(*cache, "blocks", "key"), std::nullopt);
  EXPECT_EQ(cache->stats().corrupt, 1);
  EXPECT_EQ(cache->stats().payload_checks, 2);
  EXPECT_EQ(cache->kept_mapping_bytes(), 0);

  // Kept again once written again; dropped when the file goes (another process's Clear()).
  ASSERT_OK(cache->Put("blocks", "key", PartsOf(payload)));
  EXPECT_EQ(cache->kept_mapping_bytes(), kEntryFileBytes);
  ASSERT_OK(writer->Clear());
  EXPECT_EQ(GetString(*cache, "blocks", "key"), std::nullopt);
  EXPECT_EQ(cache->kept_mapping_bytes(), 0);
  ASSERT_OK(cache->Put("blocks", "key", PartsOf(payload)));
  ASSERT_OK(cache->Clear());
  EXPECT_EQ(cache->kept_mapping_bytes(), 0);
}

TEST_F(DiskCacheTest, OtherProcessesReadsNeitherReverifyNorRemapAndCountAsUses) {
  // Two objects on one folder stand for two ranks of a node. Each one's reads mark the entries
  // used (eviction's recency) without changing the version the other verified and mapped.
  DiskCacheOptions options = Options();
  options.kept_mapping_bytes = 10 * kEntryFileBytes;
  auto first = OpenOrDie(options), second = OpenOrDie(options);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  for (const char* key : {"a", "b", "c"}) {
    ASSERT_OK(first->Put("blocks", key, PartsOf(Pattern(1000, key[0]))));
  }
  std::map<std::string, const uint8_t*> addresses;
  for (int round = 0; round < 3; ++round) {
    for (const char* key : {"a", "b", "c"}) {
      ASSERT_OK_AND_ASSIGN(auto mine, first->Get("blocks", key));
      ASSERT_OK_AND_ASSIGN(auto theirs, second->Get("blocks", key));
      ASSERT_NE(mine, nullptr);
      ASSERT_NE(theirs, nullptr);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(mine->data()), mine->size()),
                Pattern(1000, key[0]));
      if (round == 0) addresses[key] = mine->data();
      EXPECT_EQ(mine->data(), addresses[key]) << key << " mapped again in round " << round;
    }
  }
  EXPECT_EQ(first->stats().payload_checks, 0);   // it wrote them
  EXPECT_EQ(first->stats().maps, 3);             // when writing
  EXPECT_EQ(second->stats().payload_checks, 3);  // once each
  EXPECT_EQ(second->stats().maps, 3);

  // Recency is every process's: "a" read by the second object only is newer than "b" and "c".
  first.reset();
  second.reset();
  auto reader = OpenOrDie(Options(3 * kEntryFileBytes + 500));
  auto writer = OpenOrDie(Options(3 * kEntryFileBytes + 500));
  ASSERT_NE(reader, nullptr);
  ASSERT_NE(writer, nullptr);
  EXPECT_NE(GetString(*reader, "blocks", "a"), std::nullopt);
  ASSERT_OK(writer->Put("blocks", "d", PartsOf(Pattern(1000, 'd'))));
  EXPECT_EQ(writer->stats().evictions, 1);
  EXPECT_TRUE(fs::exists(writer->EntryPath("blocks", "a")));
  EXPECT_FALSE(fs::exists(writer->EntryPath("blocks", "b")));
}

TEST_F(DiskCacheTest, KeptMappingsStayWithinTheirBoundAndKeepTheirEntriesInPlace) {
  // The reader's own budget is large: kept mappings stay within a quarter of what its cache can
  // hold (KeptMappingsStayWithinAQuarterOfWhatTheDiskHolds); the writer's holds three entries.
  DiskCacheOptions options = Options();
  options.kept_mapping_bytes = 2 * kEntryFileBytes;
  auto reader = OpenOrDie(options);
  auto writer = OpenOrDie(Options(3 * kEntryFileBytes + 500));
  ASSERT_NE(reader, nullptr);
  ASSERT_NE(writer, nullptr);
  for (const char* key : {"a", "b", "c"}) {
    ASSERT_OK(writer->Put("blocks", key, PartsOf(Pattern(1000, key[0]))));
  }
  // Read and released: "a" and "b" kept, then "c" pushes out "a" (the least recently used).
  for (const char* key : {"a", "b", "a", "c"}) {
    EXPECT_EQ(GetString(*reader, "blocks", key), Pattern(1000, key[0]));
  }
  EXPECT_EQ(reader->kept_mapping_bytes(), 2 * kEntryFileBytes);
  // Another process evicts for "d": "b", the least recently used, no longer kept, goes.
  ASSERT_OK(writer->Put("blocks", "d", PartsOf(Pattern(1000, 'd'))));
  EXPECT_EQ(writer->stats().evictions, 1);
  EXPECT_EQ(writer->stats().kept_in_use, 0);
  EXPECT_FALSE(fs::exists(writer->EntryPath("blocks", "b")));
  // For "e", "a" and "c" (used before "d") are skipped while kept: "d" goes.
  ASSERT_OK(writer->Put("blocks", "e", PartsOf(Pattern(1000, 'e'))));
  EXPECT_EQ(writer->stats().evictions, 2);
  EXPECT_EQ(writer->stats().kept_in_use, 2);
  EXPECT_TRUE(fs::exists(writer->EntryPath("blocks", "a")));
  EXPECT_TRUE(fs::exists(writer->EntryPath("blocks", "c")));
  EXPECT_FALSE(fs::exists(writer->EntryPath("blocks", "d")));
  // Destroying the reader releases them: "a" goes for "f".
  reader.reset();
  ASSERT_OK(writer->Put("blocks", "f", PartsOf(Pattern(1000, 'f'))));
  EXPECT_EQ(writer->stats().kept_in_use, 2);
  EXPECT_FALSE(fs::exists(writer->EntryPath("blocks", "a")));
  EXPECT_TRUE(fs::exists(writer->EntryPath("blocks", "c")));
}

TEST_F(DiskCacheTest, KeptMappingsStayWithinAQuarterOfWhatTheDiskHolds) {
  // Kept mappings hold their entries against eviction: on a disk with room for 8 entries above
  // the floor, an object keeps at most 2 entries mapped, whatever kept_mapping_bytes asks.
  DiskCacheOptions options = Options();
  options.kept_mapping_bytes = 100 * kEntryFileBytes;
  options.min_free_bytes = 4 * kEntryFileBytes;
  options.free_bytes_for_testing = [] { return 12 * kEntryFileBytes; };
  auto cache = OpenOrDie(options);
  ASSERT_NE(cache, nullptr);
  for (int i = 0; i < 5; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_OK(cache->Put("blocks", key, PartsOf(Pattern(1000, i))));
    EXPECT_EQ(GetString(*cache, "blocks", key), Pattern(1000, i));
  }
  EXPECT_EQ(cache->kept_mapping_bytes(), 2 * kEntryFileBytes);
  EXPECT_EQ(cache->stats().maps, 5);  // each mapped once, by its Put; three dropped since

  // Within max_bytes too: a budget of 4 entries keeps one.
  DiskCacheOptions small = Options(4 * kEntryFileBytes);
  small.kept_mapping_bytes = 100 * kEntryFileBytes;
  auto other = OpenOrDie(small);
  ASSERT_NE(other, nullptr);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(GetString(*other, "blocks", "k" + std::to_string(i)), Pattern(1000, i));
  }
  EXPECT_EQ(other->kept_mapping_bytes(), kEntryFileBytes);
}

TEST_F(DiskCacheTest, EntryStaysReadableAfterReplaceEvictAndClear) {
  auto cache = OpenOrDie(Options(3 * kEntryFileBytes));
  ASSERT_NE(cache, nullptr);
  const std::string first = Pattern(1000, 1), second = Pattern(1000, 2);
  ASSERT_OK(cache->Put("blocks", "k", PartsOf(first)));
  ASSERT_OK_AND_ASSIGN(auto held, cache->Get("blocks", "k"));
  ASSERT_NE(held, nullptr);
  auto held_bytes = [&] { return std::string(reinterpret_cast<const char*>(held->data()), 1000); };

  ASSERT_OK(cache->Put("blocks", "k", PartsOf(second)));  // replaced by rename
  EXPECT_EQ(GetString(*cache, "blocks", "k"), second);
  EXPECT_EQ(held_bytes(), first);
  for (int i = 0; i < 5; ++i) {  // evicted
    ASSERT_OK(cache->Put("blocks", "other" + std::to_string(i), PartsOf(Pattern(1000, 10 + i))));
  }
  EXPECT_EQ(GetString(*cache, "blocks", "k"), std::nullopt);
  EXPECT_EQ(held_bytes(), first);
  ASSERT_OK(cache->Clear());
  EXPECT_EQ(held_bytes(), first);
}

// ---------------------------------------------------------------------------------------------
// Eviction

TEST_F(DiskCacheTest, EvictsLeastRecentlyUsedFirst) {
  auto cache = OpenOrDie(Options(3 * kEntryFileBytes + 500));
  ASSERT_NE(cache, nullptr);
  for (const char* key : {"a", "b", "c"}) {
    ASSERT_OK(cache->Put("blocks", key, PartsOf(Pattern(1000, key[0]))));
  }
  EXPECT_NE(GetString(*cache, "blocks", "a"), std::nullopt);  // a is now newer than b and c
  ASSERT_OK(cache->Put("blocks", "d", PartsOf(Pattern(1000, 'd'))));
  EXPECT_EQ(cache->stats().evictions, 1);
  EXPECT_FALSE(fs::exists(cache->EntryPath("blocks", "b")));
  EXPECT_NE(GetString(*cache, "blocks", "c"), std::nullopt);  // order now: a, d, c
  ASSERT_OK(cache->Put("blocks", "e", PartsOf(Pattern(1000, 'e'))));
  EXPECT_EQ(cache->stats().evictions, 2);
  EXPECT_EQ(GetString(*cache, "blocks", "a"), std::nullopt);
  for (const char* key : {"c", "d", "e"}) {
    EXPECT_EQ(GetString(*cache, "blocks", key), Pattern(1000, key[0])) << key;
  }
  ASSERT_OK_AND_ASSIGN(const int64_t used, cache->UsedBytes());
  EXPECT_EQ(used, 3 * kEntryFileBytes);
}

TEST_F(DiskCacheTest, StaysWithinBudgetAcrossNamespacesAndReplacements) {
  const int64_t budget = 64 << 10;
  auto cache = OpenOrDie(Options(budget));
  ASSERT_NE(cache, nullptr);
  std::mt19937 random(5);
  for (int i = 0; i < 300; ++i) {
    const std::string ns = i % 3 == 0 ? "tensors" : "blocks";
    const std::string key = std::to_string(random() % 40);
    const std::string payload = Pattern(random() % 9000, i);
    ASSERT_OK(cache->Put(ns, key, PartsOf(payload)));
    EXPECT_EQ(GetString(*cache, ns, key), payload) << i;  // the newest entry is never evicted
    ASSERT_OK_AND_ASSIGN(const int64_t used, cache->UsedBytes());
    ASSERT_LE(used, budget) << i;
  }
  EXPECT_GT(cache->stats().evictions, 0);
  EXPECT_EQ(cache->stats().not_stored, 0);
}

TEST_F(DiskCacheTest, ReplacingAnEntryDoesNotCountItTwice) {
  auto cache = OpenOrDie(Options(3 * kEntryFileBytes));
  ASSERT_NE(cache, nullptr);
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK(cache->Put("blocks", "a", PartsOf(Pattern(1000, i))));
  }
  ASSERT_OK(cache->Put("blocks", "b", PartsOf(Pattern(1000, 20))));
  ASSERT_OK(cache->Put("blocks", "c", PartsOf(Pattern(1000, 21))));
  EXPECT_EQ(cache->stats().evictions, 0);
  EXPECT_EQ(GetString(*cache, "blocks", "a"), Pattern(1000, 9));
  ASSERT_OK_AND_ASSIGN(const int64_t used, cache->UsedBytes());
  EXPECT_EQ(used, 3 * kEntryFileBytes);
}

TEST_F(DiskCacheTest, EntryLargerThanTheBudgetIsNotStoredAndEvictsNothing) {
  auto cache = OpenOrDie(Options(2 * kEntryFileBytes));
  ASSERT_NE(cache, nullptr);
  ASSERT_OK(cache->Put("blocks", "small", PartsOf(Pattern(1000, 1))));
  ASSERT_OK(cache->Put("blocks", "huge", PartsOf(Pattern(3000, 2))));
  EXPECT_EQ(GetString(*cache, "blocks", "huge"), std::nullopt);
  EXPECT_EQ(GetString(*cache, "blocks", "small"), Pattern(1000, 1));
  EXPECT_EQ(cache->stats().not_stored, 1);
  EXPECT_EQ(cache->stats().evictions, 0);
  EXPECT_TRUE(TempFiles(dir_).empty());
}

TEST_F(DiskCacheTest, KeepsTheFreeSpaceFloorByEvictingLeastRecentlyUsed) {
  // A disk of 20,000 bytes holding only the cache folder.
  DiskCacheOptions options = Options();
  options.min_free_bytes = 15000;
  const std::string dir = dir_;
  options.free_bytes_for_testing = [dir] { return 20000 - FolderBytes(dir); };
  auto cache = OpenOrDie(options);
  ASSERT_NE(cache, nullptr);
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK(cache->Put("blocks", "k" + std::to_string(i), PartsOf(Pattern(1000, i))));
  }
  EXPECT_EQ(cache->stats().evictions, 0);
  EXPECT_NE(GetString(*cache, "blocks", "k0"), std::nullopt);  // k1 is now the oldest
  for (int i = 4; i < 10; ++i) {
    ASSERT_OK(cache->Put("blocks", "k" + std::to_string(i), PartsOf(Pattern(1000, i))));
    EXPECT_GE(20000 - FolderBytes(dir_), options.min_free_bytes) << i;
    if (i == 4) {  // the fifth entry pushed out the least recently used one, k1, not k0
      EXPECT_TRUE(fs::exists(cache->EntryPath("blocks", "k0")));
      EXPECT_FALSE(fs::exists(cache->EntryPath("blocks", "k1")));
    }
  }
  // Four entries fit above the floor.
  EXPECT_EQ(cache->stats().evictions, 6);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(GetString(*cache, "blocks", "k" + std::to_string(i)).has_value(), i >= 6) << i;
  }
}

// Two writers (two DiskCache objects, as two processes have) that write at the same time: each
// one's on_write seam holds it, its entry fully written but not committed, until the other one
// is also writing or has given up; `sample` runs at that moment. With `gate_checks`, each one's
// first free-space check (the one before writing) also waits for the other's, so that both
// check before either writes; a writer that checks under a lock the other one needs waits only
// 300 ms (the other one cannot get there meanwhile).
struct TwoWriters {
  std::mutex mutex;
  std::condition_variable cv;
  int checked = 0, writing = 0, done = 0;

  void Run(const DiskCacheOptions& options, bool gate_checks, const std::function<void()>& sample,
           std::shared_ptr<DiskCache> caches[2]) {
    for (int i = 0; i < 2; ++i) {
      DiskCacheOptions mine = options;
      mine.on_write_for_testing = [this, sample](int64_t) {
        std::unique_lock<std::mutex> lock(mutex);
        ++writing;
        cv.notify_all();
        cv.wait_for(lock, std::chrono::seconds(10), [&] { return writing + done >= 2; });
        sample();
      };
      if (gate_checks) {
        auto first = std::make_shared<bool>(true);
        mine.free_bytes_for_testing = [this, first, inner = options.free_bytes_for_testing] {
          if (*first) {
            *first = false;
            std::unique_lock<std::mutex> lock(mutex);
            ++checked;
            cv.notify_all();
            cv.wait_for(lock, std::chrono::milliseconds(300), [&] { return checked + done >= 2; });
          }
          return inner();
        };
      }
      auto opened = DiskCache::Open(mine);
      ASSERT_TRUE(opened.ok()) << opened.status().ToString();
      caches[i] = *opened;
    }
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
      threads.emplace_back([&, i] {
        const Status status =
            caches[i]->Put("blocks", "k" + std::to_string(i), PartsOf(Pattern(1000, i)));
        EXPECT_TRUE(status.ok()) << status.ToString();
        std::lock_guard<std::mutex> lock(mutex);
        ++done;
        cv.notify_all();
      });
    }
    for (auto& thread : threads) thread.join();
  }
};

TEST_F(DiskCacheTest, ConcurrentWritersTogetherKeepTheFreeSpaceFloor) {
  // A disk of 20,000 bytes holding only the cache folder (its 8-byte lock file, then entries):
  // one entry fits above the floor, two do not. Both writers check the floor before writing; the
  // one that checks second must count the first one's entry, which is not committed yet.
  DiskCacheOptions options = Options();
  options.min_free_bytes = 18000;
  const std::string dir = dir_;
  options.free_bytes_for_testing = [dir] { return 20000 - FolderBytes(dir); };
  std::mutex sample_mutex;
  int64_t min_free = INT64_MAX;
  auto sample = [&] {
    std::lock_guard<std::mutex> lock(sample_mutex);
    min_free = std::min(min_free, 20000 - FolderBytes(dir));
  };
  TwoWriters writers;
  std::shared_ptr<DiskCache> caches[2];
  writers.Run(options, /*gate_checks=*/true, sample, caches);
  ASSERT_NE(caches[1], nullptr);
  EXPECT_EQ(writers.writing, 1);  // the second writer gave up instead of writing
  EXPECT_GE(min_free, options.min_free_bytes);
  EXPECT_GE(20000 - FolderBytes(dir_), options.min_free_bytes);
  EXPECT_EQ(caches[0]->stats().writes + caches[1]->stats().writes, 1);
  EXPECT_EQ(caches[0]->stats().not_stored + caches[1]->stats().not_stored, 1);
  EXPECT_EQ(GetString(*caches[0], "blocks", "k0").has_value() +
                GetString(*caches[0], "blocks", "k1").has_value(),
            1);
  EXPECT_TRUE(TempFiles(dir_).empty());
}

TEST_F(DiskCacheTest, ConcurrentWritersTogetherStayWithinTheBudget) {
  // A budget of one entry and a half: entries being written count against it too.
  const int64_t budget = kEntryFileBytes + kEntryFileBytes / 2;
  const std::string dir = dir_;
  std::mutex sample_mutex;
  int64_t max_bytes = 0;  // entries and temporary files, without the lock file
  auto sample = [&] {
    std::lock_guard<std::mutex> lock(sample_mutex);
    max_bytes =
        std::max(max_bytes, FolderBytes(dir) - static_cast<int64_t>(fs::file_size(dir + "/.lock")));
  };
  TwoWriters writers;
  std::shared_ptr<DiskCache> caches[2];
  writers.Run(Options(budget), /*gate_checks=*/false, sample, caches);
  ASSERT_NE(caches[1], nullptr);
  EXPECT_EQ(writers.writing, 1);
  EXPECT_EQ(max_bytes, kEntryFileBytes);
  EXPECT_EQ(caches[0]->stats().writes + caches[1]->stats().writes, 1);
  EXPECT_EQ(caches[0]->stats().not_stored + caches[1]->stats().not_stored, 1);
  ASSERT_OK_AND_ASSIGN(const int64_t used, caches[0]->UsedBytes());
  EXPECT_EQ(used, kEntryFileBytes);
  EXPECT_TRUE(TempFiles(dir_).empty());
}

TEST_F(DiskCacheTest, UnreachableFloorOnTheRealFileSystemEmptiesTheCache) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  ASSERT_OK(cache->Put("blocks", "old", PartsOf(Pattern(1000, 1))));
  // statvfs() itself: a floor above the free space cannot be met, so the cache gives space back.
  DiskCacheOptions options = Options();
  options.min_free_bytes = fs::space(dir_).available + (int64_t{1} << 40);
  auto starved = OpenOrDie(options);
  ASSERT_NE(starved, nullptr);
  ASSERT_OK(starved->Put("blocks", "new", PartsOf(Pattern(1000, 2))));
  EXPECT_EQ(starved->stats().not_stored, 1);
  EXPECT_EQ(starved->stats().evictions, 1);
  EXPECT_EQ(GetString(*cache, "blocks", "old"), std::nullopt);
  EXPECT_EQ(GetString(*cache, "blocks", "new"), std::nullopt);
  EXPECT_TRUE(TempFiles(dir_).empty());
}

TEST_F(DiskCacheTest, AStaleCounterIsRepairedByTheNextEviction) {
  const int64_t budget = 3 * kEntryFileBytes + 500;
  auto cache = OpenOrDie(Options(budget));
  ASSERT_NE(cache, nullptr);
  // An entry committed by a writer killed before it counted it: the file is there, the counter
  // does not know (made here by copying an entry from another folder).
  {
    char other_dir[] = "/tmp/stoker-disk-cache-other-XXXXXX";
    ASSERT_NE(mkdtemp(other_dir), nullptr);
    DiskCacheOptions other_options = Options();
    other_options.dir = other_dir;
    auto other = OpenOrDie(other_options);
    ASSERT_NE(other, nullptr);
    ASSERT_OK(other->Put("blocks", "uncounted", PartsOf(Pattern(1000, 99))));
    const std::string path = cache->EntryPath("blocks", "uncounted");
    fs::create_directories(fs::path(path).parent_path());
    fs::copy_file(other->EntryPath("blocks", "uncounted"), path);
    fs::remove_all(other_dir);
  }
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK(cache->Put("blocks", "k" + std::to_string(i), PartsOf(Pattern(1000, i))));
  }
  // The fourth commit saw the counter over budget, listed the folder and evicted by the truth.
  ASSERT_OK_AND_ASSIGN(const int64_t used, cache->UsedBytes());
  EXPECT_LE(used, budget);
  EXPECT_FALSE(fs::exists(cache->EntryPath("blocks", "uncounted")));
  EXPECT_EQ(GetString(*cache, "blocks", "k3"), Pattern(1000, 3));
}

// ---------------------------------------------------------------------------------------------
// Clear, Open, errors

TEST_F(DiskCacheTest, ClearRemovesEveryEntryButNotForeignFiles) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK(cache->Put(i % 2 ? "blocks" : "tensors", std::to_string(i), PartsOf("x")));
  }
  std::ofstream(dir_ + "/notes.txt") << "not ours";
  ASSERT_OK(cache->Clear());
  ASSERT_OK_AND_ASSIGN(const int64_t used, cache->UsedBytes());
  EXPECT_EQ(used, 0);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(GetString(*cache, i % 2 ? "blocks" : "tensors", std::to_string(i)), std::nullopt);
  }
  EXPECT_FALSE(fs::exists(dir_ + "/blocks"));
  EXPECT_FALSE(fs::exists(dir_ + "/tensors"));
  EXPECT_TRUE(fs::exists(dir_ + "/notes.txt"));
  EXPECT_EQ(cache->stats().writes, 20);  // stats are this object's history, not the folder's
  ASSERT_OK(cache->Put("blocks", "after", PartsOf("y")));
  EXPECT_EQ(GetString(*cache, "blocks", "after"), "y");
}

TEST_F(DiskCacheTest, OpenRejectsBadOptionsNamingThePath) {
  DiskCacheOptions options = Options();
  options.dir = "";
  EXPECT_EQ(GetErrorKind(DiskCache::Open(options).status()), ErrorKind::kInvalidOption);

  const std::string file = dir_ + "/a-file";
  std::ofstream(file) << "x";
  for (const std::string& bad : {file, file + "/below"}) {
    options.dir = bad;
    const Status status = DiskCache::Open(options).status();
    EXPECT_EQ(GetErrorKind(status), ErrorKind::kInvalidOption) << bad;
    EXPECT_NE(status.message().find(bad), std::string::npos) << status.message();
  }
  options = Options(0);
  EXPECT_EQ(GetErrorKind(DiskCache::Open(options).status()), ErrorKind::kInvalidOption);
  options = Options();
  options.min_free_bytes = -1;
  EXPECT_EQ(GetErrorKind(DiskCache::Open(options).status()), ErrorKind::kInvalidOption);

  options = Options();
  options.dir = dir_ + "/new/nested";
  auto cache = OpenOrDie(options);
  ASSERT_NE(cache, nullptr);
  EXPECT_TRUE(fs::is_directory(options.dir));
}

TEST_F(DiskCacheTest, FolderIsKeptAsANormalizedAbsolutePath) {
  DiskCacheOptions options = Options();
  options.dir = (fs::relative(dir_) / "." / "sub").string() + "/";  // relative, with a trailing /
  auto cache = OpenOrDie(options);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->options().dir, dir_ + "/sub");
  EXPECT_EQ(cache->EntryPath("blocks", "k").rfind(dir_ + "/sub/blocks/", 0), 0u);
}

DiskCache::Filler FillWith(std::string payload, std::atomic<int>* fills) {
  return [payload = std::move(payload), fills](DiskCache::Parts* parts,
                                               std::shared_ptr<void>* keep_alive) {
    auto owned = std::make_shared<std::string>(payload);
    parts->push_back({owned->data(), owned->size()});
    *keep_alive = owned;
    if (fills) fills->fetch_add(1);
    return Status::OK();
  };
}

std::string Bytes(const std::shared_ptr<CacheEntry>& entry) {
  return entry ? std::string(reinterpret_cast<const char*>(entry->data()), entry->size())
               : "<null>";
}

TEST_F(DiskCacheTest, AFileWhereTheNamespaceFolderGoesMakesTheCacheUnavailableThere) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  std::ofstream(dir_ + "/blocks") << "a file where the namespace folder goes";
  // Not stored, not an error: the caller goes on without the cache.
  ASSERT_OK(cache->Put("blocks", "k", PartsOf("payload")));
  EXPECT_EQ(cache->stats().unavailable, 1);
  EXPECT_EQ(cache->stats().writes, 0);
  EXPECT_TRUE(TempFiles(dir_).empty());
  EXPECT_EQ(GetString(*cache, "blocks", "k"), std::nullopt);  // ENOTDIR: a miss
  EXPECT_EQ(cache->stats().unavailable, 2);
  std::atomic<int> fills{0};
  ASSERT_OK_AND_ASSIGN(auto entry, cache->GetOrFill("blocks", "k", FillWith("filled", &fills)));
  EXPECT_EQ(Bytes(entry), "filled");
  EXPECT_TRUE(fs::is_regular_file(dir_ + "/blocks"));  // not ours: left alone
  // Other namespaces are unaffected.
  ASSERT_OK(cache->Put("tensors", "k", PartsOf("payload")));
  EXPECT_EQ(GetString(*cache, "tensors", "k"), "payload");
}

// ---------------------------------------------------------------------------------------------
// The folder removed, renamed or replaced under a live cache (issue 23.5)

TEST_F(DiskCacheTest, ARemovedFolderIsRecreatedOnDemand) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  ASSERT_OK(cache->Put("blocks", "a", PartsOf("one")));
  for (const std::string how : {"rmtree", "rename", "rmtree+mkdir", "lock file only"}) {
    SCOPED_TRACE(how);
    if (how == "rename") {
      fs::rename(dir_, dir_ + ".old");
    } else if (how == "lock file only") {
      fs::remove(dir_ + "/.lock");
    } else {
      fs::remove_all(dir_);
      if (how == "rmtree+mkdir") fs::create_directory(dir_);
    }
    EXPECT_EQ(GetString(*cache, "blocks", "a"),
              how == "lock file only" ? std::optional<std::string>("one") : std::nullopt);
    std::atomic<int> fills{0};
    ASSERT_OK_AND_ASSIGN(auto entry, cache->GetOrFill("blocks", "b", FillWith("two", &fills)));
    EXPECT_EQ(Bytes(entry), "two");
    ASSERT_OK(cache->Put("blocks", "a", PartsOf("one")));
    EXPECT_EQ(GetString(*cache, "blocks", "a"), "one");
    EXPECT_EQ(GetString(*cache, "blocks", "b"), "two");
    EXPECT_TRUE(fs::is_regular_file(dir_ + "/.lock"));
    fs::remove_all(dir_ + ".old");
  }
  EXPECT_EQ(cache->stats().unavailable, 0);
  EXPECT_GE(cache->stats().recreated, 3);
  // A new object agrees with the recreated folder (one lock file, a correct counter).
  ASSERT_OK_AND_ASSIGN(const int64_t used, cache->UsedBytes());
  EXPECT_EQ(used, 2 * (128 + 3));
  int64_t counter = -1;  // the used-bytes counter in the recreated lock file agrees
  std::ifstream(dir_ + "/.lock", std::ios::binary).read(reinterpret_cast<char*>(&counter), 8);
  EXPECT_EQ(counter, used);
}

// The folder removed after the lock was taken and before the free space is read (a race CI hit
// with two processes and `rm -rf`): the folder is made again, not reported unusable.
TEST_F(DiskCacheTest, AFolderRemovedWhileTheLockIsHeldIsRecreatedForTheFreeSpace) {
  DiskCacheCounters counters;
  CacheFolderFiles files(dir_, &counters);
  ASSERT_OK(files.RecreateFolder());
  CacheBudget budget(&files, int64_t{1} << 30, /*min_free_bytes=*/0, nullptr, &counters);
  FolderLock lock(&budget);
  ASSERT_OK(lock.Acquire());
  fs::remove_all(dir_);
  ASSERT_OK_AND_ASSIGN(const bool fits, budget.Evict(lock, 100, 100));
  EXPECT_TRUE(fits);
  EXPECT_TRUE(fs::is_directory(dir_ + "/.tmp"));
  EXPECT_GE(counters.recreated.load(), 1);
}

TEST_F(DiskCacheTest, ObjectsSharingAFolderAgreeOnTheRecreatedLockFile) {
  auto first = OpenOrDie(Options());
  auto second = OpenOrDie(Options());
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ASSERT_OK(first->Put("blocks", "x", PartsOf("x")));  // both hold descriptors of the old .lock
  ASSERT_OK(second->Put("blocks", "y", PartsOf("y")));
  fs::remove_all(dir_);
  // Both take the key's lock on the new lock file: the second one waits for the first.
  std::unique_ptr<DiskCache::KeyLock> lock;
  ASSERT_OK_AND_ASSIGN(auto entry, first->GetOrLock("blocks", "k", &lock));
  EXPECT_EQ(entry, nullptr);
  ASSERT_NE(lock, nullptr);
  std::atomic<bool> done{false};
  Result<std::shared_ptr<CacheEntry>> seen;
  std::thread waiter([&] {
    seen = second->GetOrFill("blocks", "k", FillWith("second", nullptr));
    done = true;
  });
  for (int i = 0; i < 20000 && second->stats().waits == 0; ++i) usleep(500);
  EXPECT_EQ(second->stats().waits, 1);
  EXPECT_FALSE(done.load());
  ASSERT_OK(first->Put("blocks", "k", PartsOf("first")));
  lock.reset();
  waiter.join();
  ASSERT_TRUE(seen.ok()) << seen.status().ToString();
  EXPECT_EQ(Bytes(*seen), "first");
}

TEST_F(DiskCacheTest, AnUnusableFolderFallsBackWithOneWarningAndACounter) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  ASSERT_OK(cache->Put("blocks", "a", PartsOf("one")));
  // A file where the folder was: nothing can recreate it (root passes permission checks, so
  // this stands in for a folder made unreadable).
  fs::remove_all(dir_);
  std::ofstream(dir_) << "not a folder";
  testing::internal::CaptureStderr();
  EXPECT_EQ(GetString(*cache, "blocks", "a"), std::nullopt);
  ASSERT_OK(cache->Put("blocks", "a", PartsOf("one")));
  std::atomic<int> fills{0};
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(auto entry, cache->GetOrFill("blocks", "b", FillWith("two", &fills)));
    EXPECT_EQ(Bytes(entry), "two");
  }
  const std::string warnings = testing::internal::GetCapturedStderr();
  EXPECT_EQ(fills.load(), 3);
  EXPECT_GE(cache->stats().unavailable, 5);
  EXPECT_EQ(warnings.find("cannot use the cache folder " + dir_), warnings.rfind("cannot use"))
      << warnings;  // once
  EXPECT_NE(warnings.find("cannot use the cache folder " + dir_), std::string::npos) << warnings;
  // Once the folder can be made again, the cache works again.
  fs::remove(dir_);
  ASSERT_OK(cache->Put("blocks", "a", PartsOf("one")));
  EXPECT_EQ(GetString(*cache, "blocks", "a"), "one");
}

// ---------------------------------------------------------------------------------------------
// Files that are not entries at an entry's path (issue 23.6)

// Runs `body` in a child process that must finish within 20 s (a blocking open() would hang it).
void InChildWithin20s(const std::function<bool()>& body) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);
    _exit(body() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << " (a hang?)";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(DiskCacheTest, NonRegularFilesAtAnEntryPathAreAbsentAndRemoved) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  ASSERT_OK(cache->Put("blocks", "elsewhere", PartsOf("a valid entry of another key")));
  const std::string valid = dir_ + "/valid-looking-entry";
  fs::copy_file(cache->EntryPath("blocks", "elsewhere"), valid);
  struct Case {
    std::string name;
    std::function<void(const std::string&)> plant;
    bool removable;
  };
  const std::vector<Case> cases = {
      {"fifo", [](const std::string& p) { ASSERT_EQ(mkfifo(p.c_str(), 0644), 0); }, true},
      {"empty folder", [](const std::string& p) { fs::create_directory(p); }, true},
      {"folder",
       [](const std::string& p) {
         fs::create_directory(p);
         std::ofstream(p + "/inside") << "x";
       },
       false},
      {"symlink to an entry", [&](const std::string& p) { fs::create_symlink(valid, p); }, true},
      {"dangling symlink", [](const std::string& p) { fs::create_symlink("/nonexistent", p); },
       true},
      {"socket",
       [](const std::string& p) {
         // bind() takes at most 107 bytes of path: bind a short relative name in its folder.
         const fs::path here = fs::current_path();
         fs::current_path(fs::path(p).parent_path());
         const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
         sockaddr_un address = {};
         address.sun_family = AF_UNIX;
         const std::string name = fs::path(p).filename();
         std::strncpy(address.sun_path, name.c_str(), sizeof(address.sun_path) - 1);
         ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
         close(fd);
         fs::current_path(here);
       },
       true},
  };
  for (const Case& item : cases) {
    SCOPED_TRACE(item.name);
    const std::string key = "key " + item.name;
    const std::string path = cache->EntryPath("blocks", key);
    fs::create_directories(fs::path(path).parent_path());
    item.plant(path);
    const int64_t foreign_before = cache->stats().foreign;
    InChildWithin20s([&] {  // (the child's counters start as the parent's)
      auto entry = cache->Get("blocks", key);
      return entry.ok() && *entry == nullptr && cache->stats().foreign == foreign_before + 1;
    });
    EXPECT_EQ(GetString(*cache, "blocks", key), std::nullopt);
    std::error_code error;
    const auto type = fs::symlink_status(path, error).type();
    if (item.removable) {
      EXPECT_EQ(type, fs::file_type::not_found);
    } else {
      EXPECT_EQ(type, fs::file_type::directory);  // not ours to empty
    }
    // Storing over it works where it could be removed, and is "not stored" where it could not.
    ASSERT_OK(cache->Put("blocks", key, PartsOf("the entry")));
    EXPECT_EQ(GetString(*cache, "blocks", key),
              item.removable ? std::optional<std::string>("the entry") : std::nullopt);
    std::atomic<int> fills{0};
    ASSERT_OK_AND_ASSIGN(auto entry, cache->GetOrFill("blocks", key, FillWith("filled", &fills)));
    EXPECT_EQ(Bytes(entry), item.removable ? "the entry" : "filled");
  }
  EXPECT_TRUE(fs::is_regular_file(valid));  // a symlink's target is never touched
  EXPECT_EQ(cache->stats().corrupt, 0);
  EXPECT_EQ(cache->stats().unavailable, 0);
}

TEST_F(DiskCacheTest, AFifoAsTheLockFileIsReplaced) {
  ASSERT_NE(OpenOrDie(Options()), nullptr);
  fs::remove(dir_ + "/.lock");
  ASSERT_EQ(mkfifo((dir_ + "/.lock").c_str(), 0644), 0);
  InChildWithin20s([&] {
    auto cache = DiskCache::Open(Options());
    return cache.ok() && (*cache)->Put("blocks", "k", PartsOf("v")).ok() &&
           (*cache)->stats().writes == 1;
  });
  EXPECT_TRUE(fs::is_regular_file(dir_ + "/.lock"));
}

// ---------------------------------------------------------------------------------------------
// Entries in use are not evicted (issue 23.9)

TEST_F(DiskCacheTest, EvictionKeepsEntriesThatAProcessMaps) {
  // Room for three entries; another object (as another process) maps "a", the least recently
  // used.
  auto writer = OpenOrDie(Options(3 * kEntryFileBytes + 500));
  auto reader = OpenOrDie(Options(3 * kEntryFileBytes + 500));
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  ASSERT_OK(writer->Put("blocks", "a", PartsOf(Pattern(1000, 'a'))));
  ASSERT_OK_AND_ASSIGN(auto held, reader->Get("blocks", "a"));
  ASSERT_NE(held, nullptr);
  for (const char* key : {"b", "c"}) {
    ASSERT_OK(writer->Put("blocks", key, PartsOf(Pattern(1000, key[0]))));
  }
  ASSERT_OK(writer->Put("blocks", "d", PartsOf(Pattern(1000, 'd'))));
  // "b" went instead of "a": "a"'s space would not have come back while mapped.
  EXPECT_EQ(writer->stats().kept_in_use, 1);
  EXPECT_EQ(writer->stats().evictions, 1);
  EXPECT_TRUE(fs::exists(writer->EntryPath("blocks", "a")));
  EXPECT_FALSE(fs::exists(writer->EntryPath("blocks", "b")));
  held.reset();  // unmapped: evictable again
  ASSERT_OK(writer->Put("blocks", "e", PartsOf(Pattern(1000, 'e'))));
  EXPECT_FALSE(fs::exists(writer->EntryPath("blocks", "a")));
  EXPECT_EQ(writer->stats().kept_in_use, 1);
  // Entries returned by GetOrFill are protected from the moment they are visible.
  ASSERT_OK_AND_ASSIGN(auto filled,
                       reader->GetOrFill("blocks", "f", FillWith(Pattern(1000, 'f'), nullptr)));
  for (const char* key : {"g", "h", "i"}) {
    ASSERT_OK(writer->Put("blocks", key, PartsOf(Pattern(1000, key[0]))));
  }
  EXPECT_TRUE(fs::exists(writer->EntryPath("blocks", "f")));
  EXPECT_EQ(Bytes(filled), Pattern(1000, 'f'));
}

TEST_F(DiskCacheTest, AFloorThatOnlyMappedEntriesCouldFreeIsNotUndershot) {
  // A disk of 20,000 bytes holding only the cache folder, where an unlinked file keeps its
  // space while it is open or mapped (as on tmpfs or ext4): four entries fit above the floor.
  DiskCacheOptions options = Options();
  options.min_free_bytes = 15000;
  const std::string dir = dir_;
  options.free_bytes_for_testing = [dir] {
    // Bytes of the files in the folder, plus those of removed entries still mapped (every entry
    // here has the same size).
    std::ifstream maps("/proc/self/maps");
    int64_t mapped_deleted = 0;
    for (std::string line; std::getline(maps, line);) {
      if (line.find(dir + "/") != std::string::npos &&
          line.find("(deleted)") != std::string::npos) {
        mapped_deleted += kEntryFileBytes;
      }
    }
    return 20000 - FolderBytes(dir) - mapped_deleted;
  };
  auto writer = OpenOrDie(options);
  auto reader = OpenOrDie(options);
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  std::vector<std::shared_ptr<CacheEntry>> held;
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK(writer->Put("blocks", "k" + std::to_string(i), PartsOf(Pattern(1000, i))));
    ASSERT_OK_AND_ASSIGN(auto entry, reader->Get("blocks", "k" + std::to_string(i)));
    held.push_back(entry);  // mapped, as the items in flight of a pipeline
  }
  for (int i = 4; i < 10; ++i) {
    ASSERT_OK(writer->Put("blocks", "k" + std::to_string(i), PartsOf(Pattern(1000, i))));
    EXPECT_GE(options.free_bytes_for_testing(), options.min_free_bytes) << i;
  }
  EXPECT_EQ(writer->stats().writes, 4);
  EXPECT_EQ(writer->stats().not_stored, 6);
  EXPECT_EQ(writer->stats().evictions, 0);
  held.clear();
  ASSERT_OK(writer->Put("blocks", "k10", PartsOf(Pattern(1000, 10))));
  EXPECT_EQ(writer->stats().writes, 5);
  EXPECT_GE(options.free_bytes_for_testing(), options.min_free_bytes);
}

// ---------------------------------------------------------------------------------------------
// GetOrFill

TEST_F(DiskCacheTest, GetOrFillRunsOneFillerWhileOtherThreadsWait) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  constexpr int kThreads = 6;
  const std::string payload = Pattern(5000, 3);
  std::atomic<int> fills{0};
  std::atomic<bool> others_waited{false};
  // The filler returns only once every other thread is blocked on the key's lock.
  DiskCache::Filler filler = [&](DiskCache::Parts* parts, std::shared_ptr<void>* keep_alive) {
    fills.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (cache->stats().waits < kThreads - 1 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    others_waited = cache->stats().waits == kThreads - 1;
    parts->push_back({payload.data(), payload.size()});
    return Status::OK();
  };
  std::vector<std::string> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto entry = cache->GetOrFill("tensors", "item", filler);
      results[t] = entry.ok() ? Bytes(*entry) : entry.status().ToString();
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(fills.load(), 1);
  EXPECT_TRUE(others_waited);
  for (const auto& result : results) EXPECT_EQ(result, payload);
  const CacheStats stats = cache->stats();
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.hits, kThreads - 1);
  EXPECT_EQ(stats.writes, 1);
}

TEST_F(DiskCacheTest, GetOrLockHandsTheKeysLockToAnotherThreadThatPutsTheEntry) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  const std::string payload = Pattern(7000, 5);
  std::unique_ptr<DiskCache::KeyLock> lock;
  ASSERT_OK_AND_ASSIGN(auto entry, cache->GetOrLock("tensors", "item", &lock));
  ASSERT_EQ(entry, nullptr);
  ASSERT_NE(lock, nullptr);
  EXPECT_EQ(cache->stats().misses, 1);
  // A second caller waits for the lock, then reads what the holder's writer thread stored.
  std::string seen;
  std::thread reader([&] {
    std::unique_ptr<DiskCache::KeyLock> other;
    auto got = cache->GetOrLock("tensors", "item", &other);
    seen = got.ok() && *got ? Bytes(*got) : "miss";
    EXPECT_EQ(other, nullptr);
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (cache->stats().waits < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(cache->stats().waits, 1);
  std::thread writer([&, held = std::move(lock)]() mutable {
    ASSERT_OK(cache->Put("tensors", "item", PartsOf(payload)));
    held.reset();  // released on another thread than the one that took it
  });
  writer.join();
  reader.join();
  EXPECT_EQ(seen, payload);
  EXPECT_EQ(cache->stats().hits, 1);
  // Given up without a Put: the lock is released and the next caller gets it.
  std::unique_ptr<DiskCache::KeyLock> again;
  ASSERT_OK_AND_ASSIGN(entry, cache->GetOrLock("tensors", "other", &again));
  ASSERT_NE(again, nullptr);
  again.reset();
  ASSERT_OK_AND_ASSIGN(entry, cache->GetOrLock("tensors", "other", &again));
  EXPECT_NE(again, nullptr);
}

TEST_F(DiskCacheTest, GetOrFillReturnsTheFillersErrorAndTheNextCallFillsAgain) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  auto failing = [](DiskCache::Parts*, std::shared_ptr<void>*) {
    return MakeError(ErrorKind::kStorage, "remote read failed");
  };
  const auto failed = cache->GetOrFill("blocks", "k", failing);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("remote read failed"), std::string::npos);
  std::atomic<int> fills{0};
  ASSERT_OK_AND_ASSIGN(auto entry, cache->GetOrFill("blocks", "k", FillWith("ok", &fills)));
  EXPECT_EQ(Bytes(entry), "ok");
  EXPECT_EQ(fills.load(), 1);
  ASSERT_OK_AND_ASSIGN(entry, cache->GetOrFill("blocks", "k", FillWith("again", &fills)));
  EXPECT_EQ(Bytes(entry), "ok");
  EXPECT_EQ(fills.load(), 1);
}

TEST_F(DiskCacheTest, GetOrFillReturnsTheDataWhenItCannotBeStored) {
  auto cache = OpenOrDie(Options(1000));
  ASSERT_NE(cache, nullptr);
  const std::string big = Pattern(5000, 9);
  std::atomic<int> fills{0};
  ASSERT_OK_AND_ASSIGN(auto entry, cache->GetOrFill("tensors", "big", FillWith(big, &fills)));
  EXPECT_EQ(Bytes(entry), big);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(entry->data()) % 64, 0u);
  EXPECT_EQ(cache->stats().not_stored, 1);
  ASSERT_OK_AND_ASSIGN(entry, cache->GetOrFill("tensors", "big", FillWith(big, &fills)));
  EXPECT_EQ(fills.load(), 2);  // nothing was stored, so it fills again
}

// ---------------------------------------------------------------------------------------------
// Write-back: a writer that outruns the disk skips entries instead of waiting (write_backlog.h)

TEST_F(DiskCacheTest, PutSkipsWhileTheDiskIsBehindCountsItAndALaterPutStoresIt) {
  DiskCacheOptions options = Options();
  std::atomic<bool> behind{true};
  std::atomic<int64_t> asked{0};
  options.disk_behind_for_testing = [&](int64_t incoming) {
    asked.store(incoming);
    return behind.load();
  };
  auto cache = OpenOrDie(options);
  ASSERT_NE(cache, nullptr);
  const std::string a = Pattern(1000, 1), b = Pattern(2000, 2);

  // Behind: nothing is reserved, written or left in .tmp; the entry is a miss, counted as skipped.
  ASSERT_OK(cache->Put("tensors", "a", PartsOf(a), DiskCache::WhenDiskBehind::kSkip));
  EXPECT_EQ(asked.load(), 128 + static_cast<int64_t>(a.size()));  // the file's bytes
  EXPECT_EQ(GetString(*cache, "tensors", "a"), std::nullopt);
  EXPECT_TRUE(TempFiles(dir_).empty());
  ASSERT_OK_AND_ASSIGN(int64_t used, cache->UsedBytes());
  EXPECT_EQ(used, 0);
  CacheStats stats = cache->stats();
  EXPECT_EQ(stats.write_skipped, 1);
  EXPECT_EQ(stats.writes, 0);
  EXPECT_EQ(stats.not_stored, 0);

  // kWrite (the default; GetOrFill) writes whatever the disk's state.
  ASSERT_OK(cache->Put("tensors", "b", PartsOf(b)));
  EXPECT_EQ(GetString(*cache, "tensors", "b"), b);
  std::atomic<int> fills{0};
  ASSERT_OK_AND_ASSIGN(auto filled,
                       cache->GetOrFill("tensors", "c", [&](DiskCache::Parts* parts, auto*) {
                         ++fills;
                         *parts = PartsOf(b);
                         return Status::OK();
                       }));
  EXPECT_EQ(cache->stats().write_skipped, 1);
  EXPECT_EQ(GetString(*cache, "tensors", "c"), b);

  // Caught up: the next fill of the skipped key stores it.
  behind.store(false);
  ASSERT_OK(cache->Put("tensors", "a", PartsOf(a), DiskCache::WhenDiskBehind::kSkip));
  EXPECT_EQ(GetString(*cache, "tensors", "a"), a);
  stats = cache->stats();
  EXPECT_EQ(stats.write_skipped, 1);
  EXPECT_EQ(stats.writes, 3);
}

TEST_F(DiskCacheTest, EntriesWrittenWhileFollowingTheBacklogAreWholeAndTheBacklogDrains) {
  // The real probes (cachestat, /proc/vmstat), with a bound of one byte: an entry is skipped
  // while any earlier one is still unwritten, and written once the disk has caught up.
  DiskCacheOptions options = Options();
  options.max_write_backlog_bytes = 1;
  auto cache = OpenOrDie(options);
  ASSERT_NE(cache, nullptr);
  const std::string a = Pattern(4 << 20, 1), b = Pattern(4 << 20, 2);
  ASSERT_OK(cache->Put("tensors", "a", PartsOf(a), DiskCache::WhenDiskBehind::kSkip));
  EXPECT_EQ(GetString(*cache, "tensors", "a"), a);
  sync();  // every page on the disk: nothing is behind any more
  ASSERT_OK(cache->Put("tensors", "b", PartsOf(b), DiskCache::WhenDiskBehind::kSkip));
  EXPECT_EQ(GetString(*cache, "tensors", "b"), b);
  const CacheStats stats = cache->stats();
  EXPECT_EQ(stats.writes, 2);
  EXPECT_EQ(stats.write_skipped, 0);
  EXPECT_TRUE(TempFiles(dir_).empty());
}

TEST_F(DiskCacheTest, WriteBacklogFollowsAFileUntilItsPagesAreOnTheDisk) {
  const std::string path = dir_ + "/written";
  const std::string bytes = Pattern(8 << 20, 3);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  WriteBacklog backlog(/*max_bytes=*/1, nullptr);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const int64_t unwritten = UnwrittenBytes(fd);
  // Dirty or being written back (at most the file), or already written; -1 only without cachestat.
  EXPECT_GE(unwritten, -1);
  EXPECT_LE(unwritten, static_cast<int64_t>(bytes.size()));
  StartWriteBack(fd);
  backlog.Track(fd, static_cast<int64_t>(bytes.size()));
  const int64_t followed = backlog.Unwritten();
  EXPECT_LE(followed, static_cast<int64_t>(bytes.size()));
  sync();
  // On the disk now: nothing left to follow (or the kernel cannot tell).
  EXPECT_EQ(backlog.Unwritten(), unwritten < 0 ? -1 : 0);
  DirtyPages pages;
  if (ReadDirtyPages(&pages)) {
    EXPECT_GE(pages.unwritten, 0);
    EXPECT_GT(pages.throttle_at, 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Several processes (fork(); each child opens its own DiskCache and reports by exit status)

// Waits for a child; returns its exit status, or 128 + signal.
int Reap(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

template <typename T>
T* SharedArray(size_t count) {
  void* memory =
      mmap(nullptr, sizeof(T) * count, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return nullptr;
  T* items = static_cast<T*>(memory);
  for (size_t i = 0; i < count; ++i) new (items + i) T();
  return items;
}

TEST_F(DiskCacheTest, GetOrFillRunsTheFillerOncePerKeyAcrossProcesses) {
  constexpr int kProcesses = 4, kThreadsPerProcess = 2, kKeys = 6;
  auto* fills = SharedArray<std::atomic<int>>(kKeys + 1);
  ASSERT_NE(fills, nullptr);
  std::atomic<int>& ready = fills[kKeys];
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto cache = DiskCache::Open(Options());
      if (!cache.ok()) _exit(2);
      ready.fetch_add(1);
      for (int spin = 0; spin < 10000 && ready.load() < kProcesses; ++spin) usleep(1000);
      std::atomic<int> bad{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreadsPerProcess; ++t) {
        threads.emplace_back([&, t] {
          for (int i = 0; i < kKeys; ++i) {
            const int k = (i + p + t) % kKeys;
            const std::string payload = Pattern(20000 + k, k);
            auto filler = [&, k](DiskCache::Parts* parts, std::shared_ptr<void>*) {
              fills[k].fetch_add(1);
              usleep(5000);  // widen the window in which others ask for the same key
              parts->push_back({payload.data(), payload.size()});
              return Status::OK();
            };
            auto entry = (*cache)->GetOrFill("blocks", std::to_string(k), filler);
            if (!entry.ok() || Bytes(*entry) != payload) bad.fetch_add(1);
          }
        });
      }
      for (auto& thread : threads) thread.join();
      _exit(bad.load() == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) EXPECT_EQ(Reap(pid), 0);
  for (int k = 0; k < kKeys; ++k) EXPECT_EQ(fills[k].load(), 1) << k;
  munmap(fills, sizeof(std::atomic<int>) * (kKeys + 1));
}

TEST_F(DiskCacheTest, GetOrFillWaiterTakesOverFromAKilledFiller) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipe_fds[0]);
    auto cache = DiskCache::Open(Options());
    if (!cache.ok()) _exit(2);
    (void)(*cache)->GetOrFill("blocks", "k", [&](DiskCache::Parts*, std::shared_ptr<void>*) {
      if (write(pipe_fds[1], "f", 1) != 1) _exit(3);
      for (;;) pause();  // holds the key's lock until killed
      return Status::OK();
    });
    _exit(4);
  }
  close(pipe_fds[1]);
  char signal_byte = 0;
  ASSERT_EQ(read(pipe_fds[0], &signal_byte, 1), 1);  // the child is filling
  close(pipe_fds[0]);

  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  std::atomic<int> fills{0};
  Result<std::shared_ptr<CacheEntry>> result;
  std::thread waiter([&] { result = cache->GetOrFill("blocks", "k", FillWith("mine", &fills)); });
  for (int i = 0; i < 20000 && cache->stats().waits == 0; ++i) usleep(500);
  EXPECT_EQ(cache->stats().waits, 1);
  EXPECT_EQ(fills.load(), 0);
  kill(child, SIGKILL);
  EXPECT_EQ(Reap(child), 128 + SIGKILL);
  waiter.join();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(Bytes(*result), "mine");
  EXPECT_EQ(fills.load(), 1);
}

TEST_F(DiskCacheTest, OpenRemovesOnlyAbandonedTempFiles) {
  ASSERT_NE(OpenOrDie(Options()), nullptr);
  // A pid that is certainly dead: a child that has been reaped.
  const pid_t dead = fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  ASSERT_EQ(Reap(dead), 0);
  const std::string self = std::to_string(getpid());
  const std::string name = std::string(32, 'a');
  const std::string dead_writer = name + "." + std::to_string(dead) + ".0.tmp";
  const std::string live_writer = name + "." + self + ".1.tmp";
  const std::string stale = name + "." + self + ".2.tmp";  // alive pid, untouched for an hour
  for (const auto& file : {dead_writer, live_writer, stale}) {
    std::ofstream(dir_ + "/.tmp/" + file) << "partial";
  }
  const timespec an_hour_ago[2] = {{time(nullptr) - 3600, 0}, {time(nullptr) - 3600, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, (dir_ + "/.tmp/" + stale).c_str(), an_hour_ago, 0), 0);
  ASSERT_NE(OpenOrDie(Options()), nullptr);
  EXPECT_EQ(TempFiles(dir_), std::vector<std::string>{live_writer});
}

TEST_F(DiskCacheTest, AProcessForkedDuringAFillDoesNotKeepTheKeyLocked) {
  // A process fills a key and meanwhile forks a long-lived worker (as a DataLoader does), then is
  // killed. The worker inherited the descriptors but must not keep the key's lock alive.
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t filler = fork();
  ASSERT_GE(filler, 0);
  if (filler == 0) {
    close(ready[0]);
    auto cache = DiskCache::Open(Options());
    if (!cache.ok()) _exit(2);
    std::atomic<bool> filling{false};
    std::thread fill_thread([&] {
      (void)(*cache)->GetOrFill("blocks", "k", [&](DiskCache::Parts*, std::shared_ptr<void>*) {
        filling = true;
        for (;;) pause();
        return Status::OK();
      });
    });
    for (int i = 0; i < 20000 && !filling; ++i) usleep(500);
    const pid_t worker = fork();
    if (worker == 0) {
      for (;;) pause();
    }
    if (write(ready[1], &worker, sizeof(worker)) != sizeof(worker)) _exit(3);
    fill_thread.join();  // never returns: the test kills this process
    _exit(4);
  }
  close(ready[1]);
  pid_t worker = -1;
  ASSERT_EQ(read(ready[0], &worker, sizeof(worker)), static_cast<ssize_t>(sizeof(worker)));
  close(ready[0]);
  ASSERT_GT(worker, 0);
  kill(filler, SIGKILL);
  EXPECT_EQ(Reap(filler), 128 + SIGKILL);

  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  std::atomic<bool> done{false};
  Result<std::shared_ptr<CacheEntry>> result;
  std::thread taker([&] {
    result = cache->GetOrFill("blocks", "k", FillWith("after", nullptr));
    done = true;
  });
  for (int i = 0; i < 10000 && !done; ++i) usleep(1000);
  const bool completed = done;
  kill(worker, SIGKILL);  // (also releases a hung taker, so the test ends either way)
  taker.join();
  EXPECT_TRUE(completed);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(Bytes(*result), "after");
}

TEST_F(DiskCacheTest, KilledWriterLeavesNoEntryAndTheNextOpenRemovesItsTempFile) {
  const std::string payload = Pattern(20 << 20, 4);  // several write chunks
  auto start_writer = [&](int* pipe_read) -> pid_t {
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0) return -1;
    const pid_t child = fork();
    if (child == 0) {
      close(pipe_fds[0]);
      DiskCacheOptions options = Options();
      options.on_write_for_testing = [&](int64_t) {
        if (write(pipe_fds[1], "w", 1) != 1) _exit(3);
        for (;;) pause();  // a writer stalled after its first chunk
      };
      auto cache = DiskCache::Open(options);
      if (!cache.ok()) _exit(2);
      (void)(*cache)->Put("blocks", "k", PartsOf(payload));
      _exit(4);
    }
    close(pipe_fds[1]);
    *pipe_read = pipe_fds[0];
    return child;
  };
  int pipe_read = -1;
  const pid_t writer = start_writer(&pipe_read);
  ASSERT_GT(writer, 0);
  char byte = 0;
  ASSERT_EQ(read(pipe_read, &byte, 1), 1);
  close(pipe_read);

  // A live writer's temporary file is kept by Open() and invisible to Get().
  ASSERT_EQ(TempFiles(dir_).size(), 1u);
  EXPECT_NE(TempFiles(dir_)[0].find("." + std::to_string(writer) + "."), std::string::npos);
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(TempFiles(dir_).size(), 1u);
  EXPECT_EQ(GetString(*cache, "blocks", "k"), std::nullopt);

  kill(writer, SIGKILL);
  EXPECT_EQ(Reap(writer), 128 + SIGKILL);
  EXPECT_EQ(GetString(*cache, "blocks", "k"), std::nullopt);
  EXPECT_EQ(TempFiles(dir_).size(), 1u);
  EXPECT_EQ(cache->stats().corrupt, 0);

  auto reopened = OpenOrDie(Options());
  ASSERT_NE(reopened, nullptr);
  EXPECT_TRUE(TempFiles(dir_).empty());
  ASSERT_OK_AND_ASSIGN(const int64_t used, reopened->UsedBytes());
  EXPECT_EQ(used, 0);
  ASSERT_OK(reopened->Put("blocks", "k", PartsOf(payload)));
  EXPECT_EQ(GetString(*reopened, "blocks", "k"), payload);
}

TEST_F(DiskCacheTest, ProcessesSharingAFolderSeeOnlyWholeEntriesWithinBudget) {
  constexpr int kProcesses = 3, kThreadsPerProcess = 2, kKeys = 24, kOps = 150;
  const int64_t budget = 8 * 12000;
  auto expected = [](int k) { return Pattern(2000 + 800 * k, 100 + k); };  // sizes differ by key
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto cache = DiskCache::Open(Options(budget));
      if (!cache.ok()) _exit(2);
      std::atomic<int> bad{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreadsPerProcess; ++t) {
        threads.emplace_back([&, t] {
          std::mt19937 random(p * 10 + t);
          for (int op = 0; op < kOps; ++op) {
            const int k = static_cast<int>(random() % kKeys);
            const std::string key = std::to_string(k);
            if (random() % 2) {
              if (!(*cache)->Put("blocks", key, PartsOf(expected(k))).ok()) bad.fetch_add(1);
            } else {
              auto entry = (*cache)->Get("blocks", key);
              if (!entry.ok() || (*entry && Bytes(*entry) != expected(k))) bad.fetch_add(1);
            }
          }
        });
      }
      for (auto& thread : threads) thread.join();
      const CacheStats stats = (*cache)->stats();
      _exit(bad.load() == 0 && stats.corrupt == 0 && stats.writes > 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) EXPECT_EQ(Reap(pid), 0);
  auto cache = OpenOrDie(Options(budget));
  ASSERT_NE(cache, nullptr);
  ASSERT_OK_AND_ASSIGN(const int64_t used, cache->UsedBytes());
  EXPECT_LE(used, budget);
  EXPECT_GT(used, 0);
  EXPECT_TRUE(TempFiles(dir_).empty());
  int present = 0;
  for (int k = 0; k < kKeys; ++k) {
    auto bytes = GetString(*cache, "blocks", std::to_string(k));
    if (bytes) {
      EXPECT_EQ(*bytes, expected(k)) << k;
    }
    present += bytes.has_value();
  }
  EXPECT_GT(present, 0);
  EXPECT_LT(present, kKeys);  // the budget forced evictions
}

TEST_F(DiskCacheTest, ObjectOpenedBeforeForkWorksInTheChild) {
  auto cache = OpenOrDie(Options());
  ASSERT_NE(cache, nullptr);
  ASSERT_OK(cache->Put("blocks", "parent", PartsOf("from parent")));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto entry = cache->Get("blocks", "parent");
    const bool read_ok = entry.ok() && Bytes(*entry) == "from parent";
    const bool wrote = cache->Put("blocks", "child", PartsOf("from child")).ok();
    _exit(read_ok && wrote ? 0 : 1);
  }
  EXPECT_EQ(Reap(child), 0);
  EXPECT_EQ(GetString(*cache, "blocks", "child"), "from child");
  ASSERT_OK_AND_ASSIGN(const int64_t used, cache->UsedBytes());
  EXPECT_EQ(used, 2 * (128 + 11) - 1);
}

}  // namespace
}  // namespace stoker
