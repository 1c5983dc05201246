// Independent references for float -> f16/bf16 narrowing, written with
// floating-point arithmetic (scale to the target's quantum, round with
// std::nearbyint in the default ties-to-even mode) rather than the bit
// manipulation of codec/half.h. Shared by half_test and the slow exhaustive
// test.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace ferry::codec::testing {

// The value of the correctly rounded result, as a double (or inf), for a
// finite x in a format with `fraction_bits`, smallest normal exponent
// `min_exp` and largest finite value `max_finite`.
inline double round_to_format(double ax, int fraction_bits, int min_exp, double max_finite) {
  const int e = ax == 0 ? min_exp : std::max(std::ilogb(ax), min_exp);
  const int quantum_exp = e - fraction_bits;
  const double r = std::ldexp(std::nearbyint(std::ldexp(ax, -quantum_exp)), quantum_exp);
  // Halfway between max_finite and the next power of two rounds up, to infinity.
  const double overflow = max_finite + std::ldexp(1.0, std::ilogb(max_finite) - fraction_bits - 1);
  return ax >= overflow ? INFINITY : r;
}

inline std::uint16_t reference_f16(float x) {
  const auto u = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  if (std::isnan(x)) return static_cast<std::uint16_t>(sign | 0x7E00u | ((u >> 13) & 0x3FFu));
  const double r = round_to_format(std::fabs(static_cast<double>(x)), 10, -14, 65504.0);
  if (std::isinf(r)) return static_cast<std::uint16_t>(sign | 0x7C00u);
  if (r < std::ldexp(1.0, -14)) return static_cast<std::uint16_t>(sign | static_cast<unsigned>(std::ldexp(r, 24)));
  const int e = std::ilogb(r);
  const auto fraction = static_cast<unsigned>(std::ldexp(r, 10 - e)) - 1024u;
  return static_cast<std::uint16_t>(sign | static_cast<unsigned>((e + 15) << 10) | fraction);
}

inline std::uint16_t reference_bf16(float x) {
  const auto u = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  if (std::isnan(x)) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  const double r = round_to_format(std::fabs(static_cast<double>(x)), 7, -126, 0x1.fep127);
  if (std::isinf(r)) return static_cast<std::uint16_t>(sign | 0x7F80u);
  // r is a bf16 value, so it is exact as a float whose low 16 bits are zero.
  return static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(static_cast<float>(r)) >> 16));
}

}  // namespace ferry::codec::testing
