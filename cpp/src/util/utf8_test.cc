#include "util/utf8.h"

#include <gtest/gtest.h>

namespace stoker {
namespace {

TEST(IsValidUtf8, AcceptsWhatPythonDecodesAndNothingElse) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // é € 😀
  EXPECT_FALSE(IsValidUtf8("\xc3"));                                      // truncated
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));                                  // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xe0\x80\xaf"));                              // overlong, 3 bytes
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));                              // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));                          // past U+10FFFF
  EXPECT_FALSE(IsValidUtf8("a\xff"));
  EXPECT_FALSE(IsValidUtf8("\xe2\x28\xa1"));  // bad continuation byte
}

}  // namespace
}  // namespace stoker
