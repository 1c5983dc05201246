// Set indexes that name an index as a shard (themselves, or each other,
// .ferry or Hugging Face JSON) are refused with one bad_shard line, never
// opened recursively.
#include <gtest/gtest.h>

#include <fstream>

#include "ferry/checkpoint/reader.h"
#include "ferry/checkpoint/set.h"
#include "helpers.h"

namespace ferry::checkpoint::testing {
namespace {

class SetRecursion : public scratch_dir {
 protected:
  // An index at `at` whose one shard is the file `names`.
  void index_naming(const fs::path& at, const std::string& names) {
    shard_record r;
    r.file = names;
    r.size = 1;
    r.pieces.push_back({"w", codec::dtype::f32, {4}, 0, 4, 0});
    write_options o;
    o.sync = false;
    ASSERT_TRUE(commit_set(at, "00000000000000aa", 1, std::span(&r, 1), {}, o));
  }
  void expect_refused(const fs::path& p, const std::string& shard) {
    auto r = open(p);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), checkpoint_errc::bad_shard) << r.error();
    const std::string what = r.error().what();
    EXPECT_NE(what.find(shard), std::string::npos) << what;
    EXPECT_NE(what.find("a set's index, not a shard"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
};

TEST_F(SetRecursion, AnIndexNamingItselfIsRefused) {
  index_naming(dir_ / "self.ferry", "self.ferry");
  expect_refused(dir_ / "self.ferry", "self.ferry");
}

TEST_F(SetRecursion, IndexesNamingEachOtherAreRefused) {
  index_naming(dir_ / "a.ferry", "b.ferry");
  index_naming(dir_ / "b.ferry", "a.ferry");
  expect_refused(dir_ / "a.ferry", "b.ferry");
  expect_refused(dir_ / "b.ferry", "a.ferry");
}

TEST_F(SetRecursion, AHuggingFaceIndexNamingAnIndexIsRefused) {
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"metadata": {}, "weight_map": {"w": "model.safetensors.index.json"}})";
  expect_refused(dir_ / "model.safetensors.index.json", "model.safetensors.index.json");
  index_naming(dir_ / "set.ferry", "x.ferry");
  std::ofstream(dir_ / "other.safetensors.index.json") << R"({"weight_map": {"w": "set.ferry"}})";
  expect_refused(dir_ / "other.safetensors.index.json", "set.ferry");
}

}  // namespace
}  // namespace ferry::checkpoint::testing
