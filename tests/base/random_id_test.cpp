#include "ferry/base/random_id.h"

#include <gtest/gtest.h>

#include <set>

namespace ferry::base {
namespace {

TEST(RandomHexId, SixteenLowercaseHexDigitsThatDiffer) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string id = random_hex_id();
    ASSERT_EQ(id.size(), 16u) << id;
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 100u);
}

}  // namespace
}  // namespace ferry::base
