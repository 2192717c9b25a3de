// Catalog::Open on real files written in the test: listing (order, hidden files, globs, one file
// reached twice), footers and row groups, the files' types unified, hive partition columns, and
// the identity that tells a rewritten file apart.
#include "catalog/catalog.h"

#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/writer.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "catalog/row_group_reader.h"
#include "util/test_parquet_internal.h"
#include "util/test_status_internal.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;
using test_parquet::ArrayFromJson;

class CatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("stoker_catalog_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `table` at `relative` below the test folder, in row groups of `row_group_rows`.
  std::string Write(const std::string& relative, const std::shared_ptr<arrow::Table>& table,
                    int64_t row_group_rows = 1000) {
    const fs::path path = dir_ / relative;
    fs::create_directories(path.parent_path());
    test_parquet::WriteTable(path.string(), *table, row_group_rows);
    return path.string();
  }

  // `count` rows of an int64 column `id` counting from `first`.
  static std::shared_ptr<arrow::Table> Ids(int64_t first, int64_t count) {
    std::ostringstream json;  // a stream: GCC 12 warns falsely on some string concatenations
    json << "[";
    for (int64_t i = 0; i < count; ++i) json << (i ? "," : "") << first + i;
    json << "]";
    return arrow::Table::Make(arrow::schema({arrow::field("id", arrow::int64())}),
                              {ArrayFromJson(arrow::int64(), json.str())});
  }

  std::string Relative(const std::string& path) const {
    return fs::path(path).lexically_relative(dir_).string();
  }

  fs::path dir_;
};

TEST_F(CatalogTest, ListsParquetFilesInPathOrderSkippingHiddenOnesAndCountingEachOnce) {
  Write("b.parquet", Ids(0, 3));
  Write("a.parquet", Ids(3, 3));
  Write("sub/c.parq", Ids(6, 3));
  Write("sub/d.pq", Ids(9, 3));
  Write("_metadata.parquet", Ids(100, 1));   // hidden: a leading underscore
  Write(".staging/e.parquet", Ids(200, 1));  // hidden folder
  Write("sub/.f.parquet", Ids(300, 1));      // hidden file below the source
  std::ofstream(dir_ / "notes.txt") << "not parquet";

  // The folder and one of its files again: the file counts once.
  ASSERT_OK_AND_ASSIGN(auto catalog,
                       Catalog::Open({dir_.string(), (dir_ / "a.parquet").string()}, 2));
  std::vector<std::string> listed;
  for (const auto& file : catalog->files()) listed.push_back(Relative(file.path));
  EXPECT_EQ(listed, (std::vector<std::string>{"a.parquet", "b.parquet", "sub/c.parq", "sub/d.pq"}));
  EXPECT_EQ(catalog->total_rows(), 12);

  // `*` stays in its folder.
  ASSERT_OK_AND_ASSIGN(auto globbed, Catalog::Open({(dir_ / "*.parquet").string()}, 1));
  listed.clear();
  for (const auto& file : globbed->files()) listed.push_back(Relative(file.path));
  EXPECT_EQ(listed, (std::vector<std::string>{"a.parquet", "b.parquet"}));

  auto none = Catalog::Open({(dir_ / "nothing-*.parquet").string()}, 1);
  EXPECT_FALSE(none.ok());
}

TEST_F(CatalogTest, FootersIndexTheNonEmptyRowGroups) {
  const std::string a = Write("a.parquet", Ids(0, 100), 40);
  Write("b.parquet", Ids(0, 0));  // no rows: no row group to read
  Write("c.parquet", Ids(100, 5), 40);
  ASSERT_OK_AND_ASSIGN(auto catalog, Catalog::Open({dir_.string()}, 3));
  ASSERT_EQ(catalog->files().size(), 3u);
  std::vector<std::vector<int64_t>> refs;
  for (const RowGroupRef& rg : catalog->row_groups()) {
    refs.push_back({rg.file, rg.row_group, rg.num_rows});
    // The footer's uncompressed size of the column chunk; a field the file lacks (a partition
    // column) counts 8 bytes a row.
    const int64_t chunk = catalog->files()[rg.file]
                              .metadata->RowGroup(rg.row_group)
                              ->ColumnChunk(0)
                              ->total_uncompressed_size();
    EXPECT_GT(chunk, 0);
    EXPECT_EQ(catalog->FieldBytes(rg, {"id", "part", "id"}),
              (std::vector<int64_t>{chunk, rg.num_rows * 8, chunk}));
    EXPECT_EQ(catalog->files()[rg.file].metadata->RowGroup(rg.row_group)->num_rows(), rg.num_rows);
  }
  EXPECT_EQ(refs,
            (std::vector<std::vector<int64_t>>{{0, 0, 40}, {0, 1, 40}, {0, 2, 20}, {2, 0, 5}}));
  EXPECT_EQ(catalog->total_rows(), 105);
  EXPECT_EQ(catalog->Where(catalog->row_groups()[1]), "'" + a + "', row group 1");
  EXPECT_EQ(catalog->num_file_fields(), 1);
  EXPECT_EQ(catalog->files()[0].fields.at("id").leaves, std::vector<int>{0});
}

// Categorical columns are read as dictionaries (the decoder then looks each distinct value up
// once); only plain string/binary columns, whose dictionary needs no conforming.
TEST_F(CatalogTest, ReadsRequestedStringColumnsAsDictionaries) {
  Write("a.parquet",
        arrow::Table::Make(
            arrow::schema({arrow::field("s", arrow::utf8()), arrow::field("l", arrow::large_utf8()),
                           arrow::field("n", arrow::int32())}),
            {ArrayFromJson(arrow::utf8(), R"(["a", "b", null, "a"])"),
             ArrayFromJson(arrow::large_utf8(), R"(["x", "y", "x", "x"])"),
             ArrayFromJson(arrow::int32(), "[1, 2, 3, 4]")}));
  ASSERT_OK_AND_ASSIGN(auto catalog, Catalog::Open({dir_.string()}, 1));
  ASSERT_OK_AND_ASSIGN(auto plain, ReadRowGroupTable(*catalog, 0, {"s", "l", "n"}));
  ASSERT_OK_AND_ASSIGN(auto dict, ReadRowGroupTable(*catalog, 0, {"s", "l", "n"}, {"s", "l"}));
  EXPECT_EQ(plain->GetColumnByName("s")->type()->id(), arrow::Type::STRING);
  const auto s = dict->GetColumnByName("s");
  ASSERT_EQ(s->type()->id(), arrow::Type::DICTIONARY);
  ASSERT_OK_AND_ASSIGN(auto flat, FlattenColumn(*s, false, "s", "here"));
  // The same values and nulls (materialised as large_string).
  EXPECT_EQ(flat->ToString(), plain->GetColumnByName("s")->chunk(0)->ToString());
  EXPECT_EQ(dict->GetColumnByName("l")->type()->id(), arrow::Type::LARGE_STRING);
  EXPECT_EQ(dict->GetColumnByName("n")->type()->id(), arrow::Type::INT32);
}

TEST_F(CatalogTest, UnifiesTheFilesTypesAndRecordsWhatCannotBe) {
  auto point =
      arrow::struct_({arrow::field("q", arrow::int32()), arrow::field("r", arrow::utf8())});
  const std::string first = Write(
      "a.parquet",
      arrow::Table::Make(
          arrow::schema({arrow::field("x", arrow::int32()), arrow::field("z", arrow::utf8()),
                         arrow::field("p", point)}),
          {ArrayFromJson(arrow::int32(), "[1, 2]"), ArrayFromJson(arrow::utf8(), R"(["u", "v"])"),
           ArrayFromJson(point, R"([{"q": 1, "r": "s"}, null])")}));
  const std::string second =
      Write("b.parquet",
            arrow::Table::Make(
                arrow::schema({arrow::field("x", arrow::int64()), arrow::field("z", arrow::int64()),
                               arrow::field("y", arrow::float64())}),
                {ArrayFromJson(arrow::int64(), "[3]"), ArrayFromJson(arrow::int64(), "[4]"),
                 ArrayFromJson(arrow::float64(), "[0.5]")}));
  ASSERT_OK_AND_ASSIGN(auto catalog, Catalog::Open({dir_.string()}, 2));
  const arrow::Schema& schema = *catalog->schema();
  // Nested fields flattened, in order of first appearance.
  std::vector<std::string> names;
  for (const auto& field : schema.fields()) names.push_back(field->name());
  EXPECT_EQ(names, (std::vector<std::string>{"x", "z", "p.q", "p.r", "y"}));
  EXPECT_TRUE(schema.GetFieldByName("x")->type()->Equals(*arrow::int64()));
  const FieldLeaves& leaf = catalog->files()[0].fields.at("p.r");
  EXPECT_EQ(leaf.top, "p");
  ASSERT_EQ(leaf.path.size(), 1u);
  EXPECT_EQ(leaf.path[0].name, "r");

  // Widened: read as int64 from the first file, as stored from the second.
  EXPECT_EQ(catalog->ReadAs(0, "x"), "int64");
  EXPECT_EQ(catalog->ReadAs(1, "x"), "");
  // Added later: null in the files without it.
  EXPECT_EQ(catalog->MissingIn("y"), first);
  EXPECT_EQ(catalog->MissingIn("x"), "");
  EXPECT_EQ(catalog->ReadAs(0, "y").rfind("absent", 0), 0u);
  // A string in one file and an integer in the other: kept as a conflict for whoever reads it.
  EXPECT_EQ(catalog->Conflict("x"), "");
  const std::string conflict = catalog->Conflict("z");
  for (const std::string& part :
       {std::string("'z'"), first, second, std::string("string"), std::string("int64")}) {
    EXPECT_NE(conflict.find(part), std::string::npos) << part << " in " << conflict;
  }
}

TEST_F(CatalogTest, HiveFoldersBecomeColumnsAfterTheFilesOwn) {
  Write("year=2024/city=Paris/f.parquet", Ids(0, 2));
  Write("year=2025/city=New%20York/f.parquet", Ids(2, 3));
  ASSERT_OK_AND_ASSIGN(auto catalog, Catalog::Open({dir_.string()}, 2));
  const arrow::Schema& schema = *catalog->schema();
  ASSERT_EQ(schema.num_fields(), 3);
  EXPECT_EQ(catalog->num_file_fields(), 1);
  EXPECT_EQ(schema.field(1)->name(), "year");
  EXPECT_TRUE(schema.field(1)->type()->Equals(*arrow::int64()));  // every value an integer
  EXPECT_EQ(schema.field(2)->name(), "city");
  EXPECT_TRUE(schema.field(2)->type()->Equals(*arrow::utf8()));
  ASSERT_EQ(catalog->files().size(), 2u);
  EXPECT_EQ(catalog->files()[0].partition_values, (std::vector<std::string>{"2024", "Paris"}));
  EXPECT_EQ(catalog->files()[1].partition_values, (std::vector<std::string>{"2025", "New York"}));
  EXPECT_EQ(catalog->total_rows(), 5);

  // Folders that disagree on the keys are refused.
  Write("year=2026/g.parquet", Ids(5, 1));
  auto differing = Catalog::Open({dir_.string()}, 2);
  ASSERT_FALSE(differing.ok());
  EXPECT_EQ(GetErrorKind(differing.status()), ErrorKind::kSchemaMismatch);
}

// Bytes this process has read from files so far (read and pread system calls).
int64_t BytesRead() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (io >> key >> value) {
    if (key == "rchar:") return value;
  }
  return -1;
}

// The epoch's head decodes a row group's first rows only: its column chunks are read page by
// page as far as those rows, not whole (a 3.2 MB chunk of 1 MB pages: one page and the read-ahead).
TEST_F(CatalogTest, APartialReadReadsTheColumnChunkOnlyAsFarAsItsRows) {
  constexpr int64_t kRows = 400000;
  arrow::Int64Builder ids;
  ASSERT_OK(ids.Reserve(kRows));
  for (int64_t i = 0; i < kRows; ++i) ids.UnsafeAppend(i * 7);
  ASSERT_OK_AND_ASSIGN(auto column, ids.Finish());
  auto table = arrow::Table::Make(arrow::schema({arrow::field("id", arrow::int64())}), {column});
  const fs::path path = dir_ / "a.parquet";
  test_parquet::WriteTable(path.string(), *table, kRows, /*dictionary=*/false);
  ASSERT_OK_AND_ASSIGN(auto catalog, Catalog::Open({dir_.string()}, 1));
  const int64_t chunk_bytes = kRows * 8;
  ASSERT_GE(BytesRead(), 0) << "no /proc/self/io";

  const int64_t before_head = BytesRead();
  ASSERT_OK_AND_ASSIGN(auto head, ReadRowGroupTable(*catalog, 0, {"id"}, {}, 1000));
  const int64_t head_bytes = BytesRead() - before_head;
  ASSERT_EQ(head->num_rows(), 1000);
  const auto head_ids = std::static_pointer_cast<arrow::Int64Array>(head->column(0)->chunk(0));
  EXPECT_EQ(head_ids->Value(0), 0);
  EXPECT_EQ(head_ids->Value(999), 999 * 7);
  EXPECT_LT(head_bytes, chunk_bytes / 2);

  // The whole row group reads the whole chunk (the measure sees reads at all).
  const int64_t before_whole = BytesRead();
  ASSERT_OK_AND_ASSIGN(auto whole, ReadRowGroupTable(*catalog, 0, {"id"}));
  EXPECT_GE(BytesRead() - before_whole, chunk_bytes);
  EXPECT_EQ(whole->num_rows(), kRows);
}

// Fixed-width columns without nulls are read by Parquet's column reader, not Arrow's record
// reader (row_group_reader.cc, ReadDirect): every type, encoding, page layout and fallback gives
// what Arrow's reader gives, whole row groups and partial (head) reads alike.
TEST_F(CatalogTest, DirectReadsGiveWhatArrowsReaderGives) {
  constexpr int64_t kRows = 25000;
  arrow::Int32Builder i32;
  arrow::Int64Builder i64, r64, n64, ts_values;
  arrow::FloatBuilder f32;
  arrow::DoubleBuilder f64;
  arrow::Int8Builder i8;
  arrow::UInt32Builder u32;
  for (int64_t i = 0; i < kRows; ++i) {
    ASSERT_OK(i32.Append(static_cast<int32_t>(i * 7919 % 100003) - 50000));
    ASSERT_OK(i64.Append(i % 13));  // dictionary-friendly
    ASSERT_OK(r64.Append(i * 1000003));
    if (i % 17 == 3) {
      ASSERT_OK(n64.AppendNull());
    } else {
      ASSERT_OK(n64.Append(-i));
    }
    ASSERT_OK(ts_values.Append(i * 1000));
    ASSERT_OK(f32.Append(static_cast<float>(i) / 8.0f));
    ASSERT_OK(f64.Append(static_cast<double>(i * i) * 1e-3));
    ASSERT_OK(i8.Append(static_cast<int8_t>(i % 100)));
    ASSERT_OK(u32.Append(static_cast<uint32_t>(i) * 40503u));
  }
  auto ts_type = arrow::timestamp(arrow::TimeUnit::MICRO);
  ASSERT_OK_AND_ASSIGN(auto ts_ints, ts_values.Finish());
  auto ts = std::make_shared<arrow::TimestampArray>(ts_type, kRows, ts_ints->data()->buffers[1]);
  auto schema =
      arrow::schema({arrow::field("i32", arrow::int32()), arrow::field("i64", arrow::int64()),
                     arrow::field("r64", arrow::int64(), /*nullable=*/false),
                     arrow::field("n64", arrow::int64()), arrow::field("ts", ts_type),
                     arrow::field("f32", arrow::float32()), arrow::field("f64", arrow::float64()),
                     arrow::field("i8", arrow::int8()), arrow::field("u32", arrow::uint32())});
  std::vector<std::shared_ptr<arrow::Array>> columns(9);
  ASSERT_OK(i32.Finish(&columns[0]));
  ASSERT_OK(i64.Finish(&columns[1]));
  ASSERT_OK(r64.Finish(&columns[2]));
  ASSERT_OK(n64.Finish(&columns[3]));
  columns[4] = ts;
  ASSERT_OK(f32.Finish(&columns[5]));
  ASSERT_OK(f64.Finish(&columns[6]));
  ASSERT_OK(i8.Finish(&columns[7]));
  ASSERT_OK(u32.Finish(&columns[8]));
  auto table = arrow::Table::Make(schema, columns);
  const std::vector<std::string> fields = {"i32", "i64", "r64", "n64", "ts",
                                           "f32", "f64", "i8",  "u32"};

  // Small pages (several per chunk), dictionary pages with a plain fallback, and a file whose
  // chunks carry no statistics (a null found while reading sends the column to Arrow's reader).
  for (const bool statistics : {true, false}) {
    SCOPED_TRACE(statistics ? "with statistics" : "without statistics");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    parquet::WriterProperties::Builder properties;
    properties.data_pagesize(4096)->dictionary_pagesize_limit(8192);
    if (!statistics) properties.disable_statistics();
    const std::string path = (dir_ / "a.parquet").string();
    {
      ASSERT_OK_AND_ASSIGN(auto sink, arrow::io::FileOutputStream::Open(path));
      ASSERT_OK(parquet::arrow::WriteTable(
          *table, arrow::default_memory_pool(), sink, 10000, properties.build(),
          parquet::ArrowWriterProperties::Builder().store_schema()->build()));
      ASSERT_OK(sink->Close());
    }
    ASSERT_OK_AND_ASSIGN(auto catalog, Catalog::Open({path}, 1));
    // The footer's null counts, noted at open: only n64's chunks count nulls, and only where
    // the statistics were written.
    const CatalogFile& file = catalog->files()[0];
    const int n64 = file.fields.at("n64").leaves[0];
    const int i64 = file.fields.at("i64").leaves[0];
    EXPECT_EQ(file.ChunkCountsNulls(0, n64), statistics);
    EXPECT_FALSE(file.ChunkCountsNulls(0, i64));
    ASSERT_OK_AND_ASSIGN(auto input, arrow::io::ReadableFile::Open(path));
    ASSERT_OK_AND_ASSIGN(auto arrow_reader,
                         parquet::arrow::OpenFile(input, arrow::default_memory_pool()));
    for (int g = 0; g < 3; ++g) {
      ASSERT_OK_AND_ASSIGN(auto expected, arrow_reader->ReadRowGroup(g));
      ASSERT_OK_AND_ASSIGN(auto got, ReadRowGroupTable(*catalog, g, fields));
      ASSERT_OK_AND_ASSIGN(auto head, ReadRowGroupTable(*catalog, g, fields, {}, 1234));
      ASSERT_EQ(got->num_rows(), expected->num_rows());
      ASSERT_EQ(head->num_rows(), 1234);
      for (const std::string& name : fields) {
        SCOPED_TRACE(name + " in row group " + std::to_string(g));
        const auto want = expected->GetColumnByName(name);
        ASSERT_NE(want, nullptr);
        EXPECT_TRUE(got->GetColumnByName(name)->type()->Equals(want->type()));
        EXPECT_TRUE(got->GetColumnByName(name)->Equals(*want));
        EXPECT_TRUE(head->GetColumnByName(name)->Equals(*want->Slice(0, 1234)));
      }
    }
  }
}

TEST_F(CatalogTest, IdentityAndFingerprintFollowTheFilesBytes) {
  const std::string path = Write("a.parquet", Ids(0, 10));
  ASSERT_OK_AND_ASSIGN(auto before, Catalog::Open({path}, 1));
  ASSERT_OK_AND_ASSIGN(auto again, Catalog::Open({path}, 1));
  EXPECT_EQ(before->fingerprint(), again->fingerprint());
  const CatalogFile& file = before->files()[0];
  EXPECT_FALSE(file.identity.empty());
  EXPECT_EQ(file.identity, again->files()[0].identity);
  EXPECT_EQ(file.size, static_cast<int64_t>(fs::file_size(path)));
  ASSERT_OK(file.CheckUnchanged());

  // Rewritten in place with other rows: the catalog opened before says so, naming the file.
  fs::remove(path);
  Write("a.parquet", Ids(0, 20));
  const Status changed = file.CheckUnchanged();
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(GetErrorKind(changed), ErrorKind::kStorage);
  EXPECT_NE(changed.message().find(path), std::string::npos) << changed.message();
  ASSERT_OK_AND_ASSIGN(auto after, Catalog::Open({path}, 1));
  EXPECT_NE(after->fingerprint(), before->fingerprint());
  EXPECT_NE(after->files()[0].identity, file.identity);
}

}  // namespace
}  // namespace stoker
