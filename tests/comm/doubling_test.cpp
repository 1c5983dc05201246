// Recursive doubling (FERRY_ALGORITHM=recursive_doubling) against the
// order communicator.cpp documents, computed here with the kernels
// themselves (reduce_test checks those against a scalar reference): every
// op and dtype on worlds of every shape the fold meets (a power of two, one
// and two ranks past one, the full mesh of eight), bit-identical on every
// rank; with authenticated and encrypted frames on the mesh's links; and a
// rank with another algorithm refused at the handshake.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "ferry/comm/communicator.h"
#include "ferry/comm/cost_model.h"
#include "ferry/comm/detail/reduce.h"
#include "typed_input.h"
#include "world.h"

namespace ferry::comm {
namespace {

using test::expect_all_ok;
using test::run_world;

// The order of recursive doubling and of Rabenseifner: with p2 the largest
// power of two <= n and rem = n - p2, ranks 2i and 2i+1 (i < rem) are
// combined first (lower rank first) as number i, ranks from 2 rem on are
// numbers r - rem; then for each bit, numbers v and v ^ bit combine as
// (lower, higher): bits from the lowest up for recursive doubling, from
// the highest down for Rabenseifner's halving (every block alike).
std::vector<std::byte> tree_reference(const std::vector<std::vector<std::byte>>& x, codec::dtype t, reduce_op op,
                                      algorithm how = algorithm::recursive_doubling) {
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
  std::vector<std::uint32_t> bits;
  for (std::uint32_t bit = 1; bit < p2; bit *= 2) bits.push_back(bit);
  if (how == algorithm::rabenseifner) std::reverse(bits.begin(), bits.end());
  for (const std::uint32_t bit : bits) {
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

class Doubling : public ::testing::TestWithParam<std::tuple<algorithm, std::uint32_t>> {};

TEST_P(Doubling, EveryOpAndDtypeIsTheTreeOrderOnEveryRank) {
  const auto [how, n] = GetParam();
  constexpr std::size_t count = 333;  // with 512-byte chunks: one to six chunks
  const auto cases = test::reducible_cases();
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
        // The other collectives still take the ring, in the same world (a
        // child's EXPECT would not reach the test: it throws instead).
        std::vector<std::uint32_t> ranks(n);
        comm.allgather(std::span<const std::uint32_t>(&r, 1), ranks);
        for (std::uint32_t i = 0; i < n; ++i) {
          if (ranks[i] != i) throw std::runtime_error("allgather gave " + std::to_string(ranks[i]) + " for rank " + std::to_string(i));
        }
        std::vector<float> empty;
        comm.allreduce(empty);
        return all;
      },
      [how = how](std::uint32_t, config& c) {
        c.chunk_bytes = 512;
        c.algorithm = how;
      });
  expect_all_ok(out);
  std::size_t at = 0;
  for (const auto& [t, op] : cases) {
    std::vector<std::vector<std::byte>> xs(n);
    for (std::uint32_t r = 0; r < n; ++r) xs[r] = test::typed_input(r, t, count);
    const auto want = tree_reference(xs, t, op, how);
    for (std::uint32_t r = 0; r < n; ++r) {
      const std::vector<std::byte> got(out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at),
                                       out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at + want.size()));
      EXPECT_EQ(got, want) << codec::name(t) << " " << name(op) << ", rank " << r;
    }
    at += want.size();
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, Doubling,
                         ::testing::Combine(::testing::Values(algorithm::recursive_doubling, algorithm::rabenseifner),
                                            // Under qemu-user and the sanitizers, one world
                                            // of each shape above: 3, 6, 8.
                                            ::testing::ValuesIn(test::every_shape
                                                                    ? std::vector<std::uint32_t>{2, 3, 4, 5, 6, 8}
                                                                    : std::vector<std::uint32_t>{3, 6, 8})),
                         [](const auto& p) {
                           return std::string(name(std::get<0>(p.param))) + "_" + std::to_string(std::get<1>(p.param)) +
                                  "ranks";
                         });

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
    const auto want = tree_reference(xs, codec::dtype::f32, reduce_op::sum);
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

// FERRY_ALGORITHM=auto: rank 0's link costs decide for every rank (the
// others' differ here and would choose otherwise); each allreduce gets the
// bits of the algorithm chosen. Five ranks: recursive doubling for 4 KB,
// the ring for 100 KB (the fold would send it twice more); eight ranks:
// recursive doubling, then Rabenseifner.
TEST(DoublingMesh, AutoTakesRankZerosCostsAndEachAlgorithmsBits) {
  const std::size_t small = 1000, large = 25'000;  // f32: 4 KB and 100 KB
  for (const auto& [n, for_large] : {std::pair{5u, algorithm::ring}, std::pair{8u, algorithm::rabenseifner}}) {
    auto world = [&, n = n](algorithm a) {
      return run_world(
          n,
          [&](std::uint32_t r, config& c, std::optional<listener>& l) {
            communicator comm(c, std::move(l));
            auto s = test::typed_input(r, codec::dtype::f32, small);
            comm.allreduce_bytes(codec::dtype::f32, s);
            auto g = test::typed_input(r, codec::dtype::f32, large);
            comm.allreduce_bytes(codec::dtype::f32, g);
            s.insert(s.end(), g.begin(), g.end());
            // The choices, as the communicator reports them.
            s.push_back(static_cast<std::byte>(comm.algorithm_for(4 * small)));
            s.push_back(static_cast<std::byte>(comm.algorithm_for(4 * large)));
            return s;
          },
          [&](std::uint32_t r, config& c) {
            c.algorithm = a;
            if (r != 0) c.link.alpha_s = 0;  // alone, these ranks would pick the ring for both
          });
    };
    const auto chosen = world(algorithm::automatic);
    const auto doubling = world(algorithm::recursive_doubling);
    const auto other = world(for_large);
    expect_all_ok(chosen);
    expect_all_ok(doubling);
    expect_all_ok(other);
    const std::size_t cut = 4 * small, end = 4 * (small + large);
    for (std::uint32_t r = 0; r < n; ++r) {
      const auto& got = chosen[r].bytes;
      EXPECT_TRUE(std::equal(got.begin(), got.begin() + cut, doubling[r].bytes.begin())) << n << " ranks, rank " << r;
      EXPECT_TRUE(std::equal(got.begin() + cut, got.begin() + end, other[r].bytes.begin() + cut))
          << n << " ranks, rank " << r;
      EXPECT_EQ(got[end], static_cast<std::byte>(algorithm::recursive_doubling)) << n << " ranks, rank " << r;
      EXPECT_EQ(got[end + 1], static_cast<std::byte>(for_large)) << n << " ranks, rank " << r;
    }
    // The orders differ, so the comparisons above tell them apart.
    EXPECT_FALSE(std::equal(doubling[0].bytes.begin() + cut, doubling[0].bytes.begin() + end,
                            other[0].bytes.begin() + cut));
  }
}

// The model's formulas and crossovers (comm/cost_model.h).
TEST(CostModel, PredictionsAndCrossovers) {
  const link_cost gbe;  // 50 us, 117 MB/s, 4 GB/s
  // 8 ranks, 4 KiB: the ring pays 14 latencies, recursive doubling 3.
  EXPECT_NEAR(predict(algorithm::ring, 8, 4096, gbe), 14 * 50e-6 + 1.75 * 4096 / 117e6 + 0.875 * 4096 / 4e9, 1e-12);
  EXPECT_NEAR(predict(algorithm::recursive_doubling, 8, 4096, gbe), 3 * (50e-6 + 4096 / 117e6 + 4096 / 4e9), 1e-12);
  // 6 ranks: two steps and the fold.
  EXPECT_NEAR(predict(algorithm::recursive_doubling, 6, 1000, gbe),
              2 * (50e-6 + 1000 / 117e6 + 1000 / 4e9) + 2 * (50e-6 + 1000 / 117e6) + 1000 / 4e9, 1e-12);
  // Rabenseifner: 2 lg p latencies, the ring's bytes.
  EXPECT_NEAR(predict(algorithm::rabenseifner, 8, 4096, gbe), 6 * 50e-6 + 1.75 * 4096 / 117e6 + 0.875 * 4096 / 4e9,
              1e-12);
  EXPECT_EQ(choose(8, 4096, gbe), algorithm::recursive_doubling);
  EXPECT_EQ(choose(8, 64 << 10, gbe), algorithm::rabenseifner);  // 6 latencies against the ring's 14
  EXPECT_EQ(choose(8, 16 << 20, gbe), algorithm::ring);          // within ring_margin of the ring
  EXPECT_EQ(choose(6, 16 << 20, gbe), algorithm::ring);          // the fold sends the buffer twice more
  EXPECT_EQ(choose(1, 4096, gbe), algorithm::ring);
  // 8 ranks: 3 alpha = n (1.25 beta + 2.125 gamma), about 13.4 KB; the
  // ring again where Rabenseifner's 8 latencies fewer are less than 10 %
  // of the ring's time: 6 alpha + s = 0.9 (14 alpha + s), s = 1.75 n beta
  // + 0.875 n gamma, about 217 KB.
  const auto x = crossovers(8, gbe);
  ASSERT_EQ(x.size(), 3u);
  EXPECT_EQ(x[0], (std::pair<std::size_t, algorithm>{1, algorithm::recursive_doubling}));
  EXPECT_EQ(x[1].second, algorithm::rabenseifner);
  EXPECT_GT(x[1].first, 13'000u);
  EXPECT_LT(x[1].first, 14'000u);
  EXPECT_EQ(choose(8, x[1].first - 1, gbe), algorithm::recursive_doubling);
  EXPECT_EQ(choose(8, x[1].first, gbe), algorithm::rabenseifner);
  EXPECT_EQ(x[2].second, algorithm::ring);
  EXPECT_GT(x[2].first, 217'000u);
  EXPECT_LT(x[2].first, 218'000u);
  EXPECT_EQ(choose(8, x[2].first - 1, gbe), algorithm::rabenseifner);
  // Among three (hosts' leaders, where no ring runs): the fold makes
  // recursive doubling 3 alpha + 3 n beta + 2 n gamma and Rabenseifner
  // 4 alpha + 3 n beta + 1.5 n gamma, so doubling below 2 alpha / gamma.
  EXPECT_EQ(choose_tree(3, 100'000, gbe), algorithm::recursive_doubling);
  EXPECT_EQ(choose(3, 100'000, gbe), algorithm::ring);
  EXPECT_EQ(choose_tree(3, 399'000, gbe), algorithm::recursive_doubling);
  EXPECT_EQ(choose_tree(3, 401'000, gbe), algorithm::rabenseifner);
  const auto y = crossovers(6, gbe);
  ASSERT_EQ(y.size(), 2u);
  EXPECT_EQ(y[1].second, algorithm::ring);
  EXPECT_EQ(predict(algorithm::automatic, 8, 4096, gbe), predict(algorithm::recursive_doubling, 8, 4096, gbe));
  const std::string table = explain(8, gbe);
  EXPECT_NE(table.find("| 4 KiB | 0.762 ms | 0.258 ms | 0.362 ms | recursive_doubling |"), std::string::npos) << table;
  EXPECT_NE(table.find("from 1 B: recursive_doubling"), std::string::npos) << table;
}

}  // namespace
}  // namespace ferry::comm
