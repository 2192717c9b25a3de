// Decoder on a real file written in the test: tasks by footer bytes, a segment's rows read and
// sliced from its row group, dictionaries resolved, category ids, and the join that checks
// nulls against the options and points every output slot at its column.
#include "decode/decoder.h"

#include <arrow/api.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "decode/test_dataset_internal.h"

namespace stoker {
namespace {

class DecoderTest : public test_dataset::DatasetTest {};

// The values of an int64 array.
std::vector<int64_t> Int64s(const arrow::Array& array) {
  const auto& typed = static_cast<const arrow::Int64Array&>(array);
  return {typed.raw_values(), typed.raw_values() + typed.length()};
}

const std::shared_ptr<arrow::Array>& ArrayOf(const DecodedColumns& columns,
                                             const std::string& field) {
  for (const auto& [name, array] : columns.arrays) {
    if (name == field) return array;
  }
  static const std::shared_ptr<arrow::Array> none;
  ADD_FAILURE() << "no array '" << field << "'";
  return none;
}

TEST_F(DecoderTest, TasksGroupAColumnsByTheirFooterBytes) {
  auto decoder = MakeDecoder(Options({"id", "x", "s"}));
  ASSERT_NE(decoder, nullptr);
  const Plan plan = PlanOf({{0, 0, 40, false}, {1, 10, 20, false}});
  // A budget below any column: one task per column, in schema order.
  auto one_each = decoder->MakeTasks(plan, 0, 1);
  ASSERT_EQ(one_each.size(), 3u);
  EXPECT_EQ(one_each[0].fields, std::vector<std::string>{"id"});
  EXPECT_EQ(one_each[2].fields, std::vector<std::string>{"s"});
  // A large budget: one task for the segment, costing the footer's bytes of its rows.
  auto whole = decoder->MakeTasks(plan, 0, int64_t{1} << 30);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].fields, (std::vector<std::string>{"id", "x", "s"}));
  const RowGroupRef& rg = catalog_->row_groups()[1];
  int64_t footer_bytes = 0;
  for (int64_t bytes : catalog_->FieldBytes(rg, {"id", "x", "s"})) footer_bytes += bytes;
  auto half = decoder->MakeTasks(plan, 1, int64_t{1} << 30);
  ASSERT_EQ(half.size(), 1u);
  EXPECT_EQ(half[0].segment, 1);
  EXPECT_NEAR(static_cast<double>(half[0].estimated_bytes), footer_bytes / 2.0, 2.0);
}

// Tasks take equal shares of the row group's bytes (each field where its middle falls), not
// task_bytes each and a remainder; min_tasks splits a segment that fits one task (the epoch's
// head, among the workers), at most one field per task.
TEST_F(DecoderTest, TasksAreEqualSharesAndAtLeastMinTasks) {
  auto decoder = MakeDecoder(Options({"id", "x", "s"}));
  ASSERT_NE(decoder, nullptr);
  const Plan plan = PlanOf({{0, 0, 40, false}});
  const RowGroupRef& rg = catalog_->row_groups()[0];
  std::vector<int64_t> bytes;
  int64_t total = 0;
  for (const char* field : {"id", "x", "s"}) {
    bytes.push_back(catalog_->FieldBytes(rg, {field})[0]);
    total += bytes.back();
  }
  const int64_t largest = *std::max_element(bytes.begin(), bytes.end());
  auto fields_of = [](const std::vector<DecodeTask>& tasks) {
    std::vector<std::string> all;
    for (const auto& task : tasks) {
      EXPECT_FALSE(task.fields.empty());
      all.insert(all.end(), task.fields.begin(), task.fields.end());
    }
    return all;
  };
  const std::vector<std::string> in_order = {"id", "x", "s"};
  for (int min_tasks : {1, 2, 3, 8}) {
    SCOPED_TRACE(min_tasks);
    auto tasks = decoder->MakeTasks(plan, 0, int64_t{1} << 30, min_tasks);
    EXPECT_EQ(tasks.size(), static_cast<size_t>(std::min(min_tasks, 3)));
    EXPECT_EQ(fields_of(tasks), in_order);
  }
  // Just under the row group's bytes: two shares, neither more than half plus a field.
  auto two = decoder->MakeTasks(plan, 0, total - 1);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(fields_of(two), in_order);
  for (const auto& task : two) {
    int64_t task_bytes = 0;
    for (int64_t bytes : catalog_->FieldBytes(rg, task.fields)) task_bytes += bytes;
    EXPECT_LE(task_bytes, total / 2 + largest);
  }
}

TEST_F(DecoderTest, ASegmentIsItsRowGroupsRowsWithDictionariesResolved) {
  auto decoder = MakeDecoder(Options({"id", "x", "s"}));
  ASSERT_NE(decoder, nullptr);
  // Rows 45..54: the second row group from its sixth row.
  const Plan plan = PlanOf({{1, 5, 10, false}});
  ASSERT_OK_AND_ASSIGN(DecodedColumns decoded,
                       decoder->Decode(plan, decoder->MakeTasks(plan, 0, int64_t{1} << 30)[0]));
  EXPECT_GT(decoded.bytes, 0);
  const auto& id = ArrayOf(decoded, "id");
  ASSERT_NE(id, nullptr);
  EXPECT_EQ(Int64s(*id), (std::vector<int64_t>{45, 46, 47, 48, 49, 50, 51, 52, 53, 54}));
  const auto& x = ArrayOf(decoded, "x");
  ASSERT_NE(x, nullptr);
  ASSERT_EQ(x->length(), 10);
  EXPECT_TRUE(x->IsNull(0));  // 45 % 7 == 3
  EXPECT_TRUE(x->IsNull(7));  // 52
  EXPECT_EQ(x->null_count(), 2);
  EXPECT_DOUBLE_EQ(static_cast<const arrow::DoubleArray&>(*x).Value(1), 46 * 0.25);
  // The dictionary column comes back as its plain values.
  const auto& s = ArrayOf(decoded, "s");
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->type_id(), arrow::Type::LARGE_STRING);
  const auto& colors = static_cast<const arrow::LargeStringArray&>(*s);
  EXPECT_EQ(colors.GetView(0), "red");    // 45 % 3 == 0
  EXPECT_EQ(colors.GetView(1), "green");  // 46
  EXPECT_EQ(colors.GetView(2), "blue");   // 47

  // DecodeRows, the row-group entry point, gives the same rows.
  ASSERT_OK_AND_ASSIGN(DecodedColumns rows, decoder->DecodeRows(1, {"id"}, 5, 10));
  EXPECT_TRUE(rows.arrays[0].second->Equals(*id));
}

TEST_F(DecoderTest, CategoriesAreIdsUnderANameThatCarriesTheVocabulary) {
  LoaderOptions options = Options({"s", "id"});
  options.columns.categories["s"] = {"blue", "red"};  // green is out of the vocabulary: id 0
  auto decoder = MakeDecoder(options);
  ASSERT_NE(decoder, nullptr);
  ASSERT_OK_AND_ASSIGN(DecodedColumns decoded, decoder->DecodeRows(0, {"id", "s"}, 0, 4));
  // Two values: the ids are decoded (and cached) as uint8, widened to int64 by the writer.
  const auto& ids = *ArrayOf(decoded, "s");
  ASSERT_EQ(ids.type_id(), arrow::Type::UINT8);
  const auto& narrow = static_cast<const arrow::UInt8Array&>(ids);
  EXPECT_EQ((std::vector<uint8_t>{narrow.raw_values(), narrow.raw_values() + narrow.length()}),
            (std::vector<uint8_t>{2, 0, 1, 2}));
  EXPECT_EQ(decoder->CacheName("id"), "id");
  const std::string name = decoder->CacheName("s");
  EXPECT_EQ(name.rfind("s|vocabulary=", 0), 0u) << name;
  // The width is in the name: entries of int64 ids (before ids were narrowed) are never served.
  EXPECT_NE(name.find("|ids=uint8"), std::string::npos) << name;
  EXPECT_EQ(decoder->CachePrefix(), "");  // no user transform
  EXPECT_EQ(decoder->DecodedNames({"id"}), std::vector<std::string>{"id"});
}

TEST_F(DecoderTest, JoinChecksNullsAgainstTheOptionsAndNamesTheRows) {
  const Plan plan = PlanOf({{1, 5, 10, false}});
  auto decode_and_join = [&](const LoaderOptions& options) -> Result<std::shared_ptr<DecodedItem>> {
    auto decoder = MakeDecoder(options);
    if (decoder == nullptr) return Status::Invalid("not resolved");
    std::vector<DecodedColumns> parts;
    for (const DecodeTask& task : decoder->MakeTasks(plan, 0, 1)) {
      STOKER_ASSIGN_OR_RAISE(auto part, decoder->Decode(plan, task));
      parts.push_back(std::move(part));
    }
    return decoder->Join(plan, 0, parts);
  };
  // x has two nulls in rows 45..54, and no option says what they become.
  auto refused = decode_and_join(Options({"id", "x"}));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(GetErrorKind(refused.status()), ErrorKind::kNullValues);
  const std::string message = refused.status().message();
  for (const std::string& part :
       {std::string("column 'x' has 2 null(s)"), "rows 5-14 of '" + path_ + "', row group 1",
        std::string("(40 rows)"), std::string("null_mask=['x']")}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << " in " << message;
  }

  LoaderOptions masked = Options({"id", "x"});
  masked.columns.column_options["x"].null_mask = true;
  ASSERT_OK_AND_ASSIGN(auto item, decode_and_join(masked));
  EXPECT_EQ(item->segment, 0);
  EXPECT_EQ(item->num_rows, 10);
  EXPECT_EQ(item->row_begin, 5);
  EXPECT_EQ(item->first_row_id, 45);  // 40 rows in row group 0
  EXPECT_EQ(item->where, "'" + path_ + "', row group 1");
  ASSERT_EQ(item->sources.size(), 2u);  // one slot per output column, in order
  const ColumnSource& id = item->sources[0];
  EXPECT_EQ(reinterpret_cast<const int64_t*>(id.values)[0], 45);
  EXPECT_EQ(reinterpret_cast<const int64_t*>(id.values)[9], 54);
  EXPECT_EQ(id.validity, nullptr);
  const ColumnSource& x = item->sources[1];
  ASSERT_NE(x.validity, nullptr);
  EXPECT_FALSE(x.IsValid(0));
  EXPECT_TRUE(x.IsValid(1));
  EXPECT_DOUBLE_EQ(reinterpret_cast<const double*>(x.values)[1], 46 * 0.25);
}

TEST_F(DecoderTest, ListsKeepTheirRowsAndTheirOffsets) {
  LoaderOptions options = Options({"l"});
  options.columns.column_options["l"].list_mode = ListMode::kRagged;
  auto decoder = MakeDecoder(options);
  ASSERT_NE(decoder, nullptr);
  const Plan plan = PlanOf({{2, 1, 4, false}});  // rows 81..84
  ASSERT_OK_AND_ASSIGN(auto part, decoder->Decode(plan, decoder->MakeTasks(plan, 0, 1)[0]));
  std::vector<DecodedColumns> parts;
  parts.push_back(std::move(part));
  ASSERT_OK_AND_ASSIGN(auto item, decoder->Join(plan, 0, parts));
  const ColumnSource& l = item->sources[0];
  // 81 % 4 == 1 element, 82: 2, 83: 3, 84: 0.
  std::vector<int64_t> lengths;
  for (int64_t row = 0; row < 4; ++row) lengths.push_back(l.End(row) - l.Begin(row));
  EXPECT_EQ(lengths, (std::vector<int64_t>{1, 2, 3, 0}));
  const auto* values = reinterpret_cast<const int32_t*>(l.values);
  EXPECT_EQ(values[l.Begin(2) + 2], 832);  // row 83, element 2
}

TEST_F(DecoderTest, AHeadSegmentDecodesItsRowGroupOnlyUpToItsEnd) {
  LoaderOptions options = Options({"id", "x", "s", "l"});
  options.columns.column_options["l"].list_mode = ListMode::kRagged;
  auto decoder = MakeDecoder(options);
  ASSERT_NE(decoder, nullptr);
  // Rows 45..54 of the second row group (40 rows), as a head and as an ordinary slice.
  const Plan head = PlanOf({{1, 5, 10, false, /*head=*/true}});
  const Plan slice = PlanOf({{1, 5, 10, false}});
  ASSERT_OK_AND_ASSIGN(auto partial,
                       decoder->Decode(head, decoder->MakeTasks(head, 0, 1 << 30)[0]));
  ASSERT_OK_AND_ASSIGN(auto whole,
                       decoder->Decode(slice, decoder->MakeTasks(slice, 0, 1 << 30)[0]));
  for (const char* field : {"id", "x", "s", "l"}) {
    const auto& a = ArrayOf(partial, field);
    const auto& b = ArrayOf(whole, field);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_TRUE(a->Equals(*b)) << field << ": " << a->ToString() << " vs " << b->ToString();
  }
  // The head's buffers hold the row group's first 15 rows, not its 40.
  EXPECT_LT(partial.bytes, whole.bytes);
}

// pack_rows (a shuffled loader without a cache): a task holding a whole packed run (8 or more
// plain scalar columns) delivers it packed by rows, with the segment's rows, and the item joined
// from it has the run's rows and no columns for it; a run split between tasks, or with a null in
// the segment, stays as columns.
TEST_F(DecoderTest, PackRowsPacksAWholeRunOfPlainColumnsAndNothingElse) {
  constexpr int kColumns = 9;
  std::vector<std::shared_ptr<arrow::Field>> fields;
  std::vector<std::shared_ptr<arrow::Array>> arrays;
  std::vector<std::string> names;
  for (int c = 0; c < kColumns; ++c) {
    names.push_back("c" + std::to_string(c));
    std::ostringstream json;
    for (int64_t i = 0; i < 60; ++i) {
      json << (i ? "," : "[");
      if (c == 4 && i == 45) {
        json << "null";  // row group 1 only
      } else {
        json << i * 100 + c;
      }
    }
    json << "]";
    fields.push_back(arrow::field(names.back(), arrow::int32()));
    arrays.push_back(test_parquet::ArrayFromJson(arrow::int32(), json.str()));
  }
  const std::string path = (dir_ / "run.parquet").string();
  test_parquet::WriteTable(path, *arrow::Table::Make(arrow::schema(fields), arrays), 40);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_OK_AND_ASSIGN(auto catalog, Catalog::Open({path}, 1));
  LoaderOptions options;
  options.source.sources = {path};
  options.columns.columns = names;
  options.columns.column_options["c4"].has_fill_null = true;
  ASSERT_OK_AND_ASSIGN(auto spec, ResolveColumns(*catalog, options.columns));
  const Decoder decoder(catalog, std::make_shared<OutputSpec>(std::move(spec)),
                        /*pack_rows=*/true);
  const Plan plan = PlanOf({{0, 2, 10, false}, {1, 0, 20, false}});

  ASSERT_OK_AND_ASSIGN(DecodedColumns whole, decoder.Decode(plan, DecodeTask{0, names}));
  EXPECT_TRUE(whole.arrays.empty());
  ASSERT_EQ(whole.blocks.size(), 1u);
  const FeatureBlock& block = whole.blocks[0];
  EXPECT_TRUE(block.packed);
  EXPECT_EQ(block.first, 0);
  EXPECT_EQ(block.count, kColumns);
  ASSERT_EQ(block.array->length(), 10);
  for (int64_t r = 0; r < 10; ++r) {
    for (int c = 0; c < kColumns; ++c) {
      int32_t value = 0;
      std::memcpy(&value, block.rows + (r * kColumns + c) * 4, 4);
      ASSERT_EQ(value, (r + 2) * 100 + c) << "row " << r << ", column " << c;
    }
  }
  ASSERT_OK_AND_ASSIGN(auto item, decoder.Join(plan, 0, {whole}));
  ASSERT_EQ(item->packed_rows.size(), 1u);
  ASSERT_NE(item->packed_rows[0], nullptr);
  EXPECT_EQ(item->packed_rows[0]->size(), 10 * kColumns * 4);
  ASSERT_EQ(item->sources.size(), static_cast<size_t>(kColumns));
  EXPECT_EQ(item->sources[0].values, nullptr);

  // Half the run in a task: its columns as read.
  const std::vector<std::string> half(names.begin(), names.begin() + 5);
  ASSERT_OK_AND_ASSIGN(DecodedColumns split, decoder.Decode(plan, DecodeTask{0, half}));
  EXPECT_TRUE(split.blocks.empty());
  EXPECT_EQ(split.arrays.size(), half.size());
  // A null in c4 (row 45, row group 1): the columns, the null kept for fill_null.
  ASSERT_OK_AND_ASSIGN(DecodedColumns nulls, decoder.Decode(plan, DecodeTask{1, names}));
  EXPECT_TRUE(nulls.blocks.empty());
  ASSERT_EQ(nulls.arrays.size(), names.size());
  EXPECT_EQ(ArrayOf(nulls, "c4")->null_count(), 1);
}

}  // namespace
}  // namespace stoker
