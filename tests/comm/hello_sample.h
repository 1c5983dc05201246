// tests/comm/hello_sample.h: the HELLO of rank `rank` in a world of 4,
// for the handshake tests.
#pragma once

#include <cstdint>

#include "ferry/comm/config.h"
#include "ferry/comm/detail/rendezvous.h"

namespace ferry::comm::test {

inline hello sample(std::uint32_t rank) {
  config c;
  c.rank = rank;
  c.world_size = 4;
  return detail::local_hello(c, role::ring);
}

}  // namespace ferry::comm::test
