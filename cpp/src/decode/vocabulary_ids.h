// Category ids: a categorical column's strings replaced by their ids in its vocabulary
// (resolve/vocabulary.h), by the decoder, before the ready-tensor cache.
// Thread safety: ApplyVocabulary is a pure function of its inputs (the memo only saves work);
// DictionaryIdsMemo may be used from any thread.
#pragma once

#include <arrow/array.h>
#include <arrow/chunked_array.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "resolve/vocabulary.h"
#include "stoker/error.h"

namespace stoker {

/// The ids of dictionaries' entries already looked up, by content. A row group's dictionary is
/// the same every epoch: remembered, a later epoch maps its rows through the ids it had, instead
/// of hashing every distinct string into the vocabulary again (Vocabulary::Lookup was 15% of
/// the CPU of the shape matrix's strings set's later epochs). A hit is exact: the remembered
/// dictionary is kept and compared byte for byte, so a rewritten file or another row group's
/// dictionary that only hashes alike gets its own lookup. Bounded: once the kept dictionaries
/// and ids reach `max_bytes`, later ones are looked up as before and not kept.
class DictionaryIdsMemo {
 public:
  /// A dictionary's entries as ids of one vocabulary; valid[i] is 0 for a null entry.
  struct EntryIds {
    std::vector<int64_t> ids;
    std::vector<uint8_t> valid;
  };

  /// `hash_bits`: of the content hash used to find kept dictionaries (tests: 0 puts every
  /// dictionary in one bucket, so that only the byte comparison tells them apart).
  explicit DictionaryIdsMemo(int64_t max_bytes, int hash_bits = 64)
      : max_bytes_(max_bytes),
        hash_mask_(hash_bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << hash_bits) - 1) {}

  /// The ids of `dictionary`'s entries (a string or binary array) under `vocabulary`: the kept
  /// ones when an equal dictionary was looked up under it before, else looked up (and kept
  /// while the bound allows). `field` and `where` name the column in errors.
  Result<std::shared_ptr<const EntryIds>> Get(const Vocabulary& vocabulary,
                                              const std::shared_ptr<arrow::Array>& dictionary,
                                              const std::string& field, const std::string& where);

  /// Bytes kept (dictionaries' buffers and their ids), and how many lookups were served.
  int64_t bytes() const;
  int64_t hits() const;

 private:
  struct Kept {
    const Vocabulary* vocabulary;
    std::shared_ptr<arrow::Array> dictionary;
    std::shared_ptr<const EntryIds> ids;
  };

  const int64_t max_bytes_;
  const uint64_t hash_mask_;
  mutable std::mutex mutex_;
  std::unordered_multimap<uint64_t, Kept> kept_;  // GUARDED_BY(mutex_), by content hash
  int64_t bytes_ = 0;                             // GUARDED_BY(mutex_)
  int64_t hits_ = 0;                              // GUARDED_BY(mutex_)
};

/// The ids of `column`'s values (string, large_string or dictionary<string> chunks): an array of
/// vocabulary.IdDType() (uint8 up to 255 values, uint16 up to 65,535...) with the same nulls (a
/// null row holds 0). Narrow ids keep the decoded and cached bytes small; the column writers
/// widen them to the delivered int64. `field` and `where` name it in errors. With `memo`, a
/// dictionary chunk's entries are looked up through it (null: every time).
Result<std::shared_ptr<arrow::Array>> ApplyVocabulary(const Vocabulary& vocabulary,
                                                      const arrow::ChunkedArray& column,
                                                      const std::string& field,
                                                      const std::string& where,
                                                      DictionaryIdsMemo* memo = nullptr);

}  // namespace stoker
