// Redaction: how stoker shows a source URI, and any text that may hold credentials.
//
// The engine's messages, the CLI, the benchmark reports and the Python front all go through these
// two functions (Python's stoker._redact calls them), so there is one rule and credentials never
// leave the process. Redaction goes by structure, never by substring: a short secret that also
// occurs inside an ordinary word ("b" in "bucket", "test" in "test-data") leaves the word alone.
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

namespace stoker {

/// Returns `uri_or_path` without user info (`KEY:SECRET@`) or query string (`?secret_key=...`),
/// safe to show. Local paths are returned unchanged.
std::string RedactUri(const std::string& uri_or_path);

/// Returns `text` (an error, a log line, a report field) with credentials replaced by "***":
///  1. every URI in it (`scheme://...` up to white space, a quote, `<`, `>`, `|` or a backtick)
///     as RedactUri shows it;
///  2. the value of every credential parameter, `name=value` (URI query or `key = value` config
///     style) or `'name': 'value'` (a dict or JSON), whatever the value is; the names are
///     secret_key, session_token, password, token, X-Amz-Signature, X-Amz-Credential,
///     X-Amz-Security-Token and the like (case-insensitive; kCredentialNames in uri.cc);
///  3. each non-empty string of `secrets` (the option values known to be secret) wherever it
///     stands as a whole token: not where a letter, digit, '_' or '-' continues it on either side,
///     nor a '.' or '/' followed (before it: preceded) by one of those, as in "test.parquet" or
///     "bucket/test/x". A side of the secret that is not itself a letter, digit, '_' or '-' needs
///     no delimiter.
std::string RedactSecrets(std::string text, const std::vector<std::string>& secrets);

}  // namespace stoker
