// The trainer's Adam step gives the same bits on every architecture: the
// same golden CRC on x86-64, aarch64, armhf and s390x (this test runs on
// each under qemu), and the formula is PyTorch's.
#include "ferry/trainer/adam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "exact_values.h"

namespace ferry::trainer {
namespace {

using test::crc_le;
using test::value_from;

TEST(Adam, PowerIsExactRepeatedSquaring) {
  EXPECT_EQ(power(0.9, 0), 1.0);
  EXPECT_EQ(power(0.9, 1), 0.9);
  EXPECT_EQ(power(0.9, 2), 0.9 * 0.9);
  EXPECT_EQ(power(0.5, 10), 1.0 / 1024);
  EXPECT_NEAR(power(0.999, 1000), std::pow(0.999, 1000), 1e-14);  // 1e-14 relative: a few roundings
}

TEST(Adam, FirstStepMovesEachParameterByLr) {
  // At t = 1, m / denom = g / (|g| + eps * ...) ~ sign(g): Adam's known
  // first step of size lr.
  std::vector<float> p{1.0f, -2.0f, 0.5f}, g{0.25f, -4.0f, 0.0f}, m(3), v(3);
  adam_step(p, g, m, v, 1, {.lr = 0.01});
  EXPECT_NEAR(p[0], 0.99f, 1e-6f);
  EXPECT_NEAR(p[1], -1.99f, 1e-6f);
  EXPECT_EQ(p[2], 0.5f);  // zero gradient: no move
}

TEST(Adam, WeightDecayAddsToTheGradient) {
  std::vector<float> p{2.0f}, g{0.0f}, m(1), v(1);
  adam_step(p, g, m, v, 1, {.lr = 0.1, .weight_decay = 0.5});
  EXPECT_NEAR(p[0], 1.9f, 1e-6f);
}

// The golden value was computed on x86-64; every other architecture must
// print the same. A change of the formula changes it on purpose only.
TEST(Adam, SameBitsOnEveryArchitecture) {
  constexpr std::size_t n = 4099;  // not a multiple of any vector width
  std::mt19937 gen(20261123);
  std::vector<float> p(n), m(n), v(n), g(n);
  for (auto& x : p) x = value_from(gen());
  for (int step = 1; step <= 300; ++step) {
    for (auto& x : g) x = value_from(gen());
    adam_step(p, g, m, v, step, {.lr = 1e-3, .weight_decay = step % 2 ? 0.0 : 1e-2});
  }
  const auto crcs = std::vector<std::uint32_t>{crc_le(p), crc_le(m), crc_le(v)};
  EXPECT_EQ(crcs, (std::vector<std::uint32_t>{0xdaf4c3aeu, 0x139e63f8u, 0xfa168a58u})) << std::hex << crcs[0] << " " << crcs[1] << " " << crcs[2];
}

}  // namespace
}  // namespace ferry::trainer
