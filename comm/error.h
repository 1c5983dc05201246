// ferry/comm/error.h: comm/'s error codes (300..399) and the exception its
// connections and collectives throw.
//
// The pure decoders of comm/ (frame.h, handshake.h) return result<T> like
// every decoder in ferry. What talks to the network throws comm_error, a
// ferry::exception: a collective that fails leaves nothing to return, and
// its error carries a sentence naming the ranks involved.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "ferry/base/error.h"

namespace ferry {

enum class comm_errc : std::uint16_t {
  auth_failed = 301,       ///< A peer could not prove it holds the shared secret.
  version_mismatch = 302,  ///< A peer speaks another protocol version.
  config_mismatch = 303,   ///< A peer's world configuration differs from this rank's.
  peer_lost = 304,         ///< A peer's connection closed or reset.
  timed_out = 305,         ///< A blocking operation made no progress within its timeout.
  sequence_mismatch = 306, ///< A frame from another collective, chunk or sender than expected.
  connect_failed = 307,    ///< An address could not be resolved, bound or reached.
  bad_config = 308,        ///< Invalid settings (environment variables, secret, sizes).
  aborted = 309,           ///< The communicator failed earlier; no further collective can run.
  protocol_error = 310,    ///< A peer sent a message the protocol does not allow at that point.
};
FERRY_ERROR_ENUM(comm_errc);

namespace detail {
inline constexpr error_info comm_errc_table[] = {
    {301, "auth_failed", "peer could not prove it holds the shared secret"},
    {302, "version_mismatch", "peer speaks another protocol version"},
    {303, "config_mismatch", "peer's world configuration differs"},
    {304, "peer_lost", "peer's connection closed or reset"},
    {305, "timed_out", "no progress within the timeout"},
    {306, "sequence_mismatch", "frame from an unexpected collective, chunk or sender"},
    {307, "connect_failed", "address could not be resolved, bound or reached"},
    {308, "bad_config", "invalid configuration"},
    {309, "aborted", "communicator failed earlier"},
    {310, "protocol_error", "message not allowed by the protocol at this point"},
};
[[maybe_unused]] inline const bool comm_errc_registered = register_errors(comm_errc_table);
}  // namespace detail

}  // namespace ferry

namespace ferry::comm {

/// A failed connection or collective. error() carries the code and a
/// sentence naming the ranks involved; peer() the rank at fault.
class comm_error : public ferry::exception {
 public:
  comm_error(error_code code, std::optional<std::uint32_t> peer, std::string what)
      : ferry::exception(ferry::error(code, std::move(what))), peer_(peer) {}
  /// The rank at fault (the lost, silent or misbehaving one), when known.
  [[nodiscard]] std::optional<std::uint32_t> peer() const noexcept { return peer_; }

 private:
  std::optional<std::uint32_t> peer_;
};

}  // namespace ferry::comm
