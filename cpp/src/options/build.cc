// BuildLoaderOptions: a Loader's keyword values checked and set, with errors naming the option.
// The messages are the ones users and tests know; keep their wording.
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "options/options_internal.h"
#include "stoker/option_values.h"
#include "util/utf8.h"

namespace stoker {
namespace {

using Kind = OptionValue::Kind;

const OptionValue& Get(const OptionValue& values, const std::string& key) {
  static const OptionValue kNone;
  const OptionValue* found = values.Find(key);
  return found ? *found : kNone;
}

bool Has(const OptionValue& values, const std::string& key) { return values.Find(key) != nullptr; }

// None or an int (a bool is refused).
Status CheckInt(const std::string& name, const OptionValue& value) {
  if (value.is_none() || value.is_int()) return Status::OK();
  return Invalid(name + " must be an integer, got " + value.Repr());
}

// An int option that must be given (None is refused with the same words).
Result<int64_t> Int(const std::string& name, const OptionValue& value) {
  if (!value.is_int()) return Invalid(name + " must be an integer, got " + value.Repr());
  return value.integer;
}

// Python's float(value) for what an option takes as a number.
Result<double> Number(const std::string& name, const OptionValue& value) {
  switch (value.kind) {
    case Kind::kBool:
      return value.boolean ? 1.0 : 0.0;
    case Kind::kInt:
      return static_cast<double>(value.integer);
    case Kind::kFloat:
      return value.number;
    case Kind::kString: {
      std::string text = value.text;
      text.erase(0, text.find_first_not_of(" \t\n\r\f\v"));
      text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
      double parsed = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed);
      if (error == std::errc() && end == text.data() + text.size() && !text.empty()) return parsed;
      break;
    }
    default:
      break;
  }
  return Invalid(name + " must be a number, got " + value.Repr());
}

// An option given for every column (a scalar) or per column (a dict).
struct PerColumn {
  const OptionValue* all = nullptr;  // null: given per column (or not at all)
  std::vector<std::pair<OptionValue, const OptionValue*>> by;
};

PerColumn Split(const OptionValue& value) {
  PerColumn out;
  if (value.kind == Kind::kDict) {
    for (size_t i = 0; i < value.keys.size(); ++i) {
      out.by.emplace_back(value.keys[i], &value.items[i]);
    }
  } else {
    out.all = &value;
  }
  return out;
}

const OptionValue* Lookup(const PerColumn& option, const OptionValue& name,
                          const OptionValue* fallback) {
  for (const auto& [key, value] : option.by) {
    if (key.Repr() == name.Repr()) return value;
  }
  return fallback;
}

// A struct's name stands for its leaves, and a leaf may be named below a parent.
bool Requested(const std::vector<std::string>& requested, const std::string& name) {
  for (const auto& r : requested) {
    if (r == name || r.rfind(name + ".", 0) == 0 || name.rfind(r + ".", 0) == 0) return true;
  }
  return false;
}

Status SetEnum(const std::string& option, const std::string& where, const OptionValue* value,
               const std::vector<std::string>& allowed, std::string* out) {
  if (!value || value->is_none()) return Status::OK();
  if (!value->is_string() ||
      std::find(allowed.begin(), allowed.end(), value->text) == allowed.end()) {
    std::string names;
    for (const auto& name : allowed) names += (names.empty() ? "'" : ", '") + name + "'";
    return Invalid(option + where + " must be one of " + names + ", got " +
                   (value ? value->Repr() : "None"));
  }
  *out = value->text;
  return Status::OK();
}

struct ColumnValues {
  const OptionValue* mode;
  const OptionValue* pad;
  const OptionValue* fill;
  bool mask;
  const OptionValue* error;
  const OptionValue* unit;
  const OptionValue* decimal;
};

Result<ColumnOptions> MakeColumn(const ColumnValues& v, const std::string& where) {
  ColumnOptions col;
  std::string unit;
  std::string decimal;
  STOKER_RETURN_NOT_OK(SetEnum("time_unit", where, v.unit, TimeUnitNames(), &unit));
  if (!unit.empty()) ParseTimeUnit(unit, &col.time_unit);
  STOKER_RETURN_NOT_OK(SetEnum("decimals", where, v.decimal, DecimalModeNames(), &decimal));
  if (!decimal.empty()) ParseDecimalMode(decimal, &col.decimals);
  const std::string error = v.error && v.error->is_string() ? v.error->text : "";
  if (error != "raise" && error != "zero") {
    return Invalid("on_error" + where + " must be 'raise' or 'zero', got " +
                   (v.error ? v.error->Repr() : "None"));
  }
  col.on_error_zero = error == "zero";
  if (v.mode && !v.mode->is_none()) {
    if (!ParseListMode(v.mode->is_string() ? v.mode->text : "", &col.list_mode) ||
        col.list_mode == ListMode::kUnset) {
      return Invalid("lists" + where + " must be 'padded' or 'ragged', got " + v.mode->Repr());
    }
  }
  STOKER_ASSIGN_OR_RAISE(col.pad_value, Number("pad_value" + where, *v.pad));
  if (v.fill && !v.fill->is_none()) {
    col.has_fill_null = true;
    STOKER_ASSIGN_OR_RAISE(col.fill_null, Number("fill_null" + where, *v.fill));
  }
  col.null_mask = v.mask;
  return col;
}

// lists, pad_value, fill_null, null_mask, on_error, time_unit, decimals -> the default
// ColumnOptions and one per column named.
Status SetColumnOptions(const OptionValue& values, const OptionValue& null_mask,
                        ColumnsOptions* columns) {
  std::vector<std::string> requested = columns->columns;
  if (columns->feature_groups.empty()) {
    requested.insert(requested.end(), columns->features.begin(), columns->features.end());
  } else {
    for (const auto& group : columns->feature_groups) {
      requested.insert(requested.end(), group.columns.begin(), group.columns.end());
    }
  }
  static const OptionValue kZero = OptionValue::Int(0);
  static const OptionValue kRaise = OptionValue::String("raise");
  const PerColumn lists = Split(Get(values, "lists"));
  PerColumn pad = Split(Has(values, "pad_value") ? Get(values, "pad_value") : kZero);
  if (pad.all && pad.all->is_none()) pad.all = &kZero;
  if (!pad.all) pad.all = &kZero;
  const PerColumn fill = Split(Get(values, "fill_null"));
  PerColumn error = Split(Has(values, "on_error") ? Get(values, "on_error") : kRaise);
  if (!error.all || error.all->is_none()) error.all = &kRaise;
  const PerColumn unit = Split(Get(values, "time_unit"));
  const PerColumn decimal = Split(Get(values, "decimals"));
  // null_mask: True/False for every column, or a list of names.
  static const OptionValue kTrue = OptionValue::Bool(true);
  bool mask_all = false;
  PerColumn mask;
  if (null_mask.kind == Kind::kBool) {
    mask_all = null_mask.boolean;
  } else if (null_mask.is_string()) {
    return Invalid("null_mask takes True or a list of column names, not a string");
  } else if (null_mask.kind == Kind::kList || null_mask.kind == Kind::kTuple) {
    for (const auto& name : null_mask.items) mask.by.emplace_back(name, &kTrue);
  } else if (null_mask.kind == Kind::kDict) {
    for (const auto& name : null_mask.keys) mask.by.emplace_back(name, &kTrue);
  } else {
    mask_all = null_mask.Truthy();
  }
  const std::pair<const char*, const PerColumn*> named[] = {
      {"lists", &lists},    {"pad_value", &pad},  {"fill_null", &fill},  {"null_mask", &mask},
      {"on_error", &error}, {"time_unit", &unit}, {"decimals", &decimal}};
  std::vector<OptionValue> names;  // every column named, in first-seen order
  std::set<std::string> seen;
  for (const auto& [option, by] : named) {
    for (const auto& [name, unused] : by->by) {
      if (!requested.empty() && !Requested(requested, PyStr(name))) {
        return Invalid(std::string(option) + " names column " + name.Repr() +
                       ", which is not in columns or features");
      }
      if (seen.insert(name.Repr()).second) names.push_back(name);
    }
  }
  const ColumnValues defaults{lists.all, pad.all,  fill.all,   mask_all,
                              error.all, unit.all, decimal.all};
  STOKER_ASSIGN_OR_RAISE(columns->default_column_options, MakeColumn(defaults, ""));
  columns->column_options.clear();
  for (const auto& name : names) {
    const ColumnValues own{
        Lookup(lists, name, lists.all),    Lookup(pad, name, pad.all),
        Lookup(fill, name, fill.all),      Lookup(mask, name, nullptr) != nullptr || mask_all,
        Lookup(error, name, error.all),    Lookup(unit, name, unit.all),
        Lookup(decimal, name, decimal.all)};
    STOKER_ASSIGN_OR_RAISE(columns->column_options[PyStr(name)],
                           MakeColumn(own, "[" + name.Repr() + "]"));
  }
  return Status::OK();
}

// storage_options configure remote filesystems: given (non-empty) with nothing but local paths,
// they would be ignored. An empty dict is allowed (code that always passes one).
Status SetStorageOptions(const OptionValue& given, const std::vector<std::string>& sources,
                         StorageOptions* storage) {
  if (given.is_none()) return Status::OK();
  if (given.kind != Kind::kDict) return Invalid("storage_options must be a dict of strings");
  if (!given.keys.empty()) {
    std::vector<std::string> local;
    for (const auto& source : sources) {
      if (source.find("://") == std::string::npos || source.rfind("file://", 0) == 0) {
        local.push_back(source);
      }
    }
    if (!sources.empty() && local.size() == sources.size()) {
      std::vector<std::string> keys;
      for (const auto& key : given.keys) keys.push_back(PyStr(key));
      std::sort(keys.begin(), keys.end());
      std::string listed;
      for (const auto& key : keys) listed += (listed.empty() ? "" : ", ") + key;
      return Invalid("storage_options (" + listed +
                     ") configure remote filesystems (s3://, gs://, hdfs://, ...), but source " +
                     OptionValue::String(local[0]).Repr() +
                     " is a local path, where they would be ignored: drop storage_options, or "
                     "give the remote URI");
    }
  }
  storage->storage_options.clear();
  for (size_t i = 0; i < given.keys.size(); ++i) {
    const OptionValue& key = given.keys[i];
    const OptionValue& value = given.items[i];
    // Bools as the engine's true/false; anything else as Python's str().
    storage->storage_options[PyStr(key)] =
        value.kind == Kind::kBool ? (value.boolean ? "true" : "false") : PyStr(value);
  }
  return Status::OK();
}

// A list of column names (not a string).
Result<std::vector<std::string>> Names(const OptionValue& value, const std::string& where) {
  bool ok = value.kind == Kind::kList || value.kind == Kind::kTuple;
  for (const auto& item : value.items) ok = ok && item.is_string();
  if (!ok) return Invalid(where + " takes a list of column names, got " + value.Repr());
  std::vector<std::string> names;
  for (const auto& item : value.items) names.push_back(item.text);
  return names;
}

OptionValue StringList(const std::vector<std::string>& texts) {
  std::vector<OptionValue> items;
  items.reserve(texts.size());
  for (const auto& text : texts) items.push_back(OptionValue::String(text));
  return OptionValue::List(std::move(items));
}

Status SetDType(const OptionValue& name, const std::string& where, DType* out) {
  if (!name.is_string() || !ParseDType(name.text, out)) {
    return Invalid(where + " '" + PyStr(name) +
                   "' is not a known dtype; known dtypes: " + KnownDTypes());
  }
  return Status::OK();
}

// features (a list: one group named features_name; a dict: {group: [columns]}), features_dtype
// (one dtype name, or {group: name}; groups it leaves out are float32) and the groups null_mask
// names. Returns null_mask without the group names it named (those masks are the groups').
Result<OptionValue> SetFeatures(const OptionValue& values, ColumnsOptions* out) {
  static const OptionValue kFloat32 = OptionValue::String("float32");
  static const OptionValue kFalse = OptionValue::Bool(false);
  const OptionValue& features = Get(values, "features");
  const OptionValue& dtype =
      Has(values, "features_dtype") ? Get(values, "features_dtype") : kFloat32;
  const std::string name =
      Has(values, "features_name") ? PyStr(Get(values, "features_name")) : "features";
  const OptionValue& null_mask = Has(values, "null_mask") ? Get(values, "null_mask") : kFalse;
  if (!Has(values, "features") && !Has(values, "features_dtype") && !Has(values, "features_name")) {
    return null_mask;  // base's features stay
  }
  if (features.is_none()) {
    if (dtype.kind == Kind::kDict) {
      return Invalid("features_dtype is a dict but features is not given");
    }
    STOKER_RETURN_NOT_OK(SetDType(dtype, "features_dtype", &out->features_dtype));
    out->features_name = name;
    return null_mask;
  }
  const bool grouped = features.kind == Kind::kDict;
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;
  if (grouped) {
    if (name != "features") {
      return Invalid(
          "features_name names the group of a list of features; with a dict, its keys name the "
          "groups");
    }
    if (features.keys.empty()) return Invalid("features is an empty dict: give {group: [columns]}");
    for (size_t i = 0; i < features.keys.size(); ++i) {
      const OptionValue& group = features.keys[i];
      if (!group.is_string() || group.text.empty()) {
        return Invalid("features keys are group names, got " + group.Repr());
      }
      STOKER_ASSIGN_OR_RAISE(auto columns,
                             Names(features.items[i], "features[" + group.Repr() + "]"));
      groups.emplace_back(group.text, std::move(columns));
    }
  } else {
    STOKER_ASSIGN_OR_RAISE(auto columns, Names(features, "features"));
    groups.emplace_back(name, std::move(columns));
  }
  std::vector<std::string> group_names;
  group_names.reserve(groups.size());
  for (const auto& [group, unused] : groups) group_names.push_back(group);
  auto is_group = [&](const OptionValue& value) {
    return value.is_string() &&
           std::find(group_names.begin(), group_names.end(), value.text) != group_names.end();
  };
  std::vector<const OptionValue*> dtypes;
  if (dtype.kind == Kind::kDict) {
    std::vector<std::string> unknown;
    for (const auto& key : dtype.keys) {
      if (!is_group(key)) unknown.push_back(PyStr(key));
    }
    if (!unknown.empty()) {
      std::sort(unknown.begin(), unknown.end());
      std::vector<std::string> sorted = group_names;
      std::sort(sorted.begin(), sorted.end());
      return Invalid("features_dtype names group(s) " + StringList(unknown).Repr() +
                     ", which features does not define; groups: " + StringList(sorted).Repr());
    }
    for (const auto& group : group_names) {
      const OptionValue* given = dtype.Find(group);
      dtypes.push_back(given ? given : &kFloat32);
    }
  } else {
    dtypes.assign(groups.size(), &dtype);
  }
  std::set<std::string> masked;
  OptionValue rest = null_mask;
  if (null_mask.kind == Kind::kBool && null_mask.boolean) {
    masked.insert(group_names.begin(), group_names.end());
  } else if (null_mask.kind == Kind::kList || null_mask.kind == Kind::kTuple) {
    std::vector<OptionValue> others;
    for (const auto& item : null_mask.items) {
      if (is_group(item)) {
        masked.insert(item.text);
      } else {
        others.push_back(item);
      }
    }
    rest = OptionValue::List(std::move(others));
  }
  out->features_name = name;
  if (!grouped && masked.empty()) {
    // One group as before (its fingerprint unchanged); null_mask=True masks it.
    out->features = groups.front().second;
    STOKER_RETURN_NOT_OK(SetDType(*dtypes.front(), "features_dtype", &out->features_dtype));
    return rest;
  }
  out->feature_groups.clear();
  for (size_t g = 0; g < groups.size(); ++g) {
    FeatureGroup group;
    group.name = groups[g].first;
    group.columns = groups[g].second;
    STOKER_RETURN_NOT_OK(
        SetDType(*dtypes[g], "features_dtype['" + group.name + "']", &group.dtype));
    group.null_mask = masked.contains(group.name);
    out->feature_groups.push_back(std::move(group));
  }
  return rest;
}

// Whether `text[i..]` starts a line break of Python's str.splitlines (after universal newlines);
// sets `*size` to its bytes.
bool LineBreak(const std::string& text, size_t i, size_t* size) {
  const auto c = static_cast<unsigned char>(text[i]);
  if (c == '\r') {
    *size = i + 1 < text.size() && text[i + 1] == '\n' ? 2 : 1;
    return true;
  }
  if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
    *size = 1;
    return true;
  }
  if (text.compare(i, 2, "\xc2\x85") == 0) {
    *size = 2;
    return true;
  }
  if (text.compare(i, 3, "\xe2\x80\xa8") == 0 || text.compare(i, 3, "\xe2\x80\xa9") == 0) {
    *size = 3;
    return true;
  }
  return false;
}

// Whether a line is only whitespace, as Python's str.strip() sees it.
bool Blank(const std::string& line) {
  static const char* const kSpaces[] = {"\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80",
                                        "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf",
                                        "\xe2\x81\x9f", "\xe3\x80\x80"};
  size_t i = 0;
  while (i < line.size()) {
    const auto c = static_cast<unsigned char>(line[i]);
    if (c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f)) {
      ++i;
      continue;
    }
    if (line.compare(i, 2, "\xe2\x80") == 0 && i + 2 < line.size() &&
        static_cast<unsigned char>(line[i + 2]) >= 0x80 &&
        static_cast<unsigned char>(line[i + 2]) <= 0x8a) {
      i += 3;
      continue;
    }
    bool space = false;
    for (const char* s : kSpaces) {
      const std::string token(s);
      if (line.compare(i, token.size(), token) == 0) {
        i += token.size();
        space = true;
        break;
      }
    }
    if (!space) return false;
  }
  return true;
}

// The non-blank lines of a UTF-8 vocabulary file; errors name `where`.
Result<std::vector<std::string>> ReadVocabulary(const std::string& path, const std::string& where) {
  const std::string shown = OptionValue::String(path).Repr();
  auto cannot = [&](int error) {
    return Invalid(where + ": cannot read the vocabulary file " + shown + ": " +
                   std::strerror(error));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return cannot(errno);
  struct stat info {};
  if (::fstat(fd, &info) == 0 && S_ISDIR(info.st_mode)) {
    ::close(fd);
    return cannot(EISDIR);
  }
  std::string text;
  char buffer[65536];
  while (true) {
    const ssize_t got = ::read(fd, buffer, sizeof(buffer));
    if (got < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      return cannot(error);
    }
    if (got == 0) break;
    text.append(buffer, static_cast<size_t>(got));
  }
  ::close(fd);
  if (!IsValidUtf8(text)) {
    return Invalid(where + ": the vocabulary file " + shown + " is not UTF-8 text");
  }
  std::vector<std::string> lines;
  size_t start = 0;
  size_t i = 0;
  while (i <= text.size()) {
    size_t size = 0;
    if (i == text.size() || LineBreak(text, i, &size)) {
      std::string line = text.substr(start, i - start);
      if (!Blank(line)) lines.push_back(std::move(line));
      if (i == text.size()) break;
      i += size;
      start = i;
    } else {
      ++i;
    }
  }
  return lines;
}

// categories: {column: "auto" | [values] | path of a text file, one value per line} -> the
// engine's {column: [values]} ([] for "auto").
Status SetCategories(const OptionValue& categories, ColumnsOptions* out) {
  if (categories.is_none()) return Status::OK();
  if (categories.kind != Kind::kDict) {
    return Invalid(
        "categories must be a dict {column: 'auto' | list of str | path of a text file}");
  }
  std::map<std::string, std::vector<std::string>> made;
  for (size_t i = 0; i < categories.keys.size(); ++i) {
    const OptionValue& column = categories.keys[i];
    const OptionValue& given = categories.items[i];
    std::string where = "categories[" + column.Repr() + "]";
    if (!column.is_string()) {
      return Invalid("categories keys are column names, got " + column.Repr());
    }
    if (given.is_string() && given.text == "auto") {
      made[column.text] = {};
      continue;
    }
    std::vector<std::string> values;
    if (given.is_string()) {
      STOKER_ASSIGN_OR_RAISE(values, ReadVocabulary(given.text, where));
      where += " (file " + given.Repr() + ")";
    } else {
      bool strings = given.kind == Kind::kList || given.kind == Kind::kTuple;
      for (const auto& item : given.items) strings = strings && item.is_string();
      if (!strings) {
        return Invalid(where + " must be 'auto', a list of str or the path of a text file, got " +
                       given.Repr());
      }
      for (const auto& item : given.items) values.push_back(item.text);
    }
    if (values.empty()) return Invalid(where + " is empty: give at least one value, or 'auto'");
    std::set<std::string> seen;
    for (const auto& value : values) {
      if (!seen.insert(value).second) {
        return Invalid(where + " lists " + OptionValue::String(value).Repr() +
                       " twice; each value gets one id");
      }
    }
    made[column.text] = std::move(values);
  }
  out->categories = std::move(made);
  return Status::OK();
}

// Python's os.path.normpath of a POSIX path.
std::string NormPath(const std::string& path) {
  if (path.empty()) return ".";
  int initial = path[0] == '/' ? 1 : 0;
  if (initial && path.compare(0, 2, "//") == 0 && path.compare(0, 3, "///") != 0) initial = 2;
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(start, end - start);
    start = end + 1;
    if (part.empty() || part == ".") continue;
    if (part != ".." || (!initial && parts.empty()) || (!parts.empty() && parts.back() == "..")) {
      parts.push_back(part);
    } else if (!parts.empty()) {
      parts.pop_back();
    }
  }
  std::string out(initial, '/');
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "/" : "") + parts[i];
  return out.empty() ? "." : out;
}

// Python's os.path.expanduser: "~" and "~user" at the start.
std::string ExpandUser(const std::string& path) {
  if (path.empty() || path[0] != '~') return path;
  size_t end = path.find('/', 1);
  if (end == std::string::npos) end = path.size();
  std::string home;
  if (end == 1) {
    if (const char* env = std::getenv("HOME")) {
      home = env;
    } else if (const passwd* entry = ::getpwuid(::getuid())) {
      home = entry->pw_dir;
    } else {
      return path;
    }
  } else {
    const passwd* entry = ::getpwnam(path.substr(1, end - 1).c_str());
    if (!entry) return path;
    home = entry->pw_dir;
  }
  while (!home.empty() && home.back() == '/') home.pop_back();
  const std::string out = home + path.substr(end);
  return out.empty() ? "/" : out;
}

// A source or a list of sources -> absolute local paths and URIs, as the engine takes them.
Status SetSources(const OptionValue& source, SourceOptions* out) {
  std::vector<OptionValue> items;
  if (source.kind == Kind::kList || source.kind == Kind::kTuple) {
    items = source.items;
  } else {
    items.push_back(source);
  }
  if (items.empty()) return Invalid("source is empty: give a file, folder, glob or URI");
  std::vector<std::string> sources;
  for (const auto& item : items) {
    if (!item.is_string() || item.text.empty()) {
      return Invalid("source " + item.Repr() + " is not a path or URI");
    }
    const std::string& text = item.text;
    if (text.find("://") != std::string::npos) {
      sources.push_back(text);
      continue;
    }
    std::string path = ExpandUser(text);
    if (path.empty() || path[0] != '/') {
      char cwd[4096];
      if (::getcwd(cwd, sizeof(cwd)) != nullptr) path = std::string(cwd) + "/" + path;
    }
    sources.push_back(NormPath(path));
  }
  out->sources = std::move(sources);
  return Status::OK();
}

// One chain of `transforms`: an op (a dict with a str "op"), or a non-empty list or tuple of
// them. The ops' names and parameters are the transform registry's to check, at open.
Status CheckChain(const OptionValue& chain, const std::string& where) {
  if (chain.kind == Kind::kDict) return CheckChain(OptionValue::List({chain}), where);
  if ((chain.kind != Kind::kList && chain.kind != Kind::kTuple) || chain.items.empty()) {
    return Invalid(where + " must be a non-empty list of ops (stoker.ops.*)");
  }
  for (size_t position = 0; position < chain.items.size(); ++position) {
    const OptionValue& op = chain.items[position];
    const OptionValue* name = op.kind == Kind::kDict ? op.Find("op") : nullptr;
    if (name == nullptr || !name->is_string()) {
      return Invalid(where + "[" + std::to_string(position) + "] is " + op.Repr() +
                     ", not an op: use stoker.ops (e.g. stoker.ops.resize(224)) or a dict "
                     "{'op': name, **params}");
    }
  }
  return Status::OK();
}

// `transforms`: {column: chain} or {column: {output: chain, ...}} (several outputs of one column).
Status CheckTransforms(const OptionValue& transforms) {
  if (transforms.is_none()) return Status::OK();
  if (transforms.kind != Kind::kDict) {
    return Invalid("transforms must be a dict {column: [op, ...]}");
  }
  for (size_t i = 0; i < transforms.items.size(); ++i) {
    const OptionValue& column = transforms.keys[i];
    const OptionValue& chain = transforms.items[i];
    if (!column.is_string()) {
      return Invalid("transforms keys are column names, got " + column.Repr());
    }
    const std::string where = "transforms[" + column.Repr() + "]";
    if (chain.kind != Kind::kDict || chain.Find("op") != nullptr) {
      STOKER_RETURN_NOT_OK(CheckChain(chain, where));
      continue;
    }
    if (chain.items.empty()) return Invalid(where + " names no outputs");
    for (size_t j = 0; j < chain.items.size(); ++j) {
      const OptionValue& output = chain.keys[j];
      if (!output.is_string() || output.text.empty()) {
        return Invalid(where + " keys are output names, got " + output.Repr());
      }
      STOKER_RETURN_NOT_OK(CheckChain(chain.items[j], where + "[" + output.Repr() + "]"));
    }
  }
  return Status::OK();
}

// `transform_columns` (given with transform=): a non-empty list of column names.
Status SetTransformColumns(const OptionValue& given, ColumnsOptions* out) {
  if (given.is_none()) return Status::OK();
  const bool names = (given.kind == Kind::kList || given.kind == Kind::kTuple) &&
                     std::all_of(given.items.begin(), given.items.end(),
                                 [](const OptionValue& item) { return item.is_string(); });
  if (!names) return Invalid("transform_columns takes a list of column names");
  if (given.items.empty()) {
    return Invalid("transform_columns is empty: name at least one column, or pass None for all");
  }
  out->transform_columns.clear();
  for (const auto& item : given.items) out->transform_columns.push_back(item.text);
  return Status::OK();
}

}  // namespace

const std::vector<std::string>& TimeUnitNames() {
  static const std::vector<std::string> kNames = {"D", "h", "m", "s", "ms", "us", "ns"};
  return kNames;
}

const std::vector<std::string>& DecimalModeNames() {
  static const std::vector<std::string> kNames = {"float64", "float32", "scaled_int64"};
  return kNames;
}

Result<LoaderOptions> BuildLoaderOptions(const OptionValue& values, LoaderOptions base,
                                         bool describe) {
  LoaderOptions out = std::move(base);
  if (values.kind != Kind::kDict) return Invalid("options must be given as a dict");
  const std::vector<std::string> checked_ints =
      describe
          ? std::vector<std::string>{"num_io_threads"}
          : std::vector<std::string>{"batch_size", "num_threads", "num_io_threads", "max_retries"};
  for (const auto& name : checked_ints) STOKER_RETURN_NOT_OK(CheckInt(name, Get(values, name)));
  if (Has(values, "source")) STOKER_RETURN_NOT_OK(SetSources(Get(values, "source"), &out.source));
  STOKER_ASSIGN_OR_RAISE(const OptionValue null_mask, SetFeatures(values, &out.columns));
  STOKER_RETURN_NOT_OK(SetCategories(Get(values, "categories"), &out.columns));
  if (Has(values, "allow_lossy_cast")) {
    out.columns.allow_lossy_cast = Get(values, "allow_lossy_cast").Truthy();
  }
  if (!describe) {
    OrderOptions& order = out.order;
    ExecutionOptions& execution = out.execution;
    if (Has(values, "batch_size")) {
      STOKER_ASSIGN_OR_RAISE(order.batch_size, Int("batch_size", Get(values, "batch_size")));
    }
    if (Has(values, "shuffle")) order.shuffle = Get(values, "shuffle").Truthy();
    if (Has(values, "shuffle_window") && !Get(values, "shuffle_window").is_none()) {
      // An int is a row count; anything else a byte size. None: the default (kAutoShuffleWindow).
      const OptionValue& window = Get(values, "shuffle_window");
      if (window.is_int()) {
        if (window.integer < 0) {
          return Invalid("shuffle_window must be between 0 and 2**31 rows, got " +
                         std::to_string(window.integer));
        }
        order.shuffle_window_rows = window.integer;
      } else {
        STOKER_ASSIGN_OR_RAISE(order.shuffle_window_bytes, ParseSize(window, "shuffle_window"));
      }
    }
    if (Has(values, "drop_last")) order.drop_last = Get(values, "drop_last").Truthy();
    if (Has(values, "padding_mask")) order.padding_mask = Get(values, "padding_mask").Truthy();
    if (Has(values, "num_threads")) {
      const OptionValue& threads = Get(values, "num_threads");
      execution.num_threads = threads.is_int() ? static_cast<int>(threads.integer) : 0;
    }
    if (Has(values, "prefetch_bytes")) {
      STOKER_ASSIGN_OR_RAISE(execution.prefetch_bytes,
                             ParseSize(Get(values, "prefetch_bytes"), "prefetch_bytes"));
    }
    if (Has(values, "task_bytes")) {
      STOKER_ASSIGN_OR_RAISE(execution.task_bytes,
                             ParseSize(Get(values, "task_bytes"), "task_bytes"));
    }
  }
  if (Has(values, "num_io_threads")) {
    const OptionValue& threads = Get(values, "num_io_threads");
    out.execution.num_io_threads = threads.is_int() ? static_cast<int>(threads.integer) : 0;
  }
  STOKER_RETURN_NOT_OK(
      SetStorageOptions(Get(values, "storage_options"), out.source.sources, &out.storage));
  if (Has(values, "max_retries")) {
    STOKER_ASSIGN_OR_RAISE(const int64_t retries, Int("max_retries", Get(values, "max_retries")));
    out.storage.max_retries = static_cast<int>(retries);
  }
  if (Has(values, "retry_base_delay")) {
    STOKER_ASSIGN_OR_RAISE(out.storage.retry_base_delay_s,
                           Number("retry_base_delay", Get(values, "retry_base_delay")));
  }
  if (describe) {
    // Sizes are checked as a Loader checks them, though they do not change the description.
    for (const char* name :
         {"prefetch_bytes", "task_bytes", "cache_bytes", "cache_min_free_bytes"}) {
      if (Has(values, name)) STOKER_RETURN_NOT_OK(ParseSize(Get(values, name), name).status());
    }
  } else {
    if (Has(values, "cache_bytes")) {
      STOKER_ASSIGN_OR_RAISE(out.cache.bytes, ParseSize(Get(values, "cache_bytes"), "cache_bytes"));
    }
    if (Has(values, "cache_min_free_bytes")) {
      STOKER_ASSIGN_OR_RAISE(
          out.cache.min_free_bytes,
          ParseSize(Get(values, "cache_min_free_bytes"), "cache_min_free_bytes"));
    }
  }
  STOKER_RETURN_NOT_OK(SetColumnOptions(values, null_mask, &out.columns));
  STOKER_RETURN_NOT_OK(CheckTransforms(Get(values, "transforms")));
  STOKER_RETURN_NOT_OK(SetTransformColumns(Get(values, "transform_columns"), &out.columns));
  return out;
}

}  // namespace stoker
