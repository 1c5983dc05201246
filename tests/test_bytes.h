// Byte vectors for the tests: from integer literals, or deterministic
// random ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

namespace ferry::testing {

/// `n` deterministic bytes (splitmix64 from `seed`): raw bit patterns, so
/// floats read from them include NaNs, infinities and subnormals.
inline std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    seed += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    out[i] = static_cast<std::byte>(z ^ (z >> 31));
  }
  return out;
}

inline std::vector<std::byte> bytes(std::initializer_list<unsigned> values) {
  std::vector<std::byte> out;
  for (unsigned v : values) out.push_back(std::byte{static_cast<std::uint8_t>(v)});
  return out;
}

}  // namespace ferry::testing
