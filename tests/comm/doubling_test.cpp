// Recursive doubling (FERRY_ALGORITHM=recursive_doubling) against the
// order communicator.cpp documents, computed here with the kernels
// themselves (reduce_test checks those against a scalar reference): every
// op and dtype on worlds of every shape the fold meets (a power of two, one
// and two ranks past one, the full mesh of eight), bit-identical on every
// rank; with authenticated and encrypted frames on the mesh's links; and a
// rank with another algorithm refused at the handshake.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "ferry/comm/communicator.h"
#include "ferry/comm/detail/reduce.h"
#include "typed_input.h"
#include "world.h"

namespace ferry::comm {
namespace {

using test::run_world;

void expect_all_ok(const std::vector<test::outcome>& out) {
  for (std::size_t r = 0; r < out.size(); ++r) ASSERT_TRUE(out[r].ok) << "rank " << r << ": " << out[r].text;
}

// Recursive doubling's order: with p2 the largest power of two <= n and
// rem = n - p2, ranks 2i and 2i+1 (i < rem) are combined first (lower rank
// first) as number i, ranks from 2 rem on are numbers r - rem; then for
// each bit, numbers v and v ^ bit combine as (lower, higher).
std::vector<std::byte> doubling_reference(const std::vector<std::vector<std::byte>>& x, codec::dtype t, reduce_op op) {
  const auto n = static_cast<std::uint32_t>(x.size());
  const std::size_t count = x[0].size() / codec::size_of(t);
  std::uint32_t p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const std::uint32_t rem = n - p2;
  std::vector<std::vector<std::byte>> a(p2);
  for (std::uint32_t v = 0; v < p2; ++v) {
    if (v < rem) {
      a[v].resize(x[0].size());
      detail::reduce(op, t, a[v].data(), x[2 * v].data(), x[2 * v + 1].data(), wire::host_order, count);
    } else {
      a[v] = x[v + rem];
    }
  }
  for (std::uint32_t bit = 1; bit < p2; bit *= 2) {
    std::vector<std::vector<std::byte>> b(p2, std::vector<std::byte>(x[0].size()));
    for (std::uint32_t v = 0; v < p2; ++v) {
      const std::uint32_t lo = std::min(v, v ^ bit), hi = std::max(v, v ^ bit);
      detail::reduce(op, t, b[v].data(), a[lo].data(), a[hi].data(), wire::host_order, count);
    }
    a = std::move(b);
  }
  if (op == reduce_op::avg) detail::divide(t, a[0].data(), count, n);
  return a[0];
}

class Doubling : public ::testing::TestWithParam<std::uint32_t> {};

TEST_P(Doubling, EveryOpAndDtypeIsTheDoublingOrderOnEveryRank) {
  const std::uint32_t n = GetParam();
  constexpr std::size_t count = 333;  // with 512-byte chunks: one to five chunks
  std::vector<std::pair<codec::dtype, reduce_op>> cases;
  for (const codec::dtype t : codec::all_dtypes) {
    for (const reduce_op op : all_reduce_ops) {
      if (detail::reducible(op, t)) cases.emplace_back(t, op);
    }
  }
  const auto out = run_world(
      n,
      [&](std::uint32_t r, config& c, std::optional<listener>& l) {
        communicator comm(c, std::move(l));
        std::vector<std::byte> all;
        for (const auto& [t, op] : cases) {
          auto v = test::typed_input(r, t, count);
          comm.allreduce_bytes(t, v, {.op = op});
          all.insert(all.end(), v.begin(), v.end());
        }
        // The other collectives still take the ring, in the same world.
        std::vector<std::uint32_t> ranks(n);
        comm.allgather(std::span<const std::uint32_t>(&r, 1), ranks);
        for (std::uint32_t i = 0; i < n; ++i) EXPECT_EQ(ranks[i], i);
        std::vector<float> empty;
        comm.allreduce(empty);
        return all;
      },
      [](std::uint32_t, config& c) {
        c.chunk_bytes = 512;
        c.algorithm = algorithm::recursive_doubling;
      });
  expect_all_ok(out);
  std::size_t at = 0;
  for (const auto& [t, op] : cases) {
    std::vector<std::vector<std::byte>> xs(n);
    for (std::uint32_t r = 0; r < n; ++r) xs[r] = test::typed_input(r, t, count);
    const auto want = doubling_reference(xs, t, op);
    for (std::uint32_t r = 0; r < n; ++r) {
      const std::vector<std::byte> got(out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at),
                                       out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at + want.size()));
      EXPECT_EQ(got, want) << codec::name(t) << " " << name(op) << ", rank " << r;
    }
    at += want.size();
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, Doubling, ::testing::Values(2u, 3u, 4u, 5u, 6u, 8u),
                         [](const auto& p) { return std::to_string(p.param) + "ranks"; });

// The mesh's links seal and open frames like the ring's.
TEST(DoublingMesh, AuthenticatedAndEncryptedFramesOnTheMesh) {
  for (const frame_auth auth : {frame_auth::frames, frame_auth::encrypt}) {
    const std::uint32_t n = 6;
    const auto out = run_world(
        n,
        [&](std::uint32_t r, config& c, std::optional<listener>& l) {
          communicator comm(c, std::move(l));
          auto v = test::typed_input(r, codec::dtype::f32, 5000);
          comm.allreduce_bytes(codec::dtype::f32, v, {.op = reduce_op::sum});
          return v;
        },
        [&](std::uint32_t, config& c) {
          c.chunk_bytes = 4096;
          c.auth = auth;
          c.algorithm = algorithm::recursive_doubling;
        });
    expect_all_ok(out);
    std::vector<std::vector<std::byte>> xs(n);
    for (std::uint32_t r = 0; r < n; ++r) xs[r] = test::typed_input(r, codec::dtype::f32, 5000);
    const auto want = doubling_reference(xs, codec::dtype::f32, reduce_op::sum);
    for (std::uint32_t r = 0; r < n; ++r) EXPECT_EQ(out[r].bytes, want) << name(auth) << ", rank " << r;
  }
}

// Ranks that would take different paths are stopped before any frame.
TEST(DoublingMesh, ARankWithAnotherAlgorithmIsRefusedAtTheHandshake) {
  const auto out = run_world(
      3,
      [](std::uint32_t, config& c, std::optional<listener>& l) {
        communicator comm(c, std::move(l));
        return std::vector<std::byte>{};
      },
      [](std::uint32_t r, config& c) {
        c.timeout = std::chrono::milliseconds(5000);
        if (r == 2) c.algorithm = algorithm::recursive_doubling;
      });
  bool named = false;
  for (const auto& o : out) {
    EXPECT_FALSE(o.ok);
    named = named || o.text.find("FERRY_ALGORITHM=recursive_doubling") != std::string::npos;
  }
  EXPECT_TRUE(named) << out[0].text << "\n" << out[1].text << "\n" << out[2].text;
}

}  // namespace
}  // namespace ferry::comm
