// Vocabularies of categorical columns: string columns delivered as int64 ids
// (ColumnsOptions::categories).
//
// Id 0 is the out-of-vocabulary id; vocabulary value i (0-based) gets id i + 1. A vocabulary is
// given by the user (a list, or a file read by the Python front) or built at open ("auto"): the
// sorted distinct values of the dataset, read from the row groups' dictionary pages where every
// data page of the column chunk is dictionary-encoded, otherwise by reading the column chunk.
// Ids replace the strings in the decoder (decode/vocabulary_ids.h), before the ready-tensor
// cache, so a cache entry's name carries the vocabulary's hash (Decoder::CacheName). The decoder
// stores them in the narrowest unsigned type that holds size() (IdDType: a warm epoch reads 1, 2
// or 4 bytes per id, not 8); the column writers widen them to the delivered int64.
// Thread safety: a Vocabulary is immutable once made (Make, FromIndexed; hash() computes its
// value once, on any thread); share it freely.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "catalog/catalog.h"
#include "stoker/error.h"
#include "stoker/tensor.h"
#include "util/view_index.h"

namespace stoker {

class Vocabulary {
 public:
  /// How an "auto" vocabulary was built (for describe and the docs).
  enum class Origin { kGiven, kDictionaryPages, kColumnScan, kPartitionValues };

  /// Checks `values` (no duplicates) and indexes them; errors name `column`.
  static Result<std::shared_ptr<const Vocabulary>> Make(std::vector<std::string> values,
                                                        Origin origin, const std::string& column);
  /// Distinct `values` with their index (`ids`: positions in `values`), as an "auto" build
  /// collected them: the same vocabulary as Make() gives, without indexing the values again.
  static std::shared_ptr<const Vocabulary> FromIndexed(std::vector<std::string> values,
                                                       ViewIndex ids, Origin origin);

  const std::vector<std::string>& values() const { return values_; }
  int64_t size() const { return static_cast<int64_t>(values_.size()); }
  Origin origin() const { return origin_; }
  /// FNV-1a of the values in order: part of the fingerprint and the cache entry names. Computed
  /// on the first call (a resume state's fingerprint, a cache's entry names), not at open: over a
  /// 30-column "auto" build it was a tenth of the loader's open.
  uint64_t hash() const;
  /// The id of `value`: 1..size(), or 0 when it is not in the vocabulary.
  int64_t Lookup(std::string_view value) const;
  /// The narrowest unsigned type that holds every id, 0..size(): uint8, uint16, uint32 (int64
  /// beyond that). The decoded (and cached) ids have this type.
  DType IdDType() const;

 private:
  std::vector<std::string> values_;
  ViewIndex ids_;  // positions in values_ (id - 1)
  Origin origin_ = Origin::kGiven;
  mutable std::once_flag hashed_;
  mutable uint64_t hash_ = 0;
};

/// Builds the "auto" vocabulary of file column `field` (a string, large_string or
/// dictionary<string> column): the sorted distinct non-null values over every row group.
Result<std::shared_ptr<const Vocabulary>> BuildVocabulary(const Catalog& catalog,
                                                          const std::string& field);

/// The "auto" vocabularies of file columns `fields` (each as BuildVocabulary gives it, error
/// included), built on up to `num_threads` threads, one field per thread at a time: the results,
/// in the order of `fields`, are the same whatever the thread count. Every file must have every
/// field.
std::vector<Result<std::shared_ptr<const Vocabulary>>> BuildVocabularies(
    const Catalog& catalog, const std::vector<std::string>& fields, int num_threads);

/// The "auto" vocabulary of hive partition column number `key` (in partition order): its sorted
/// distinct values over the files.
Result<std::shared_ptr<const Vocabulary>> BuildPartitionVocabulary(const Catalog& catalog, int key);

}  // namespace stoker
