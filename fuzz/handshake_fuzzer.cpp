// The handshake on arbitrary bytes, two ways: the pure parsers (HELLO,
// REJECT, TABLE, ABORT), whose successes re-encode to the same bytes; and
// the live exchange, with the input as everything the peer ever sends on a
// socket pair, on both the accepting and the initiating side. Without the
// secret no input may authenticate, and every failure is a comm_error.
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <vector>

#include "ferry/comm/error.h"
#include "ferry/comm/frame.h"
#include "ferry/comm/handshake.h"
#include "ferry/comm/detail/rendezvous.h"
#include "fuzz_check.h"

namespace handshake_harness {

using namespace ferry;
using namespace ferry::comm;
using namespace ferry::comm::detail;  // the exchange over a socket is internal

void parsers(std::span<const std::byte> in) {
  if (in.size() >= hello_size) {
    const auto bytes = in.first<hello_size>();
    const auto h = parse_hello(bytes);
    if (h && h->version == protocol_version) {
      const auto again = encode_hello(*h);
      FUZZ_CHECK(std::equal(again.begin(), again.end(), bytes.begin()));
      (void)compare_worlds(*h, *h);
      (void)describe(*h);
    }
  }
  if (in.size() >= 4) {
    const auto r = parse_reject(in.subspan(4));
    if (r) FUZZ_CHECK(r->text.size() <= max_reject_text);
  }
  if (!in.empty()) {
    const std::uint32_t world = std::to_integer<std::uint32_t>(in[0]) % 8 + 1;
    const auto t = parse_table(in.subspan(1), world);
    if (t) {
      FUZZ_CHECK(t->size() == world);
      (void)encode_table(*t);
    }
  }
  if (in.size() >= abort_size) {
    const auto a = parse_abort(in.first<abort_size>());
    if (a) FUZZ_CHECK(a->code != errc::ok);
  }
}

void live(std::span<const std::byte> in, bool accept) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds) != 0) return;
  comm::detail::socket mine(fds[0]), peer(fds[1]);
  // Everything the peer will ever say, then end of stream.
  const auto n = ::send(peer.fd(), in.data(), std::min<std::size_t>(in.size(), 64 * 1024), 0);
  (void)n;
  ::shutdown(peer.fd(), SHUT_WR);
  config c;
  c.world_size = 4;
  c.rank = 1;
  const hello me = local_hello(c, accept ? role::reply : role::ring);
  const auto deadline = clock::now() + std::chrono::milliseconds(200);
  try {
    if (accept) {
      (void)handshake_accept(mine, me, "the secret", deadline);
    } else {
      (void)handshake_initiate(mine, me, "the secret", deadline, "peer");
    }
    FUZZ_CHECK(false && "authenticated without the secret");
  } catch (const comm_error& e) {
    FUZZ_CHECK(e.code() != errc::ok);
  }
}

}  // namespace handshake_harness

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace handshake_harness;
  const auto in = std::as_bytes(std::span(data, size));
  parsers(in);
  live(in, true);
  live(in, false);
  return 0;
}
