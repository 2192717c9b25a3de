#include "catalog/catalog.h"

#include <arrow/filesystem/localfs.h>
#include <arrow/io/interfaces.h>
#include <arrow/type_traits.h>
#include <arrow/util/key_value_metadata.h>
#include <fnmatch.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>
#include <parquet/statistics.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>  // NOLINT(modernize-deprecated-headers): POSIX clock_gettime, CLOCK_REALTIME_COARSE

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "io/block_cache.h"
#include "io/filesystem.h"
#include "io/local_listing.h"
#include "io/prefetched_file.h"
#include "util/hash.h"
#include "util/utf8.h"

namespace stoker {
namespace {

bool HasGlob(const std::string& path) { return path.find_first_of("*?[") != std::string::npos; }

bool IsParquetName(const std::string& path) {
  const std::string base = path.substr(path.find_last_of('/') + 1);
  if (base.empty() || base[0] == '_' || base[0] == '.') return false;
  for (const char* ext : {".parquet", ".parq", ".pq"}) {
    const size_t n = std::char_traits<char>::length(ext);
    if (base.size() > n && base.compare(base.size() - n, n, ext) == 0) return true;
  }
  return false;
}

// Hidden or metadata folders (`_temporary`, `.cache`) below the source are skipped.
bool HasHiddenComponent(const std::string& relative) {
  size_t start = 0;
  while (start < relative.size()) {
    size_t end = relative.find('/', start);
    if (end == std::string::npos) end = relative.size();
    if (end > start && (relative[start] == '_' || relative[start] == '.')) return true;
    start = end + 1;
  }
  return false;
}

struct ListedFile {
  std::string path;
  std::string display;
  std::string base_dir;  // the folder hive partitions are read below
  int64_t size;
  std::shared_ptr<arrow::fs::FileSystem> fs;
  int64_t mtime_ns = 0;
  std::string real_path;  // the file once symbolic links are resolved (remote: `display`)
};

// Arrow builds a column chunk's metadata (and checks its size statistics) only when it is asked
// for, and reports a corrupt one by throwing: check every chunk once here, so planning and
// decoding never meet a throwing footer, and the error names the chunk. Notes which chunks'
// statistics count a null in `chunk_nulls` (CatalogFile::chunk_nulls).
Status CheckFooter(const parquet::FileMetaData& metadata, const std::string& display,
                   std::vector<bool>* chunk_nulls) {
  const parquet::SchemaDescriptor* schema = metadata.schema();
  for (int c = 0; c < schema->num_columns(); ++c) {
    const std::shared_ptr<parquet::schema::ColumnPath> path = schema->Column(c)->path();
    for (const auto& name : path->ToDotVector()) {
      if (!IsValidUtf8(name)) {
        return MakeError(ErrorKind::kCorruptFile, "'" + display +
                                                      "' is not a valid Parquet file: column " +
                                                      std::to_string(c) +
                                                      " has a name that is "
                                                      "not UTF-8");
      }
    }
  }
  chunk_nulls->assign(static_cast<size_t>(metadata.num_row_groups()) * schema->num_columns(),
                      false);
  for (int rg = 0; rg < metadata.num_row_groups(); ++rg) {
    const std::string where = "'" + display + "', row group " + std::to_string(rg);
    int column = -1;
    try {
      auto group = metadata.RowGroup(rg);
      if (group->num_columns() != schema->num_columns()) {
        return MakeError(ErrorKind::kCorruptFile,
                         where + ": corrupt footer: " + std::to_string(group->num_columns()) +
                             " column chunks for " + std::to_string(schema->num_columns()) +
                             " columns in the schema");
      }
      // The row count decides which row groups are read (an empty one is skipped): it must
      // agree with the chunks, or rows would be dropped or invented silently.
      const int64_t rows = group->num_rows();
      for (column = 0; column < group->num_columns(); ++column) {
        const auto chunk = group->ColumnChunk(column);
        // Statistics are decoded lazily too (and throw when their type disagrees with the
        // schema): describe() and cast checks read them.
        if (chunk->type() != schema->Column(column)->physical_type()) {
          return MakeError(ErrorKind::kCorruptFile,
                           where + ", column '" + schema->Column(column)->path()->ToDotString() +
                               "': corrupt footer: the chunk's physical type disagrees with the "
                               "schema's");
        }
        if (chunk->is_stats_set()) {
          const auto stats = chunk->statistics();
          (*chunk_nulls)[static_cast<size_t>(rg) * schema->num_columns() + column] =
              stats && stats->HasNullCount() && stats->null_count() > 0;
        }
        // Since Arrow 26 an unknown codec number throws where it is read (describe() and the
        // decoders read it): an unreadable footer, found here with the others.
        static_cast<void>(chunk->compression());
        const int64_t values = chunk->num_values();
        const bool repeated = schema->Column(column)->max_repetition_level() > 0;
        if (rows < 0 || (repeated ? values < rows : values != rows)) {
          return MakeError(ErrorKind::kCorruptFile,
                           where + ", column '" + schema->Column(column)->path()->ToDotString() +
                               "': corrupt footer: " + std::to_string(values) + " values for " +
                               std::to_string(rows) + " rows");
        }
      }
    } catch (const parquet::ParquetException& e) {
      const std::string chunk =
          column < 0 ? "" : ", column '" + schema->Column(column)->path()->ToDotString() + "'";
      return MakeError(ErrorKind::kCorruptFile, where + chunk + ": corrupt footer: " + e.what());
    }
  }
  return Status::OK();
}

int64_t MtimeNs(const arrow::fs::FileInfo& info) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(info.mtime().time_since_epoch())
      .count();
}

Status ListSource(const std::string& raw_source, const StorageOptions& storage,
                  std::vector<ListedFile>* out) {
  std::string path;
  STOKER_ASSIGN_OR_RAISE(std::shared_ptr<arrow::fs::FileSystem> fs,
                         OpenFileSystem(raw_source, storage, &path));
  const std::string source = RedactUri(raw_source);  // no credentials in messages
  const std::string prefix = DisplayPrefix(raw_source, *fs);
  auto display = [&](const std::string& p) { return prefix + p; };

  std::string pattern;
  std::string base = path;
  if (HasGlob(path)) {
    pattern = path;
    const size_t glob_at = path.find_first_of("*?[");
    const size_t slash = path.rfind('/', glob_at);
    base = slash == std::string::npos ? std::string() : path.substr(0, slash);
  }

  auto info_result = fs->GetFileInfo(base);
  if (!info_result.ok()) {
    return MakeError(ErrorKind::kStorage,
                     "cannot stat '" + display(base) + "': " + info_result.status().message());
  }
  const arrow::fs::FileInfo& info = *info_result;
  if (info.type() == arrow::fs::FileType::NotFound) {
    return MakeError(ErrorKind::kNotFound, "no such file or directory: '" + source + "'");
  }
  const bool local = !IsRemote(*fs);
  if (info.type() == arrow::fs::FileType::File && pattern.empty()) {
    out->push_back({path, display(path), "", info.size(), fs, MtimeNs(info),
                    local ? RealPath(path) : display(path)});
    return Status::OK();
  }

  // A file under the source is read when its path below the folder has no hidden component and
  // it matches the pattern (a glob) or has a Parquet extension (a folder).
  auto selected = [&](const std::string& file) {
    const std::string relative =
        file.size() > base.size() ? file.substr(base.empty() ? 0 : base.size() + 1) : file;
    if (HasHiddenComponent(relative)) return false;
    if (pattern.empty()) return IsParquetName(file);
    // `**` may cross folders; a single `*` stays inside one.
    const int flags = pattern.find("**") == std::string::npos ? FNM_PATHNAME : 0;
    return fnmatch(pattern.c_str(), file.c_str(), flags) == 0;
  };
  const size_t before = out->size();
  if (local) {
    // Arrow's listing would follow a link back to a parent folder until ELOOP (io/local_listing.h).
    auto entries = ListLocalTree(base);
    if (!entries.ok()) return entries.status();
    for (const LocalEntry& entry : *entries) {
      if (!selected(entry.path)) continue;
      if (entry.broken_link) {
        return MakeError(ErrorKind::kNotFound, "'" + display(entry.path) + "' under '" + source +
                                                   "' is a broken symbolic link (to '" +
                                                   entry.link_target +
                                                   "'): its target does not exist");
      }
      out->push_back(
          {entry.path, display(entry.path), base, entry.size, fs, entry.mtime_ns, entry.real_path});
    }
  } else {
    arrow::fs::FileSelector selector;
    selector.base_dir = base;
    selector.recursive = true;
    auto listed = fs->GetFileInfo(selector);
    if (!listed.ok()) {
      return MakeError(ErrorKind::kStorage,
                       "cannot list '" + display(base) + "': " + listed.status().message());
    }
    for (const auto& entry : *listed) {
      if (entry.type() != arrow::fs::FileType::File || !selected(entry.path())) continue;
      out->push_back({entry.path(), display(entry.path()), base, entry.size(), fs, MtimeNs(entry),
                      display(entry.path())});
    }
  }
  if (out->size() == before) {
    return MakeError(ErrorKind::kEmptyDataset,
                     pattern.empty()
                         ? "no Parquet files (*.parquet, *.parq, *.pq) under '" + source + "'"
                         : "no files match the pattern '" + source + "'");
  }
  std::sort(out->begin() + before, out->end(),
            [](const ListedFile& a, const ListedFile& b) { return a.path < b.path; });
  return Status::OK();
}

// Hive writers percent-encode partition values ("New York" is stored as New%20York).
std::string PercentDecode(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() &&
        std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

// `key=value` folders between the source folder and the file.
std::vector<std::pair<std::string, std::string>> HivePartitions(const ListedFile& file) {
  std::vector<std::pair<std::string, std::string>> out;
  if (file.base_dir.empty() && file.path.find('/') == std::string::npos) return out;
  std::string relative = file.path.substr(file.base_dir.empty() ? 0 : file.base_dir.size() + 1);
  size_t start = 0;
  while (true) {
    const size_t end = relative.find('/', start);
    if (end == std::string::npos) break;  // the file name itself
    const std::string part = relative.substr(start, end - start);
    const size_t eq = part.find('=');
    if (eq != std::string::npos && eq > 0) {
      out.emplace_back(PercentDecode(part.substr(0, eq)), PercentDecode(part.substr(eq + 1)));
    }
    start = end + 1;
  }
  return out;
}

void CollectLeaves(const parquet::arrow::SchemaField& node, std::vector<int>* out) {
  if (node.is_leaf()) out->push_back(node.column_index);
  for (const auto& child : node.children) CollectLeaves(child, out);
}

bool HasStructOrMap(const arrow::DataType& type) {
  switch (type.id()) {
    case arrow::Type::STRUCT:
    case arrow::Type::MAP:
      return true;
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST:
      return HasStructOrMap(*static_cast<const arrow::BaseListType&>(type).value_type());
    default:
      return false;
  }
}

// Wraps `type` in the list levels (`large` per level, outermost first) above a leaf.
std::shared_ptr<arrow::DataType> WrapLists(std::shared_ptr<arrow::DataType> type,
                                           const std::vector<bool>& large) {
  for (auto it = large.rbegin(); it != large.rend(); ++it) {
    type = *it ? arrow::large_list(type) : arrow::list(type);
  }
  return type;
}

// The flattened columns under one node of the file's schema: the node itself unless a struct or
// map is below it; struct children as `name.child`; through lists, one list column per leaf; a
// map as `name.keys` and `name.values`. `map_node`: the outermost map above (all its leaves are
// read together, as the reader needs the keys to build the values).
void FlattenField(const parquet::arrow::SchemaField& node,
                  const std::shared_ptr<arrow::DataType>& type, const std::string& name,
                  const FieldLeaves& at, const std::vector<bool>& lists,
                  const parquet::arrow::SchemaField* map_node,
                  std::vector<std::pair<std::string, FieldLeaves>>* out) {
  auto step = [&](PathStep::Kind kind, const std::string& child) {
    FieldLeaves next = at;
    next.path.push_back({kind, child});
    return next;
  };
  if (!HasStructOrMap(*type)) {
    FieldLeaves column = at;
    CollectLeaves(map_node ? *map_node : node, &column.leaves);
    std::sort(column.leaves.begin(), column.leaves.end());
    column.type = WrapLists(type, lists);
    out->emplace_back(name, std::move(column));
    return;
  }
  if (type->id() == arrow::Type::STRUCT) {
    for (int i = 0; i < type->num_fields() && i < static_cast<int>(node.children.size()); ++i) {
      const auto& child = type->field(i);
      FlattenField(node.children[i], child->type(), name + "." + child->name(),
                   step(PathStep::kChild, child->name()), lists, map_node, out);
    }
    return;
  }
  std::vector<bool> inner = lists;
  if (type->id() == arrow::Type::MAP) {
    const auto& map = static_cast<const arrow::MapType&>(*type);
    // The node's one child is the key/value entries; its children the key and the value.
    if (node.children.size() != 1 || node.children[0].children.size() != 2) return;
    const auto& entries = node.children[0];
    inner.push_back(false);
    const parquet::arrow::SchemaField* outer = map_node ? map_node : &node;
    FlattenField(entries.children[0], map.key_type(), name + ".keys", step(PathStep::kMapKeys, ""),
                 inner, outer, out);
    FlattenField(entries.children[1], map.item_type(), name + ".values",
                 step(PathStep::kMapItems, ""), inner, outer, out);
    return;
  }
  // A list (or large_list) of something with structs or maps below.
  if (node.children.size() != 1) return;
  inner.push_back(type->id() == arrow::Type::LARGE_LIST);
  FlattenField(node.children[0], static_cast<const arrow::BaseListType&>(*type).value_type(), name,
               step(PathStep::kElements, ""), inner, map_node, out);
}

// ---- File identity (docs/cache.md, "File identity") -------------------------------------------

int64_t Nanoseconds(const timespec& t) { return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec; }

// STOKER_CACHE_IDENTITY=content: trust no file's metadata, key every ready-tensor entry on the
// bytes of its column chunks (for file systems that misreport times).
bool IdentityByContent() {
  const char* mode = std::getenv("STOKER_CACHE_IDENTITY");
  return mode != nullptr && std::strcmp(mode, "content") == 0;
}

// What changes whenever a local file's bytes do. The ctime is set by the kernel on every change
// and by no call, so a copy that restores the mtime (cp -p, rsync -t, touch -r) still moves it;
// the inode tells a file replaced by rename() apart.
std::string LocalIdentity(const struct stat& st) {
  return "local " + std::to_string(st.st_dev) + " " + std::to_string(st.st_ino) + " " +
         std::to_string(st.st_size) + " " + std::to_string(Nanoseconds(st.st_mtim)) + " " +
         std::to_string(Nanoseconds(st.st_ctim));
}

// File systems whose times do not tell every rewrite apart: network file systems (another
// client's write shows up after the attribute cache expires, with the server's clock), FUSE (any
// semantics) and FAT (no ctime, 2 s mtimes).
bool UntrustedFileSystem(const std::string& path) {
  struct statfs fs;
  if (statfs(path.c_str(), &fs) != 0) return true;
  switch (static_cast<uint32_t>(fs.f_type)) {
    case 0x6969:      // NFS
    case 0x517B:      // SMB
    case 0xFF534D42:  // CIFS
    case 0xFE534D42:  // SMB2
    case 0x65735546:  // FUSE (sshfs, s3fs, gcsfuse, virtiofs...)
    case 0x01021997:  // 9P
    case 0x5346414F:  // AFS
    case 0x6B414653:  // kAFS
    case 0x4d44:      // FAT
    case 0x2011BAB0:  // exFAT
      return true;
    default:
      return false;
  }
}

// Takes a local file's identity. A change within the clock tick of the file's ctime (or within
// its second, where a file system keeps whole seconds) could leave every stamp as it is: such a
// recent file is stat()ed again once the tick has passed (a few ms), and a file still that
// recent (being written, or a ctime in the future) is not trusted.
Status CaptureLocalIdentity(const std::string& path, const std::string& display, CatalogFile* out) {
  timespec resolution;
  if (clock_getres(CLOCK_REALTIME_COARSE, &resolution) != 0) resolution = {0, 10000000};
  constexpr int64_t kMaxWaitNs = 50000000;
  for (int round = 0;; ++round) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      const int err = errno;
      return MakeError(err == ENOENT ? ErrorKind::kNotFound : ErrorKind::kStorage,
                       "cannot stat '" + display + "': " + std::strerror(err));
    }
    timespec now;
    clock_gettime(CLOCK_REALTIME_COARSE, &now);
    out->identity = LocalIdentity(st);
    const bool whole_seconds = st.st_ctim.tv_nsec == 0 && st.st_mtim.tv_nsec == 0;
    const int64_t settled_at = Nanoseconds(st.st_ctim) + (whole_seconds ? 2000000000 : 1);
    const int64_t wait_ns = settled_at - Nanoseconds(now) + Nanoseconds(resolution);
    if (Nanoseconds(now) >= settled_at) {
      out->identity_trusted = !IdentityByContent() && !UntrustedFileSystem(path);
      return Status::OK();
    }
    if (round == 2 || wait_ns > kMaxWaitNs) {
      out->identity_trusted = false;
      return Status::OK();
    }
    std::this_thread::sleep_for(std::chrono::nanoseconds(wait_ns));
  }
}

// What a store says about the object's version, in a fixed order: S3's ETag (a hash of the
// content for simple uploads, new for every upload) and VersionId (on versioned buckets), GCS's
// generation and md5Hash, Azure's Content-Hash. Empty when it reports none of them.
std::string ObjectVersion(const arrow::KeyValueMetadata& metadata) {
  std::string version;
  for (const char* key : {"ETag", "VersionId", "generation", "md5Hash", "Content-Hash"}) {
    const int index = metadata.FindKey(key);
    if (index < 0 || metadata.value(index).empty()) continue;
    version += std::string(version.empty() ? "" : " ") + key + "=" + metadata.value(index);
  }
  return version;
}

Result<std::string> RemoteIdentity(arrow::fs::FileSystem& fs, const std::string& path, int64_t size,
                                   bool* trusted) {
  ARROW_ASSIGN_OR_RAISE(auto metadata, ReadObjectMetadata(fs, path));
  const std::string version = metadata ? ObjectVersion(*metadata) : std::string();
  *trusted = !version.empty() && !IdentityByContent();
  const int index = metadata ? metadata->FindKey("Content-Length") : -1;
  if (index >= 0) size = std::atoll(metadata->value(index).c_str());
  return "remote " + std::to_string(size) + " " + version;
}

Status Changed(const std::string& display, const std::string& now) {
  return MakeError(ErrorKind::kStorage, "'" + display + "' changed since the loader opened it (" +
                                            now + "); open a new Loader to read its new contents");
}

// Local: stat(); remote: what the store says now (a HEAD).
Status CheckIdentity(arrow::fs::FileSystem& fs, const std::string& path, const std::string& display,
                     int64_t size, const std::string& identity) {
  if (!IsRemote(fs)) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      const int err = errno;
      return MakeError(
          ErrorKind::kStorage,
          err == ENOENT ? "'" + display + "' no longer exists (deleted after the loader opened it?)"
                        : "cannot stat '" + display + "': " + std::strerror(err));
    }
    const std::string now = LocalIdentity(st);
    return now == identity ? Status::OK() : Changed(display, "was " + identity + ", now " + now);
  }
  bool trusted = false;
  auto now = RemoteIdentity(fs, path, size, &trusted);
  if (!now.ok()) {
    return MakeError(ErrorKind::kStorage,
                     "cannot check '" + display + "' for changes: " + now.status().message());
  }
  return *now == identity ? Status::OK() : Changed(display, "was " + identity + ", now " + *now);
}

Status CaptureIdentity(const ListedFile& listed, bool cached, CatalogFile* out) {
  if (!IsRemote(*listed.fs)) return CaptureLocalIdentity(listed.path, listed.display, out);
  out->identity =
      "remote " + std::to_string(listed.size) + " mtime " + std::to_string(listed.mtime_ns);
  out->identity_trusted = false;
  if (!cached) return Status::OK();  // no cache: nothing to key
  auto identity = RemoteIdentity(*listed.fs, listed.path, listed.size, &out->identity_trusted);
  if (!identity.ok()) {
    return MakeError(GetErrorKind(identity.status()) == ErrorKind::kNotFound ? ErrorKind::kNotFound
                                                                             : ErrorKind::kStorage,
                     "cannot open '" + listed.display + "': " + identity.status().message());
  }
  out->identity = std::move(*identity);
  if (out->identity.rfind("remote " + std::to_string(listed.size) + " ", 0) != 0) {
    return MakeError(ErrorKind::kStorage, "'" + listed.display +
                                              "' changed while the loader was opening it; open "
                                              "the Loader again");
  }
  if (out->identity_trusted) {
    out->version_check = std::make_shared<VersionCheck>(
        [fs = listed.fs, path = listed.path, display = listed.display, size = listed.size,
         identity = out->identity] { return CheckIdentity(*fs, path, display, size, identity); });
  }
  return Status::OK();
}

Status ReadFooter(const ListedFile& listed, std::shared_ptr<DiskCache> block_cache,
                  CatalogFile* out, std::shared_ptr<arrow::Schema>* schema) {
  out->path = listed.path;
  out->display_path = listed.display;
  out->fs = listed.fs;
  out->size = listed.size;
  out->mtime_ns = listed.mtime_ns;
  // Before the footer is read: the identity then names bytes at least as old as the footer.
  STOKER_RETURN_NOT_OK(CaptureIdentity(listed, block_cache != nullptr, out));
  // A replaced object is told apart by its identity only: without one, no block is cached.
  if (IsRemote(*listed.fs) && out->identity_trusted) out->block_cache = std::move(block_cache);
  // The footer's own bytes, cached as they are read: fetched as the file's last 4 MiB blocks,
  // a cold open downloaded up to 8 MiB per file before the first batch could start
  // (bench.remote: Loader() 0.9-1.35 s with cache_dir, 0.12-0.3 s without).
  auto input = out->Open(/*exact_ranges=*/true);
  if (!input.ok()) {
    return MakeError(ErrorKind::kStorage,
                     "cannot open '" + listed.display + "': " + input.status().message());
  }
  try {
    auto reader = parquet::ParquetFileReader::Open(*input);
    out->metadata = reader->metadata();
  } catch (const parquet::ParquetStatusException& e) {
    if (ReadFailureKind(e.status()) != ErrorKind::kCorruptFile) {
      return MakeError(ReadFailureKind(e.status()), "cannot read the footer of '" + listed.display +
                                                        "': " + e.status().message());
    }
    return MakeError(
        ErrorKind::kCorruptFile,
        "'" + listed.display + "' is not a valid Parquet file: " + e.status().message());
  } catch (const parquet::ParquetException& e) {
    return MakeError(ErrorKind::kCorruptFile,
                     "'" + listed.display + "' is not a valid Parquet file: " + e.what());
  }
  STOKER_RETURN_NOT_OK(CheckFooter(*out->metadata, listed.display, &out->chunk_nulls));
  parquet::ArrowReaderProperties props;
  parquet::arrow::SchemaManifest manifest;
  const Status st = parquet::arrow::SchemaManifest::Make(
      out->metadata->schema(), out->metadata->key_value_metadata(), props, &manifest);
  if (!st.ok()) {
    // A stored Arrow schema (ARROW:schema) that cannot be decoded is damage, not a type stoker
    // lacks: the Parquet schema alone maps.
    parquet::arrow::SchemaManifest plain;
    if (out->metadata->key_value_metadata() != nullptr &&
        out->metadata->key_value_metadata()->Contains("ARROW:schema") &&
        parquet::arrow::SchemaManifest::Make(out->metadata->schema(), nullptr, props, &plain)
            .ok()) {
      return MakeError(ErrorKind::kCorruptFile, "'" + listed.display +
                                                    "' is not a valid Parquet file: its stored "
                                                    "Arrow schema (ARROW:schema) is corrupt: " +
                                                    st.message());
    }
    return MakeError(
        ErrorKind::kUnsupportedType,
        "cannot map the Parquet schema of '" + listed.display + "' to Arrow: " + st.message());
  }
  std::vector<std::shared_ptr<arrow::Field>> fields;
  for (size_t i = 0; i < manifest.schema_fields.size(); ++i) {
    const auto& schema_field = manifest.schema_fields[i];
    FieldLeaves top;
    top.field_index = static_cast<int>(i);
    top.top = schema_field.field->name();
    std::vector<std::pair<std::string, FieldLeaves>> columns;
    FlattenField(schema_field, schema_field.field->type(), schema_field.field->name(), top, {},
                 nullptr, &columns);
    for (auto& [name, column] : columns) {
      // A name seen twice (a column literally named "a.b" beside struct a) keeps the first.
      if (out->fields.contains(name)) continue;
      fields.push_back(arrow::field(name, column.type, schema_field.field->nullable()));
      out->fields[name] = std::move(column);
    }
  }
  *schema = arrow::schema(std::move(fields));
  return Status::OK();
}

}  // namespace

namespace {

bool IsInteger(arrow::Type::type id) { return arrow::is_integer(id); }

int BitWidth(const arrow::DataType& type) {
  return static_cast<const arrow::FixedWidthType&>(type).bit_width();
}

std::shared_ptr<arrow::DataType> IntegerType(bool is_signed, int bits) {
  switch (bits) {
    case 8:
      return is_signed ? arrow::int8() : arrow::uint8();
    case 16:
      return is_signed ? arrow::int16() : arrow::uint16();
    case 32:
      return is_signed ? arrow::int32() : arrow::uint32();
    case 64:
      return is_signed ? arrow::int64() : arrow::uint64();
    default:
      return nullptr;
  }
}

bool IsStringLike(arrow::Type::type id) {
  return id == arrow::Type::STRING || id == arrow::Type::LARGE_STRING ||
         id == arrow::Type::BINARY || id == arrow::Type::LARGE_BINARY;
}

}  // namespace

std::shared_ptr<arrow::DataType> UnifyTypes(const std::shared_ptr<arrow::DataType>& a,
                                            const std::shared_ptr<arrow::DataType>& b) {
  using arrow::Type;
  if (a->Equals(*b)) return a;
  if (a->id() == Type::NA) return b;
  if (b->id() == Type::NA) return a;
  // Dictionaries are decoded to their values (strings with 64-bit offsets, as
  // MaterializeDictionary gives them), so only the values must agree.
  if (a->id() == Type::DICTIONARY || b->id() == Type::DICTIONARY) {
    auto values = [](const std::shared_ptr<arrow::DataType>& t) {
      return t->id() == Type::DICTIONARY
                 ? static_cast<const arrow::DictionaryType&>(*t).value_type()
                 : t;
    };
    auto unified = UnifyTypes(values(a), values(b));
    if (unified && unified->id() == Type::STRING) return arrow::large_utf8();
    if (unified && unified->id() == Type::BINARY) return arrow::large_binary();
    return unified;
  }
  const bool a_int = IsInteger(a->id());
  const bool b_int = IsInteger(b->id());
  if (a_int && b_int) {
    const bool a_signed = arrow::is_signed_integer(a->id());
    const bool b_signed = arrow::is_signed_integer(b->id());
    if (a_signed == b_signed) return BitWidth(*a) >= BitWidth(*b) ? a : b;
    // A signed type wider than the unsigned one holds both (uint64 has none).
    const int unsigned_bits = a_signed ? BitWidth(*b) : BitWidth(*a);
    const int signed_bits = a_signed ? BitWidth(*a) : BitWidth(*b);
    return IntegerType(true, std::max(signed_bits, 2 * unsigned_bits));
  }
  const bool a_float = a->id() == Type::FLOAT || a->id() == Type::DOUBLE;
  const bool b_float = b->id() == Type::FLOAT || b->id() == Type::DOUBLE;
  if (a_float && b_float) return BitWidth(*a) >= BitWidth(*b) ? a : b;
  if ((a_int && b_float) || (a_float && b_int)) {
    // The float that holds every integer exactly: float32 up to 16 bits, float64 up to 32; no
    // float holds every int64.
    const auto& integer = a_int ? a : b;
    const auto& real = a_int ? b : a;
    if (BitWidth(*integer) <= 16) return real;
    if (BitWidth(*integer) <= 32) return arrow::float64();
    return nullptr;
  }
  if (IsStringLike(a->id()) && IsStringLike(b->id())) {
    const bool text = (a->id() == Type::STRING || a->id() == Type::LARGE_STRING) &&
                      (b->id() == Type::STRING || b->id() == Type::LARGE_STRING);
    return text ? arrow::large_utf8() : arrow::large_binary();
  }
  const bool a_list = a->id() == Type::LIST || a->id() == Type::LARGE_LIST;
  const bool b_list = b->id() == Type::LIST || b->id() == Type::LARGE_LIST;
  if (a_list && b_list) {
    auto values = UnifyTypes(static_cast<const arrow::BaseListType&>(*a).value_type(),
                             static_cast<const arrow::BaseListType&>(*b).value_type());
    if (!values) return nullptr;
    if (a->id() == Type::LIST && b->id() == Type::LIST) return arrow::list(values);
    return arrow::large_list(values);
  }
  return nullptr;
}

Result<std::shared_ptr<arrow::io::RandomAccessFile>> CatalogFile::Open(bool exact_ranges) const {
  // The pipeline's fetch stage already requested this task's bytes (io/prefetched_file.h).
  if (auto prefetched = ScopedPrefetchedFile(this)) return prefetched;
  ARROW_ASSIGN_OR_RAISE(auto file, fs->OpenInputFile(path));
  if (!block_cache) return file;
  return MakeBlockCachedFile(std::move(file), block_cache, display_path + '\n' + identity, size,
                             version_check, kCacheBlockBytes, exact_ranges);
}

bool CatalogFile::ChunkCountsNulls(int row_group, int leaf) const {
  const size_t index =
      static_cast<size_t>(row_group) * static_cast<size_t>(metadata->num_columns()) + leaf;
  return index < chunk_nulls.size() && chunk_nulls[index];
}

Status CatalogFile::CheckUnchanged() const {
  return CheckIdentity(*fs, path, display_path, size, identity);
}

Result<std::shared_ptr<Catalog>> Catalog::Open(const std::vector<std::string>& sources,
                                               int num_threads, const StorageOptions& storage,
                                               std::shared_ptr<DiskCache> block_cache) {
  if (sources.empty()) {
    return MakeError(ErrorKind::kInvalidOption, "source is empty: give a file, folder or URI");
  }
  std::vector<ListedFile> listed;
  for (const auto& source : sources) STOKER_RETURN_NOT_OK(ListSource(source, storage, &listed));
  // The same file reached through two sources or two links is read once, under the first of
  // its paths in sorted order (the name messages, hive folders and the fingerprint use).
  std::sort(listed.begin(), listed.end(),
            [](const ListedFile& a, const ListedFile& b) { return a.display < b.display; });
  std::unordered_set<std::string> seen;
  size_t kept = 0;
  for (size_t i = 0; i < listed.size(); ++i) {
    if (!seen.insert(listed[i].real_path).second) continue;
    if (kept != i) listed[kept] = std::move(listed[i]);
    ++kept;
  }
  listed.resize(kept);

  auto catalog = std::make_shared<Catalog>();
  catalog->files_.resize(listed.size());
  std::vector<std::shared_ptr<arrow::Schema>> schemas(listed.size());
  std::vector<Status> statuses(listed.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < listed.size(); i = next++) {
      statuses[i] = ReadFooter(listed[i], block_cache, &catalog->files_[i], &schemas[i]);
    }
  };
  const int threads = std::max(1, std::min<int>(num_threads, static_cast<int>(listed.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& thread : pool) thread.join();
  for (const auto& st : statuses) STOKER_RETURN_NOT_OK(st);

  // Columns in order of first appearance; each one's types unified over the files that have it
  // (Arrow's schema unification). A column some files lack is null there; a conflict matters
  // only to a loader that reads the column (ResolveColumns).
  std::vector<std::shared_ptr<arrow::Field>> fields;
  std::unordered_map<std::string, size_t> first_file;  // name -> first file that has it
  std::unordered_map<std::string, size_t> position;    // name -> index in `fields`
  for (size_t i = 0; i < schemas.size(); ++i) {
    for (const auto& field : schemas[i]->fields()) {
      auto [it, added] = first_file.emplace(field->name(), i);
      if (added) {
        position[field->name()] = fields.size();
        fields.push_back(field);
        continue;
      }
      const size_t index = position[field->name()];
      const auto& current = fields[index];
      if (catalog->conflicts_.contains(field->name())) continue;
      auto unified = UnifyTypes(current->type(), field->type());
      if (!unified) {
        const auto& first_type = schemas[it->second]->GetFieldByName(field->name())->type();
        catalog->conflicts_[field->name()] =
            "schema mismatch: column '" + field->name() + "' is " + first_type->ToString() +
            " in '" + catalog->files_[it->second].display_path + "' but " +
            field->type()->ToString() + " in '" + catalog->files_[i].display_path +
            "', and the two types cannot be unified without changing values";
        continue;
      }
      fields[index] =
          arrow::field(field->name(), unified, current->nullable() || field->nullable());
    }
  }
  for (auto& field : fields) {
    for (size_t i = 0; i < schemas.size(); ++i) {
      if (schemas[i]->GetFieldIndex(field->name()) < 0) {
        catalog->missing_in_[field->name()] = catalog->files_[i].display_path;
        field = field->WithNullable(true);
        break;
      }
    }
  }

  // Hive partitions: the keys must be the same for every file.
  std::vector<std::string> keys;
  for (size_t i = 0; i < listed.size(); ++i) {
    auto parts = HivePartitions(listed[i]);
    std::vector<std::string> file_keys;
    for (auto& [key, value] : parts) {
      file_keys.push_back(key);
      catalog->files_[i].partition_values.push_back(value);
    }
    if (i == 0) {
      keys = file_keys;
    } else if (file_keys != keys) {
      return MakeError(ErrorKind::kSchemaMismatch, "hive partition folders differ: '" +
                                                       catalog->files_[0].display_path + "' and '" +
                                                       catalog->files_[i].display_path +
                                                       "' have different key=value levels");
    }
  }
  catalog->num_file_fields_ = static_cast<int>(fields.size());
  for (size_t k = 0; k < keys.size(); ++k) {
    if (first_file.contains(keys[k])) {
      return MakeError(ErrorKind::kSchemaMismatch,
                       "hive partition key '" + keys[k] + "' is also a column in the files");
    }
    bool all_int = true;
    for (const auto& file : catalog->files_) {
      const std::string& v = file.partition_values[k];
      char* end = nullptr;
      errno = 0;
      std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno != 0) all_int = false;
    }
    fields.push_back(arrow::field(keys[k], all_int ? arrow::int64() : arrow::utf8(), false));
  }
  catalog->schema_ = arrow::schema(std::move(fields));
  // Arrow computes a type's fingerprint on first use (DataType::Equals of nested types) and
  // caches it: computed here, before any worker compares a read column's type with these
  // shared ones, every later use only reads it.
  for (const auto& field : catalog->schema_->fields()) {
    static_cast<void>(field->type()->fingerprint());
  }
  for (auto& file : catalog->files_) {
    file.as_dataset = true;
    for (int i = 0; i < catalog->num_file_fields_ && file.as_dataset; ++i) {
      const auto& field = catalog->schema_->field(i);
      const auto it = file.fields.find(field->name());
      file.as_dataset =
          it != file.fields.end() && it->second.type && it->second.type->Equals(*field->type());
    }
  }

  Fnv1a hash;
  for (size_t f = 0; f < catalog->files_.size(); ++f) {
    const auto& file = catalog->files_[f];
    hash.Add(file.display_path);
    hash.AddInt(file.size);
    for (int rg = 0; rg < file.metadata->num_row_groups(); ++rg) {
      const int64_t rows = file.metadata->RowGroup(rg)->num_rows();
      hash.AddInt(rows);
      if (rows == 0) continue;
      catalog->row_groups_.push_back({static_cast<int>(f), rg, rows});
      catalog->total_rows_ += rows;
    }
  }
  catalog->fingerprint_ = hash.digest();
  return catalog;
}

std::string Catalog::Conflict(const std::string& name) const {
  auto it = conflicts_.find(name);
  return it == conflicts_.end() ? std::string() : it->second;
}

std::string Catalog::MissingIn(const std::string& name) const {
  auto it = missing_in_.find(name);
  return it == missing_in_.end() ? std::string() : it->second;
}

std::string Catalog::ReadAs(int file, const std::string& name) const {
  // Asked for every field of every task: most files have the dataset's columns and types, and
  // then only a partition column (after the file's columns) reads otherwise.
  if (files_[file].as_dataset) {
    bool partition = false;
    for (int i = num_file_fields_; i < schema_->num_fields() && !partition; ++i) {
      partition = schema_->field(i)->name() == name;
    }
    if (!partition) return "";
  }
  auto unified = schema_->GetFieldByName(name);
  if (!unified) return "";
  const auto& fields = files_[file].fields;
  auto it = fields.find(name);
  if (it == fields.end()) return "absent, " + unified->type()->ToString();
  return it->second.type->Equals(*unified->type()) ? "" : unified->type()->ToString();
}

std::vector<int64_t> Catalog::FieldBytes(const RowGroupRef& rg,
                                         const std::vector<std::string>& fields) const {
  const CatalogFile& file = files_[rg.file];
  std::vector<int64_t> bytes(fields.size(), 0);
  std::unique_ptr<parquet::RowGroupMetaData> meta;
  for (size_t i = 0; i < fields.size(); ++i) {
    auto it = file.fields.find(fields[i]);
    if (it == file.fields.end()) {
      bytes[i] = rg.num_rows * 8;  // a partition column
      continue;
    }
    if (!meta) meta = file.metadata->RowGroup(rg.row_group);
    for (int leaf : it->second.leaves) {
      bytes[i] += meta->ColumnChunk(leaf)->total_uncompressed_size();
    }
  }
  return bytes;
}

std::string Catalog::Where(const RowGroupRef& rg) const {
  return "'" + files_[rg.file].display_path + "', row group " + std::to_string(rg.row_group);
}

}  // namespace stoker
