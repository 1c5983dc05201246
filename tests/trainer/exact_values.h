// Values the optimizer tests feed to every architecture (INTERNAL to the
// tests): floats built from integers, so exact on every host, and the
// CRC32C of floats' little-endian bytes, so the same golden on every host.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ferry/codec/crc32c.h"

namespace ferry::trainer::test {

/// A mix of magnitudes, signs, zeros and subnormals, from `bits`.
inline float value_from(std::uint32_t bits) {
  const auto mantissa = static_cast<std::int32_t>(bits >> 8) - (1 << 23);
  const int exponent = static_cast<int>(bits & 0x1f) - 40;  // 2^-40 .. 2^-9 scale
  if ((bits & 0xe0) == 0) return 0.0f;
  if ((bits & 0xe0) == 0x20) return std::bit_cast<float>(bits & 0x807fffffu);  // subnormal or zero
  return std::ldexp(static_cast<float>(mantissa), exponent);
}

/// CRC32C of `v`'s little-endian bytes, extending `crc`.
inline std::uint32_t crc_le(const std::vector<float>& v, std::uint32_t crc = 0) {
  std::vector<std::byte> bytes;
  bytes.reserve(v.size() * 4);
  for (const float f : v) {
    const auto u = std::bit_cast<std::uint32_t>(f);
    for (int s = 0; s < 32; s += 8) bytes.push_back(static_cast<std::byte>(u >> s));
  }
  return codec::crc32c_extend(crc, bytes);
}

}  // namespace ferry::trainer::test
