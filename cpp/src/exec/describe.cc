// Describe (stoker/describe.h): the catalog's footers plus column resolution, one column at a
// time (ResolveColumnAlone).

#include "stoker/describe.h"

#include <parquet/metadata.h>
#include <parquet/statistics.h>
#include <parquet/types.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "catalog/catalog.h"
#include "resolve/column_spec.h"
#include "resolve/features.h"
#include "resolve/resolve_columns.h"
#include "resolve/user_transform.h"

namespace stoker {
namespace {

// The names pyarrow uses (ColumnChunkMetaData.compression), so the CLI reads the same as before.
std::string CompressionName(arrow::Compression::type codec) {
  switch (codec) {
    case arrow::Compression::UNCOMPRESSED:
      return "UNCOMPRESSED";
    case arrow::Compression::SNAPPY:
      return "SNAPPY";
    case arrow::Compression::GZIP:
      return "GZIP";
    case arrow::Compression::BROTLI:
      return "BROTLI";
    case arrow::Compression::ZSTD:
      return "ZSTD";
    case arrow::Compression::LZ4:
    case arrow::Compression::LZ4_FRAME:
    case arrow::Compression::LZ4_HADOOP:
      return "LZ4";
    case arrow::Compression::LZO:
      return "LZO";
    case arrow::Compression::BZ2:
      return "BZ2";
  }
  return "UNKNOWN";
}

// Footer facts of one file column over every file and row group.
struct FooterFacts {
  std::set<std::string> physical_types;
  std::set<std::string> encodings;
  std::set<std::string> compression;
  int64_t compressed_bytes = 0;
  int64_t uncompressed_bytes = 0;
  int64_t null_count = 0;
  bool null_count_known = true;
};

FooterFacts CollectFooterFacts(const Catalog& catalog, const std::string& field) {
  FooterFacts facts;
  for (const CatalogFile& file : catalog.files()) {
    auto it = file.fields.find(field);
    if (it == file.fields.end()) continue;
    const std::vector<int>& leaves = it->second.leaves;
    for (int rg = 0; rg < file.metadata->num_row_groups(); ++rg) {
      auto row_group = file.metadata->RowGroup(rg);
      for (int leaf : leaves) {
        auto chunk = row_group->ColumnChunk(leaf);
        facts.physical_types.insert(parquet::TypeToString(chunk->type()));
        for (auto encoding : chunk->encodings()) {
          facts.encodings.insert(parquet::EncodingToString(encoding));
        }
        facts.compression.insert(CompressionName(chunk->compression()));
        facts.compressed_bytes += chunk->total_compressed_size();
        facts.uncompressed_bytes += chunk->total_uncompressed_size();
        // A nested leaf ("tags.list.element") counts empty lists as nulls: not the rows' nulls.
        const bool nested = leaves.size() > 1 ||
                            chunk->path_in_schema()->ToDotString().find('.') != std::string::npos;
        std::shared_ptr<parquet::Statistics> stats =
            chunk->is_stats_set() ? chunk->statistics() : nullptr;
        if (nested || stats == nullptr || !stats->HasNullCount()) {
          facts.null_count_known = false;
        } else {
          facts.null_count += stats->null_count();
        }
      }
    }
  }
  return facts;
}

void SetProduced(const ColumnSpec& spec, ColumnDescription* column) {
  const ColumnInfo info = ToColumnInfo(spec);
  column->kind = info.kind;
  column->dtype = info.dtype;
  column->inner_shape = info.inner_shape;
  column->annotation = info.annotation;
}

// What the loader makes of column `name`: one description, or one per output of its transforms
// (each named after its output, with the column's footer facts).
std::vector<ColumnDescription> DescribeColumn(
    const Catalog& catalog, const LoaderOptions& options,
    const std::shared_ptr<arrow::Schema>& transform_schema, const std::string& name, bool feature) {
  ColumnDescription column;
  column.name = name;
  const arrow::Schema& schema = *catalog.schema();
  const int index = schema.GetFieldIndex(name);
  // A user transform's output: what it returned at open (no footer facts of its own).
  const int output = transform_schema ? transform_schema->GetFieldIndex(name) : -1;
  if (output >= 0) {
    column.arrow_type = transform_schema->field(output)->type()->ToString();
  } else if (index >= 0) {
    column.arrow_type = schema.field(index)->type()->ToString();
    column.partition = index >= catalog.num_file_fields();
    if (!column.partition) {
      FooterFacts facts = CollectFooterFacts(catalog, name);
      column.physical_types.assign(facts.physical_types.begin(), facts.physical_types.end());
      column.encodings.assign(facts.encodings.begin(), facts.encodings.end());
      column.compression.assign(facts.compression.begin(), facts.compression.end());
      column.compressed_bytes = facts.compressed_bytes;
      column.uncompressed_bytes = facts.uncompressed_bytes;
      column.null_count = facts.null_count;
      column.null_count_known = facts.null_count_known;
    }
  }
  auto resolved = ResolveColumnAlone(catalog, options.columns, !options.cache.dir.empty(),
                                     transform_schema, name, feature);
  if (resolved.ok()) {
    column.ok = true;
    std::vector<ColumnDescription> out;
    for (const ColumnSpec& spec : *resolved) {
      out.push_back(column);
      out.back().name = spec.name;
      SetProduced(spec, &out.back());
      if (spec.vocabulary) out.back().vocabulary_size = spec.vocabulary->size();
      if (feature) {
        for (const FeatureGroup& group : EffectiveFeatureGroups(options.columns)) {
          const auto& members = group.columns;
          if (std::find(members.begin(), members.end(), name) != members.end()) {
            out.back().feature_group = group.name;
          }
        }
      }
    }
    return out;
  }
  const auto kind = GetErrorKind(resolved.status());
  column.error_kind = kind ? ErrorKindName(*kind) : "internal";
  column.error = resolved.status().message();
  // A list column read without a list mode: say what it is, as lists='ragged' would give it.
  auto it = options.columns.column_options.find(name);
  const ColumnOptions& chosen = it == options.columns.column_options.end()
                                    ? options.columns.default_column_options
                                    : it->second;
  if (!feature && kind == ErrorKind::kUnsupportedType && chosen.list_mode == ListMode::kUnset) {
    LoaderOptions ragged = options;
    ColumnOptions with_mode = chosen;
    with_mode.list_mode = ListMode::kRagged;
    ragged.columns.column_options[name] = with_mode;
    auto as_ragged = ResolveColumnAlone(catalog, ragged.columns, !options.cache.dir.empty(),
                                        transform_schema, name, feature);
    if (as_ragged.ok() && as_ragged->front().layout == SourceLayout::kList) {
      column.needs_list_mode = true;
      SetProduced(as_ragged->front(), &column);
    }
  }
  return {column};
}

}  // namespace

Result<DatasetDescription> Describe(const LoaderOptions& options) {
  STOKER_RETURN_NOT_OK(options.Validate());
  int io_threads = options.execution.num_io_threads;
  if (io_threads <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    io_threads =
        std::max(4, options.execution.num_threads > 0 ? options.execution.num_threads : cores);
  }
  // No block cache: a description reads each footer once and leaves no trace on disk.
  STOKER_ASSIGN_OR_RAISE(auto catalog,
                         Catalog::Open(options.source.sources, io_threads, options.storage));

  DatasetDescription out;
  out.rows = catalog->total_rows();
  out.fingerprint = catalog->fingerprint();
  for (size_t f = 0; f < catalog->files().size(); ++f) {
    const CatalogFile& file = catalog->files()[f];
    FileDescription described;
    described.path = file.display_path;
    described.size = file.size;
    described.rows = file.metadata->num_rows();
    described.num_row_groups = file.metadata->num_row_groups();
    out.files.push_back(std::move(described));
    for (int rg = 0; rg < file.metadata->num_row_groups(); ++rg) {
      auto row_group = file.metadata->RowGroup(rg);
      RowGroupDescription group;
      group.file = static_cast<int>(f);
      group.index = rg;
      group.rows = row_group->num_rows();
      group.bytes = row_group->total_byte_size();
      for (int c = 0; c < row_group->num_columns(); ++c) {
        group.compressed_bytes += row_group->ColumnChunk(c)->total_compressed_size();
      }
      out.row_groups.push_back(group);
    }
  }

  // A user transform is run once, on the first rows: its outputs are the columns.
  std::shared_ptr<arrow::Schema> transform_schema;
  if (options.columns.user_transform) {
    STOKER_ASSIGN_OR_RAISE(transform_schema,
                           ProbeUserTransform(*catalog, *options.columns.user_transform,
                                              options.columns.transform_columns));
  }
  // Each column is resolved with its own per-column options only (ResolveColumnAlone), so a
  // name that matches no column would go unreported: Loader raises for it, and so does this.
  for (const auto& [key, unused] : options.columns.column_options) {
    const std::string top = key.substr(0, key.find('.'));
    const bool known = catalog->schema()->GetFieldIndex(top) >= 0 ||
                       (transform_schema && transform_schema->GetFieldIndex(top) >= 0) ||
                       options.columns.transforms.contains(key) ||
                       options.columns.transform_outputs.contains(key);
    if (!known) {
      return MakeError(ErrorKind::kInvalidOption, "a per-column option names column '" + key +
                                                      "', which is not a column of the dataset");
    }
  }
  const std::vector<FeatureGroup> groups = EffectiveFeatureGroups(options.columns);
  if (options.columns.columns.empty() && groups.empty()) {
    std::vector<std::string> names;
    if (transform_schema) {
      for (const auto& field : transform_schema->fields()) names.push_back(field->name());
      for (int i = catalog->num_file_fields(); i < catalog->schema()->num_fields(); ++i) {
        names.push_back(catalog->schema()->field(i)->name());
      }
    } else {
      for (const auto& field : catalog->schema()->fields()) names.push_back(field->name());
    }
    for (const auto& name : names) {
      for (auto& column : DescribeColumn(*catalog, options, transform_schema, name, false)) {
        out.columns.push_back(std::move(column));
      }
    }
  } else {
    // A struct parent is described leaf by leaf, each with its own footer facts.
    const arrow::Schema& schema = transform_schema ? *transform_schema : *catalog->schema();
    // Each leaf once: columns=["image", "image.path"] with transforms on the struct "image"
    // names image.path twice (its chain reads image.bytes alone, resolve_columns.h).
    std::set<std::string> described;
    for (const auto& name : ExpandParents(schema, options.columns.columns)) {
      if (!described.insert(name).second) continue;
      for (auto& column : DescribeColumn(*catalog, options, transform_schema, name, false)) {
        out.columns.push_back(std::move(column));
      }
    }
    for (const auto& group : groups) {
      for (const auto& name : ExpandParents(schema, group.columns)) {
        for (auto& column : DescribeColumn(*catalog, options, transform_schema, name, true)) {
          out.columns.push_back(std::move(column));
        }
      }
    }
  }
  return out;
}

}  // namespace stoker
