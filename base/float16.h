// ferry/base/float16.h: the 16- and 8-bit floating-point bit patterns ferry
// moves, and the IEEE 754 guarantees every module relies on.
//
// f16, bf16 and the two FP8 formats are patterns, not arithmetic types:
// wire/ loads and stores them like integers, codec/half.h converts the
// 16-bit ones to and from float. Each is the dtype of the same name in
// codec/dtype.h.
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>

namespace ferry {

/// The raw bit pattern of an IEEE 754 binary16 value. ferry moves these
/// patterns; codec/half.h converts them to and from float.
struct f16 {
  std::uint16_t bits;
  friend constexpr bool operator==(f16, f16) = default;
};

/// The raw bit pattern of a bfloat16 value (the top half of a binary32).
struct bf16 {
  std::uint16_t bits;
  friend constexpr bool operator==(bf16, bf16) = default;
};

/// The raw bit pattern of an OCP FP8 E4M3 value (1 sign, 4 exponent, 3
/// fraction; no infinities).
struct f8_e4m3 {
  std::uint8_t bits;
  friend constexpr bool operator==(f8_e4m3, f8_e4m3) = default;
};

/// The raw bit pattern of an OCP FP8 E5M2 value (1 sign, 5 exponent, 2
/// fraction): the top byte of an f16.
struct f8_e5m2 {
  std::uint8_t bits;
  friend constexpr bool operator==(f8_e5m2, f8_e5m2) = default;
};

/// The raw bit patterns of the FP8 "fnuz" variants (PyTorch's
/// float8_e4m3fnuz and float8_e5m2fnuz, as AMD's MI300 computes them): no
/// infinities, no negative zero, and 0x80 alone is NaN; exponent bias 8
/// (E4M3) and 16 (E5M2), one more than the OCP formats'. Carried as patterns;
/// not float_pattern types (no arithmetic or wire conversions of their own).
struct f8_e4m3fnuz {
  std::uint8_t bits;
  friend constexpr bool operator==(f8_e4m3fnuz, f8_e4m3fnuz) = default;
};
struct f8_e5m2fnuz {
  std::uint8_t bits;
  friend constexpr bool operator==(f8_e5m2fnuz, f8_e5m2fnuz) = default;
};

/// The pattern types above, but the fnuz ones.
template <class T>
concept float_pattern = std::same_as<T, f16> || std::same_as<T, bf16> || std::same_as<T, f8_e4m3> ||
                        std::same_as<T, f8_e5m2>;

static_assert(std::numeric_limits<float>::is_iec559 && sizeof(float) == 4,
              "ferry requires IEEE 754 binary32 float");
static_assert(std::numeric_limits<double>::is_iec559 && sizeof(double) == 8,
              "ferry requires IEEE 754 binary64 double");

}  // namespace ferry
