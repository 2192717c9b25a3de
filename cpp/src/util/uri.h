// URI helpers shared by io/ (opening filesystems) and the public redaction (stoker/redact.h).
#pragma once

#include <string>

namespace stoker {

/// `s` with ASCII letters lowercased.
std::string LowerAscii(std::string s);

/// The scheme of "scheme://...", lowercased; empty for plain paths (and Windows drive letters).
std::string UriScheme(const std::string& uri);

}  // namespace stoker
