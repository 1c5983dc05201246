#include "ferry/comm/detail/rendezvous.h"

#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/base/arch.h"
#include "ferry/comm/detail/fail.h"
#include "ferry/comm/error.h"
#include "ferry/wire/cursor.h"

namespace ferry::comm::detail {
namespace {

// A failure caused by an unauthenticated peer, which must not stop a rank
// that is waiting for the real one.
bool stranger_failure(error_code e) {
  return e == comm_errc::auth_failed || e == comm_errc::protocol_error || e == comm_errc::version_mismatch ||
         e == errc::bad_magic || e == errc::bad_value || e == errc::checksum_mismatch || e == comm_errc::peer_lost ||
         e == comm_errc::timed_out;
}

// Accepts until the handshake of one peer with role `r` and rank `expect`
// succeeds; refused strangers are remembered for the timeout message.
std::pair<socket, hello> accept_peer(const socket& l, const config& c, role r, std::optional<std::uint32_t> expect,
                                     clock::time_point deadline, std::string& refused, frame_keys& keys) {
  for (;;) {
    socket s = accept_until(l, deadline);
    if (!s.valid()) return {};
    try {
      // One slow stranger may not hold the door for long.
      const auto until = std::min(deadline, clock::now() + std::chrono::seconds(10));
      hello theirs = handshake_accept(s, local_hello(c, role::reply), c.secret, until, &keys);
      if (theirs.role != r || (expect && theirs.rank != *expect)) {
        fail(comm_errc::protocol_error, theirs.rank,
             describe(theirs) + " connected to " + rank_name(c.rank) + " as " +
                 (theirs.role == role::join   ? "a joiner"
                  : theirs.role == role::mesh ? "a mesh peer"
                                              : "a ring neighbour") +
                 ", which the ring does not expect");
      }
      return {std::move(s), std::move(theirs)};
    } catch (const comm_error& e) {
      if (!stranger_failure(e.code())) throw;
      refused = e.what();
    }
  }
}

const char* order_name(ring_order o) { return o == ring_order::node ? "node" : "rank"; }

bool same_host(const endpoint& a, const endpoint& b) {
  if (a.family() != b.family()) return false;
  if (a.family() == AF_INET) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in*>(&a.storage)->sin_addr,
                       &reinterpret_cast<const sockaddr_in*>(&b.storage)->sin_addr, sizeof(in_addr)) == 0;
  }
  if (a.family() == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(&a.storage)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(&b.storage)->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

[[noreturn]] void waited_in_vain(const config& c, const std::string& for_whom, const std::string& refused) {
  std::string what = rank_name(c.rank) + " timed out after " + std::to_string(c.timeout.count()) +
                     " ms waiting for " + for_whom;
  if (!refused.empty()) what += "; it refused a connection meanwhile: " + refused;
  fail(comm_errc::timed_out, std::nullopt, what);
}

ring_links host(const config& c, const socket& l, clock::time_point deadline) {
  const std::uint32_t n = c.world_size;
  std::vector<std::optional<std::pair<socket, hello>>> joined(n);
  std::vector<frame_keys> joined_keys(n);
  std::string refused;
  for (std::uint32_t count = 0; count + 1 < n;) {
    frame_keys keys;
    auto [s, theirs] = accept_peer(l, c, role::join, std::nullopt, deadline, refused, keys);
    if (!s.valid()) {
      std::string missing;
      for (std::uint32_t r = 1; r < n; ++r) {
        if (!joined[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      waited_in_vain(c, "ranks " + missing + " to join", refused);
    }
    if (joined[theirs.rank]) {
      fail(comm_errc::config_mismatch, theirs.rank,
           "two processes joined as " + rank_name(theirs.rank) + ": " + describe(joined[theirs.rank]->second) +
               " and " + describe(theirs));
    }
    joined_keys[theirs.rank] = keys;
    joined[theirs.rank].emplace(std::move(s), std::move(theirs));
    ++count;
  }
  std::vector<table_entry> table(n);
  table[0].at = local_endpoint(joined[1]->first);  // where this host was reached
  table[0].at.set_port(0);
  const ring_order order = c.order.value_or(ring_order::node);
  table[0].order = order;
  for (std::uint32_t r = 1; r < n; ++r) {
    table[r].at = remote_endpoint(joined[r]->first);
    table[r].at.set_port(joined[r]->second.listen_port);
  }
  const auto bytes = encode_table(table);
  for (std::uint32_t r = 1; r < n; ++r) send_all(joined[r]->first, bytes, deadline, rank_name(r));

  ring_links links;
  links.ring = ring_positions(table, order);
  const std::uint32_t next = links.ring[1];
  const std::uint32_t prev = links.ring[n - 1];
  links.next = connect_to(table[next].at, deadline, rank_name(next));
  links.next_hello =
      handshake_initiate(links.next, local_hello(c, role::ring), c.secret, deadline, rank_name(next), &links.next_keys);
  if (links.next_hello.rank != next) {
    fail(comm_errc::protocol_error, links.next_hello.rank,
         describe(links.next_hello) + " answered at " + rank_name(next) + "'s address");
  }
  links.prev = std::move(joined[prev]->first);  // its join connection carries its frames to rank 0
  links.prev_hello = joined[prev]->second;
  links.prev_keys = joined_keys[prev];
  links.table = std::move(table);
  return links;
}

ring_links join(const config& c, clock::time_point deadline) {
  const std::uint32_t n = c.world_size;
  const std::string master = "rank 0 (the rendezvous at " + c.master_addr + " port " + std::to_string(c.master_port) + ")";
  socket to_master = connect_to(c.master_addr, c.master_port, deadline);
  endpoint here = local_endpoint(to_master);
  here.set_port(0);
  socket ring_listener = listen_on(here);
  hello mine = local_hello(c, role::join);
  mine.listen_port = local_endpoint(ring_listener).port();
  frame_keys master_keys;
  const hello master_hello = handshake_initiate(to_master, mine, c.secret, deadline, master, &master_keys);
  if (master_hello.rank != 0) {
    fail(comm_errc::protocol_error, master_hello.rank, describe(master_hello) + " answered at the rendezvous address");
  }

  std::vector<std::byte> table_bytes(8);
  recv_all(to_master, table_bytes, deadline, master);
  const std::uint32_t count = wire::reader(table_bytes).read_le_at<std::uint32_t>(4).value();  // 8 bytes: cannot fail
  if (count != n) {  // checked before the rest is allocated
    fail(comm_errc::config_mismatch, 0, "rank 0 sent a table of " + std::to_string(count) + " ranks to a world of " + std::to_string(n));
  }
  table_bytes.resize(8 + 20 * std::size_t{n} + 4);
  recv_all(to_master, std::span(table_bytes).subspan(8), deadline, master);
  const auto table = parse_table(table_bytes, n);
  if (!table) fail(table.error(), 0, "rank 0 sent a malformed table: " + std::string(ferry::message(table.error())));

  const ring_order order = (*table)[0].order;
  if (c.order && *c.order != order) {
    fail(comm_errc::config_mismatch, 0,
         rank_name(c.rank) + " has FERRY_RING_ORDER=" + order_name(*c.order) + " but rank 0 formed the ring in " +
             order_name(order) + " order: set the same value on every rank");
  }
  ring_links links;
  links.ring = ring_positions(*table, order);
  const auto at_ring = static_cast<std::uint32_t>(std::find(links.ring.begin(), links.ring.end(), c.rank) - links.ring.begin());
  const std::uint32_t next = links.ring[(at_ring + 1) % n];
  const std::uint32_t prev = links.ring[(at_ring + n - 1) % n];
  if (next == 0) {
    links.next = std::move(to_master);
    links.next_hello = master_hello;
    links.next_keys = master_keys;
  } else {
    const endpoint& at = (*table)[next].at;
    if (at.family() == AF_UNSPEC) fail(comm_errc::protocol_error, 0, "rank 0's table has no address for " + rank_name(next));
    links.next = connect_to(at, deadline, rank_name(next));
    links.next_hello =
        handshake_initiate(links.next, local_hello(c, role::ring), c.secret, deadline, rank_name(next), &links.next_keys);
    if (links.next_hello.rank != next) {
      fail(comm_errc::protocol_error, links.next_hello.rank,
           describe(links.next_hello) + " answered at " + rank_name(next) + "'s address");
    }
  }
  std::string refused;
  auto [prev_socket, prev_hello] = accept_peer(ring_listener, c, role::ring, prev, deadline, refused, links.prev_keys);
  if (!prev_socket.valid()) waited_in_vain(c, rank_name(prev) + " to connect", refused);
  links.prev = std::move(prev_socket);
  links.prev_hello = std::move(prev_hello);
  links.table = std::move(*table);
  links.listener = std::move(ring_listener);
  return links;
}

}  // namespace


std::vector<std::uint32_t> ring_positions(std::span<const table_entry> table, ring_order order) {
  const auto n = static_cast<std::uint32_t>(table.size());
  std::vector<std::uint32_t> ring;
  ring.reserve(n);
  std::vector<bool> placed(n, false);
  for (std::uint32_t r = 0; r < n; ++r) {
    if (placed[r]) continue;
    for (std::uint32_t s = r; s < n; ++s) {
      if (!placed[s] && (s == r || (order == ring_order::node && same_host(table[r].at, table[s].at)))) {
        placed[s] = true;
        ring.push_back(s);
      }
    }
  }
  return ring;
}

hello local_hello(const config& c, role r) {
  hello h;
  h.role = r;
  h.rank = c.rank;
  h.world_size = c.world_size;
  h.chunk_bytes = c.chunk_bytes;
  h.max_frame_bytes = c.max_frame_bytes;
  h.auth = c.auth;
  h.algorithm = c.algorithm;
  h.arch = std::string(base::host_arch());
  return h;
}

ring_links form_ring(const config& c, std::optional<listener> rank0) {
  c.validate().value();
  if (c.world_size == 1) return {};
  const auto deadline = clock::now() + c.timeout;
  ring_links links;
  if (c.rank == 0) {
    const socket l = rank0 ? listener_access::take(*rank0) : listen_on(c.master_addr, c.master_port);
    links = host(c, l, deadline);
  } else {
    links = join(c, deadline);
  }
  tune_for_collectives(links.prev, c.timeout, c.send_buffer_bytes);
  tune_for_collectives(links.next, c.timeout, c.send_buffer_bytes);
  return links;
}

std::vector<mesh_link> form_mesh(const config& c, ring_links& links) {
  const std::uint32_t n = c.world_size;
  std::vector<mesh_link> mesh;
  if (n < 4) return mesh;  // every pair is on the ring already
  const auto deadline = clock::now() + c.timeout;
  const auto place = static_cast<std::size_t>(std::find(links.ring.begin(), links.ring.end(), c.rank) - links.ring.begin());
  const std::uint32_t next = links.ring[(place + 1) % n];
  const std::uint32_t prev = links.ring[(place + n - 1) % n];
  const auto meshed = [&](std::uint32_t r) { return r != c.rank && r != next && r != prev; };
  std::vector<bool> have(n, false);
  std::size_t lower = 0;
  for (std::uint32_t r = 0; r < c.rank; ++r) lower += meshed(r) ? 1U : 0U;
  std::string refused;
  for (std::size_t got = 0; got < lower;) {
    mesh_link m;
    auto [s, theirs] = accept_peer(links.listener, c, role::mesh, std::nullopt, deadline, refused, m.keys);
    if (!s.valid()) {
      std::string missing;
      for (std::uint32_t r = 0; r < c.rank; ++r) {
        if (meshed(r) && !have[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      waited_in_vain(c, "ranks " + missing + " to connect", refused);
    }
    if (theirs.rank >= c.rank || !meshed(theirs.rank) || have[theirs.rank]) {
      fail(comm_errc::protocol_error, theirs.rank,
           describe(theirs) + " connected to " + rank_name(c.rank) + " as a mesh peer, which the mesh does not expect");
    }
    have[theirs.rank] = true;
    m.peer = theirs.rank;
    m.s = std::move(s);
    m.peer_hello = std::move(theirs);
    mesh.push_back(std::move(m));
    ++got;
  }
  links.listener.close();
  for (std::uint32_t r = c.rank + 1; r < n; ++r) {
    if (!meshed(r)) continue;
    const endpoint& at = links.table[r].at;
    if (at.family() == AF_UNSPEC) fail(comm_errc::protocol_error, 0, "rank 0's table has no address for " + rank_name(r));
    mesh_link m;
    m.peer = r;
    m.initiated = true;
    m.s = connect_to(at, deadline, rank_name(r));
    m.peer_hello = handshake_initiate(m.s, local_hello(c, role::mesh), c.secret, deadline, rank_name(r), &m.keys);
    if (m.peer_hello.rank != r) {
      fail(comm_errc::protocol_error, m.peer_hello.rank, describe(m.peer_hello) + " answered at " + rank_name(r) + "'s address");
    }
    mesh.push_back(std::move(m));
  }
  for (mesh_link& m : mesh) tune_for_collectives(m.s, c.timeout, c.send_buffer_bytes);
  return mesh;
}

}  // namespace ferry::comm::detail

namespace ferry::comm {

listener::listener(const comm::config& c) : fd_(detail::listen_on(c.master_addr, c.master_port).release()) {}

listener& listener::operator=(listener&& o) noexcept {
  if (this != &o) {
    const detail::socket old(std::exchange(fd_, std::exchange(o.fd_, -1)));  // closed here
  }
  return *this;
}

listener::~listener() { const detail::socket closed(fd_); }

std::uint16_t listener::port() const {
  struct borrowed {
    detail::socket s;
    ~borrowed() { (void)s.release(); }  // the listener keeps its descriptor
  } b{detail::socket(fd_)};
  return detail::local_endpoint(b.s).port();
}

}  // namespace ferry::comm
