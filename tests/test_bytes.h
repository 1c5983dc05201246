// Byte vectors from integer literals, for the tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

namespace ferry::testing {

inline std::vector<std::byte> bytes(std::initializer_list<unsigned> values) {
  std::vector<std::byte> out;
  for (unsigned v : values) out.push_back(std::byte{static_cast<std::uint8_t>(v)});
  return out;
}

}  // namespace ferry::testing
