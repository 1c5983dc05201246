// ferry/comm/peer.h: what a rank says about itself when a connection opens
// (the fields of the HELLO, comm/handshake.h), and how a person reads it.
// communicator::prev_peer() and next_peer() return one; the HELLO's byte
// layout and the rest of the handshake live in handshake.h.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ferry/comm/options.h"
#include "ferry/wire/byte_order.h"

namespace ferry::comm {

// 3 since error codes were renumbered (ABORT carries them; docs/errors.md);
// 4 since HELLO carries the allreduce algorithm and ranks form a mesh;
// 5 since frames carry point-to-point messages (frame.h, flag bit 6) and
// every world of four or more ranks forms the mesh;
// 6 since every world's setup ends with the allgather of host keys (shared
// memory between ranks of one host, docs/comm-protocol.md section 8).
inline constexpr std::uint8_t protocol_version = 6;

enum class role : std::uint8_t { join = 1, ring = 2, reply = 3, mesh = 4 };

/// What one side says about itself in a HELLO.
struct hello {
  std::uint8_t version = protocol_version;
  comm::role role = role::reply;
  wire::byte_order order = wire::host_order;
  std::uint8_t word_size = sizeof(void*);
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;
  std::uint32_t chunk_bytes = 0;
  std::uint32_t max_frame_bytes = 0;
  std::uint16_t listen_port = 0;
  frame_auth auth = frame_auth::none;
  comm::algorithm algorithm = comm::algorithm::ring;
  std::string arch;  ///< at most 16 ASCII characters
  std::array<std::byte, 32> nonce{};
  friend bool operator==(const hello&, const hello&) = default;
};

/// "rank 2 (s390x, big-endian, 64-bit)".
std::string describe(const hello& h);

}  // namespace ferry::comm
