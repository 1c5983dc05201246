// Point-to-point messages (communicator.h's send and recv): every rank to
// every other on worlds with and without the mesh, several dtypes, tags
// received out of their sending order, receives from any rank, two ranks
// that post their receives and then send long messages to each other at
// once, messages that arrive among a collective's frames, authenticated
// and encrypted links, and the errors a receive fails with while the
// communicator stays usable. Each rank checks what it receives and throws
// on a difference (the parent sees it as the rank's error text).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ferry/comm/communicator.h"
#include "world.h"

namespace ferry::comm {
namespace {

using test::expect_all_ok;
using test::run_world;

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// The values rank `from` sends rank `to`: distinct per pair and index.
std::vector<float> floats(std::uint32_t from, std::uint32_t to, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(from * 1000 + to) + static_cast<float>(i) * 0.5f;
  return v;
}

class PointToPoint : public ::testing::TestWithParam<std::uint32_t> {};

// Every rank sends every other rank f32 and i64 messages (one empty, one
// longer than a chunk) and receives them in another order than they left.
TEST_P(PointToPoint, EveryRankToEveryOtherInAnyTagOrder) {
  const std::uint32_t n = GetParam();
  const auto out = run_world(
      n,
      [&](std::uint32_t r, config& c, std::optional<listener>& l) {
        c.chunk_bytes = 512;  // long messages take several frames
        communicator comm(c, std::move(l));
        std::vector<work> sends;
        std::vector<std::vector<float>> f(n);
        std::vector<std::vector<std::int64_t>> ints(n);
        for (std::uint32_t to = 0; to < n; ++to) {
          if (to == r) continue;
          f[to] = floats(r, to, 1000);
          ints[to] = {std::int64_t{-1} - r, std::int64_t{1} << 40, to};
          sends.push_back(comm.start_send_bytes(codec::dtype::f32, std::as_bytes(std::span(f[to])), to, 7));
          sends.push_back(comm.start_send_bytes(codec::dtype::i64, std::as_bytes(std::span(ints[to])), to, -3));
          sends.push_back(comm.start_send_bytes(codec::dtype::u8, {}, to, 0));
          // Same sender and tag: received in the order sent.
          sends.push_back(comm.start_send_bytes(codec::dtype::i64, std::as_bytes(std::span(ints[to]).first(1)), to, -3));
        }
        for (std::uint32_t from = 0; from < n; ++from) {
          if (from == r) continue;
          std::vector<std::int64_t> i(3);
          require(comm.recv(i, from, -3) == from, "the sender");  // sent second, taken first
          require(i == std::vector<std::int64_t>{std::int64_t{-1} - from, std::int64_t{1} << 40, r}, "i64 values");
          std::vector<std::uint8_t> none;
          comm.recv(none, from, 0);
          std::vector<std::int64_t> second(1);
          comm.recv(second, from, -3);
          require(second[0] == std::int64_t{-1} - from, "the second message with tag -3");
          std::vector<float> v(1000);
          comm.recv(v, from, 7);
          require(v == floats(from, r, 1000), "f32 values from rank " + std::to_string(from));
        }
        for (work& w : sends) w.wait();
        comm.barrier();
        return std::vector<std::byte>{};
      });
  expect_all_ok(out);
}

INSTANTIATE_TEST_SUITE_P(Worlds, PointToPoint, ::testing::Values(2u, 3u, 5u));

// Two ranks post their receives first, then send each other 8 MB at once:
// both finish (each reads the other's message while it sends its own).
TEST(PointToPointExchange, ReceivesPostedFirstThenLongSendsBothWays) {
  const auto out = run_world(4, [&](std::uint32_t r, config& c, std::optional<listener>& l) {
    communicator comm(c, std::move(l));
    const std::uint32_t partner = r ^ 1;
    std::vector<float> mine = floats(r, partner, 2 << 20), theirs(2 << 20);
    work rx = comm.start_recv_bytes(codec::dtype::f32, std::as_writable_bytes(std::span(theirs)), partner, 1);
    work tx = comm.start_send_bytes(codec::dtype::f32, std::as_bytes(std::span(mine)), partner, 1);
    tx.wait();
    rx.wait();
    require(theirs == floats(partner, r, 2 << 20), "the partner's 8 MB");
    return std::vector<std::byte>{};
  });
  expect_all_ok(out);
}

// Any-sender receives return each sender once; a message sent before an
// allreduce and received after it passes the collective's frames (rank 0
// sends to its ring successor, whose allreduce reads that connection).
TEST(PointToPointExchange, AnySourceAndMessagesAmongCollectiveFrames) {
  const auto out = run_world(4, [&](std::uint32_t r, config& c, std::optional<listener>& l) {
    communicator comm(c, std::move(l));
    std::vector<double> one{static_cast<double>(r)};
    if (r != 0) comm.send(one, 0, 5);
    if (r == 0) {
      std::vector<bool> seen(4, false);
      for (int k = 0; k < 3; ++k) {
        std::vector<double> v(1);
        const std::uint32_t from = comm.recv(v, std::nullopt, 5);
        require(from != 0 && !seen[from] && v[0] == static_cast<double>(from), "any-source receive");
        seen[from] = true;
      }
    }
    std::vector<float> late{-0.0f, std::nanf("0x123"), 1e-40f};
    if (r == 0) comm.send(late, 1, 9);
    std::vector<float> sum{1.0f};
    comm.allreduce(sum);
    require(sum[0] == 4.0f, "the allreduce");
    if (r == 1) {
      std::vector<float> got(3);
      comm.recv(got, 0, 9);
      require(std::memcmp(got.data(), late.data(), sizeof(float) * 3) == 0, "-0, a NaN payload and a subnormal, bit for bit");
    }
    comm.barrier();
    return std::vector<std::byte>{};
  });
  expect_all_ok(out);
}

// A long message to a rank already inside a collective that waits for the
// sender, over a connection the collective does not use (ranks 0 and 2 of
// four are joined by the mesh): the collective reads it aside, the send
// finishes, the sender joins the collective.
TEST(PointToPointExchange, LongMessageToARankWaitingInACollective) {
  const auto out = run_world(4, [&](std::uint32_t r, config& c, std::optional<listener>& l) {
    communicator comm(c, std::move(l));
    std::vector<float> big = floats(0, 2, 4 << 20);  // 16 MB: more than the sockets hold
    if (r == 0) comm.send(big, 2, 1);
    std::vector<float> sum{1.0f};
    comm.allreduce(sum);
    require(sum[0] == 4.0f, "the allreduce");
    if (r == 2) {
      std::vector<float> got(big.size());
      comm.recv(got, 0, 1);
      require(got == big, "the 16 MB message");
    }
    comm.barrier();
    return std::vector<std::byte>{};
  });
  expect_all_ok(out);
}

// A receive of the wrong size or dtype fails (the message is dropped), one
// that nothing matches times out; the communicator goes on working.
TEST(PointToPointExchange, FailedReceivesLeaveTheCommunicatorUsable) {
  const auto out = run_world(
      3,
      [&](std::uint32_t r, config& c, std::optional<listener>& l) {
        communicator comm(c, std::move(l));
        std::vector<std::int32_t> v{1, 2, 3};
        std::string errors;
        if (r == 0) {
          comm.send(v, 1, 0);
          comm.send(v, 1, 0);
        }
        if (r == 1) {
          std::vector<std::int32_t> two(2);
          std::vector<float> three(3);
          for (auto* attempt : {+[](communicator& k, std::vector<std::int32_t>& a, std::vector<float>&) { k.recv(a, 0, 0); },
                                +[](communicator& k, std::vector<std::int32_t>&, std::vector<float>& b) { k.recv(b, 0, 0); },
                                +[](communicator& k, std::vector<std::int32_t>& a, std::vector<float>&) { k.recv(a, 2, 4); }}) {
            try {
              attempt(comm, two, three);
              errors += "none;";
            } catch (const comm_error& e) {
              errors += std::string(name(e.code())) + ";";
            }
          }
          require(errors == "size_mismatch;bad_argument;timed_out;", "the receives' errors: " + errors);
        }
        std::vector<std::int32_t> total{static_cast<std::int32_t>(r)};
        comm.allreduce(total);
        require(total[0] == 3, "the allreduce after them");
        return std::vector<std::byte>{};
      },
      // Rank 1's receive times out long before the others' allreduce would.
      [](std::uint32_t r, config& c) { c.timeout = std::chrono::milliseconds(r == 1 ? 500 : 10'000); });
  expect_all_ok(out);
}

// Authenticated and encrypted links carry messages both ways over the
// mesh; sending to this rank or past the world is refused.
TEST(PointToPointExchange, AuthenticatedAndEncryptedMeshes) {
  for (const frame_auth a : {frame_auth::frames, frame_auth::encrypt}) {
    const auto out = run_world(
        5,
        [&](std::uint32_t r, config& c, std::optional<listener>& l) {
          communicator comm(c, std::move(l));
          const std::uint32_t to = (r + 2) % 5, from = (r + 3) % 5;
          std::vector<std::uint16_t> mine(300, static_cast<std::uint16_t>(r)), theirs(300);
          work rx = comm.start_recv_bytes(codec::dtype::u16, std::as_writable_bytes(std::span(theirs)), from, 2);
          comm.send(mine, to, 2);
          rx.wait();
          require(theirs == std::vector<std::uint16_t>(300, static_cast<std::uint16_t>(from)), "the message");
          for (const std::uint32_t bad : {r, 5u}) {
            try {
              comm.send(mine, bad, 0);
              require(false, "a send to rank " + std::to_string(bad) + " was taken");
            } catch (const ferry::exception& e) {
              require(e.code() == comm_errc::bad_argument, e.what());
            }
          }
          comm.barrier();
          return std::vector<std::byte>{};
        },
        [&](std::uint32_t, config& c) { c.auth = a; });
    expect_all_ok(out);
  }
}

// all_to_all with uneven pieces (some empty, some longer than a chunk) in
// f32, i16 and bool, on worlds with and without the mesh.
class AllToAll : public ::testing::TestWithParam<std::uint32_t> {};

// Elements rank `from` sends rank `to`: (from + 2 * to) % 5 * 300 of them.
std::size_t piece(std::uint32_t from, std::uint32_t to) { return (from + 2 * to) % 5 * 300; }

TEST_P(AllToAll, UnevenPiecesArriveInRankOrder) {
  const std::uint32_t n = GetParam();
  const auto out = run_world(n, [&](std::uint32_t r, config& c, std::optional<listener>& l) {
    c.chunk_bytes = 512;
    communicator comm(c, std::move(l));
    std::vector<std::size_t> sc(n), rc(n);
    std::vector<float> in, expect;
    std::vector<std::int16_t> in16, expect16;
    std::vector<std::uint8_t> inb, expectb;
    for (std::uint32_t k = 0; k < n; ++k) {
      sc[k] = piece(r, k);
      rc[k] = piece(k, r);
      for (std::size_t i = 0; i < sc[k]; ++i) {
        in.push_back(static_cast<float>(r * 100000 + k * 1000 + i));
        in16.push_back(static_cast<std::int16_t>(-static_cast<int>(r * 1000 + k * 100 + i % 100)));
        inb.push_back(static_cast<std::uint8_t>((r + k + i) % 2));
      }
      for (std::size_t i = 0; i < rc[k]; ++i) {
        expect.push_back(static_cast<float>(k * 100000 + r * 1000 + i));
        expect16.push_back(static_cast<std::int16_t>(-static_cast<int>(k * 1000 + r * 100 + i % 100)));
        expectb.push_back(static_cast<std::uint8_t>((k + r + i) % 2));
      }
    }
    std::vector<float> got(expect.size());
    comm.all_to_all_bytes(codec::dtype::f32, std::as_bytes(std::span(in)), sc, std::as_writable_bytes(std::span(got)), rc);
    require(got == expect, "f32 pieces");
    std::vector<std::int16_t> got16(expect16.size());
    work w = comm.start_all_to_all_bytes(codec::dtype::i16, std::as_bytes(std::span(in16)), sc,
                                         std::as_writable_bytes(std::span(got16)), rc);
    w.wait();
    require(got16 == expect16, "i16 pieces");
    std::vector<std::uint8_t> gotb(expectb.size());
    comm.all_to_all_bytes(codec::dtype::boolean, std::as_bytes(std::span(inb)), sc,
                          std::as_writable_bytes(std::span(gotb)), rc);
    require(gotb == expectb, "bool pieces");
    std::vector<std::int32_t> even(3 * n, static_cast<std::int32_t>(r)), evenout(3 * n);
    comm.all_to_all(even, evenout);
    for (std::uint32_t k = 0; k < n; ++k) require(evenout[3 * k] == static_cast<std::int32_t>(k), "equal pieces");
    return std::vector<std::byte>{};
  });
  expect_all_ok(out);
}

INSTANTIATE_TEST_SUITE_P(Worlds, AllToAll, ::testing::Values(1u, 2u, 3u, 4u, 6u));

// A rank whose counts disagree with a sender's fails naming that sender.
TEST(AllToAllErrors, CountsThatDisagreeFailNamingTheSender) {
  const auto out = run_world(3, [&](std::uint32_t r, config& c, std::optional<listener>& l) {
    communicator comm(c, std::move(l));
    std::vector<std::size_t> counts{2, 2, 2};
    std::vector<float> in(6, 1.0f), got(6 + (r == 1 ? 1 : 0));
    std::vector<std::size_t> rc = counts;
    if (r == 1) rc[2] = 3;  // rank 2 sends it 2
    comm.all_to_all_bytes(codec::dtype::f32, std::as_bytes(std::span(in)), counts,
                          std::as_writable_bytes(std::span(got)), rc);
    return std::vector<std::byte>{};
  });
  ASSERT_FALSE(out[1].ok);
  EXPECT_EQ(out[1].code, errc::size_mismatch) << out[1].text;
  EXPECT_EQ(out[1].culprit, 2u) << out[1].text;
}

}  // namespace
}  // namespace ferry::comm
