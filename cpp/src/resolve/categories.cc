#include "resolve/categories.h"

namespace stoker {

Status ResolveCategory(const Catalog& catalog, const std::vector<std::string>& given,
                       bool transformed, bool user_transform, ColumnSpec* spec,
                       std::map<std::string, std::shared_ptr<const Vocabulary>>* vocabularies) {
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
    } else {
      STOKER_ASSIGN_OR_RAISE(vocabulary, BuildVocabulary(catalog, name));
    }
  }
  spec->vocabulary = vocabulary;
  spec->kind = ColumnKind::kDense;
  if (!partition) spec->layout = SourceLayout::kFixed;
  spec->source_dtype = spec->dtype = DType::kInt64;
  spec->annotation = "category";
  return Status::OK();
}

}  // namespace stoker
