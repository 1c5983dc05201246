// A machine on the path: rank 1 joins rank 0 through a tampering proxy, so
// the proxy carries rank 1's frames to rank 0 (rank n-1's join connection
// is its link to rank 0). It passes the handshake on, then parses the frame
// stream and attacks one frame: flips a byte, injects a frame, replays one,
// drops one, truncates one (then goes on, or closes). With FERRY_AUTH=frames
// or encrypt every attack fails rank 0's allreduce with a typed error
// naming the link, and no rank accepts a result. Without authentication a
// byte flipped under a recomputed CRC is accepted: the contrast.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "ferry/codec/crc32c.h"
#include "ferry/codec/dtype.h"
#include "ferry/comm/communicator.h"
#include "ferry/comm/frame.h"
#include "ferry/comm/handshake.h"
#include "ferry/wire/byte_order.h"
#include "world.h"

namespace ferry::comm {
namespace {

using namespace std::chrono_literals;
using test::run_world;

enum class attack { flip, flip_fix_crc, inject, replay, drop, truncate, truncate_close };

const char* attack_name(attack a) {
  switch (a) {
    case attack::flip: return "flip";
    case attack::flip_fix_crc: return "flip_fix_crc";
    case attack::inject: return "inject";
    case attack::replay: return "replay";
    case attack::drop: return "drop";
    case attack::truncate: return "truncate";
    case attack::truncate_close: return "truncate_close";
  }
  return "?";
}

constexpr std::size_t count = 10'000;  // 2 blocks of 20000 bytes: 5 chunks each
constexpr std::uint32_t chunk_bytes = 4096;
// Frame 0 on the link is the communicator's first collective (the host
// keys' allgather); frame 3 is a stage-0 frame of the allreduce: rank 0
// cannot finish without it.
constexpr std::size_t target = 3;

float input(std::uint32_t rank, std::size_t i) { return static_cast<float>(rank + 1) + 0.25f * static_cast<float>(i); }

void send_bytes(int fd, const std::byte* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

// The length of the message (frame or ABORT) at the front of `b`, once its
// header is in; 0 if not yet known.
std::size_t message_size(const std::vector<std::byte>& b, frame_auth mode) {
  if (b.size() < 4) return 0;
  if (std::memcmp(b.data(), "FDX1", 4) == 0) return mode == frame_auth::none ? abort_size : sealed_abort_size;
  if (b.size() < frame_header_size) return 0;
  const auto flags = std::to_integer<unsigned>(b[5]);
  const auto order = (flags & 1) ? wire::byte_order::big : wire::byte_order::little;
  const auto n = wire::load<std::uint32_t>(b.data() + 24, order);
  const std::size_t width = (flags & 0x0E) != 0 ? 2 : codec::size_of(static_cast<codec::dtype>(b[6]));
  return frame_header_size + width * std::size_t{n} + ((flags & 0x10) ? frame_tag_size : frame_trailer_size);
}

// Fixes the CRC of an unauthenticated frame (what an attacker can always do).
void fix_crc(std::vector<std::byte>& f) {
  const auto order = (std::to_integer<unsigned>(f[5]) & 1) ? wire::byte_order::big : wire::byte_order::little;
  const std::size_t body = f.size() - frame_trailer_size;
  wire::store<std::uint32_t>(codec::crc32c(std::span<const std::byte>(f).first(body)), f.data() + body, order);
}

// The proxy: `in` is rank 1's connection, `out` rank 0's. Bytes from rank 0
// pass untouched; rank 1's HELLO and AUTH pass, then its frames are parsed
// one by one and frame `target` attacked.
void proxy(int in, int out, attack a, frame_auth mode) {
  std::size_t pass = hello_size + auth_size;
  std::vector<std::byte> pending;
  std::size_t index = 0;
  std::vector<std::byte> earlier;
  for (;;) {
    std::array<pollfd, 2> fds{{{in, POLLIN, 0}, {out, POLLIN, 0}}};
    if (::poll(fds.data(), 2, 20'000) <= 0) return;
    std::byte buf[65536];
    if (fds[1].revents != 0) {
      const ssize_t got = ::recv(out, buf, sizeof buf, 0);
      if (got <= 0) return;
      send_bytes(in, buf, static_cast<std::size_t>(got));
    }
    if (fds[0].revents == 0) continue;
    const ssize_t got = ::recv(in, buf, sizeof buf, 0);
    if (got <= 0) return;
    pending.insert(pending.end(), buf, buf + got);
    const std::size_t through = std::min(pass, pending.size());
    send_bytes(out, pending.data(), through);
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(through));
    pass -= through;
    for (std::size_t size; (size = message_size(pending, mode)) != 0 && pending.size() >= size;) {
      std::vector<std::byte> m(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(size));
      pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(size));
      const std::size_t i = index++;
      if (i + 1 == target) earlier = m;
      if (i != target) {
        send_bytes(out, m.data(), m.size());
        continue;
      }
      switch (a) {
        case attack::flip:
        case attack::flip_fix_crc:
          m[frame_header_size + 5] ^= std::byte{0x10};  // a payload byte
          if (a == attack::flip_fix_crc) fix_crc(m);
          send_bytes(out, m.data(), m.size());
          break;
        case attack::inject: {
          // A frame of its own, with the header rank 0 expects next.
          std::vector<std::byte> forged = m;
          for (std::size_t k = frame_header_size; k < forged.size(); ++k) forged[k] = std::byte{0x42};
          if (mode == frame_auth::none) fix_crc(forged);
          send_bytes(out, forged.data(), forged.size());
          send_bytes(out, m.data(), m.size());
          break;
        }
        case attack::replay:
          send_bytes(out, earlier.data(), earlier.size());
          send_bytes(out, m.data(), m.size());
          break;
        case attack::drop: break;
        case attack::truncate: send_bytes(out, m.data(), m.size() - 7); break;
        case attack::truncate_close:
          send_bytes(out, m.data(), m.size() - 7);
          ::shutdown(out, SHUT_RDWR);
          ::shutdown(in, SHUT_RDWR);
          return;
      }
    }
  }
}

struct proxy_socket {
  int fd = -1;
  std::uint16_t port = 0;
  proxy_socket() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, 4) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "proxy socket: " << std::strerror(errno);
    }
    port = ntohs(a.sin_port);
  }
  ~proxy_socket() { ::close(fd); }
};

// A two-rank world whose link from rank 1 to rank 0 runs through the
// attacking proxy; `chunk` sets how many frames the allreduce sends.
std::vector<test::outcome> attacked_world(attack a, frame_auth mode, std::uint32_t chunk = chunk_bytes) {
  const proxy_socket listening;
  return run_world(3, [&](std::uint32_t r, config& c, std::optional<listener>& l) {
    if (r == 2) {  // the machine on the path
      const int in = ::accept(listening.fd, nullptr, nullptr);
      const int out = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      to.sin_port = htons(c.master_port);
      if (::connect(out, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0) proxy(in, out, a, mode);
      ::close(in);
      ::close(out);
      return std::vector<std::byte>();
    }
    c.world_size = 2;
    c.auth = mode;
    c.chunk_bytes = chunk;
    c.timeout = 10s;
    if (r == 1) c.master_port = listening.port;
    communicator comm(c, std::move(l));
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = input(r, i);
    comm.allreduce(v);
    return test::to_bytes(v);
  });
}

std::vector<float> expected_sum() {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = input(0, i) + input(1, i);
  return v;
}

class Tamper : public ::testing::TestWithParam<frame_auth> {};

TEST_P(Tamper, EveryAttackFailsTheAllreduceNamingTheLink) {
  const frame_auth mode = GetParam();
  for (const attack a : {attack::flip, attack::flip_fix_crc, attack::inject, attack::replay, attack::drop,
                         attack::truncate, attack::truncate_close}) {
    const auto out = attacked_world(a, mode);
    const std::string what = std::string(name(mode)) + ", " + attack_name(a);
    ASSERT_FALSE(out[0].ok) << what << ": rank 0 accepted a result";
    const error_code code = a == attack::truncate_close ? error_code(comm_errc::peer_lost)
                                                        : error_code(comm_errc::forged_frame);
    EXPECT_EQ(out[0].code, code) << what << ": " << out[0].text;
    EXPECT_EQ(out[0].culprit, 1u) << what;
    EXPECT_NE(out[0].text.find("link from rank 1 to rank 0"), std::string::npos) << what << ": " << out[0].text;
    if (code == comm_errc::forged_frame) {
      EXPECT_NE(out[0].text.find("message #" + std::to_string(target) + " on the link"), std::string::npos)
          << what << ": " << out[0].text;
    }
    // Rank 1 cannot finish without rank 0's share of what was attacked.
    EXPECT_FALSE(out[1].ok) << what << ": rank 1 accepted a result";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, Tamper, ::testing::Values(frame_auth::frames, frame_auth::encrypt),
                         [](const auto& p) { return std::string(name(p.param)); });

TEST(TamperWithoutAuth, AFlipUnderAFixedCrcIsAcceptedAndAReplayIsCaughtOnlyByItsSequence) {
  // What FERRY_AUTH prevents: a wrong result, silently accepted everywhere.
  auto out = attacked_world(attack::flip_fix_crc, frame_auth::none);
  ASSERT_TRUE(out[0].ok) << out[0].text;
  ASSERT_TRUE(out[1].ok) << out[1].text;
  EXPECT_NE(test::from_bytes<float>(out[0].bytes), expected_sum());
  EXPECT_EQ(out[0].bytes, out[1].bytes);
  // A plain flip is an accident to the CRC.
  out = attacked_world(attack::flip, frame_auth::none);
  EXPECT_EQ(out[0].code, errc::checksum_mismatch) << out[0].text;
  // A replay within a collective breaks the chunk order; across worlds
  // (numbers restart at collective #1) it would not.
  out = attacked_world(attack::replay, frame_auth::none);
  EXPECT_EQ(out[0].code, comm_errc::sequence_mismatch) << out[0].text;
  EXPECT_NE(out[0].text.find("link from rank 1 to rank 0"), std::string::npos) << out[0].text;
}

TEST(TamperWithoutAttack, TheProxyAloneChangesNothing) {
  // The same world through a proxy that attacks frame `target` of a stream
  // too short to have it: the baseline every attack is measured against.
  for (const frame_auth mode : {frame_auth::none, frame_auth::frames, frame_auth::encrypt}) {
    // Default chunk bytes: the keys' frame and 2 of the allreduce each way, no frame #3.
    const auto out = attacked_world(attack::flip, mode, config{}.chunk_bytes);
    for (std::uint32_t r = 0; r < 2; ++r) {
      ASSERT_TRUE(out[r].ok) << name(mode) << ": " << out[r].text;
      EXPECT_EQ(test::from_bytes<float>(out[r].bytes), expected_sum()) << name(mode);
    }
  }
}

}  // namespace
}  // namespace ferry::comm
