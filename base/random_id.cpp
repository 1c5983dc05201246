#include "ferry/base/random_id.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>

namespace ferry::base {

std::string random_hex_id() {
  std::uint64_t r = 0;
  try {
    std::random_device rd;
    r = (std::uint64_t{rd()} << 32) ^ rd();
  } catch (...) {
    r = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(r));
  return out;
}

}  // namespace ferry::base
