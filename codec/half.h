// ferry/codec/half.h: float <-> f16 and float <-> bf16 conversions.
//
// Formats (bit 15 is the most significant bit of the 16-bit pattern):
//   f16  (IEEE 754 binary16): sign 15, exponent 14..10 (bias 15), fraction 9..0.
//   bf16 (bfloat16):          sign 15, exponent 14..7 (bias 127), fraction 6..0;
//                             exactly the top 16 bits of an IEEE 754 binary32.
//
// Narrowing (float -> f16/bf16), bit-exact and identical on every path:
// - Rounding is to nearest, ties to even, independent of the FPU's mode.
// - Finite values too large for the format become infinity of the same sign
//   (f16: |x| >= 65520; bf16: |x| >= 0x1.ffp127). Infinities stay infinite.
// - Values below the smallest normal become subnormals, rounded the same
//   way; values at most half the smallest subnormal become zero of the same
//   sign. -0.0 stays -0.0.
// - NaN stays NaN and becomes quiet: the result is the sign, an all-ones
//   exponent, the quiet bit (f16 0x0200, bf16 0x0040), and the top fraction
//   bits of the input's payload (f16: bits 22..13, bf16: bits 22..16). A
//   signalling NaN whose kept payload bits are zero still comes out as a NaN.
//
// Widening (f16/bf16 -> float) is exact: every finite value, infinity and
// zero maps to the same number, and a NaN maps to the NaN with the same sign
// and the payload shifted into the top fraction bits (a signalling NaN stays
// signalling). So widening then narrowing returns every non-signalling input
// unchanged.
//
// The scalar functions are constexpr and use integer arithmetic only. The
// bulk functions use F16C/AVX2 on x86 when present (chosen at run time, see
// base/cpu.h), NEON on aarch64, and a portable loop elsewhere; all paths
// give the same bits.
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <string_view>

#include "ferry/wire/byte_order.h"

namespace ferry::codec {

[[nodiscard]] constexpr bf16 to_bf16(float value) noexcept {
  const auto u = std::bit_cast<std::uint32_t>(value);
  if ((u & 0x7FFF'FFFFu) > 0x7F80'0000u) {
    return bf16{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
  }
  // Adding 0x7FFF rounds halfway cases up; the extra lsb makes them even.
  // Overflow carries into the exponent and yields infinity, as required.
  const std::uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return bf16{static_cast<std::uint16_t>((u + rounding) >> 16)};
}

[[nodiscard]] constexpr float to_float(bf16 h) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h.bits) << 16);
}

[[nodiscard]] constexpr f16 to_f16(float value) noexcept {
  const auto u = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7FFF'FFFFu;
  if (a > 0x7F80'0000u) {  // NaN: quiet it, keep the top payload bits
    return f16{static_cast<std::uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x03FFu))};
  }
  if (a >= 0x477F'F000u) {  // >= 65520 rounds past 65504: infinity (or was one)
    return f16{static_cast<std::uint16_t>(sign | 0x7C00u)};
  }
  if (a >= 0x3880'0000u) {  // >= 2^-14: a normal f16
    // Rebias the exponent (127 -> 15) and round the 13 dropped fraction bits;
    // a carry out of the fraction correctly bumps the exponent.
    const std::uint32_t rounded = a + 0x0FFFu + ((a >> 13) & 1u);
    return f16{static_cast<std::uint16_t>(sign | ((rounded - 0x3800'0000u) >> 13))};
  }
  if (a <= 0x3300'0000u) {  // <= 2^-25, half the smallest subnormal: zero
    return f16{sign};
  }
  // Subnormal f16: the value is mant * 2^(e - 150); in units of 2^-24 that is
  // mant >> (126 - e), with e in 102..112 so the shift is 14..24.
  const std::uint32_t e = a >> 23;
  const std::uint32_t mant = (a & 0x007F'FFFFu) | 0x0080'0000u;
  const std::uint32_t shift = 126 - e;
  std::uint32_t h = mant >> shift;
  const std::uint32_t rest = mant & ((1u << shift) - 1);
  const std::uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u) != 0)) ++h;  // may reach 0x400: the smallest normal
  return f16{static_cast<std::uint16_t>(sign | h)};
}

[[nodiscard]] constexpr float to_float(f16 h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  const std::uint32_t e = (h.bits >> 10) & 0x1Fu;
  const std::uint32_t m = h.bits & 0x03FFu;
  if (e == 0x1F) return std::bit_cast<float>(sign | 0x7F80'0000u | (m << 13));
  if (e != 0) return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
  if (m == 0) return std::bit_cast<float>(sign);
  // Subnormal: shift the leading one up to bit 10, lowering the exponent.
  const int k = std::countl_zero(m) - 21;  // 10 - index of the top set bit
  const std::uint32_t norm = (m << k) & 0x03FFu;
  return std::bit_cast<float>(sign | (static_cast<std::uint32_t>(113 - k) << 23) | (norm << 13));
}

/// FP8 E5M2 is the top byte of an f16: exact.
[[nodiscard]] constexpr float to_float(f8_e5m2 h) noexcept {
  return to_float(f16{static_cast<std::uint16_t>(h.bits << 8)});
}

/// FP8 E4M3 ("fn" variant, as PyTorch's float8_e4m3fn and safetensors'
/// F8_E4M3): bias 7, no infinities, S.1111.111 is NaN. Exact.
[[nodiscard]] constexpr float to_float(f8_e4m3 h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x80u) << 24;
  const std::uint32_t e = (h.bits >> 3) & 0x0Fu;
  const std::uint32_t m = h.bits & 0x07u;
  if (e == 0x0F && m == 0x07) return std::bit_cast<float>(sign | 0x7FC0'0000u);
  if (e != 0) return std::bit_cast<float>(sign | ((e + 120) << 23) | (m << 20));
  if (m == 0) return std::bit_cast<float>(sign);
  const int k = std::countl_zero(m) - 28;  // 3 - index of the top set bit
  const std::uint32_t norm = (m << k) & 0x07u;
  return std::bit_cast<float>(sign | (static_cast<std::uint32_t>(121 - k) << 23) | (norm << 20));
}

namespace detail {
// An 8-bit fnuz float with E exponent bits (bias 2^(E-1)): 0x80 is NaN, no
// infinities, no negative zero. Exact.
template <int E>
[[nodiscard]] constexpr float fnuz_to_float(std::uint8_t b) noexcept {
  constexpr int M = 7 - E, bias = 1 << (E - 1);
  if (b == 0x80) return std::bit_cast<float>(0x7FC0'0000u);
  const std::uint32_t sign = static_cast<std::uint32_t>(b & 0x80u) << 24;
  const std::uint32_t e = (b >> M) & ((1u << E) - 1);
  const std::uint32_t m = b & ((1u << M) - 1);
  if (e != 0) return std::bit_cast<float>(sign | ((e + 127 - bias) << 23) | (m << (23 - M)));
  if (m == 0) return 0.0f;
  const int top = 31 - std::countl_zero(m);  // the subnormal's leading one
  const std::uint32_t norm = (m << (M - top)) & ((1u << M) - 1);
  return std::bit_cast<float>(sign | (static_cast<std::uint32_t>(127 + 1 - bias - (M - top)) << 23) |
                              (norm << (23 - M)));
}
}  // namespace detail

/// FP8 E4M3 fnuz (PyTorch's float8_e4m3fnuz): bias 8, 0x80 is NaN. Exact.
[[nodiscard]] constexpr float to_float(f8_e4m3fnuz h) noexcept { return detail::fnuz_to_float<4>(h.bits); }

/// FP8 E5M2 fnuz (PyTorch's float8_e5m2fnuz): bias 16, 0x80 is NaN. Exact.
[[nodiscard]] constexpr float to_float(f8_e5m2fnuz h) noexcept { return detail::fnuz_to_float<5>(h.bits); }

/// Bulk forms: out[i] is the scalar conversion of in[i].
// Requires: in.size() == out.size().
void to_bf16(std::span<const float> in, std::span<bf16> out) noexcept;
void to_f16(std::span<const float> in, std::span<f16> out) noexcept;
void to_float(std::span<const bf16> in, std::span<float> out) noexcept;
void to_float(std::span<const f16> in, std::span<float> out) noexcept;

/// The kernel the bulk forms use now: "avx2+f16c", "avx2" (bf16 SIMD, f16
/// scalar), "neon" or "scalar".
[[nodiscard]] std::string_view half_kernel_name() noexcept;

}  // namespace ferry::codec
