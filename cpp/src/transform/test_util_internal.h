// Helpers shared by the transform tests: building ops and chains (and the Status assertions of
// util/test_status_internal.h).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "transform/op.h"
#include "util/test_status_internal.h"

namespace stoker::transform::test_util {

/// One op spec: name and params.
struct Spec {
  std::string name;
  Params params;
};

inline Result<Chain> MakeChain(const ValueType& input, const std::vector<Spec>& specs,
                               Chain::Options options = {}) {
  std::vector<std::unique_ptr<Op>> ops;
  for (const Spec& spec : specs) {
    STOKER_ASSIGN_OR_RAISE(auto op, MakeOp(spec.name, spec.params));
    ops.push_back(std::move(op));
  }
  return Chain::Make("col", input, std::move(ops), options);
}

/// Runs a chain on one value.
inline Status RunChain(const Chain& chain, const Value& in, Value* out, uint64_t row = 0,
                       uint64_t epoch = 0, uint64_t seed = 7) {
  Value scratch;
  RowContext ctx;
  ctx.seed = seed;
  ctx.epoch = epoch;
  ctx.row = row;
  return chain.Apply(ctx, in, out, &scratch);
}

inline std::vector<uint8_t> Bytes(const Value& value) {
  return {value.data(), value.data() + value.size_bytes()};
}

}  // namespace stoker::transform::test_util
