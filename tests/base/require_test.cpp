#include "ferry/base/require.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace ferry {
namespace {

result<int, error> check_extent(std::uint32_t extent, unsigned k, int* evaluated) {
  FERRY_REQUIRE(extent != 0, errc::bad_value, "extent ", k, " is 0", (++*evaluated, ""));
  FERRY_REQUIRE(extent <= 10, errc::limit_exceeded, "extent ", k, " is ", extent, "; the limit is ", 10);
  return static_cast<int>(extent);
}

TEST(Require, ReturnsTheValuesJoinedOnlyWhenTheConditionFails) {
  int evaluated = 0;
  EXPECT_EQ(*check_extent(3, 1, &evaluated), 3);
  EXPECT_EQ(evaluated, 0);  // the context is not built on success
  const auto zero = check_extent(0, 2, &evaluated);
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error().code(), errc::bad_value);
  EXPECT_EQ(zero.error().context(), "extent 2 is 0");
  EXPECT_EQ(evaluated, 1);
  const auto big = check_extent(4000000000u, 7, &evaluated);
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code(), errc::limit_exceeded);
  EXPECT_EQ(big.error().context(), "extent 7 is 4000000000; the limit is 10");
}

TEST(Require, JoinsAsStdToStringWould) {
  const std::string name = "a\nb";
  EXPECT_EQ(context("offset ", std::size_t{12}, ": global ", quote(name)), "offset 12: global 'a\\nb'");
  // Bytes read from input print as numbers; char prints as itself.
  EXPECT_EQ(context(std::uint8_t{255}, ' ', std::int8_t{-1}, ' ', 'x'), "255 -1 x");
  EXPECT_EQ(context(std::int64_t{INT64_MIN}), std::to_string(INT64_MIN));
  EXPECT_EQ(context(UINT64_MAX), std::to_string(UINT64_MAX));
  EXPECT_EQ(context(std::string_view("view"), std::string("string")), "viewstring");
  EXPECT_EQ(context(), "");
  EXPECT_EQ(make_error(errc::truncated, "at ", 3).context(), "at 3");
  EXPECT_EQ(make_error(errc::truncated).context(), "");
}

result<void, error> without_values(bool ok) {
  FERRY_REQUIRE(ok, errc::trailing_bytes);
  return {};
}

TEST(Require, WorksWithoutValues) {
  EXPECT_TRUE(without_values(true));
  EXPECT_EQ(without_values(false).error().code(), errc::trailing_bytes);
  EXPECT_EQ(without_values(false).error().context(), "");
}

}  // namespace
}  // namespace ferry
