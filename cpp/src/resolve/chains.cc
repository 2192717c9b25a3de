#include "resolve/chains.h"

#include <memory>

#include "resolve/column_checks.h"
#include "transform/op.h"

namespace stoker {
namespace {

using transform::ValueType;

// What the chain of `spec` takes: a list's element, bytes or text, or the column's tensors
// (scalars or fixed-size lists, raw or converted numbers).
Result<ValueType> ChainInput(const ColumnSpec& spec) {
  if (spec.layout == SourceLayout::kList) {
    // Element-wise: the chain sees one list element at a time.
    if (spec.list_of_strings) {
      return spec.annotation == "utf8" ? ValueType::String() : ValueType::Bytes();
    }
    if (spec.source_dtype == DType::kBool) {
      return MakeError(ErrorKind::kUnsupportedType, "transforms on column '" + spec.name + "' (" +
                                                        spec.arrow_type +
                                                        "): lists of bool take no transforms");
    }
    return ValueType::Tensor(transform::FromDType(spec.source_dtype), {});
  }
  if (spec.layout == SourceLayout::kString) {
    return spec.annotation == "utf8" ? ValueType::String() : ValueType::Bytes();
  }
  if (spec.layout == SourceLayout::kFixed &&
      (!IsTemporal(spec.annotation) || spec.annotation == "arrow.fixed_shape_tensor" ||
       spec.conversion.active())) {
    return ValueType::Tensor(transform::FromDType(spec.source_dtype),
                             spec.inner == 1 ? std::vector<int64_t>{} : spec.inner_shape);
  }
  return MakeError(ErrorKind::kUnsupportedType,
                   "transforms on column '" + spec.name + "' (" + spec.arrow_type +
                       "): transforms take binary, string, numeric or fixed-size list columns" +
                       (IsTemporal(spec.annotation) && spec.layout == SourceLayout::kFixed
                            ? "; time_unit={'" + spec.name +
                                  "': 's'} makes a timestamp or date a float64 number first"
                            : std::string()));
}

// The chain of `specs` on `input`, every op built and type-checked; it must end in a tensor.
Result<transform::Chain> MakeChain(const std::string& column, const std::vector<OpSpec>& specs,
                                   const ValueType& input) {
  std::vector<std::unique_ptr<transform::Op>> ops;
  for (const auto& op : specs) {
    auto made = transform::MakeOp(op.op, op.params);
    if (!made.ok()) {
      return MakeError(ErrorKind::kInvalidOption,
                       "transforms['" + column + "']: " + made.status().message());
    }
    ops.push_back(std::move(*made));
  }
  transform::Chain::Options chain_options;
  chain_options.require_fixed_shape = true;
  STOKER_ASSIGN_OR_RAISE(auto chain,
                         transform::Chain::Make(column, input, std::move(ops), chain_options));
  const ValueType& output = chain.output_type();
  if (output.kind != transform::ValueKind::kTensor || !transform::ToDType(output.element)) {
    return MakeError(ErrorKind::kUnsupportedType, "transforms['" + column + "'] ends in " +
                                                      output.ToString() +
                                                      "; a chain must end in a tensor");
  }
  return chain;
}

// A list's chain runs whole in the decoder over the list's elements (so it is cached), and the
// column stays a list of the chain's output, padded or ragged as `lists=` says.
Status SetListChain(transform::Chain chain, ColumnSpec* spec) {
  const ValueType& output = chain.output_type();
  const DType output_dtype = *transform::ToDType(output.element);
  if (chain.DeterministicPrefixLength() != chain.size()) {
    return MakeError(ErrorKind::kInvalidOption,
                     "transforms['" + spec->name + "'] on list column '" + spec->name +
                         "' has a random op; the ops of a list column apply to each element "
                         "and must be deterministic");
  }
  if (!output.shape.empty() || output_dtype == DType::kBool) {
    return MakeError(ErrorKind::kUnsupportedType,
                     "transforms['" + spec->name + "'] give " + output.ToString() +
                         " per element of list column '" + spec->name +
                         "'; the ops of a list column must give one number (not bool) per "
                         "element");
  }
  spec->source_dtype = spec->dtype = output_dtype;
  spec->list_of_strings = false;
  spec->dictionary = false;
  spec->annotation.clear();
  spec->output_shape = {};
  spec->cached_ops = chain.size();
  spec->chain = std::make_shared<const transform::Chain>(std::move(chain));
  return Status::OK();
}

// The cache stores the longest deterministic prefix whose output is a fixed-shape tensor, or,
// with a cache_dir, any tensor (a decoded image of its own size): a warm epoch then decodes
// nothing. Without a cache_dir a variable-shape prefix would only move work between threads and
// split decode from the resize or crop that follows it, so the chain runs whole per batch.
size_t CachedPrefixLength(const transform::Chain& chain, bool allow_cache, bool variable_cache) {
  size_t cached = allow_cache ? chain.DeterministicPrefixLength() : 0;
  while (cached > 0) {
    const ValueType& type = chain.types()[cached];
    if (type.kind == transform::ValueKind::kTensor && (type.FixedShape() || variable_cache) &&
        !chain.SplitsFusedOps(cached)) {
      break;
    }
    --cached;
  }
  return cached;
}

}  // namespace

void SetCachedPrefix(size_t cached, ColumnSpec* spec) {
  spec->cached_ops = cached;
  spec->cached_shapes = false;
  if (cached == 0) return;
  const transform::ValueType& type = spec->chain->types()[cached];
  spec->source_dtype = *transform::ToDType(type.element);
  spec->dictionary = false;  // the cached values are plain tensors
  if (type.FixedShape()) {
    spec->layout = SourceLayout::kFixed;
    spec->inner_shape = type.shape;
    spec->inner = 1;
    for (int64_t dim : type.shape) spec->inner *= dim;
  } else {
    spec->layout = SourceLayout::kString;
    spec->cached_shapes = true;
    spec->inner_shape.clear();
    spec->inner = 1;
  }
}

Status ResolveChain(const std::vector<OpSpec>& ops, ColumnSpec* spec, bool allow_cache,
                    bool variable_cache) {
  STOKER_ASSIGN_OR_RAISE(const ValueType input, ChainInput(*spec));
  STOKER_ASSIGN_OR_RAISE(transform::Chain chain, MakeChain(spec->name, ops, input));
  if (spec->layout == SourceLayout::kList) return SetListChain(std::move(chain), spec);
  const size_t cached = CachedPrefixLength(chain, allow_cache, variable_cache);
  const ValueType& output = chain.output_type();
  spec->kind = ColumnKind::kDense;
  spec->dtype = *transform::ToDType(output.element);
  spec->output_shape = output.shape;
  spec->annotation.clear();
  spec->chain = std::make_shared<const transform::Chain>(std::move(chain));
  SetCachedPrefix(cached, spec);
  return Status::OK();
}

Status ResolveOutputs(const std::vector<std::pair<std::string, std::vector<OpSpec>>>& outputs,
                      const std::string& column, int group, bool cache, ColumnLookup& lookup,
                      std::set<std::string>* seen_outputs, OutputSpec* out) {
  if (outputs.empty()) {
    return MakeError(ErrorKind::kInvalidOption, "transforms['" + column + "'] names no outputs");
  }
  const size_t first = out->columns.size();
  for (const auto& [name, ops] : outputs) {
    if (name != column && !seen_outputs->insert(name).second) {
      return MakeError(ErrorKind::kInvalidOption,
                       "transforms['" + column + "'] output '" + name +
                           "' clashes with another column or output of that name");
    }
    ColumnSpec spec;
    STOKER_RETURN_NOT_OK(lookup.Find(column, &spec));
    if (spec.layout == SourceLayout::kPartition || spec.layout == SourceLayout::kList) {
      return MakeError(ErrorKind::kUnsupportedType,
                       "transforms['" + column +
                           "']: several outputs need a binary, string, "
                           "numeric or fixed-size list column");
    }
    if (spec.options.null_mask) {
      return MakeError(ErrorKind::kInvalidOption,
                       "null_mask for column '" + column +
                           "', whose transforms give several outputs: start the chains with "
                           "fill_null, or use on_error='zero'");
    }
    // The whole chain runs per batch; the shared prefix once per row for all outputs (cached
    // instead with a cache_dir, below).
    STOKER_RETURN_NOT_OK(ResolveChain(ops, &spec, /*allow_cache=*/false, false));
    spec.name = name;
    spec.field = column;
    spec.group = group;
    spec.counters = out->transform_counters;
    out->columns.push_back(std::move(spec));
  }
  // Shared: the leading deterministic ops with equal fingerprints in every output's chain.
  const transform::Chain& head = *out->columns[first].chain;
  size_t shared = head.DeterministicPrefixLength();
  for (size_t i = first + 1; i < out->columns.size(); ++i) {
    const transform::Chain& chain = *out->columns[i].chain;
    size_t same = 0;
    while (same < shared && same < chain.size() &&
           chain.op(same).Fingerprint() == head.op(same).Fingerprint()) {
      ++same;
    }
    shared = same;
  }
  // With a cache_dir the shared prefix is the group's cached prefix: decoded once, before the
  // cache, as long as it ends in a tensor.
  size_t cached = 0;
  if (cache) {
    cached = shared;
    while (cached > 0 && head.types()[cached].kind != transform::ValueKind::kTensor) --cached;
  }
  for (size_t i = first; i < out->columns.size(); ++i) {
    out->columns[i].shared_ops = shared;
    SetCachedPrefix(cached, &out->columns[i]);
  }
  return Status::OK();
}

}  // namespace stoker
