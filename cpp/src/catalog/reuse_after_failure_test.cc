// Arrow's Parquet reader after a corrupt page, on the same thread: its decompressors (zstd,
// snappy, gzip, lz4) and the page and array buffers, which come from the process's recycling
// pool (a failed read hands them back half-written), leave the row groups read next exactly what
// a clean file gives (issue 22's reuse audit, docs/reliability.md).
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <gtest/gtest.h>
#include <parquet/arrow/writer.h>
#include <parquet/file_reader.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "catalog/catalog.h"
#include "catalog/row_group_reader.h"
#include "util/test_status_internal.h"

namespace stoker {
namespace {

constexpr int64_t kRows = 4000;
constexpr int64_t kRowGroup = 1000;

// id, a double with nulls, strings of varying length, lists of floats: every buffer kind.
std::shared_ptr<arrow::Table> MakeTable() {
  arrow::Int64Builder ids;
  arrow::DoubleBuilder xs;
  arrow::StringBuilder strings;
  arrow::ListBuilder lists(arrow::default_memory_pool(), std::make_shared<arrow::FloatBuilder>());
  auto* floats = static_cast<arrow::FloatBuilder*>(lists.value_builder());
  for (int64_t i = 0; i < kRows; ++i) {
    EXPECT_TRUE(ids.Append(i).ok());
    EXPECT_TRUE((i % 7 == 3 ? xs.AppendNull() : xs.Append(static_cast<double>(i) * 0.25)).ok());
    EXPECT_TRUE(strings.Append(std::string(1 + i % 13, static_cast<char>('a' + i % 26))).ok());
    EXPECT_TRUE(lists.Append().ok());
    for (int64_t k = 0; k < i % 5; ++k) EXPECT_TRUE(floats->Append(i + 0.5f * k).ok());
  }
  std::shared_ptr<arrow::Array> a, b, c, d;
  EXPECT_TRUE(ids.Finish(&a).ok());
  EXPECT_TRUE(xs.Finish(&b).ok());
  EXPECT_TRUE(strings.Finish(&c).ok());
  EXPECT_TRUE(lists.Finish(&d).ok());
  return arrow::Table::Make(
      arrow::schema({arrow::field("id", arrow::int64()), arrow::field("x", arrow::float64()),
                     arrow::field("s", arrow::utf8()), arrow::field("l", d->type())}),
      {a, b, c, d});
}

void Write(const std::string& path, const arrow::Table& table, arrow::Compression::type codec) {
  parquet::WriterProperties::Builder properties;
  properties.compression(codec)->disable_dictionary();
  auto sink = arrow::io::FileOutputStream::Open(path);
  ASSERT_TRUE(sink.ok());
  ASSERT_OK(parquet::arrow::WriteTable(table, arrow::default_memory_pool(), *sink, kRowGroup,
                                       properties.build()));
  ASSERT_OK((*sink)->Close());
}

// Overwrites the second half of a column chunk (its last page's compressed data) with 0xFF.
void CorruptChunk(const std::string& path, int row_group, int column) {
  int64_t start = 0, size = 0;
  {
    auto reader = parquet::ParquetFileReader::OpenFile(path);
    auto chunk = reader->metadata()->RowGroup(row_group)->ColumnChunk(column);
    start = chunk->data_page_offset();
    size = chunk->total_compressed_size();
  }
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(start + size / 2);
  const std::string junk(static_cast<size_t>(size / 2 - 4), '\xff');
  file.write(junk.data(), static_cast<std::streamsize>(junk.size()));
}

class ReuseAfterFailureTest : public ::testing::TestWithParam<arrow::Compression::type> {
 protected:
  void SetUp() override {
    if (!arrow::util::Codec::IsAvailable(GetParam())) GTEST_SKIP() << "codec not built";
    dir_ = std::filesystem::temp_directory_path() /
           ("stoker_reuse_" + std::to_string(getpid()) + "_" + std::to_string(GetParam()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_P(ReuseAfterFailureTest, RowGroupsAfterACorruptPageAreExactOnTheSameThread) {
  const auto table = MakeTable();
  const std::string good_path = (dir_ / "good.parquet").string();
  const std::string bad_path = (dir_ / "bad.parquet").string();
  Write(good_path, *table, GetParam());
  Write(bad_path, *table, GetParam());
  CorruptChunk(bad_path, 1, 1);  // row group 1: the doubles
  CorruptChunk(bad_path, 2, 2);  // row group 2: the strings
  auto good = Catalog::Open({good_path}, 1);
  auto bad = Catalog::Open({bad_path}, 1);
  ASSERT_TRUE(good.ok() && bad.ok());
  const std::vector<std::string> fields = {"id", "x", "s", "l"};
  std::vector<std::shared_ptr<arrow::Table>> reference(4);
  std::thread([&] {  // a thread that has never failed
    for (int rg = 0; rg < 4; ++rg) {
      auto read = ReadRowGroupTable(**good, rg, fields);
      ASSERT_TRUE(read.ok()) << read.status().ToString();
      reference[rg] = *read;
    }
  })
      .join();
  for (int threads : {1, 2}) {
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&] {
        for (int round = 0; round < 2; ++round) {
          for (int rg = 0; rg < 4; ++rg) {
            auto read = ReadRowGroupTable(**bad, rg, fields);
            if (rg == 1 || rg == 2) {
              ASSERT_FALSE(read.ok()) << "row group " << rg;
              EXPECT_EQ(GetErrorKind(read.status()), ErrorKind::kCorruptFile);
              EXPECT_NE(read.status().message().find("row group " + std::to_string(rg)),
                        std::string::npos)
                  << read.status().ToString();
              // The same row group of the clean file, right after the failure.
              auto clean = ReadRowGroupTable(**good, rg, fields);
              ASSERT_TRUE(clean.ok()) << clean.status().ToString();
              EXPECT_TRUE((*clean)->Equals(*reference[rg])) << "row group " << rg;
            } else {
              ASSERT_TRUE(read.ok()) << read.status().ToString();
              EXPECT_TRUE((*read)->Equals(*reference[rg])) << "row group " << rg;
            }
          }
        }
      });
    }
    for (auto& worker : workers) worker.join();
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, ReuseAfterFailureTest,
                         ::testing::Values(arrow::Compression::ZSTD, arrow::Compression::SNAPPY,
                                           arrow::Compression::GZIP, arrow::Compression::LZ4),
                         [](const auto& info) {
                           return arrow::util::Codec::GetCodecAsString(info.param);
                         });

}  // namespace
}  // namespace stoker
