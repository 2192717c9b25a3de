// OptionSummary and OptionDifferences (what a resume state keeps of the options, and the message
// naming what differs), and OptionTable (every keyword option and whether it is fingerprinted).
//
// The summary's numbers are the ones stoker saved when Python computed them: CRC-32s of Python's
// repr of tuples of the option values. They are reproduced here byte for byte (OptionValue::Repr),
// so states saved before this code existed still name what differs.
#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "options/options_internal.h"
#include "stoker/option_values.h"

namespace stoker {
namespace {

using Kind = OptionValue::Kind;

OptionValue Str(const std::string& text) { return OptionValue::String(text); }

OptionValue Strings(const std::vector<std::string>& texts) {
  std::vector<OptionValue> items;
  items.reserve(texts.size());
  for (const auto& text : texts) items.push_back(Str(text));
  return OptionValue::List(std::move(items));
}

OptionValue Tuple(std::vector<OptionValue> items) {
  return OptionValue::List(std::move(items), /*tuple=*/true);
}

// zlib.crc32(repr(parts).encode()), parts a tuple.
uint64_t Crc(std::vector<OptionValue> parts) { return Crc32(Tuple(std::move(parts)).Repr()); }

const char* ListModeText(ListMode mode) {
  switch (mode) {
    case ListMode::kPadded:
      return "ListMode.padded";
    case ListMode::kRagged:
      return "ListMode.ragged";
    default:
      return "ListMode.unset";
  }
}

// on_error joins only when set, so that states saved before it still match.
OptionValue ColumnTuple(const ColumnOptions& o) {
  std::vector<OptionValue> items = {Str(ListModeText(o.list_mode)), OptionValue::Float(o.pad_value),
                                    OptionValue::Bool(o.has_fill_null),
                                    OptionValue::Float(o.fill_null),
                                    OptionValue::Bool(o.null_mask)};
  if (o.on_error_zero) items.push_back(Str("on_error=zero"));
  return Tuple(std::move(items));
}

}  // namespace

uint32_t Crc32(const std::string& text) {
  static const std::array<uint32_t, 256> kTable = [] {
    std::array<uint32_t, 256> table{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    return table;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : text) crc = kTable[(crc ^ byte) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

std::vector<std::pair<std::string, uint64_t>> OptionSummary(
    const LoaderOptions& options, uint64_t dataset_fingerprint, int64_t shuffle_window_rows,
    const OptionValue& transforms, const std::string& transform_fingerprint, bool has_transform) {
  const ColumnsOptions& c = options.columns;
  const OrderOptions& order = options.order;
  std::vector<std::pair<std::string, uint64_t>> out;
  out.emplace_back("dataset", dataset_fingerprint);
  out.emplace_back("batch_size", static_cast<uint64_t>(order.batch_size));
  out.emplace_back("shuffle", order.shuffle ? 1 : 0);
  out.emplace_back("shuffle_window", static_cast<uint64_t>(shuffle_window_rows));
  out.emplace_back("drop_last", order.drop_last ? 1 : 0);
  out.emplace_back("padding_mask", order.padding_mask ? 1 : 0);
  std::vector<std::string> columns = c.columns;
  std::sort(columns.begin(), columns.end());
  out.emplace_back("columns", Crc({Strings(columns)}));
  if (c.feature_groups.empty()) {
    out.emplace_back(
        "features", Crc({Strings(c.features), Str(c.features_name),
                         Str(DTypeName(c.features_dtype)), OptionValue::Bool(c.allow_lossy_cast)}));
  } else {
    std::vector<OptionValue> groups;
    for (const auto& g : c.feature_groups) {
      groups.push_back(Tuple({Str(g.name), Strings(g.columns), Str(DTypeName(g.dtype)),
                              OptionValue::Bool(g.null_mask)}));
    }
    out.emplace_back("features", Crc({OptionValue::List(std::move(groups)),
                                      OptionValue::Bool(c.allow_lossy_cast)}));
  }
  // Only when set, so states of loaders without categories are unchanged.
  if (!c.categories.empty()) {
    std::vector<OptionValue> items;
    for (const auto& [column, vocabulary] : c.categories) {
      items.push_back(Tuple({Str(column), Strings(vocabulary)}));
    }
    out.emplace_back("categories", Crc({OptionValue::List(std::move(items))}));
  }
  std::vector<OptionValue> per_column;
  for (const auto& [name, column] : c.column_options) {
    per_column.push_back(Tuple({Str(name), ColumnTuple(column)}));
  }
  out.emplace_back("column_options", Crc({ColumnTuple(c.default_column_options),
                                          OptionValue::List(std::move(per_column))}));
  out.emplace_back("transforms", Crc({transforms}));
  // Only with transform=, so states of loaders without one are unchanged.
  if (has_transform) {
    out.emplace_back("transform", Crc({Str(transform_fingerprint), Strings(c.transform_columns)}));
  }
  return out;
}

std::string OptionDifferences(const OptionValue& saved,
                              const std::vector<std::pair<std::string, uint64_t>>& mine) {
  if (saved.kind != Kind::kDict) {
    return "the dataset's files and these options must match: source, columns, features, "
           "features_name, features_dtype, allow_lossy_cast, batch_size, shuffle, "
           "shuffle_window, drop_last, padding_mask, transforms and the column options (lists, "
           "pad_value, fill_null, null_mask, on_error)";
  }
  static const std::map<std::string, std::string> kNames = {
      {"dataset", "the dataset (its files, sizes or row counts)"},
      {"features", "features (or features_name, features_dtype, allow_lossy_cast)"},
      {"column_options", "the column options (lists, pad_value, fill_null, null_mask, on_error)"}};
  static const std::set<std::string> kShown = {"batch_size", "shuffle", "shuffle_window",
                                               "drop_last", "padding_mask"};
  std::string differ;
  for (const auto& [key, value] : mine) {
    const OptionValue* was = saved.Find(key);
    // As text: a saved int may be beyond int64 (a dataset fingerprint is a uint64).
    const bool same = was && was->Repr() == std::to_string(value);
    if (same) continue;
    auto name = kNames.find(key);
    std::string text = name != kNames.end() ? name->second : key;
    if (kShown.contains(key)) {
      text += " (saved " + (was ? was->Repr() : "None") + ", now " + std::to_string(value) + ")";
    }
    differ += (differ.empty() ? "" : "; ") + text;
  }
  return differ.empty() ? "the sources differ (the same files under other paths)"
                        : "these differ: " + differ;
}

const std::vector<OptionInfo>& OptionTable() {
  // What Loader takes, in the user guide's order. "python": read by the Python front only.
  static const std::vector<OptionInfo> kTable = {
      {"source", "source", true},
      {"columns", "columns", true},
      {"features", "columns", true},
      {"batch_size", "order", true},
      {"shuffle", "order", true},
      {"seed", "order", false},  // kept in the resume state itself
      {"shuffle_window", "order", true},
      {"drop_last", "order", true},
      {"rank", "order", true},
      {"world_size", "order", true},
      {"num_threads", "execution", false},
      {"device", "python", false},
      {"pin_memory", "execution", false},
      {"num_io_threads", "execution", false},
      {"prefetch_bytes", "execution", false},
      {"output", "python", false},
      {"lists", "columns", true},
      {"pad_value", "columns", true},
      {"fill_null", "columns", true},
      {"null_mask", "columns", true},
      {"features_dtype", "columns", true},
      {"features_name", "columns", true},
      {"allow_lossy_cast", "columns", true},
      {"categories", "columns", true},
      {"time_unit", "columns", true},
      {"decimals", "columns", true},
      {"padding_mask", "order", true},
      {"task_bytes", "execution", false},
      {"storage_options", "storage", false},
      {"max_retries", "storage", false},
      {"retry_base_delay", "storage", false},
      {"cache_dir", "cache", false},
      {"cache_bytes", "cache", false},
      {"cache_min_free_bytes", "cache", false},
      {"transforms", "columns", true},
      {"on_error", "columns", true},
      {"transform", "columns", true},
      {"transform_columns", "columns", true},
      {"transform_version", "columns", true},  // part of the transform's fingerprint
      {"augment", "python", false},
      {"python_workers", "python", false},
      {"python_start_method", "python", false},
      {"petastorm", "python", true},  // its codec ops join the transforms
  };
  return kTable;
}

}  // namespace stoker
