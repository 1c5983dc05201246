// ferry/comm/options.h: the choices a comm user makes that the protocol
// carries, without the protocol (frame.h, handshake.h) itself.
#pragma once

#include <cstdint>
#include <optional>
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
[[nodiscard]] constexpr std::string_view name(frame_auth a) noexcept {
  switch (a) {
    case frame_auth::none: break;
    case frame_auth::frames: return "frames";
    case frame_auth::encrypt: return "encrypt";
  }
  return "none";
}

/// Every mode, for lists of the accepted names.
inline constexpr frame_auth all_frame_auths[] = {frame_auth::none, frame_auth::frames, frame_auth::encrypt};

/// The mode name() gives `s`; nullopt for any other text.
[[nodiscard]] constexpr std::optional<frame_auth> frame_auth_from_name(std::string_view s) noexcept {
  for (const frame_auth a : all_frame_auths) {
    if (name(a) == s) return a;
  }
  return std::nullopt;
}

}  // namespace ferry::comm
