// ferry/comm/rendezvous.h: from a config to a ring of authenticated links.
//
// Rank 0 hosts the rendezvous on MASTER_ADDR:MASTER_PORT. Every other rank
// opens a ring listener (on the local address it reaches rank 0 from, any
// port), connects to rank 0, passes the handshake (handshake.h) with role
// "join" announcing that listener's port, and receives the TABLE of every
// rank's listener as rank 0 saw it. Then rank r connects to rank r+1's
// listener (role "ring"), and rank n-1's join connection becomes its link to
// rank 0, closing the ring. Connections that fail the handshake before
// authenticating (strangers, wrong secrets) are refused and rank 0 keeps
// waiting; an authenticated rank whose configuration differs fails the
// rendezvous on both sides. Everything is bounded by config::timeout.
#pragma once

#include <cstdint>
#include <optional>

#include "ferry/comm/config.h"
#include "ferry/comm/handshake.h"
#include "ferry/comm/socket.h"

namespace ferry::comm {

/// Rank 0's rendezvous socket, bound before the others join. Binding it
/// first lets a launcher (or a test) learn the port when MASTER_PORT is 0.
class listener {
 public:
  explicit listener(const config& c);
  [[nodiscard]] std::uint16_t port() const;
  [[nodiscard]] const socket& get() const noexcept { return socket_; }

 private:
  socket socket_;
};

/// One rank's two links: `prev` delivers frames from rank (r-1) mod n,
/// `next` carries frames to rank (r+1) mod n. Both invalid when n == 1.
struct ring_links {
  socket prev;
  socket next;
  hello prev_hello;  ///< what rank r-1 said about itself
  hello next_hello;  ///< what rank r+1 said about itself
};

/// Forms the ring. Rank 0 uses `rank0` if given, else binds its own.
/// Throws comm_error (connect_failed, timed_out, auth_failed,
/// version_mismatch, config_mismatch, protocol_error, peer_lost, bad_config).
ring_links form_ring(const config& c, std::optional<listener> rank0 = std::nullopt);

/// The HELLO this rank sends (nonce left zero; the handshake fills it).
hello local_hello(const config& c, role r);

}  // namespace ferry::comm
