// ferry/comm/error.h: comm/'s error codes (300..399), which the torch
// backend (python/distributed/) shares, and the exception its connections
// and collectives throw.
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

#define FERRY_COMM_ERRORS(X)                                                                             \
  X(auth_failed, 301, "peer could not prove it holds the shared secret")                                 \
  X(version_mismatch, 302, "peer speaks another protocol version")                                       \
  X(config_mismatch, 303, "peer's world configuration differs")                                          \
  X(peer_lost, 304, "peer's connection closed or reset")                                                 \
  X(timed_out, 305, "no progress within the timeout")                                                    \
  X(sequence_mismatch, 306, "frame from an unexpected collective, chunk or sender")                      \
  X(connect_failed, 307, "address could not be resolved, bound or reached")                              \
  X(bad_config, 308, "invalid configuration")                                                            \
  X(aborted, 309, "communicator failed earlier")                                                         \
  X(protocol_error, 310, "message not allowed by the protocol at this point")                            \
  X(forged_frame, 311, "frame failed authentication: altered, injected, replayed, reordered or dropped") \
  X(unsupported, 312, "operation, dtype, device or reduce op the backend does not support")              \
  X(bad_argument, 313, "collective called with tensors, a root or an option that do not fit it")
FERRY_DEFINE_ERRORS(comm_errc, FERRY_COMM_ERRORS);

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
