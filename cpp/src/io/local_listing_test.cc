#include "io/local_listing.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace stoker {
namespace {

class LocalListing : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/stoker-listing-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
  }
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf '" + root_ + "'").c_str()), 0); }
  void File(const std::string& relative) { std::ofstream(root_ + "/" + relative) << "x"; }
  void Dir(const std::string& relative) {
    ASSERT_EQ(mkdir((root_ + "/" + relative).c_str(), 0755), 0);
  }
  void Link(const std::string& target, const std::string& relative) {
    ASSERT_EQ(symlink(target.c_str(), (root_ + "/" + relative).c_str()), 0);
  }
  std::vector<std::string> Paths(const std::vector<LocalEntry>& entries) {
    std::vector<std::string> out;
    for (const auto& entry : entries) {
      out.push_back(entry.path.substr(root_.size() + 1) + (entry.broken_link ? " (broken)" : ""));
    }
    return out;
  }
  std::string root_;
};

TEST_F(LocalListing, LoopsAndRepeatedFoldersAreEnteredOnce) {
  Dir("d");
  File("d/a.parquet");
  Link(".", "d/again");  // a loop to itself
  Link("..", "d/up");    // a loop to the parent
  Dir("e");
  Link("../d", "e/to_d");  // a second path to d
  auto listed = ListLocalTree(root_);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(Paths(*listed), (std::vector<std::string>{"d/a.parquet"}));
  EXPECT_EQ((*listed)[0].real_path, RealPath(root_) + "/d/a.parquet");
}

TEST_F(LocalListing, FileLinksKeepTheirPathAndResolveTheirRealPath) {
  File("a.parquet");
  Link("a.parquet", "b.parquet");
  Link("missing.parquet", "lost.parquet");
  Link("self.parquet", "self.parquet");
  auto listed = ListLocalTree(root_);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(Paths(*listed),
            (std::vector<std::string>{"a.parquet", "b.parquet", "lost.parquet (broken)",
                                      "self.parquet (broken)"}));
  EXPECT_EQ((*listed)[0].real_path, (*listed)[1].real_path);
  EXPECT_EQ((*listed)[1].size, 1);
  EXPECT_EQ((*listed)[2].link_target, "missing.parquet");
}

TEST_F(LocalListing, AnUnreadableFolderIsAnError) {
  EXPECT_FALSE(ListLocalTree(root_ + "/no-such-folder").ok());
}

}  // namespace
}  // namespace stoker
