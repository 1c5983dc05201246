// Multi-process failure tests: wrong secrets, mismatched worlds, hostile
// frames from an authenticated peer, a rank killed mid-allreduce, a silent
// rank, and handshake errors over a socket pair.
#include <gtest/gtest.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <thread>

#include "ferry/base/arch.h"
#include "ferry/codec/crc32c.h"
#include "ferry/comm/communicator.h"
#include "ferry/comm/frame.h"
#include "ferry/comm/detail/rendezvous.h"
#include "hello_sample.h"
#include "ferry/comm/handshake.h"
#include "world.h"

namespace ferry::comm {
namespace {

using namespace std::chrono_literals;
using namespace detail;  // white-box: sockets, the rendezvous and the exchange
using test::run_world;

std::vector<std::byte> nothing() { return {}; }

TEST(Auth, WrongSecretIsRefusedAndTheWorldStillForms) {
  // An impostor (rank 1's number, another secret) knocks first; rank 0
  // refuses it and keeps waiting for the real rank 1.
  const auto out = run_world(3, [](std::uint32_t r, config& c, std::optional<listener>& l) {
    if (r == 2) {
      c.rank = 1;
      c.world_size = 2;
      c.secret = "not-the-secret";
      c.timeout = 5s;
      communicator impostor(c);  // must throw
      return nothing();
    }
    c.world_size = 2;
    if (r == 1) std::this_thread::sleep_for(500ms);
    communicator comm(c, std::move(l));
    std::vector<float> v{1.0f, 2.0f};
    comm.allreduce(v);
    return test::to_bytes(v);
  });
  ASSERT_TRUE(out[0].ok) << out[0].text;
  ASSERT_TRUE(out[1].ok) << out[1].text;
  EXPECT_EQ(test::from_bytes<float>(out[0].bytes), (std::vector<float>{2.0f, 4.0f}));
  ASSERT_FALSE(out[2].ok);
  EXPECT_EQ(out[2].code, comm_errc::auth_failed) << out[2].text;
  EXPECT_NE(out[2].text.find("shared secret"), std::string::npos) << out[2].text;
}

TEST(Auth, RankZeroNamesTheRefusedPeerWhenNobodyElseComes) {
  const auto out = run_world(2, [](std::uint32_t, config& c, std::optional<listener>& l) {
    c.timeout = 2s;
    communicator comm(c, std::move(l));
    return nothing();
  }, [](std::uint32_t r, config& c) {
    if (r == 1) c.secret = "wrong";
  });
  EXPECT_EQ(out[0].code, comm_errc::timed_out) << out[0].text;
  EXPECT_NE(out[0].text.find("ranks 1 to join"), std::string::npos) << out[0].text;
  EXPECT_NE(out[0].text.find("shared secret"), std::string::npos) << out[0].text;
  EXPECT_EQ(out[1].code, comm_errc::auth_failed) << out[1].text;
}

TEST(Handshake, ConfigMismatchNamesBothSides) {
  const auto out = run_world(2, [](std::uint32_t, config& c, std::optional<listener>& l) {
    c.timeout = 5s;
    communicator comm(c, std::move(l));
    return nothing();
  }, [](std::uint32_t r, config& c) {
    if (r == 1) c.chunk_bytes = 8192;
  });
  for (const auto& o : out) {
    EXPECT_EQ(o.code, comm_errc::config_mismatch) << o.text;
    EXPECT_NE(o.text.find("chunk bytes"), std::string::npos) << o.text;
    EXPECT_NE(o.text.find("rank 0 ("), std::string::npos) << o.text;
    EXPECT_NE(o.text.find("rank 1 ("), std::string::npos) << o.text;
  }
}

// Rank 1 joins properly and takes part in the communicator's first
// collective (the allgather of host keys, as a rank without shared memory:
// docs/comm-protocol.md section 8), then writes `bytes` on its link to rank
// 0 in place of its allreduce frame (collective #2); rank 0's allreduce
// must fail with `code` naming 1.
void hostile_frame(const std::vector<std::byte>& bytes, error_code code, bool bools = false) {
  const auto out = run_world(2, [&](std::uint32_t r, config& c, std::optional<listener>& l) {
    c.timeout = 5s;
    if (r == 1) {
      ring_links links = form_ring(c);
      frame_header join;
      join.sender = 1;
      join.sequence = 1;
      join.type = codec::dtype::u8;
      join.count = 33;
      send_all(links.next, encode_frame(join, std::vector<std::byte>(33)), clock::now() + 5s, "rank 0");
      send_all(links.next, bytes, clock::now() + 5s, "rank 0");
      std::this_thread::sleep_for(1s);  // keep the link open while rank 0 reads
      return nothing();
    }
    communicator comm(c, std::move(l));
    if (bools) {
      bool v[1000] = {};
      comm.allreduce(v);
    } else {
      std::vector<float> v(1000, 1.0f);
      comm.allreduce(v);
    }
    return nothing();
  });
  ASSERT_FALSE(out[0].ok);
  EXPECT_EQ(out[0].code, code) << out[0].text;
  EXPECT_EQ(out[0].culprit, 1u) << out[0].text;
  EXPECT_NE(out[0].text.find("rank 1"), std::string::npos) << out[0].text;
}

std::vector<std::byte> frame_bytes(std::uint32_t count, std::uint64_t sequence, std::uint32_t chunk = 0) {
  frame_header h;
  h.sender = 1;
  h.sequence = sequence;
  h.chunk = chunk;
  h.count = count;
  std::vector<float> v(count, 1.0f);
  return encode_frame(h, std::as_bytes(std::span(v)));
}

TEST(HostileFrames, OversizedIsRefusedBeforeAllocation) {
  // A header announcing 2^32-1 floats (16 GiB): refused from the header alone.
  auto f = frame_bytes(500, 2);
  wire::store<std::uint32_t>(0xFFFFFFFF, f.data() + 24, wire::host_order);
  f.resize(frame_header_size);
  hostile_frame(f, errc::limit_exceeded);
}

TEST(HostileFrames, CorruptedPayloadFailsTheCrcNamingThePeer) {
  auto f = frame_bytes(500, 2);
  f[frame_header_size + 17] ^= std::byte{0x01};
  hostile_frame(f, errc::checksum_mismatch);
}

TEST(HostileFrames, WrongSequenceIsAnErrorNotMixedIn) {
  hostile_frame(frame_bytes(500, 7), comm_errc::sequence_mismatch);
}

TEST(HostileFrames, WrongSizeNamesThePeer) { hostile_frame(frame_bytes(499, 2), errc::size_mismatch); }

// A bool is a byte holding 0 or 1: a peer's 2 is refused, naming it.
TEST(HostileFrames, ABoolByteOtherThanZeroOrOneNamesThePeer) {
  frame_header h;
  h.sender = 1;
  h.sequence = 2;
  h.type = codec::dtype::boolean;
  h.count = 500;
  std::vector<std::byte> v(500, std::byte{1});
  v[321] = std::byte{2};
  hostile_frame(encode_frame(h, v), errc::bad_value, true);
}

// A rank killed with SIGKILL mid-allreduce: every other rank fails within
// 5 s, naming it. Authenticated, the ABORTs that carry the news around the
// ring are sealed (after any half-sent frame) and must still verify, or the
// ranks would report forged_frame instead of the dead rank.
void kill_one(std::uint32_t n, std::uint32_t victim, frame_auth auth = frame_auth::none,
              algorithm how = algorithm::ring) {
  test::expect_killed_rank_named_fast(n, victim, [auth, how](std::uint32_t, config& c) {
    c.auth = auth;
    c.algorithm = how;
  });
}

TEST(DeadPeer, SigkillMidAllreduceFailsEveryRankFast3) { kill_one(3, 1); }
TEST(DeadPeer, SigkillMidAllreduceFailsEveryRankFast4) { kill_one(4, 2); }
TEST(DeadPeer, SigkillMidAllreduceFailsEveryRankFastWithFrameTags) { kill_one(4, 2, frame_auth::frames); }
TEST(DeadPeer, SigkillMidAllreduceFailsEveryRankFastEncrypted) { kill_one(3, 1, frame_auth::encrypt); }
// Recursive doubling and Rabenseifner: the ranks that exchange with the victim see it go;
// the others hear it from them, over the mesh. Rank 4 of 6 exchanges in
// both steps; rank 0 of 5 only folds into rank 1.
TEST(DeadPeer, SigkillMidRecursiveDoublingOrRabenseifnerFailsEveryRankFast) {
  kill_one(6, 4, frame_auth::none, algorithm::recursive_doubling);
  kill_one(5, 0, frame_auth::none, algorithm::recursive_doubling);
  kill_one(6, 4, frame_auth::none, algorithm::rabenseifner);
}

TEST(DeadPeer, SilentRankTimesOutAndEveryoneExits) {
  const auto out = run_world(3, [](std::uint32_t r, config& c, std::optional<listener>& l) {
    c.timeout = 1500ms;
    communicator comm(c, std::move(l));
    if (r == 2) {
      std::this_thread::sleep_for(4s);  // alive but never joins the collective
      return nothing();
    }
    std::vector<float> v(100, 1.0f);
    comm.allreduce(v);
    return nothing();
  });
  // Both waiting ranks time out (within the timeout and a margin: the
  // processes exited, so no rank hung). Rank 0, which waits on rank 2
  // directly, names it; rank 1 names whoever it waited for.
  for (std::uint32_t r = 0; r < 2; ++r) {
    ASSERT_FALSE(out[r].ok);
    EXPECT_EQ(out[r].code, comm_errc::timed_out) << out[r].text;
  }
  EXPECT_EQ(out[0].culprit, 2u) << out[0].text;
}

TEST(Communicator, BrokenCommunicatorRefusesLaterCalls) {
  const auto out = run_world(2, [](std::uint32_t r, config& c, std::optional<listener>& l) {
    c.timeout = 1s;
    communicator comm(c, std::move(l));
    if (r == 1) return nothing();  // leaves at once
    std::vector<float> v(10, 1.0f);
    try {
      comm.allreduce(v);
    } catch (const comm_error& e) {
      EXPECT_EQ(e.code(), comm_errc::peer_lost);
    }
    comm.allreduce(v);  // throws aborted
    return nothing();
  });
  EXPECT_EQ(out[0].code, comm_errc::aborted) << out[0].text;
  EXPECT_NE(out[0].text.find("earlier failure"), std::string::npos) << out[0].text;
}

TEST(Communicator, RanksDisagreeingOnCompressionFail) {
  const auto out = run_world(3, [](std::uint32_t r, config& c, std::optional<listener>& l) {
    c.timeout = 5s;
    communicator comm(c, std::move(l));
    std::vector<float> v(100, 1.0f);
    comm.allreduce(v, {.comp = r == 1 ? compression::bf16 : compression::none});
    return nothing();
  });
  for (const auto& o : out) {
    ASSERT_FALSE(o.ok);
    EXPECT_EQ(o.code, comm_errc::config_mismatch) << o.text;
  }
  EXPECT_NE(out[2].text.find("rank 1 sent F32 as bf16"), std::string::npos) << out[2].text;
}

TEST(Rendezvous, Ipv6Loopback) {
  // Skipped nowhere: a machine without ::1 fails here, loudly.
  const auto out = run_world(
      3,
      [](std::uint32_t r, config& c, std::optional<listener>& l) {
        communicator comm(c, std::move(l));
        std::vector<float> v(1000, static_cast<float>(r));
        comm.allreduce(v);
        return test::to_bytes(v);
      },
      {}, {}, "::1");
  for (const auto& o : out) {
    ASSERT_TRUE(o.ok) << o.text;
    EXPECT_EQ(test::from_bytes<float>(o.bytes), std::vector<float>(1000, 3.0f));
  }
}

// --- the handshake over a socket pair ---------------------------------------

std::pair<socket, socket> pair_of_sockets() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  return {socket(fds[0]), socket(fds[1])};
}

using test::sample;

TEST(Handshake, VersionMismatchNamesBothSides) {
  auto [a, b] = pair_of_sockets();
  std::thread acceptor([&] {
    try {
      (void)handshake_accept(b, sample(1), "s", clock::now() + 5s);
      ADD_FAILURE() << "accepted";
    } catch (const comm_error& e) {
      EXPECT_EQ(e.code(), comm_errc::version_mismatch);
    }
  });
  hello h = sample(0);
  h.version = protocol_version + 1;
  h.arch = "s390x";
  h.order = wire::byte_order::big;
  send_all(a, encode_hello(h), clock::now() + 5s, "acceptor");
  std::array<std::byte, 8> head{};
  recv_all(a, head, clock::now() + 5s, "acceptor");
  EXPECT_EQ(std::memcmp(head.data(), "FDR1", 4), 0);
  std::vector<std::byte> body(4 + wire::load<std::uint16_t>(head.data() + 6, wire::byte_order::little));
  std::memcpy(body.data(), head.data() + 4, 4);
  recv_all(a, std::span(body).subspan(4), clock::now() + 5s, "acceptor");
  const auto r = parse_reject(body);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->code, comm_errc::version_mismatch);
  EXPECT_NE(r->text.find("rank 1 (" + std::string(base::host_arch())), std::string::npos) << r->text;
  EXPECT_NE(r->text.find("rank 0 (s390x, big-endian, 64-bit) speaks version " + std::to_string(protocol_version + 1)), std::string::npos) << r->text;
  acceptor.join();
}

TEST(Handshake, InitiatorSeesTheRejectText) {
  auto [a, b] = pair_of_sockets();
  std::thread acceptor([&] {
    try {
      (void)handshake_accept(b, sample(1), "right", clock::now() + 5s);
    } catch (const comm_error&) {
    }
  });
  try {
    (void)handshake_initiate(a, sample(0), "wrong", clock::now() + 5s, "rank 1");
    FAIL() << "authenticated with a wrong secret";
  } catch (const comm_error& e) {
    EXPECT_EQ(e.code(), comm_errc::auth_failed);
    EXPECT_NE(std::string(e.what()).find("rank 1 (" + std::string(base::host_arch())), std::string::npos) << e.what();
  }
  acceptor.join();
}

}  // namespace
}  // namespace ferry::comm
