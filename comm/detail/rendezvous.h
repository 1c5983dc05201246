// ferry/comm/detail/rendezvous.h: from a config to a ring of authenticated links.
//
// Rank 0 hosts the rendezvous on MASTER_ADDR:MASTER_PORT. Every other rank
// opens a ring listener (on the local address it reaches rank 0 from, any
// port), connects to rank 0, passes the handshake (handshake.h) with role
// "join" announcing that listener's port, and receives the TABLE of every
// rank's listener as rank 0 saw it. Every rank derives the ring from it
// (ring_positions: the ranks by place); the rank at place p connects to the
// listener of the one at place p+1 (role "ring"), and the last place's join
// connection becomes its link to rank 0 (place 0), closing the ring. Connections that fail the handshake before
// authenticating (strangers, wrong secrets) are refused and rank 0 keeps
// waiting; an authenticated rank whose configuration differs fails the
// rendezvous on both sides. Everything is bounded by config::timeout.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "ferry/comm/communicator.h"
#include "ferry/comm/config.h"
#include "ferry/comm/handshake.h"
#include "ferry/comm/detail/socket.h"

namespace ferry::comm::detail {

/// One rank's ring listener, as rank 0 saw it. Entry 0 is rank 0's own
/// address (port 0) and carries the world's ring order.
struct table_entry {
  endpoint at;  ///< family AF_UNSPEC (0) for none
  ring_order order = ring_order::rank;  ///< entry 0 only
};
std::vector<std::byte> encode_table(std::span<const table_entry> entries);
/// Errors: bad_magic, truncated, trailing_bytes, checksum_mismatch,
/// config_mismatch (count differs from world_size), bad_value (family).
result<std::vector<table_entry>> parse_table(std::span<const std::byte> bytes, std::uint32_t world_size) noexcept;

/// The whole exchange on a fresh connection, initiator side: returns the
/// acceptor's HELLO once both sides are proven and their worlds agree.
/// Throws comm_error: auth_failed, version_mismatch, config_mismatch,
/// protocol_error, peer_lost, timed_out. `who` names the peer in errors.
/// With `keys` and mine.auth not none, the connection's frame keys go there.
hello handshake_initiate(const socket& s, hello mine, std::string_view secret, clock::time_point deadline,
                         const std::string& who, frame_keys* keys = nullptr);
/// Acceptor side: returns the initiator's HELLO. `mine.role` is set to reply.
hello handshake_accept(const socket& s, hello mine, std::string_view secret, clock::time_point deadline,
                       frame_keys* keys = nullptr);


/// The socket a listener holds, taken out of it.
struct listener_access {
  static socket take(listener& l) noexcept { return socket(std::exchange(l.fd_, -1)); }
  };

/// One rank's two links: `prev` delivers frames from the rank at the place
/// before this one on the ring, `next` carries frames to the one after
/// (`ring`). Both invalid when n == 1.
struct ring_links {
  socket prev;
  socket next;
  hello prev_hello;  ///< what the previous rank on the ring said about itself
  hello next_hello;  ///< what the next rank on the ring said about itself
  /// Frame keys (config::auth not none). This rank initiated `next` and
  /// accepted `prev`, so it sends frames with next_keys.initiator and
  /// receives them with prev_keys.initiator.
  frame_keys prev_keys;
  frame_keys next_keys;
  /// The ranks in ring order (position -> rank); empty when n == 1.
  std::vector<std::uint32_t> ring;
  /// What form_mesh() needs: every rank's ring listener as rank 0 saw it,
  /// and this rank's own listener, still open (invalid on rank 0).
  std::vector<table_entry> table;
  socket listener;
};

/// A link to a rank that is not a ring neighbour.
struct mesh_link {
  std::uint32_t peer = 0;
  socket s;
  hello peer_hello;
  frame_keys keys;
  bool initiated = false;  ///< this rank connected (and so sends with keys.initiator)
};

/// Connects this rank to every rank that is not its ring neighbour, once
/// every rank has formed its ring links (the caller makes sure: a barrier
/// over the ring): each rank first accepts the lower ranks (role "mesh",
/// on its ring listener, in any order), then connects to the higher ones
/// in rank order, so no two ranks wait for each other. Closes the
/// listener. Throws comm_error as form_ring() does.
std::vector<mesh_link> form_mesh(const config& c, ring_links& links);

/// The ranks in ring order (position -> rank) for a world whose TABLE is
/// `table` (config.h, ring_order): rank order, or grouped by the address
/// each rank joined from (entry 0: rank 0's). Rank 0 is always first.
std::vector<std::uint32_t> ring_positions(std::span<const table_entry> table, ring_order order);

/// Forms the ring. Rank 0 uses `rank0` if given, else binds its own.
/// Throws comm_error (connect_failed, timed_out, auth_failed,
/// version_mismatch, config_mismatch, protocol_error, peer_lost, bad_config).
ring_links form_ring(const config& c, std::optional<listener> rank0 = std::nullopt);

/// The HELLO this rank sends (nonce left zero; the handshake fills it).
hello local_hello(const config& c, role r);

}  // namespace ferry::comm::detail
