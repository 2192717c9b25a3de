// Redaction: how stoker shows a source URI in any text it writes.
//
// The engine's messages, the CLI, the benchmark reports and the Python front all show sources
// through RedactUri, so that credentials given in a URI never leave the process.
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

namespace stoker {

/// Returns `uri_or_path` without user info (`KEY:SECRET@`) or query string (`?secret_key=...`),
/// safe to show. Local paths are returned unchanged.
std::string RedactUri(const std::string& uri_or_path);

/// Replaces every occurrence of each non-empty string of `secrets` in `text` with "***".
std::string RedactSecrets(std::string text, const std::vector<std::string>& secrets);

}  // namespace stoker
