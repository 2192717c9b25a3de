// Live counters of one pipeline stage, updated by its threads and read as StageStats.
//
// Thread safety: every counter is an atomic; Snapshot() may run at any time from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "stoker/stats.h"

namespace stoker {

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class StageCounters {
 public:
  StageCounters(std::string name, std::string pool, int threads)
      : name_(std::move(name)), pool_(std::move(pool)), threads_(threads) {}

  std::atomic<int64_t> busy_ns{0};
  std::atomic<int64_t> wait_in_ns{0};
  std::atomic<int64_t> wait_out_ns{0};
  std::atomic<int64_t> items{0};
  std::atomic<int64_t> bytes{0};

  StageStats Snapshot() const {
    StageStats out;
    out.name = name_;
    out.pool = pool_;
    out.threads = threads_;
    out.busy_s = static_cast<double>(busy_ns.load()) * 1e-9;
    out.wait_in_s = static_cast<double>(wait_in_ns.load()) * 1e-9;
    out.wait_out_s = static_cast<double>(wait_out_ns.load()) * 1e-9;
    out.items = items.load();
    out.bytes = bytes.load();
    return out;
  }

 private:
  const std::string name_;
  const std::string pool_;
  const int threads_;
};

/// Adds the time between construction and destruction to a counter.
class ScopedTimer {
 public:
  explicit ScopedTimer(std::atomic<int64_t>* sink) : sink_(sink), start_(NowNs()) {}
  ~ScopedTimer() { *sink_ += NowNs() - start_; }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  std::atomic<int64_t>* sink_;
  int64_t start_;
};

}  // namespace stoker
