// ViewIndex: positions of distinct strings, found by content. The strings stay where the caller
// keeps them (`view(i)` returns the i-th inserted); the index holds only (hash, position) slots,
// open addressing with linear probing, a power of two of slots, at most half used: no node per
// string to allocate and free (an "auto" vocabulary of 40,000 values built and looked up at open).
// Thread safety: none; const methods may run on several threads at once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

namespace stoker {

class ViewIndex {
 public:
  /// Room for `count` strings without growing.
  void Reserve(size_t count) {
    if (2 * count > slots_.size()) Grow(2 * count);
  }

  /// The position of `value` (0-based, in insertion order), or -1.
  template <typename View>
  int64_t Find(std::string_view value, const View& view) const {
    if (slots_.empty()) return -1;
    const size_t hash = std::hash<std::string_view>{}(value);
    const size_t mask = slots_.size() - 1;
    for (size_t at = hash & mask;; at = (at + 1) & mask) {
      const Slot& slot = slots_[at];
      if (slot.position == 0) return -1;
      if (slot.hash == hash && view(slot.position - 1) == value) return slot.position - 1;
    }
  }

  /// `value`'s position and false when present; else it becomes position size() (the caller
  /// keeps it so that `view` returns it from now on) and true.
  template <typename View>
  std::pair<int64_t, bool> Insert(std::string_view value, const View& view) {
    const auto needed = 2 * static_cast<size_t>(size_ + 1);
    if (needed > slots_.size()) Grow(needed);
    const size_t hash = std::hash<std::string_view>{}(value);
    const size_t mask = slots_.size() - 1;
    for (size_t at = hash & mask;; at = (at + 1) & mask) {
      Slot& slot = slots_[at];
      if (slot.position == 0) {
        slot = {hash, ++size_};
        return {size_ - 1, true};
      }
      if (slot.hash == hash && view(slot.position - 1) == value) return {slot.position - 1, false};
    }
  }

  int64_t size() const { return size_; }

  /// Moves every string to a new position: the one at position p is at `positions[p]` from now
  /// on (a permutation of 0..size()-1, which the caller's `view` follows). Nothing is hashed or
  /// compared again: a vocabulary sorted after it was collected keeps the collecting index.
  void Renumber(const std::vector<int64_t>& positions) {
    for (Slot& slot : slots_) {
      if (slot.position != 0) slot.position = positions[slot.position - 1] + 1;
    }
  }

 private:
  struct Slot {
    size_t hash = 0;
    int64_t position = 0;  // 1 + the string's position; 0: an empty slot
  };

  // At least `min_slots` slots (a power of two, at least 16), the used ones placed again.
  void Grow(size_t min_slots) {
    size_t capacity = std::max<size_t>(16, slots_.size());
    while (capacity < min_slots) capacity *= 2;
    std::vector<Slot> old = std::exchange(slots_, std::vector<Slot>(capacity));
    const size_t mask = capacity - 1;
    for (const Slot& slot : old) {
      if (slot.position == 0) continue;
      size_t at = slot.hash & mask;
      while (slots_[at].position != 0) at = (at + 1) & mask;
      slots_[at] = slot;
    }
  }

  std::vector<Slot> slots_;
  int64_t size_ = 0;
};

}  // namespace stoker
