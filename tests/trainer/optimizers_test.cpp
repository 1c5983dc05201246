// The trainer's optimizers (trainer/optimizers.h) give the same bits on
// every architecture: the same golden CRCs on x86-64, aarch64, armhf and
// s390x (this test runs on each under qemu). Against LibTorch's own
// optimizers: tests/trainer/optimizers_torch_test.cpp.
#include "ferry/trainer/optimizers.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "exact_values.h"

namespace ferry::trainer {
namespace {

using test::crc_le;
using test::value_from;

// 300 steps of one configuration over 4099 values; the CRC of the
// parameters and then of every state tensor.
std::uint32_t run(const optimizer_options& o) {
  constexpr std::size_t n = 4099;  // not a multiple of any vector width
  std::mt19937 gen(20261127);
  std::vector<float> p(n), g(n);
  for (auto& x : p) x = value_from(gen());
  std::vector<std::vector<float>> state(state_names(o).size(), std::vector<float>(n));
  std::vector<std::span<float>> spans(state.begin(), state.end());
  for (int step = 1; step <= 300; ++step) {
    for (auto& x : g) x = value_from(gen());
    optimizer_step(p, g, spans, step, o);
  }
  std::uint32_t crc = crc_le(p);
  for (const auto& s : state) crc = crc_le(s, crc);
  return crc;
}

optimizer_options with(optimizer_kind k, void (*edit)(optimizer_options&) = nullptr) {
  auto o = defaults(k);
  if (edit != nullptr) edit(o);
  return o;
}

TEST(Optimizers, NamesAndLibTorchDefaults) {
  for (const auto k : all_optimizers) EXPECT_EQ(optimizer_from_name(name(k)), k);
  EXPECT_FALSE(optimizer_from_name("Adam"));
  EXPECT_EQ(defaults(optimizer_kind::adamw).weight_decay, 1e-2);
  EXPECT_EQ(defaults(optimizer_kind::adam).weight_decay, 0.0);
  EXPECT_EQ(defaults(optimizer_kind::rmsprop).lr, 1e-2);
  EXPECT_EQ(defaults(optimizer_kind::rmsprop).alpha, 0.99);
  EXPECT_EQ(state_names(defaults(optimizer_kind::sgd)).size(), 0u);
  EXPECT_EQ(state_names(with(optimizer_kind::rmsprop, [](optimizer_options& o) {
              o.momentum = 0.9;
              o.centered = true;
            })),
            (std::vector<std::string_view>{"square_avg", "momentum_buffer", "grad_avg"}));
  EXPECT_FALSE(invalid(defaults(optimizer_kind::sgd)));
  auto bad = defaults(optimizer_kind::sgd);
  bad.nesterov = true;
  EXPECT_EQ(invalid(bad), "Nesterov momentum needs a momentum above 0 and zero dampening");
  bad.lr = -1;
  EXPECT_TRUE(invalid(bad));
}

TEST(Optimizers, SgdWithMomentumStartsFromTheGradient) {
  // PyTorch's buffer is the first step's gradient (not momentum * 0 + (1 -
  // dampening) * g), then buf * momentum + (1 - dampening) * g.
  auto o = defaults(optimizer_kind::sgd);
  o.lr = 0.5;
  o.momentum = 0.5;
  o.dampening = 0.5;
  std::vector<float> p{1.0f}, g{2.0f}, buf{0.0f};
  std::vector<std::span<float>> s{buf};
  optimizer_step(p, g, s, 1, o);
  EXPECT_EQ(buf[0], 2.0f);
  EXPECT_EQ(p[0], 0.0f);
  optimizer_step(p, g, s, 2, o);
  EXPECT_EQ(buf[0], 2.0f);  // 2 * 0.5 + 2 * 0.5
  EXPECT_EQ(p[0], -1.0f);
}

TEST(Optimizers, AdamwDecaysTheParameterNotTheGradient) {
  auto o = defaults(optimizer_kind::adamw);
  o.lr = 0.1;
  o.weight_decay = 0.5;
  std::vector<float> p{2.0f}, g{0.0f}, m(1), v(1);
  std::vector<std::span<float>> s{m, v};
  optimizer_step(p, g, s, 1, o);
  EXPECT_EQ(p[0], 2.0f * static_cast<float>(1 - 0.05));  // zero gradient: only the decay
  EXPECT_EQ(m[0], 0.0f);
}

// The golden values were computed on x86-64; every other architecture must
// print the same. A change of a formula changes them on purpose only.
TEST(Optimizers, SameBitsOnEveryArchitecture) {
  const std::vector<std::pair<std::string, optimizer_options>> cases{
      {"adamw", with(optimizer_kind::adamw)},
      {"sgd", with(optimizer_kind::sgd, [](optimizer_options& o) { o.weight_decay = 1e-3; })},
      {"sgd momentum", with(optimizer_kind::sgd, [](optimizer_options& o) {
         o.momentum = 0.9;
         o.dampening = 0.1;
       })},
      {"sgd nesterov", with(optimizer_kind::sgd, [](optimizer_options& o) {
         o.momentum = 0.9;
         o.nesterov = true;
         o.weight_decay = 1e-4;
       })},
      {"rmsprop", with(optimizer_kind::rmsprop)},
      {"rmsprop centered momentum", with(optimizer_kind::rmsprop, [](optimizer_options& o) {
         o.momentum = 0.9;
         o.centered = true;
         o.weight_decay = 1e-2;
       })},
  };
  const std::vector<std::uint32_t> golden{0xcd1919cfu, 0x7748693cu, 0xbf4f3eb4u, 0x7dd6b95cu, 0xfb3cefddu, 0xdb14e62au};
  std::vector<std::uint32_t> got;
  for (const auto& [label, o] : cases) got.push_back(run(o));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(got[i], golden[i]) << cases[i].first << ": 0x" << std::hex << got[i];
  }
}

}  // namespace
}  // namespace ferry::trainer
