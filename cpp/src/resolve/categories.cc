#include "resolve/categories.h"

#include <arrow/type.h>

#include <algorithm>

namespace stoker {
namespace {

bool IsStringType(const arrow::DataType& type) {
  return type.id() == arrow::Type::STRING || type.id() == arrow::Type::LARGE_STRING;
}

}  // namespace

BuiltVocabularies BuildAutoVocabularies(const Catalog& catalog, const ColumnsOptions& options,
                                        int num_threads) {
  std::vector<std::string> fields;
  if (!options.user_transform) {
    for (const auto& [name, given] : options.categories) {
      if (!given.empty() || options.transforms.contains(name) ||
          options.transform_outputs.contains(name) || !catalog.Conflict(name).empty()) {
        continue;
      }
      const int index = catalog.schema()->GetFieldIndex(name);
      if (index < 0 || index >= catalog.num_file_fields()) continue;
      const auto& type = *catalog.schema()->field(index)->type();
      const bool text =
          IsStringType(type) ||
          (type.id() == arrow::Type::DICTIONARY &&
           IsStringType(*static_cast<const arrow::DictionaryType&>(type).value_type()));
      const std::string& field = name;  // a lambda cannot capture a structured binding (clang)
      const bool everywhere =
          std::all_of(catalog.files().begin(), catalog.files().end(),
                      [&](const CatalogFile& file) { return file.fields.contains(field); });
      if (text && everywhere) fields.push_back(name);
    }
  }
  BuiltVocabularies out;
  auto results = BuildVocabularies(catalog, fields, num_threads);
  for (size_t i = 0; i < fields.size(); ++i) out.emplace(fields[i], std::move(results[i]));
  return out;
}

Status ResolveCategory(const Catalog& catalog, const std::vector<std::string>& given,
                       bool transformed, bool user_transform, ColumnSpec* spec,
                       std::map<std::string, std::shared_ptr<const Vocabulary>>* vocabularies,
                       const BuiltVocabularies* built) {
  const std::string& name = spec->name;
  const bool partition = spec->layout == SourceLayout::kPartition;
  if (!partition && (spec->layout != SourceLayout::kString || spec->annotation != "utf8")) {
    return MakeError(ErrorKind::kUnsupportedType,
                     "categories['" + name + "']: column '" + name + "' has type " +
                         spec->arrow_type +
                         "; categories apply to string, large_string and dictionary<string> "
                         "columns and to hive partition columns");
  }
  if (transformed) {
    return MakeError(ErrorKind::kInvalidOption,
                     "column '" + name +
                         "' is in both categories and transforms; use one (the vocabulary op "
                         "of transforms, or categories)");
  }
  std::shared_ptr<const Vocabulary>& vocabulary = (*vocabularies)[name];
  if (!vocabulary) {
    if (!given.empty()) {
      STOKER_ASSIGN_OR_RAISE(vocabulary, Vocabulary::Make(given, Vocabulary::Origin::kGiven, name));
    } else if (partition) {
      STOKER_ASSIGN_OR_RAISE(
          vocabulary,
          BuildPartitionVocabulary(catalog, spec->field_index - catalog.num_file_fields()));
    } else if (user_transform) {
      return MakeError(ErrorKind::kInvalidOption,
                       "categories['" + name +
                           "'] = 'auto' on an output of transform=: give the vocabulary (a "
                           "list or a file)");
    } else if (auto ahead = built ? built->find(name) : BuiltVocabularies::const_iterator();
               built && ahead != built->end()) {
      STOKER_ASSIGN_OR_RAISE(vocabulary, ahead->second);
    } else {
      STOKER_ASSIGN_OR_RAISE(vocabulary, BuildVocabulary(catalog, name));
    }
  }
  spec->vocabulary = vocabulary;
  spec->kind = ColumnKind::kDense;
  if (!partition) spec->layout = SourceLayout::kFixed;
  // Delivered as int64; a file column's ids are decoded (and cached) in the narrowest type that
  // holds them (Vocabulary::IdDType) and widened by the writer. A partition column's id is one
  // int64 per file (Decoder::Join).
  spec->dtype = DType::kInt64;
  spec->source_dtype = partition ? DType::kInt64 : vocabulary->IdDType();
  spec->annotation = "category";
  return Status::OK();
}

}  // namespace stoker
