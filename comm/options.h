// ferry/comm/options.h: the choices a comm user makes that the protocol
// carries, without the protocol (frame.h, handshake.h) itself.
#pragma once

#include <cstdint>
#include <string_view>

namespace ferry::comm {

/// How frames are protected on a link (FERRY_AUTH; frame.h's
/// AUTHENTICATION says how). Both ends of every link must agree (checked at
/// the handshake).
enum class frame_auth : std::uint8_t {
  none = 0,     ///< CRC32C: catches accidents, not attacks
  frames = 1,   ///< a ChaCha20-Poly1305 tag over header and payload
  encrypt = 2,  ///< the same, with the payload encrypted
};
/// "none", "frames", "encrypt": FERRY_AUTH's values.
[[nodiscard]] std::string_view name(frame_auth a) noexcept;

}  // namespace ferry::comm
