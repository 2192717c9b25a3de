// Strict UTF-8 validation: what Python's decoder accepts (no overlong forms, surrogates or code
// points past U+10FFFF). Column names and vocabulary files become Python str.
#pragma once

#include <string_view>

namespace stoker {

bool IsValidUtf8(std::string_view text);

}  // namespace stoker
