// The cached decoder (the ready-tensor cache) on a real file and a real cache folder: a miss
// decodes and stores, a hit gives the same arrays, the entry layout round-trips, and a corrupt
// entry is decoded again rather than served.
#include "decode/cached_decoder.h"

#include <arrow/api.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cache/entry_format.h"
#include "decode/tensor_entry.h"
#include "decode/test_dataset_internal.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;

class CachedDecoderTest : public test_dataset::DatasetTest {
 protected:
  std::shared_ptr<DiskCache> OpenCache() {
    DiskCacheOptions options;
    options.dir = (dir_ / "cache").string();
    options.max_bytes = int64_t{1} << 30;
    options.min_free_bytes = 0;
    auto cache = DiskCache::Open(options);
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    return cache.ok() ? *cache : nullptr;
  }

  // The entry files of the tensor cache's folder.
  std::vector<fs::path> EntryFiles() const {
    std::vector<fs::path> files;
    const fs::path folder = dir_ / "cache" / "tensors";
    if (!fs::exists(folder)) return files;
    for (const auto& entry : fs::recursive_directory_iterator(folder)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
    return files;
  }

  // Decodes the one task of `plan`'s segment 0 through `cached`.
  static Result<DecodedColumns> Decode(const CachedDecoder& cached, const Decoder& decoder,
                                       const Plan& plan, bool* hit) {
    return cached.Decode(plan, decoder.MakeTasks(plan, 0, int64_t{1} << 30)[0], hit);
  }

  static void ExpectSameArrays(const DecodedColumns& a, const DecodedColumns& b) {
    ASSERT_EQ(a.arrays.size(), b.arrays.size());
    for (size_t i = 0; i < a.arrays.size(); ++i) {
      EXPECT_EQ(a.arrays[i].first, b.arrays[i].first);
      EXPECT_TRUE(a.arrays[i].second->Equals(*b.arrays[i].second))
          << a.arrays[i].first << ": " << a.arrays[i].second->ToString() << " vs "
          << b.arrays[i].second->ToString();
    }
  }
};

TEST_F(CachedDecoderTest, AMissDecodesAndStoresAndAHitGivesTheSameArrays) {
  auto decoder = MakeDecoder(Options({"id", "x", "s"}));
  ASSERT_NE(decoder, nullptr);
  auto cache = OpenCache();
  ASSERT_NE(cache, nullptr);
  // A slice of a row group: the whole row group is cached, then sliced.
  const Plan plan = PlanOf({{1, 5, 10, false}});
  ASSERT_OK_AND_ASSIGN(DecodedColumns plain,
                       decoder->Decode(plan, decoder->MakeTasks(plan, 0, int64_t{1} << 30)[0]));

  CachedDecoder cached(cache, decoder);
  EXPECT_FALSE(cached.HoldsEntries());
  bool hit = true;
  ASSERT_OK_AND_ASSIGN(DecodedColumns missed, Decode(cached, *decoder, plan, &hit));
  EXPECT_FALSE(hit);
  ExpectSameArrays(missed, plain);
  cached.Flush();  // the write-behind writer stores the entry
  EXPECT_TRUE(cached.HoldsEntries());
  EXPECT_EQ(EntryFiles().size(), 1u);

  ASSERT_OK_AND_ASSIGN(DecodedColumns served, Decode(cached, *decoder, plan, &hit));
  EXPECT_TRUE(hit);
  ExpectSameArrays(served, plain);

  // Another loader on the node (a new cached decoder, the same folder) is served too, and the
  // other rows of the row group come from the same entry.
  CachedDecoder other(OpenCache(), decoder);
  const Plan rest = PlanOf({{1, 15, 25, false}});
  ASSERT_OK_AND_ASSIGN(DecodedColumns rest_served, Decode(other, *decoder, rest, &hit));
  EXPECT_TRUE(hit);
  ASSERT_OK_AND_ASSIGN(DecodedColumns rest_plain,
                       decoder->Decode(rest, decoder->MakeTasks(rest, 0, int64_t{1} << 30)[0]));
  ExpectSameArrays(rest_served, rest_plain);
  EXPECT_EQ(EntryFiles().size(), 1u);
  CacheStats stats;
  other.AddStats(&stats);
  EXPECT_EQ(stats.write_skipped, 0);
}

// The epoch's head (its first batch's rows) waits for no whole row group: on a miss its own rows
// are decoded and nothing is stored; the rest of its row group stores the row group's entry, and
// the next epoch's head is served from it.
TEST_F(CachedDecoderTest, AHeadMissDecodesItsRowsAloneAndTheRestStoresTheRowGroup) {
  auto decoder = MakeDecoder(Options({"id", "x", "s"}));
  ASSERT_NE(decoder, nullptr);
  auto cache = OpenCache();
  ASSERT_NE(cache, nullptr);
  Plan plan = PlanOf({{1, 0, 8, false}, {1, 8, 32, false}});  // row group 1: 40 rows
  plan.segments[0].head = true;
  const DecodeTask head = decoder->MakeTasks(plan, 0, int64_t{1} << 30)[0];
  const DecodeTask rest = decoder->MakeTasks(plan, 1, int64_t{1} << 30)[0];
  ASSERT_OK_AND_ASSIGN(DecodedColumns plain_head, decoder->Decode(plan, head));
  ASSERT_OK_AND_ASSIGN(DecodedColumns plain_rest, decoder->Decode(plan, rest));
  ASSERT_EQ(plain_head.arrays[0].second->length(), 8);

  CachedDecoder cached(cache, decoder);
  bool hit = true;
  ASSERT_OK_AND_ASSIGN(DecodedColumns head_missed, cached.Decode(plan, head, &hit));
  EXPECT_FALSE(hit);
  ExpectSameArrays(head_missed, plain_head);
  cached.Flush();
  EXPECT_TRUE(EntryFiles().empty());  // the head stores nothing, nor counts a miss
  EXPECT_EQ(cache->stats().writes, 0);
  EXPECT_EQ(cache->stats().misses, 0);

  ASSERT_OK_AND_ASSIGN(DecodedColumns rest_missed, cached.Decode(plan, rest, &hit));
  EXPECT_FALSE(hit);
  ExpectSameArrays(rest_missed, plain_rest);
  cached.Flush();
  EXPECT_EQ(EntryFiles().size(), 1u);  // the whole row group's entry
  EXPECT_EQ(cache->stats().misses, 1);

  // The next epoch: both served from that entry.
  ASSERT_OK_AND_ASSIGN(DecodedColumns head_served, cached.Decode(plan, head, &hit));
  EXPECT_TRUE(hit);
  ExpectSameArrays(head_served, plain_head);
  ASSERT_OK_AND_ASSIGN(DecodedColumns rest_served, cached.Decode(plan, rest, &hit));
  EXPECT_TRUE(hit);
  ExpectSameArrays(rest_served, plain_rest);
  EXPECT_EQ(cache->stats().writes, 1);
}

// While another filler holds the row group's key (a worker decoding it, or the writer storing
// it), the head decodes its rows instead of waiting for that fill.
TEST_F(CachedDecoderTest, AHeadDoesNotWaitForAnotherFillerOfItsRowGroup) {
  auto decoder = MakeDecoder(Options({"id", "x"}));
  ASSERT_NE(decoder, nullptr);
  auto cache = OpenCache();
  ASSERT_NE(cache, nullptr);
  Plan plan = PlanOf({{0, 0, 8, false}, {0, 8, 32, false}});
  plan.segments[0].head = true;
  const DecodeTask head = decoder->MakeTasks(plan, 0, int64_t{1} << 30)[0];
  ASSERT_OK_AND_ASSIGN(DecodedColumns plain_head, decoder->Decode(plan, head));
  CachedDecoder cached(cache, decoder);
  // Another process on the node fills the row group's entry: its key is locked meanwhile.
  const std::string key = cached.Key(catalog_->row_groups()[0], head.fields);
  std::unique_ptr<DiskCache::KeyLock> lock;
  ASSERT_OK_AND_ASSIGN(auto absent, OpenCache()->GetOrLock("tensors", key, &lock));
  ASSERT_EQ(absent, nullptr);
  ASSERT_NE(lock, nullptr);
  // Without the head's rule this call would wait for `lock`, held until it returns.
  bool hit = true;
  ASSERT_OK_AND_ASSIGN(DecodedColumns head_missed, cached.Decode(plan, head, &hit));
  EXPECT_FALSE(hit);
  ExpectSameArrays(head_missed, plain_head);
  EXPECT_EQ(cache->stats().waits, 0);
  lock.reset();
  // The key locked above is the row group's entry (the rest stores it under that name).
  const DecodeTask rest = decoder->MakeTasks(plan, 1, int64_t{1} << 30)[0];
  ASSERT_OK(cached.Decode(plan, rest, &hit).status());
  cached.Flush();
  const std::vector<fs::path> entries = EntryFiles();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].filename().string(), NameOf("tensors", key).hex);
}

TEST_F(CachedDecoderTest, ACorruptEntryIsDecodedAgainNotServed) {
  auto decoder = MakeDecoder(Options({"id", "x"}));
  ASSERT_NE(decoder, nullptr);
  const Plan plan = PlanOf({{0, 0, 40, false}});
  ASSERT_OK_AND_ASSIGN(DecodedColumns plain,
                       decoder->Decode(plan, decoder->MakeTasks(plan, 0, int64_t{1} << 30)[0]));
  {
    CachedDecoder cached(OpenCache(), decoder);
    bool hit = true;
    ASSERT_OK_AND_ASSIGN(DecodedColumns missed, Decode(cached, *decoder, plan, &hit));
    EXPECT_FALSE(hit);
    cached.Flush();
  }
  const std::vector<fs::path> entries = EntryFiles();
  ASSERT_EQ(entries.size(), 1u);
  {
    // One byte of the payload flipped, as a bad disk would.
    std::fstream file(entries[0], std::ios::in | std::ios::out | std::ios::binary);
    const auto middle = static_cast<std::streamoff>(fs::file_size(entries[0]) / 2);
    file.seekg(middle);
    const char byte = static_cast<char>(file.get());
    file.seekp(middle);
    file.put(static_cast<char>(byte ^ 0x5a));
  }
  auto cache = OpenCache();
  CachedDecoder cached(cache, decoder);
  bool hit = true;
  ASSERT_OK_AND_ASSIGN(DecodedColumns again, Decode(cached, *decoder, plan, &hit));
  EXPECT_FALSE(hit);
  ExpectSameArrays(again, plain);
  EXPECT_EQ(cache->stats().corrupt, 1);
  cached.Flush();
  ASSERT_OK_AND_ASSIGN(DecodedColumns served, Decode(cached, *decoder, plan, &hit));
  EXPECT_TRUE(hit);  // stored anew
  ExpectSameArrays(served, plain);
}

TEST_F(CachedDecoderTest, WithASlowDiskAQueuedEntryIsServedFromMemoryAndCloseDropsIt) {
  // The write path's fault seam: every write-behind write waits a minute first.
  struct SlowDisk {
    SlowDisk() { CachedDecoder::SetWriteDelayForTesting(60000); }
    ~SlowDisk() { CachedDecoder::SetWriteDelayForTesting(0); }
  } slow_disk;
  auto decoder = MakeDecoder(Options({"id", "x"}));
  ASSERT_NE(decoder, nullptr);
  auto cache = OpenCache();
  ASSERT_NE(cache, nullptr);
  const Plan plan = PlanOf({{0, 0, 40, false}});
  ASSERT_OK_AND_ASSIGN(DecodedColumns plain,
                       decoder->Decode(plan, decoder->MakeTasks(plan, 0, int64_t{1} << 30)[0]));
  CachedDecoder cached(cache, decoder);
  bool hit = true;
  ASSERT_OK_AND_ASSIGN(DecodedColumns missed, Decode(cached, *decoder, plan, &hit));
  EXPECT_FALSE(hit);
  // Still on its way to the disk: served from the queue.
  ASSERT_OK_AND_ASSIGN(DecodedColumns queued, Decode(cached, *decoder, plan, &hit));
  EXPECT_TRUE(hit);
  ExpectSameArrays(queued, plain);
  // Close() cuts the wait short and drops the entry instead of waiting a minute for the disk.
  const auto start = std::chrono::steady_clock::now();
  cached.Close();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_TRUE(EntryFiles().empty());
  CacheStats stats;
  cached.AddStats(&stats);
  EXPECT_EQ(stats.write_skipped, 1);
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(cache->stats().writes, 0);
}

TEST_F(CachedDecoderTest, WhileTheDiskIsBehindTheWriterSkipsAndALaterEpochStoresTheEntry) {
  auto decoder = MakeDecoder(Options({"id", "x"}));
  ASSERT_NE(decoder, nullptr);
  // The cache's write-back seam: the disk is behind until told otherwise.
  std::atomic<bool> behind{true};
  DiskCacheOptions options;
  options.dir = (dir_ / "cache").string();
  options.min_free_bytes = 0;
  options.disk_behind_for_testing = [&](int64_t) { return behind.load(); };
  ASSERT_OK_AND_ASSIGN(auto cache, DiskCache::Open(options));
  const Plan plan = PlanOf({{0, 0, 40, false}});
  ASSERT_OK_AND_ASSIGN(DecodedColumns plain,
                       decoder->Decode(plan, decoder->MakeTasks(plan, 0, int64_t{1} << 30)[0]));
  CachedDecoder cached(cache, decoder);
  // Waits (without a deadline that could fail a slow run) for the writer thread's count to move.
  auto wait_for = [](const std::function<bool()>& done) {
    for (int i = 0; i < 60000 && !done(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };

  // Epoch 1: decoded; the writer thread finds the disk behind and skips the entry.
  bool hit = true;
  ASSERT_OK_AND_ASSIGN(DecodedColumns missed, Decode(cached, *decoder, plan, &hit));
  EXPECT_FALSE(hit);
  ExpectSameArrays(missed, plain);
  wait_for([&] { return cache->stats().write_skipped > 0; });
  ASSERT_EQ(cache->stats().write_skipped, 1);
  cached.Flush();  // nothing queued: returns once the writer is done with the skipped entry
  EXPECT_TRUE(EntryFiles().empty());

  // Epoch 2: the disk has caught up: decoded again, and stored this time.
  behind.store(false);
  ASSERT_OK_AND_ASSIGN(DecodedColumns again, Decode(cached, *decoder, plan, &hit));
  EXPECT_FALSE(hit);
  ExpectSameArrays(again, plain);
  wait_for([&] { return cache->stats().writes > 0; });
  cached.Flush();
  EXPECT_EQ(EntryFiles().size(), 1u);

  // Epoch 3: served from the disk.
  ASSERT_OK_AND_ASSIGN(DecodedColumns served, Decode(cached, *decoder, plan, &hit));
  EXPECT_TRUE(hit);
  ExpectSameArrays(served, plain);
  CacheStats stats = cache->stats();
  cached.AddStats(&stats);
  EXPECT_EQ(stats.write_skipped, 1);
  EXPECT_EQ(stats.writes, 1);
  EXPECT_EQ(stats.misses, 2);
}

TEST(TensorEntry, ArraysRoundTripZeroCopyAndAligned) {
  auto ids = test_parquet::ArrayFromJson(arrow::int64(), "[1, 2, 3]");
  auto texts = test_parquet::ArrayFromJson(arrow::large_utf8(), R"(["a", null, "ccc"])");
  auto tensors = test_parquet::ArrayFromJson(arrow::fixed_size_list(arrow::float32(), 2),
                                             "[[1, 2], [3, 4], null]");
  const NamedArrays arrays = {{"id", ids}, {"text|vocabulary=00", texts}, {"t", tensors}};
  ASSERT_OK_AND_ASSIGN(auto payload, Serialize(arrays, 3));
  // The parts, one after the other, are the entry's bytes (what DiskCache::Put writes).
  std::string bytes;
  for (const auto& [data, size] : payload->parts()) {
    bytes.append(static_cast<const char*>(data), size);
  }
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<arrow::Buffer> entry, arrow::AllocateBuffer(bytes.size()));
  std::memcpy(entry->mutable_data(), bytes.data(), bytes.size());
  ASSERT_OK_AND_ASSIGN(NamedArrays read, Deserialize(entry));
  ASSERT_EQ(read.size(), arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    EXPECT_EQ(read[i].first, arrays[i].first);
    EXPECT_TRUE(read[i].second->Equals(*arrays[i].second)) << read[i].second->ToString();
  }
  // Zero-copy: the values point into the entry, at 64-byte aligned offsets.
  const uint8_t* values = read[0].second->data()->buffers[1]->data();
  EXPECT_GE(values, entry->data());
  EXPECT_LT(values, entry->data() + entry->size());
  EXPECT_EQ((values - entry->data()) % 64, 0);
  // What a task needs: every stored field, of the task's rows.
  EXPECT_TRUE(EntryMatches(read, {"id", "t"}, {}, 3));
  EXPECT_FALSE(EntryMatches(read, {"id", "other"}, {}, 3));
  EXPECT_FALSE(EntryMatches(read, {"id"}, {}, 4));
  // Bytes that are no entry are an error, not arrays.
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<arrow::Buffer> junk, arrow::AllocateBuffer(64));
  std::memset(junk->mutable_data(), 0x42, 64);
  EXPECT_FALSE(Deserialize(junk).ok());
}

}  // namespace
}  // namespace stoker
