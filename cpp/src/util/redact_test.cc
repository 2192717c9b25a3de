// Redaction by structure (issue 22): URI user info and query strings, credential parameters'
// values, and known secrets as whole tokens only, never inside the message's own words.
#include "stoker/redact.h"

#include <gtest/gtest.h>

namespace stoker {
namespace {

TEST(RedactSecrets, ShortSecretsInsideWordsAreLeftAlone) {
  const std::string message =
      "When getting information for key 'ds/part-0.parquet' in bucket 'bucket-data': AWS Error "
      "NO_SUCH_BUCKET during HeadObject operation: The specified bucket does not exist";
  for (const char* secret : {"b", "e", "t", "a", "ck", "test", "data", "Head", "Obj", "pa"}) {
    EXPECT_EQ(RedactSecrets(message, {secret}), message) << secret;
  }
  EXPECT_EQ(RedactSecrets("in bucket 'test-data'", {"test"}), "in bucket 'test-data'");
  EXPECT_EQ(RedactSecrets("read test.parquet and a/test/b", {"test"}),
            "read test.parquet and a/test/b");
}

TEST(RedactSecrets, WholeTokensAreRedacted) {
  EXPECT_EQ(RedactSecrets("a sekret and sekret", {"sekret", ""}), "a *** and ***");
  EXPECT_EQ(RedactSecrets("denied for b.", {"b"}), "denied for ***.");
  EXPECT_EQ(RedactSecrets("{'secret_key': 'b', 'region': 'x'}", {"b"}),
            "{'secret_key': '***', 'region': 'x'}");
  EXPECT_EQ(RedactSecrets("(b)", {"b"}), "(***)");
  EXPECT_EQ(RedactSecrets("b", {"b"}), "***");
  // Secrets with '/' and '+' inside (AWS keys) and '=' at their end (base64 tokens).
  EXPECT_EQ(RedactSecrets("key wJal/K7+MDENG= used", {"wJal/K7+MDENG="}), "key *** used");
}

TEST(RedactSecrets, UrisAndCredentialParametersGoWhateverTheValue) {
  EXPECT_EQ(RedactSecrets("cannot open 's3://AKIA:b@bucket/ds?region=x' now", {}),
            "cannot open 's3://bucket/ds' now");
  EXPECT_EQ(RedactSecrets("GET /bucket/key?X-Amz-Signature=abc123&X-Amz-Credential=AKIA/2024 "
                          "failed",
                          {}),
            "GET /bucket/key?X-Amz-Signature=***&X-Amz-Credential=*** failed");
  EXPECT_EQ(RedactSecrets("x-amz-security-token=FwoG/zz== sent", {}),
            "x-amz-security-token=*** sent");
  EXPECT_EQ(RedactSecrets("{\"session_token\": \"abc\", \"scheme\": \"http\"}", {}),
            "{\"session_token\": \"***\", \"scheme\": \"http\"}");
  EXPECT_EQ(RedactSecrets("storage_options(secret_key='abc', region='r')", {}),
            "storage_options(secret_key='***', region='r')");
  EXPECT_EQ(RedactSecrets("aws_secret_access_key = abc\nregion = r", {}),
            "aws_secret_access_key = ***\nregion = r");
  // Names inside longer names, and mentions without a value, stay.
  EXPECT_EQ(RedactSecrets("my_token=1 and storage_options['secret_key'] applies", {}),
            "my_token=1 and storage_options['secret_key'] applies");
}

TEST(RedactUri, ContainerIsNotUserInfo) {
  EXPECT_EQ(RedactUri("s3://KEY:SECRET@bucket/ds?secret_key=x&region=y"), "s3://bucket/ds");
  EXPECT_EQ(RedactUri("abfs://container@account.dfs.core.windows.net/p"),
            "abfs://container@account.dfs.core.windows.net/p");
  EXPECT_EQ(RedactUri("/local/path?x"), "/local/path?x");
}

}  // namespace
}  // namespace stoker
