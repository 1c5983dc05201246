#include "ferry/codec/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "../restore_cpu_features.h"
#include "ferry/base/cpu.h"
#include "half_reference.h"

namespace ferry::codec {
namespace {

using base::cpu_feature_set;

float f(std::uint32_t bits) { return std::bit_cast<float>(bits); }
std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }

TEST(ToF16, KnownVectors) {
  const std::pair<float, std::uint16_t> cases[] = {
      {1.0f, 0x3C00},
      {-2.0f, 0xC000},
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {65504.0f, 0x7BFF},                     // max finite
      {65519.99f, 0x7BFF},                    // just below the overflow threshold
      {65520.0f, 0x7C00},                     // halfway to 65536: ties to even, overflows
      {1e9f, 0x7C00},                         // overflow
      {-1e9f, 0xFC00},
      {std::ldexp(1.0f, -14), 0x0400},        // smallest normal
      {std::ldexp(1.0f, -24), 0x0001},        // smallest subnormal
      {std::ldexp(1.0f, -25), 0x0000},        // halfway to the smallest subnormal: to even (zero)
      {std::ldexp(1.5f, -25), 0x0001},        // above halfway
      {std::ldexp(3.0f, -25), 0x0002},        // 1.5 subnormal units: ties to even (2)
      {std::ldexp(5.0f, -25), 0x0002},        // 2.5 units: ties to even (2)
      {1.0f + std::ldexp(1.0f, -11), 0x3C00}, // halfway between 1 and 1+2^-10: down to even
      {1.0f + 3 * std::ldexp(1.0f, -11), 0x3C02},  // halfway, up to even
      {1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20), 0x3C01},  // just above halfway
      {std::ldexp(1023.5f, -24), 0x0400},     // rounds up out of the subnormals
      {6.342e-5f, 0x0428},
      {std::numeric_limits<float>::infinity(), 0x7C00},
      {-std::numeric_limits<float>::infinity(), 0xFC00},
      {f(0x00000001), 0x0000},                // float subnormal
  };
  for (const auto& [x, expected] : cases) {
    EXPECT_EQ(to_f16(x).bits, expected) << std::hexfloat << x;
    EXPECT_EQ(testing::reference_f16(x), expected) << "reference, " << std::hexfloat << x;
  }
}

TEST(ToBf16, KnownVectors) {
  const std::pair<std::uint32_t, std::uint16_t> cases[] = {
      {0x3F800000, 0x3F80},  // 1.0
      {0xBF800000, 0xBF80},
      {0x80000000, 0x8000},  // -0.0
      {0x3F808000, 0x3F80},  // halfway: down to even
      {0x3F818000, 0x3F82},  // halfway: up to even
      {0x3F808001, 0x3F81},  // above halfway
      {0x7F7F7FFF, 0x7F7F},  // just below halfway to overflow
      {0x7F7F8000, 0x7F80},  // halfway, odd below: rounds to infinity
      {0x7F7FFFFF, 0x7F80},  // max float overflows
      {0xFF7FFFFF, 0xFF80},
      {0x00000001, 0x0000},  // smallest float subnormal
      {0x00008000, 0x0000},  // halfway to the smallest bf16 subnormal: even (zero)
      {0x00018000, 0x0002},  // halfway: up to even
      {0x007FFFFF, 0x0080},  // largest subnormal rounds to the smallest normal
      {0x7F800000, 0x7F80},
      {0xFF800000, 0xFF80},
  };
  for (const auto& [x, expected] : cases) {
    EXPECT_EQ(to_bf16(f(x)).bits, expected) << std::hex << x;
    EXPECT_EQ(testing::reference_bf16(f(x)), expected) << "reference, " << std::hex << x;
  }
}

TEST(Narrowing, NanStaysNanAndBecomesQuiet) {
  // signalling NaN with only low payload bits: the kept bits are zero, the
  // quiet bit keeps it a NaN.
  EXPECT_EQ(to_f16(f(0x7F800001)).bits, 0x7E00);
  EXPECT_EQ(to_bf16(f(0x7F800001)).bits, 0x7FC0);
  EXPECT_EQ(to_f16(f(0xFF800001)).bits, 0xFE00);
  EXPECT_EQ(to_bf16(f(0xFF800001)).bits, 0xFFC0);
  // quiet NaN with payload: the top payload bits survive.
  EXPECT_EQ(to_f16(f(0xFFC12345)).bits, 0xFE09);
  EXPECT_EQ(to_bf16(f(0xFFC12345)).bits, 0xFFC1);
  EXPECT_EQ(to_f16(f(0x7FA00000)).bits, 0x7F00);  // signalling, top payload bit kept, now quiet
  EXPECT_EQ(to_bf16(f(0x7FA00000)).bits, 0x7FE0);
}

TEST(Widening, EveryF16PatternIsExact) {
  for (std::uint32_t i = 0; i < 0x10000; ++i) {
    const f16 h{static_cast<std::uint16_t>(i)};
    const float x = to_float(h);
    const std::uint32_t e = (i >> 10) & 0x1F, m = i & 0x3FF;
    const double sign = (i & 0x8000) ? -1.0 : 1.0;
    if (e == 0x1F && m != 0) {
      ASSERT_EQ(bits(x), ((i & 0x8000u) << 16) | 0x7F800000u | (m << 13)) << i;
      ASSERT_EQ(to_f16(x).bits, i | 0x0200u) << i;  // narrowing quiets
      continue;
    }
    const double expected = e == 0x1F ? sign * INFINITY
                            : e == 0  ? sign * std::ldexp(m, -24)
                                      : sign * std::ldexp(1024 + m, static_cast<int>(e) - 25);
    ASSERT_EQ(static_cast<double>(x), expected) << i;
    ASSERT_EQ(std::signbit(x), (i & 0x8000) != 0) << i;
    ASSERT_EQ(to_f16(x).bits, i) << i;
  }
}

TEST(Widening, EveryBf16PatternIsExact) {
  for (std::uint32_t i = 0; i < 0x10000; ++i) {
    const bf16 h{static_cast<std::uint16_t>(i)};
    const float x = to_float(h);
    ASSERT_EQ(bits(x), i << 16);
    const bool nan = (i & 0x7F80) == 0x7F80 && (i & 0x7F) != 0;
    ASSERT_EQ(to_bf16(x).bits, nan ? (i | 0x40u) : i) << i;
  }
}

TEST(Narrowing, MatchesReferenceOnRandomAndNearTieInputs) {
  std::mt19937 rng(5);
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t u = rng();
    if (i % 2) u = (u & 0xFFFF0000u) | (0x8000u + (rng() % 3) - 1);  // near bf16 ties
    if (i % 3 == 0) u = (u & 0xFFFFE000u) | (0x1000u + (rng() % 3) - 1);  // near f16 ties
    ASSERT_EQ(to_f16(f(u)).bits, testing::reference_f16(f(u))) << std::hex << u;
    ASSERT_EQ(to_bf16(f(u)).bits, testing::reference_bf16(f(u))) << std::hex << u;
  }
}

TEST(Bulk, EveryPathMatchesScalar) {
  ferry::test::restore_cpu_features restore;
  std::mt19937 rng(11);
  std::vector<float> in(4099);
  for (auto& x : in) x = f(rng());
  const std::uint32_t specials[] = {0x7F800001, 0xFFC12345, 0x80000000, 0x00000001, 0x7F7F8000,
                                    0x477FF000, 0x33000000, 0x7F800000, 0x38800000, 0x3F808000};
  for (std::size_t i = 0; i < std::size(specials); ++i) in[i * 7] = f(specials[i]);

  std::vector<f16> h16(in.size()), expected16(in.size());
  std::vector<bf16> hb(in.size()), expectedb(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    expected16[i] = to_f16(in[i]);
    expectedb[i] = to_bf16(in[i]);
    // Odd-looking patterns for widening, signalling NaNs included.
    h16[i] = f16{static_cast<std::uint16_t>(rng())};
    hb[i] = bf16{static_cast<std::uint16_t>(rng())};
  }
  h16[0] = f16{0x7C01};
  hb[0] = bf16{0x7F81};

  for (cpu_feature_set features : {cpu_feature_set{0}, base::all_cpu_features}) {
    base::limit_cpu_features(features);
    SCOPED_TRACE(std::string(half_kernel_name()));
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{15},
                          std::size_t{16}, std::size_t{17}, in.size()}) {
      const auto src = std::span<const float>(in).first(n);
      std::vector<f16> o16(n);
      std::vector<bf16> ob(n);
      to_f16(src, o16);
      to_bf16(src, ob);
      std::vector<float> w16(n), wb(n);
      to_float(std::span<const f16>(h16).first(n), w16);
      to_float(std::span<const bf16>(hb).first(n), wb);
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(o16[i], expected16[i]) << i;
        ASSERT_EQ(ob[i], expectedb[i]) << i;
        ASSERT_EQ(bits(w16[i]), bits(to_float(h16[i]))) << i << " " << std::hex << h16[i].bits;
        ASSERT_EQ(bits(wb[i]), bits(to_float(hb[i]))) << i;
      }
    }
  }
}

// A cheap stand-in for the 2^32 sweep (which runs natively only), so every
// architecture's kernel meets all exponents and signs and every rounding tie:
// 2^24 strided patterns, plus every f16 and bf16 tie and its neighbours.
TEST(Bulk, StridedSweepAndEveryTieMatchScalar) {
  std::vector<float> in;
  in.reserve((1u << 24) + 6 * (1u << 19) + 3 * (1u << 16));
  for (std::uint32_t i = 0; i < (1u << 24); ++i) in.push_back(f(i * 257u));
  for (std::uint32_t hi = 0; hi < (1u << 19); ++hi) {
    for (std::uint32_t lo : {0x0FFFu, 0x1000u, 0x1001u}) in.push_back(f((hi << 13) | lo));
  }
  for (std::uint32_t hi = 0; hi < (1u << 16); ++hi) {
    for (std::uint32_t lo : {0x7FFFu, 0x8000u, 0x8001u}) in.push_back(f((hi << 16) | lo));
  }
  std::vector<f16> h(in.size());
  std::vector<bf16> b(in.size());
  to_f16(in, h);
  to_bf16(in, b);
  std::vector<float> wide_h(in.size()), wide_b(in.size());
  to_float(std::span<const f16>(h), wide_h);
  to_float(std::span<const bf16>(b), wide_b);
  for (std::size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(h[i], to_f16(in[i])) << half_kernel_name() << " " << std::hex << bits(in[i]);
    ASSERT_EQ(b[i], to_bf16(in[i])) << half_kernel_name() << " " << std::hex << bits(in[i]);
    ASSERT_EQ(bits(wide_h[i]), bits(to_float(h[i]))) << std::hex << h[i].bits;
    ASSERT_EQ(bits(wide_b[i]), bits(to_float(b[i]))) << std::hex << b[i].bits;
  }
}

TEST(Scalar, IsConstexpr) {
  static_assert(to_f16(1.0f).bits == 0x3C00);
  static_assert(to_bf16(-1.0f).bits == 0xBF80);
  static_assert(to_float(f16{0x3C00}) == 1.0f);
  static_assert(to_float(bf16{0x4000}) == 2.0f);
  SUCCEED();
}

}  // namespace
}  // namespace ferry::codec

namespace ferry::codec {
namespace {

// All 256 patterns of each FP8 format against the definition.
double fp8_reference(unsigned bits, int exp_bits, int bias, bool e4m3fn) {
  const int man_bits = 7 - exp_bits;
  const double sign = (bits & 0x80u) ? -1.0 : 1.0;
  const unsigned e = (bits >> man_bits) & ((1u << exp_bits) - 1);
  const unsigned m = bits & ((1u << man_bits) - 1);
  const unsigned e_max = (1u << exp_bits) - 1;
  if (e4m3fn && e == e_max && m == (1u << man_bits) - 1) return std::nan("");
  if (!e4m3fn && e == e_max) return m == 0 ? sign * INFINITY : std::nan("");
  if (e == 0) return sign * std::ldexp(m, 1 - bias - man_bits);
  return sign * std::ldexp((1u << man_bits) + m, static_cast<int>(e) - bias - man_bits);
}

TEST(Fp8, EveryPatternDecodesExactly) {
  for (unsigned b = 0; b < 256; ++b) {
    const auto u8 = static_cast<std::uint8_t>(b);
    const double e4 = fp8_reference(b, 4, 7, true), e5 = fp8_reference(b, 5, 15, false);
    const float g4 = to_float(f8_e4m3{u8}), g5 = to_float(f8_e5m2{u8});
    EXPECT_TRUE(std::isnan(e4) ? std::isnan(g4) : static_cast<double>(g4) == e4) << b;
    EXPECT_TRUE(std::isnan(e5) ? std::isnan(g5) : static_cast<double>(g5) == e5) << b;
    EXPECT_EQ(std::signbit(g4), (b & 0x80u) != 0) << b;
  }
}

// The fnuz variants: bias one more, 0x80 the only NaN, no infinities (the
// all-ones exponent holds numbers), no negative zero.
TEST(Fp8, EveryFnuzPatternDecodesExactly) {
  const auto fnuz = [](unsigned b, int exp_bits) {
    if (b == 0x80) return std::nan("");
    const int man_bits = 7 - exp_bits, bias = 1 << (exp_bits - 1);
    const double sign = (b & 0x80u) ? -1.0 : 1.0;
    const unsigned e = (b >> man_bits) & ((1u << exp_bits) - 1), m = b & ((1u << man_bits) - 1);
    if (e == 0) return sign * std::ldexp(m, 1 - bias - man_bits);
    return sign * std::ldexp((1u << man_bits) + m, static_cast<int>(e) - bias - man_bits);
  };
  for (unsigned b = 0; b < 256; ++b) {
    const auto u8 = static_cast<std::uint8_t>(b);
    const float g4 = to_float(f8_e4m3fnuz{u8}), g5 = to_float(f8_e5m2fnuz{u8});
    const double e4 = fnuz(b, 4), e5 = fnuz(b, 5);
    EXPECT_TRUE(std::isnan(e4) ? std::isnan(g4) : static_cast<double>(g4) == e4) << b;
    EXPECT_TRUE(std::isnan(e5) ? std::isnan(g5) : static_cast<double>(g5) == e5) << b;
  }
  EXPECT_EQ(to_float(f8_e4m3fnuz{0x7F}), 240.0f);
  EXPECT_EQ(to_float(f8_e5m2fnuz{0x7F}), 57344.0f);
  EXPECT_EQ(to_float(f8_e4m3fnuz{0x01}), std::ldexp(1.0f, -10));
  EXPECT_EQ(to_float(f8_e5m2fnuz{0x01}), std::ldexp(1.0f, -17));
  EXPECT_FALSE(std::signbit(to_float(f8_e4m3fnuz{0x00})));
}

}  // namespace
}  // namespace ferry::codec
