#include "resolve/vocabulary.h"

#include <parquet/column_page.h>
#include <parquet/column_reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <set>
#include <string_view>
#include <thread>

#include "catalog/row_group_reader.h"
#include "util/hash.h"

namespace stoker {
namespace {

// The distinct values seen, sorted once at the end: a std::set's ordered inserts (string
// compares down the tree for every value of every dictionary page) were half of a 30-column
// loader's start-up.
// Looked up first: most values repeat in every row group's dictionary. A new value's bytes are
// copied once, into an arena; the index (ViewIndex) and the sort hold views (no string, no node
// allocation per value, no string swaps in the sort).
class ValueSet {
 public:
  /// Room for `count` values in all (a dictionary page's count: most of them repeat in the next
  /// pages, so the index rarely grows after the first).
  void Reserve(size_t count) {
    index_.Reserve(count);
    views_.reserve(count);
  }

  void Add(std::string_view value) {
    if (index_.Insert(value, [&](int64_t i) { return views_[i]; }).second) {
      views_.push_back(Store(value));
    }
  }

  /// The values in byte order, and their index renumbered to that order (the vocabulary's ids
  /// without hashing the values again: indexing them anew in Vocabulary::Make, its hash
  /// included, was a sixth of a 30-column open's samples). Sorted on an 8-byte big-endian key of
  /// each value's bytes past the prefix all values share (one integer compare orders almost every
  /// pair: "s07_000123" and "s07_004567" differ past "s07_00"); equal keys compare the whole
  /// values.
  std::shared_ptr<const Vocabulary> TakeVocabulary(Vocabulary::Origin origin) && {
    size_t common = views_.empty() ? 0 : views_.front().size();
    for (std::string_view value : views_) {
      const size_t limit = std::min(common, value.size());
      size_t i = 0;
      while (i < limit && value[i] == views_.front()[i]) ++i;
      common = i;
      if (common == 0) break;
    }
    struct Entry {
      uint64_t key;
      std::string_view value;
      int64_t seen;  // the position in views_ (the index's)
    };
    std::vector<Entry> entries;
    entries.reserve(views_.size());
    for (size_t seen = 0; seen < views_.size(); ++seen) {
      const std::string_view value = views_[seen];
      uint64_t key = 0;
      for (size_t i = common; i < common + 8; ++i) {
        key = (key << 8) | (i < value.size() ? static_cast<unsigned char>(value[i]) : 0u);
      }
      entries.push_back({key, value, static_cast<int64_t>(seen)});
    }
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return a.key != b.key ? a.key < b.key : a.value < b.value;
    });
    std::vector<std::string> values;
    values.reserve(entries.size());
    std::vector<int64_t> positions(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      values.emplace_back(entries[i].value);
      positions[entries[i].seen] = static_cast<int64_t>(i);
    }
    index_.Renumber(positions);
    return Vocabulary::FromIndexed(std::move(values), std::move(index_), origin);
  }

 private:
  static constexpr size_t kBlockBytes = 64 << 10;

  std::string_view Store(std::string_view value) {
    if (value.empty()) return {};
    if (value.size() > free_) {
      const size_t bytes = std::max(kBlockBytes, value.size());
      blocks_.push_back(std::make_unique<char[]>(bytes));
      next_ = blocks_.back().get();
      free_ = bytes;
    }
    std::memcpy(next_, value.data(), value.size());
    std::string_view stored(next_, value.size());
    next_ += value.size();
    free_ -= value.size();
    return stored;
  }

  std::vector<std::unique_ptr<char[]>> blocks_;
  char* next_ = nullptr;
  size_t free_ = 0;
  std::vector<std::string_view> views_;  // in the order first seen
  ViewIndex index_;                      // positions in views_
};

void Add(std::string_view value, ValueSet* out) { out->Add(value); }

// Whether every data page of the chunk is dictionary-encoded, so its dictionary page holds every
// value it has. Without encoding stats (old writers) we cannot tell: the chunk is read.
bool AllPagesFromDictionary(const parquet::ColumnChunkMetaData& chunk) {
  if (!chunk.has_dictionary_page()) return false;
  const auto& stats = chunk.encoding_stats();
  if (stats.empty()) return false;
  for (const auto& page : stats) {
    if (page.page_type != parquet::PageType::DATA_PAGE &&
        page.page_type != parquet::PageType::DATA_PAGE_V2) {
      continue;
    }
    if (page.encoding != parquet::Encoding::PLAIN_DICTIONARY &&
        page.encoding != parquet::Encoding::RLE_DICTIONARY) {
      return false;
    }
  }
  return true;
}

// The values of a PLAIN byte-array dictionary page: a 4-byte little-endian length, then bytes.
Status ReadDictionaryPage(const parquet::DictionaryPage& page, const std::string& where,
                          ValueSet* out) {
  const uint8_t* data = page.data();
  const int64_t size = page.size();
  out->Reserve(static_cast<size_t>(std::max(0, page.num_values())));
  int64_t at = 0;
  for (int32_t i = 0; i < page.num_values(); ++i) {
    uint32_t length = 0;
    if (at + 4 > size) break;
    std::memcpy(&length, data + at, 4);
    at += 4;
    if (at + static_cast<int64_t>(length) > size) {
      return MakeError(ErrorKind::kCorruptFile,
                       "the dictionary page of " + where + " is shorter than its values");
    }
    Add(std::string_view(reinterpret_cast<const char*>(data + at), length), out);
    at += length;
  }
  return Status::OK();
}

// Adds the distinct non-null values of a string array (plain or dictionary) to `out`.
void CollectValues(const arrow::Array& array, ValueSet* out) {
  if (array.type_id() == arrow::Type::DICTIONARY) {
    // Every entry, as a dictionary page gives them (a pandas category's unused categories too).
    CollectValues(*static_cast<const arrow::DictionaryArray&>(array).dictionary(), out);
    return;
  }
  for (int64_t i = 0; i < array.length(); ++i) {
    if (array.IsNull(i)) continue;
    if (array.type_id() == arrow::Type::LARGE_STRING) {
      Add(static_cast<const arrow::LargeStringArray&>(array).GetView(i), out);
    } else {
      Add(static_cast<const arrow::StringArray&>(array).GetView(i), out);
    }
  }
}

}  // namespace

Result<std::shared_ptr<const Vocabulary>> Vocabulary::Make(std::vector<std::string> values,
                                                           Origin origin,
                                                           const std::string& column) {
  auto out = std::make_shared<Vocabulary>();
  out->origin_ = origin;
  out->values_ = std::move(values);
  const std::vector<std::string>& kept = out->values_;
  const auto view = [&](int64_t i) -> std::string_view { return kept[i]; };
  out->ids_.Reserve(kept.size());
  for (const std::string& value : kept) {
    if (!out->ids_.Insert(value, view).second) {
      return MakeError(ErrorKind::kInvalidOption, "categories['" + column + "'] lists '" + value +
                                                      "' twice; each value gets one id");
    }
  }
  return std::shared_ptr<const Vocabulary>(std::move(out));
}

std::shared_ptr<const Vocabulary> Vocabulary::FromIndexed(std::vector<std::string> values,
                                                          ViewIndex ids, Origin origin) {
  auto out = std::make_shared<Vocabulary>();
  out->origin_ = origin;
  out->values_ = std::move(values);
  out->ids_ = std::move(ids);
  return out;
}

uint64_t Vocabulary::hash() const {
  std::call_once(hashed_, [this] {
    Fnv1a hash;
    hash.Add("vocabulary-v1");
    for (const std::string& value : values_) {
      hash.AddInt(value.size());
      hash.Add(value);
    }
    hash_ = hash.digest();
  });
  return hash_;
}

int64_t Vocabulary::Lookup(std::string_view value) const {
  return 1 + ids_.Find(value, [&](int64_t i) -> std::string_view { return values_[i]; });
}

DType Vocabulary::IdDType() const {
  const int64_t max_id = size();
  if (max_id <= 0xFF) return DType::kUInt8;
  if (max_id <= 0xFFFF) return DType::kUInt16;
  if (max_id <= 0xFFFFFFFFLL) return DType::kUInt32;
  return DType::kInt64;
}

namespace {

// A builder's Parquet readers, one per file, opened when first needed and kept for the row groups
// and columns it builds next (30 columns of 8 row groups in 2 files: 2 opens, not 240). At most
// kMaxOpen at a time (the first opened is closed first): a dataset of many files does not hold a
// file descriptor per file per thread.
class FileReaders {
 public:
  explicit FileReaders(size_t files) : readers_(files) {}

  parquet::ParquetFileReader* Get(int file) const { return readers_[file].get(); }

  parquet::ParquetFileReader* Put(int file, std::unique_ptr<parquet::ParquetFileReader> reader) {
    if (open_.size() == kMaxOpen) {
      readers_[open_.front()].reset();
      open_.pop_front();
    }
    open_.push_back(file);
    readers_[file] = std::move(reader);
    return readers_[file].get();
  }

 private:
  static constexpr size_t kMaxOpen = 16;
  std::vector<std::unique_ptr<parquet::ParquetFileReader>> readers_;
  std::deque<int> open_;  // the files with a reader, first opened first
};

Result<std::shared_ptr<const Vocabulary>> Build(const Catalog& catalog, const std::string& field,
                                                FileReaders* readers) {
  ValueSet values;
  bool scanned = false;
  const auto& row_groups = catalog.row_groups();
  for (int index = 0; index < static_cast<int>(row_groups.size()); ++index) {
    const RowGroupRef& rg = row_groups[index];
    const CatalogFile& file = catalog.files()[rg.file];
    const FieldLeaves& leaves = file.fields.at(field);
    const int leaf = leaves.leaves.empty() ? -1 : leaves.leaves.front();
    bool done = false;
    if (leaves.leaves.size() == 1 &&
        AllPagesFromDictionary(*file.metadata->RowGroup(rg.row_group)->ColumnChunk(leaf))) {
      // The dictionary page alone: the chunk's first page.
      parquet::ParquetFileReader* reader = readers->Get(rg.file);
      std::shared_ptr<arrow::io::RandomAccessFile> input;
      if (!reader) {
        STOKER_ASSIGN_OR_RAISE(input, file.Open());
      }
      Status failure;
      try {
        if (!reader) {
          reader = readers->Put(
              rg.file, parquet::ParquetFileReader::Open(input, parquet::default_reader_properties(),
                                                        file.metadata));
        }
        auto pages = reader->RowGroup(rg.row_group)->GetColumnPageReader(leaf);
        std::shared_ptr<parquet::Page> page = pages->NextPage();
        if (page && page->type() == parquet::PageType::DICTIONARY_PAGE) {
          const auto& dictionary = static_cast<const parquet::DictionaryPage&>(*page);
          if (dictionary.encoding() == parquet::Encoding::PLAIN ||
              dictionary.encoding() == parquet::Encoding::PLAIN_DICTIONARY) {
            failure = ReadDictionaryPage(dictionary, catalog.Where(rg), &values);
            done = failure.ok();
          }
        }
      } catch (const parquet::ParquetException& e) {
        failure = MakeError(ErrorKind::kCorruptFile, "cannot read the dictionary page of column '" +
                                                         field + "' of " + catalog.Where(rg) +
                                                         ": " + e.what());
      }
      STOKER_RETURN_NOT_OK(failure);
    }
    if (done) continue;
    // Not all from the dictionary (or no dictionary): read the column chunk once.
    scanned = true;
    STOKER_ASSIGN_OR_RAISE(auto table, ReadRowGroupTable(catalog, index, {field}));
    for (const auto& chunk : table->column(0)->chunks()) CollectValues(*chunk, &values);
  }
  return std::move(values).TakeVocabulary(scanned ? Vocabulary::Origin::kColumnScan
                                                  : Vocabulary::Origin::kDictionaryPages);
}

}  // namespace

Result<std::shared_ptr<const Vocabulary>> BuildVocabulary(const Catalog& catalog,
                                                          const std::string& field) {
  FileReaders readers(catalog.files().size());
  return Build(catalog, field, &readers);
}

std::vector<Result<std::shared_ptr<const Vocabulary>>> BuildVocabularies(
    const Catalog& catalog, const std::vector<std::string>& fields, int num_threads) {
  std::vector<Result<std::shared_ptr<const Vocabulary>>> out(fields.size());
  // Each field's vocabulary is built by one thread alone, from the same bytes whichever thread:
  // the results do not depend on the thread count.
  std::atomic<size_t> next{0};
  auto work = [&] {
    FileReaders readers(catalog.files().size());
    for (size_t i = next++; i < fields.size(); i = next++) {
      out[i] = Build(catalog, fields[i], &readers);
    }
  };
  const int threads = std::max(1, std::min<int>(num_threads, static_cast<int>(fields.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& thread : pool) thread.join();
  return out;
}

Result<std::shared_ptr<const Vocabulary>> BuildPartitionVocabulary(const Catalog& catalog,
                                                                   int key) {
  std::set<std::string> values;
  for (const auto& file : catalog.files()) values.insert(file.partition_values[key]);
  return Vocabulary::Make(std::vector<std::string>(values.begin(), values.end()),
                          Vocabulary::Origin::kPartitionValues,
                          catalog.schema()->field(catalog.num_file_fields() + key)->name());
}

}  // namespace stoker
