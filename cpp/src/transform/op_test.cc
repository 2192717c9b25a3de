// The op registry's parameter lists: what an unknown parameter's error lists is what each op
// really takes (issue 22: a failing factory used to leave "parameters: none").
#include "transform/op.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace stoker::transform {
namespace {

// One valid parameter set per op: the factory then reads every parameter it takes, defaults
// included, and its fingerprint ("name{key=value,...}@vN") names them all.
const std::map<std::string, Params>& ValidParams() {
  using List = ParamValue::List;
  static const auto* params = new std::map<std::string, Params>{
      {"bucketize", {{"boundaries", List{1.0, 2.0}}}},
      {"cast", {{"dtype", "float32"}}},
      {"center_crop", {{"size", 4}}},
      {"clip", {{"min", 0}}},
      {"decode_image", {}},
      {"decode_npy", {{"dtype", "float32"}, {"shape", List{2}}}},
      {"decode_npz", {{"dtype", "float32"}, {"shape", List{2}}}},
      {"fill_null", {{"value", 0}}},
      {"hash_bucket", {{"num_buckets", 4}}},
      {"horizontal_flip", {}},
      {"log1p", {}},
      {"min_max", {{"min", 0}, {"max", 1}}},
      {"normalize", {{"mean", 0.5}, {"std", 0.25}}},
      {"pad", {{"padding", 1}}},
      {"random_crop", {{"size", 4}}},
      {"random_resized_crop", {{"size", 4}}},
      {"reinterpret", {{"dtype", "float32"}, {"shape", List{2}}}},
      {"resize", {{"size", 4}}},
      {"shape", {}},
      {"standardize", {{"mean", 0}, {"std", 1}}},
      {"to_chw", {}},
      {"vertical_flip", {}},
      {"vocabulary", {{"vocabulary", List{"a", "b"}}}},
  };
  return *params;
}

std::set<std::string> FingerprintKeys(const std::string& fingerprint) {
  std::set<std::string> keys;
  const size_t open = fingerprint.find('{');
  const size_t close = fingerprint.rfind('}');
  std::string body = fingerprint.substr(open + 1, close - open - 1);
  // Values hold no '=' here; keys run from a separator to the next '='.
  size_t from = 0;
  while (from < body.size()) {
    const size_t eq = body.find('=', from);
    if (eq == std::string::npos) break;
    keys.insert(body.substr(from, eq - from));
    int depth = 0;
    size_t at = eq + 1;
    for (; at < body.size(); ++at) {
      if (body[at] == '[') ++depth;
      if (body[at] == ']') --depth;
      if (body[at] == ',' && depth == 0) break;
    }
    from = at + 1;
  }
  return keys;
}

TEST(OpRegistry, DeclaredParametersAreTheFactorysOwn) {
  ASSERT_EQ(ValidParams().size(), OpNames().size());
  for (const std::string& name : OpNames()) {
    SCOPED_TRACE(name);
    auto found = ValidParams().find(name);
    ASSERT_NE(found, ValidParams().end()) << "add a valid parameter set for the new op";
    auto op = MakeOp(name, found->second);
    ASSERT_TRUE(op.ok()) << op.status().ToString();
    const std::vector<std::string> declared = OpParameters(name);
    EXPECT_EQ(FingerprintKeys((*op)->Fingerprint()),
              std::set<std::string>(declared.begin(), declared.end()))
        << (*op)->Fingerprint();
  }
}

TEST(OpRegistry, UnknownParameterListsEveryParameterEvenWhenOthersFail) {
  // resize's factory fails on the missing 'size' before reading anything else.
  auto misspelt = MakeOp("resize", {{"sizee", 3}});
  ASSERT_FALSE(misspelt.ok());
  EXPECT_NE(misspelt.status().message().find(
                "unknown parameter 'sizee' (parameters: size, interpolation, antialias)"),
            std::string::npos)
      << misspelt.status().message();
  EXPECT_EQ(misspelt.status().message().find("none"), std::string::npos);
  auto none = MakeOp("to_chw", {{"sizee", 3}});
  EXPECT_NE(none.status().message().find("unknown parameter 'sizee' (it takes no parameters)"),
            std::string::npos)
      << none.status().message();
  auto after_valid = MakeOp("clip", {{"min", 0}, {"maxx", 1}});
  EXPECT_NE(after_valid.status().message().find("(parameters: min, max)"), std::string::npos)
      << after_valid.status().message();
}

}  // namespace
}  // namespace stoker::transform
