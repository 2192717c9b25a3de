// Feature ops against known answers, and the registry/chain contracts (errors at open time,
// fingerprints, deterministic prefix, nulls).
#include <cmath>
#include <limits>

#include "transform/test_util_internal.h"

namespace stoker::transform {
namespace {

using test_util::MakeChain;
using test_util::RunChain;
using test_util::Spec;

template <typename T>
Value Tensor(const std::vector<T>& values, ElementType type) {
  return Value::TensorView(type, {static_cast<int64_t>(values.size())}, values.data());
}

template <typename Out, typename In>
std::vector<Out> Apply1(const std::vector<Spec>& specs, const std::vector<In>& values,
                        ElementType type, Status* status = nullptr) {
  auto chain = MakeChain(ValueType::Tensor(type, {static_cast<int64_t>(values.size())}), specs);
  EXPECT_TRUE(chain.ok()) << chain.status().ToString();
  if (!chain.ok()) return {};
  Value out;
  const Status st = RunChain(*chain, Tensor(values, type), &out);
  if (status != nullptr) *status = st;
  if (!st.ok()) return {};
  return std::vector<Out>(out.as<Out>(), out.as<Out>() + out.num_elements());
}

TEST(Cast, ExactCastsPassLossyOnesNeedTheFlag) {
  EXPECT_EQ((Apply1<int32_t, double>({{"cast", {{"dtype", "int32"}}}}, {1.0, -2.0, 3e9 / 3e9},
                                     ElementType::kFloat64)),
            (std::vector<int32_t>{1, -2, 1}));
  Status status;
  Apply1<uint8_t, int32_t>({{"cast", {{"dtype", "uint8"}}}}, {1, 300}, ElementType::kInt32,
                           &status);
  EXPECT_EQ(GetErrorKind(status), ErrorKind::kLossyCast) << status.ToString();
  EXPECT_NE(status.message().find("300"), std::string::npos);
  EXPECT_EQ((Apply1<uint8_t, int32_t>({{"cast", {{"dtype", "uint8"}, {"lossy", true}}}},
                                      {1, 300, -5}, ElementType::kInt32)),
            (std::vector<uint8_t>{1, 255, 0}));
  Apply1<int64_t, double>({{"cast", {{"dtype", "int64"}}}}, {1.5}, ElementType::kFloat64, &status);
  EXPECT_EQ(GetErrorKind(status), ErrorKind::kLossyCast);
  EXPECT_EQ((Apply1<int64_t, double>({{"cast", {{"dtype", "int64"}, {"lossy", true}}}},
                                     {1.9, -1.9, std::nan("")}, ElementType::kFloat64)),
            (std::vector<int64_t>{1, -1, 0}));
  // int64 extremes survive (no detour through double).
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(
      (Apply1<int64_t, int64_t>({{"cast", {{"dtype", "int64"}}}}, {big}, ElementType::kInt64)),
      (std::vector<int64_t>{big}));
  EXPECT_EQ((Apply1<float, int32_t>({{"cast", {{"dtype", "float32"}}}}, {3}, ElementType::kInt32)),
            (std::vector<float>{3.0f}));
}

TEST(FeatureOps, KnownAnswers) {
  EXPECT_EQ((Apply1<double, double>({{"clip", {{"min", 0}, {"max", 1.5}}}}, {-1, 0.5, 7},
                                    ElementType::kFloat64)),
            (std::vector<double>{0, 0.5, 1.5}));
  EXPECT_EQ((Apply1<int32_t, int32_t>({{"clip", {{"max", 3}}}}, {-9, 9}, ElementType::kInt32)),
            (std::vector<int32_t>{-9, 3}));
  const auto logs = Apply1<float, int32_t>({{"log1p", {}}}, {0, 1, 9}, ElementType::kInt32);
  EXPECT_FLOAT_EQ(logs[1], std::log(2.0f));
  EXPECT_FLOAT_EQ(logs[2], std::log(10.0f));
  EXPECT_EQ((Apply1<double, double>({{"standardize", {{"mean", 10}, {"std", 2}}}}, {10, 14, 6},
                                    ElementType::kFloat64)),
            (std::vector<double>{0, 2, -2}));
  EXPECT_EQ((Apply1<float, int16_t>({{"min_max", {{"min", 0}, {"max", 200}}}}, {0, 50, 400},
                                    ElementType::kInt16)),
            (std::vector<float>{0, 0.25f, 2.0f}));
  EXPECT_EQ((Apply1<float, int16_t>({{"min_max", {{"min", 0}, {"max", 200}, {"clip", true}}}},
                                    {400}, ElementType::kInt16)),
            (std::vector<float>{1.0f}));
  // boundaries [0, 10, 20]: x < 0 -> 0, 0 <= x < 10 -> 1, ..., x >= 20 -> 3.
  EXPECT_EQ((Apply1<int64_t, double>({{"bucketize", {{"boundaries", ParamValue::List{0, 10, 20}}}}},
                                     {-5, 0, 9.9, 10, 25}, ElementType::kFloat64)),
            (std::vector<int64_t>{0, 1, 1, 2, 3}));
}

int64_t ApplyText(const Spec& spec, const std::string& text) {
  auto chain = MakeChain(ValueType::String(), {spec});
  EXPECT_TRUE(chain.ok()) << chain.status().ToString();
  Value out;
  EXPECT_TRUE(
      RunChain(*chain, Value::View(ValueKind::kString, text.data(), text.size()), &out).ok());
  EXPECT_EQ(out.shape(), std::vector<int64_t>{});
  return out.as<int64_t>()[0];
}

TEST(HashBucket, IsFnv1a64OfTheBytesModBuckets) {
  // FNV-1a 64 test vectors: "" -> cbf29ce484222325, "a" -> af63dc4c8601ec8c,
  // "foobar" -> 85944171f73967e8.
  const Spec spec{"hash_bucket", {{"num_buckets", 1000}}};
  EXPECT_EQ(ApplyText(spec, ""), static_cast<int64_t>(0xcbf29ce484222325ULL % 1000));
  EXPECT_EQ(ApplyText(spec, "a"), static_cast<int64_t>(0xaf63dc4c8601ec8cULL % 1000));
  EXPECT_EQ(ApplyText(spec, "foobar"), static_cast<int64_t>(0x85944171f73967e8ULL % 1000));
  // Integers hash their 8 little-endian bytes as int64, whatever the column's integer width.
  const auto as_int64 = Apply1<int64_t, int64_t>({spec}, {0, 42}, ElementType::kInt64);
  const auto as_int16 = Apply1<int64_t, int16_t>({spec}, {0, 42}, ElementType::kInt16);
  EXPECT_EQ(as_int64, as_int16);
  uint64_t zero_hash = 0xcbf29ce484222325ULL;
  for (int i = 0; i < 8; ++i) zero_hash = (zero_hash ^ 0) * 0x100000001b3ULL;
  EXPECT_EQ(as_int64[0], static_cast<int64_t>(zero_hash % 1000));
  auto floats = MakeChain(ValueType::Tensor(ElementType::kFloat32, {}), {spec});
  EXPECT_EQ(GetErrorKind(floats.status()), ErrorKind::kUnsupportedType);
}

TEST(Vocabulary, LooksUpWithAnOutOfVocabularyId) {
  const Spec text{"vocabulary", {{"vocabulary", ParamValue::List{"cat", "dog"}}}};
  EXPECT_EQ(ApplyText(text, "cat"), 0);
  EXPECT_EQ(ApplyText(text, "dog"), 1);
  EXPECT_EQ(ApplyText(text, "emu"), 2);  // default: len(vocabulary)
  const Spec custom{"vocabulary", {{"vocabulary", ParamValue::List{"cat"}}, {"oov_id", -1}}};
  EXPECT_EQ(ApplyText(custom, "emu"), -1);
  EXPECT_EQ((Apply1<int64_t, int32_t>({{"vocabulary", {{"vocabulary", ParamValue::List{7, 3}}}}},
                                      {3, 7, 5}, ElementType::kInt32)),
            (std::vector<int64_t>{1, 0, 2}));
  EXPECT_FALSE(MakeOp("vocabulary", {{"vocabulary", ParamValue::List{"a", "a"}}}).ok());
  EXPECT_FALSE(MakeOp("vocabulary", {{"vocabulary", ParamValue::List{"a", 1}}}).ok());
  auto mismatch = MakeChain(ValueType::Tensor(ElementType::kInt32, {}), {text});
  EXPECT_EQ(GetErrorKind(mismatch.status()), ErrorKind::kUnsupportedType);
}

TEST(FillNull, FillsNullRowsOnly) {
  auto chain = MakeChain(ValueType::Tensor(ElementType::kInt32, {2}),
                         {{"fill_null", {{"value", -1}}}, {"cast", {{"dtype", "int64"}}}});
  ASSERT_TRUE(chain.ok()) << chain.status().ToString();
  Value out;
  ASSERT_OK(RunChain(*chain, Value::Null(), &out));
  EXPECT_EQ(out.as<int64_t>()[0], -1);
  EXPECT_EQ(out.as<int64_t>()[1], -1);
  const std::vector<int32_t> values = {4, 5};
  ASSERT_OK(RunChain(*chain, Tensor(values, ElementType::kInt32), &out));
  EXPECT_EQ(out.as<int64_t>()[1], 5);
  auto text = MakeChain(ValueType::String(), {{"fill_null", {{"value", "?"}}}});
  ASSERT_OK(RunChain(*text, Value::Null(), &out));
  EXPECT_EQ(out.bytes(), "?");
  // Without fill_null a null row is an error naming the fix.
  auto plain = MakeChain(ValueType::Tensor(ElementType::kInt32, {}), {{"log1p", {}}});
  const Status null = RunChain(*plain, Value::Null(), &out);
  EXPECT_EQ(GetErrorKind(null), ErrorKind::kNullValues);
  EXPECT_NE(null.message().find("fill_null"), std::string::npos);
  // A fill value the column cannot hold is an open-time error.
  auto unfit =
      MakeChain(ValueType::Tensor(ElementType::kUInt8, {}), {{"fill_null", {{"value", -1}}}});
  EXPECT_EQ(GetErrorKind(unfit.status()), ErrorKind::kLossyCast);
}

TEST(Registry, UnknownNamesParametersAndTypesAreNamed) {
  auto unknown = MakeOp("sharpen", {});
  EXPECT_EQ(GetErrorKind(unknown.status()), ErrorKind::kInvalidOption);
  EXPECT_NE(unknown.status().message().find("'sharpen'"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("random_resized_crop"), std::string::npos);
  auto extra = MakeOp("log1p", {{"base", 2}});
  EXPECT_NE(extra.status().message().find("unknown parameter 'base'"), std::string::npos)
      << extra.status().message();
  auto wrong_type = MakeOp("resize", {{"size", "big"}});
  EXPECT_NE(wrong_type.status().message().find("parameter 'size'"), std::string::npos);
  EXPECT_NE(wrong_type.status().message().find("got str"), std::string::npos);
  auto missing = MakeOp("standardize", {{"mean", 1}});
  EXPECT_NE(missing.status().message().find("'std' is required"), std::string::npos);
  EXPECT_EQ(OpNames().size(), 23u);
}

TEST(Chain, FirstWrongOpIsNamedWithItsColumn) {
  auto chain = MakeChain(ValueType::Tensor(ElementType::kFloat32, {}),
                         {{"clip", {{"min", 0}}}, {"hash_bucket", {{"num_buckets", 4}}}});
  ASSERT_FALSE(chain.ok());
  EXPECT_EQ(GetErrorKind(chain.status()), ErrorKind::kUnsupportedType);
  EXPECT_NE(chain.status().message().find("column 'col', op 1 'hash_bucket'"), std::string::npos)
      << chain.status().message();
  EXPECT_NE(chain.status().message().find("float32[]"), std::string::npos);
}

TEST(Chain, DeterministicPrefixAndFingerprints) {
  const std::vector<Spec> specs = {{"decode_image", {}},
                                   {"resize", {{"size", 32}}},
                                   {"random_crop", {{"size", 28}}},
                                   {"horizontal_flip", {}},
                                   {"normalize", {{"mean", 0.5}, {"std", 0.5}}}};
  auto chain = MakeChain(ValueType::Bytes(), specs);
  ASSERT_TRUE(chain.ok()) << chain.status().ToString();
  EXPECT_EQ(chain->DeterministicPrefixLength(), 2u);
  EXPECT_EQ(chain->output_type(), ValueType::Tensor(ElementType::kFloat32, {28, 28, 3}));
  // Defaults are part of the fingerprint; a changed parameter changes it.
  EXPECT_NE(chain->op(1).Fingerprint().find("antialias=true"), std::string::npos)
      << chain->op(1).Fingerprint();
  auto other = MakeChain(ValueType::Bytes(), {{"decode_image", {}}, {"resize", {{"size", 33}}}});
  EXPECT_NE(chain->Fingerprint(2), other->Fingerprint());
  auto same = MakeChain(ValueType::Bytes(), {{"decode_image", {{"mode", "RGB"}}},
                                             {"resize", {{"size", 32}, {"antialias", true}}}});
  EXPECT_EQ(chain->Fingerprint(2), same->Fingerprint());
  // 1 and 1.0 are the same parameter.
  auto a = MakeOp("clip", {{"min", 1}});
  auto b = MakeOp("clip", {{"min", 1.0}});
  EXPECT_EQ((*a)->Fingerprint(), (*b)->Fingerprint());
  auto certain = MakeChain(ValueType::Tensor(ElementType::kUInt8, {4, 4, 3}),
                           {{"horizontal_flip", {{"p", 1.0}}}, {"random_crop", {{"size", 2}}}});
  EXPECT_EQ(certain->DeterministicPrefixLength(), 1u);
}

TEST(Chain, RunsASuffixOnACachedPrefix) {
  auto chain = MakeChain(ValueType::Tensor(ElementType::kFloat64, {2}),
                         {{"standardize", {{"mean", 1}, {"std", 2}}}, {"clip", {{"max", 0.4}}}});
  ASSERT_TRUE(chain.ok());
  const std::vector<double> values = {1, 3};
  Value whole, prefix, rest, scratch;
  RowContext ctx;
  ASSERT_OK(chain->Apply(ctx, Tensor(values, ElementType::kFloat64), &whole, &scratch));
  ASSERT_OK(chain->Apply(ctx, Tensor(values, ElementType::kFloat64), &prefix, &scratch, 0, 1));
  ASSERT_OK(chain->Apply(ctx, prefix, &rest, &scratch, 1));
  EXPECT_EQ(test_util::Bytes(whole), test_util::Bytes(rest));
  EXPECT_EQ(whole.as<double>()[1], 0.4);
}

// The columnar kernels give exactly the bytes of Apply row by row, for every element-wise op,
// scalar and tensor rows, a two-op chain, and text and integer lookups.
TEST(Columnar, SameBytesAsRowByRow) {
  const std::vector<float> floats = {-3.5f, 0.0f, 1.25f, 7.0f, 1e30f, -0.1f};
  const std::vector<std::vector<Spec>> float_chains = {
      {{"standardize", {{"mean", 0.5}, {"std", 2.0}}}},
      {{"clip", {{"min", -1}, {"max", 2}}}, {"log1p", {}}},
      {{"min_max", {{"min", -4}, {"max", 8}}}, {"cast", {{"dtype", "float16"}, {"lossy", true}}}},
      {{"bucketize", {{"boundaries", ParamValue::List{-1, 0, 1, 5}}}}},
      {{"cast", {{"dtype", "int32"}, {"lossy", true}}}, {"hash_bucket", {{"num_buckets", 97}}}},
  };
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{}, std::vector<int64_t>{2}}) {
    const int64_t per_row = shape.empty() ? 1 : shape[0];
    const int64_t rows = static_cast<int64_t>(floats.size()) / per_row;
    for (const auto& specs : float_chains) {
      ASSERT_OK_AND_ASSIGN(auto chain,
                           MakeChain(ValueType::Tensor(ElementType::kFloat32, shape), specs));
      ASSERT_TRUE(chain.SupportsColumn(0, chain.size())) << specs[0].name;
      std::vector<uint8_t> expected;
      for (int64_t row = 0; row < rows; ++row) {
        Value out;
        ASSERT_OK(RunChain(
            chain, Value::TensorView(ElementType::kFloat32, shape, floats.data() + row * per_row),
            &out));
        const auto bytes = test_util::Bytes(out);
        expected.insert(expected.end(), bytes.begin(), bytes.end());
      }
      std::vector<uint8_t> got(expected.size()), scratch;
      ASSERT_OK(chain.ApplyColumn(ColumnInput{reinterpret_cast<const uint8_t*>(floats.data())},
                                  rows, got.data(), &scratch, 0, chain.size()));
      EXPECT_EQ(got, expected) << specs[0].name;
    }
  }
  // Strings: hash_bucket and vocabulary over Arrow-style offsets.
  const std::string text = "applepearfig";
  const std::vector<int32_t> offsets = {0, 5, 9, 12, 12};
  for (const auto& specs : std::vector<std::vector<Spec>>{
           {{"hash_bucket", {{"num_buckets", 1 << 20}}}},
           {{"vocabulary", {{"vocabulary", ParamValue::List{"pear", "fig"}}}}}}) {
    ASSERT_OK_AND_ASSIGN(auto chain, MakeChain(ValueType::String(), specs));
    ASSERT_TRUE(chain.SupportsColumn(0, chain.size()));
    std::vector<int64_t> expected;
    for (size_t row = 0; row + 1 < offsets.size(); ++row) {
      Value out;
      ASSERT_OK(RunChain(chain,
                         Value::View(ValueKind::kString, text.data() + offsets[row],
                                     offsets[row + 1] - offsets[row]),
                         &out));
      expected.push_back(*out.as<int64_t>());
    }
    std::vector<int64_t> got(expected.size());
    std::vector<uint8_t> scratch;
    ASSERT_OK(chain.ApplyColumn(
        ColumnInput{reinterpret_cast<const uint8_t*>(text.data()), offsets.data()},
        static_cast<int64_t>(got.size()), reinterpret_cast<uint8_t*>(got.data()), &scratch, 0,
        chain.size()));
    EXPECT_EQ(got, expected) << specs[0].name;
  }
  // A failing element fails the columnar pass (the caller then names the row).
  ASSERT_OK_AND_ASSIGN(auto strict, MakeChain(ValueType::Tensor(ElementType::kFloat32, {}),
                                              {{"cast", {{"dtype", "int32"}}}}));
  std::vector<uint8_t> out(floats.size() * 4), scratch;
  EXPECT_EQ(GetErrorKind(strict.ApplyColumn(
                ColumnInput{reinterpret_cast<const uint8_t*>(floats.data())},
                static_cast<int64_t>(floats.size()), out.data(), &scratch, 0, 1)),
            ErrorKind::kLossyCast);
  // Ops without a kernel (random or image ops) keep the row path.
  ASSERT_OK_AND_ASSIGN(auto image, MakeChain(ValueType::Bytes(), {{"decode_image", {}}}));
  EXPECT_FALSE(image.SupportsColumn(0, 1));
}

// The affine ops' typed column loops (float32, float64, int32, int64 inputs) give the row path's
// bytes, NaN, infinities and integers beyond 2^53 included.
TEST(Columnar, AffineFastPathMatchesRowPath) {
  const std::vector<double> values = {-3.5, 0.0, 1.25, 7.0, 1e30, -0.1, NAN, INFINITY, 12345.678};
  const std::vector<int64_t> ints = {-7, 0, 3, (int64_t{1} << 53) + 1, INT64_MAX, INT64_MIN, 42};
  const std::vector<std::vector<Spec>> chains = {
      {{"standardize", {{"mean", 0.5}, {"std", 3.0}}}},
      {{"log1p", {}}},
      {{"min_max", {{"min", -4}, {"max", 8}}}},
  };
  struct Input {
    ElementType type;
    std::vector<uint8_t> bytes;
    int64_t count;
  };
  std::vector<Input> inputs;
  const auto add = [&inputs](ElementType type, const auto& typed) {
    const auto* p = reinterpret_cast<const uint8_t*>(typed.data());
    inputs.push_back({type, std::vector<uint8_t>(p, p + typed.size() * sizeof(typed[0])),
                      static_cast<int64_t>(typed.size())});
  };
  add(ElementType::kFloat32, std::vector<float>(values.begin(), values.end()));
  add(ElementType::kFloat64, values);
  add(ElementType::kInt32, std::vector<int32_t>{-7, 0, 3, INT32_MAX, INT32_MIN, 99});
  add(ElementType::kInt64, ints);
  for (const Input& input : inputs) {
    for (const auto& specs : chains) {
      ASSERT_OK_AND_ASSIGN(auto chain, MakeChain(ValueType::Tensor(input.type, {}), specs));
      ASSERT_TRUE(chain.SupportsColumn(0, chain.size()));
      std::vector<uint8_t> expected;
      const int size = ElementSize(input.type);
      for (int64_t row = 0; row < input.count; ++row) {
        Value out;
        ASSERT_OK(RunChain(
            chain, Value::TensorView(input.type, {}, input.bytes.data() + row * size), &out));
        const auto bytes = test_util::Bytes(out);
        expected.insert(expected.end(), bytes.begin(), bytes.end());
      }
      std::vector<uint8_t> got(expected.size()), scratch;
      ASSERT_OK(chain.ApplyColumn(ColumnInput{input.bytes.data()}, input.count, got.data(),
                                  &scratch, 0, chain.size()));
      EXPECT_EQ(got, expected) << specs[0].name << " on " << ElementName(input.type);
    }
  }
}

}  // namespace
}  // namespace stoker::transform
