// ferry/base/float16.h: the 16-bit floating-point bit patterns ferry moves,
// and the IEEE 754 guarantees every module relies on.
//
// f16 and bf16 are patterns, not arithmetic types: wire/ loads and stores
// them like integers, codec/half.h converts them to and from float.
#pragma once

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

static_assert(std::numeric_limits<float>::is_iec559 && sizeof(float) == 4,
              "ferry requires IEEE 754 binary32 float");
static_assert(std::numeric_limits<double>::is_iec559 && sizeof(double) == 8,
              "ferry requires IEEE 754 binary64 double");

}  // namespace ferry
