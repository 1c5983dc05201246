// Error-feedback residuals carried to a job of another size (residual.h).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ferry/trainer/residual.h"

namespace ferry::trainer {
namespace {

TEST(CarryResiduals, SameWorldKeepsEachRanksRow) {
  const std::vector<float> saved{1, 2, 3, 4, 5, 6};
  EXPECT_EQ(carry_residuals(saved, 2, 3, 2), saved);
}

TEST(CarryResiduals, AnotherWorldStartsEveryRankFromTheMean) {
  // 4 ranks x 2 columns -> 3 ranks: the mean row, three times.
  const std::vector<float> saved{1, -8, 2, 0.5f, 4, 0, 1, 0};
  const std::vector<float> want{2, -1.875f, 2, -1.875f, 2, -1.875f};
  EXPECT_EQ(carry_residuals(saved, 4, 2, 3), want);
  // The mean the averaged gradient receives is unchanged.
  const auto one = carry_residuals(saved, 4, 2, 1);
  EXPECT_EQ(one, (std::vector<float>{2, -1.875f}));
}

TEST(CarryResiduals, SummedInDoubleAndRoundedOnce) {
  // In float, 1e8 + 1 + 1 - 1e8 loses both ones; in double it does not.
  const std::vector<float> saved{1e8f, 1, 1, -1e8f};
  const auto got = carry_residuals(saved, 4, 1, 2);
  EXPECT_EQ(got, (std::vector<float>{0.5f, 0.5f}));
  // Signed zeros and subnormals survive a world of one.
  const float tiny = std::numeric_limits<float>::denorm_min();
  const auto kept = carry_residuals(std::vector<float>{-0.f, tiny}, 1, 2, 1);
  EXPECT_TRUE(std::signbit(kept[0]));
  EXPECT_EQ(kept[1], tiny);
}

}  // namespace
}  // namespace ferry::trainer
