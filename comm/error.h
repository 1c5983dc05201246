// ferry/comm/error.h: the exception comm/'s connections and collectives throw.
//
// The pure decoders of comm/ (frame.h, handshake.h) return result<T> like
// every decoder in ferry. What talks to the network throws comm_error: a
// collective that fails leaves nothing to return, and the error must carry
// a sentence naming the ranks involved, which an errc alone cannot.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "ferry/base/error.h"

namespace ferry::comm {

class comm_error : public std::runtime_error {
 public:
  comm_error(errc code, std::optional<std::uint32_t> peer, const std::string& what)
      : std::runtime_error(what), code_(code), peer_(peer) {}
  /// The failure's kind (timed_out, peer_lost, checksum_mismatch, ...).
  [[nodiscard]] errc code() const noexcept { return code_; }
  /// The rank at fault (the lost, silent or misbehaving one), when known.
  [[nodiscard]] std::optional<std::uint32_t> peer() const noexcept { return peer_; }

 private:
  errc code_;
  std::optional<std::uint32_t> peer_;
};

}  // namespace ferry::comm
