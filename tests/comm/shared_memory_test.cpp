// Allreduce through shared memory (comm/detail/shared_memory.h): ranks of
// one host in one segment, host groups (FERRY_HOST_ID) whose leaders
// combine over TCP, the fallbacks, and failures. Forked worlds (world.h)
// with config::shared_memory on.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <numeric>
#include <set>
#include <thread>
#include <tuple>

#include "ferry/comm/communicator.h"
#include "ferry/comm/detail/reduce.h"
#include "typed_input.h"
#include "world.h"

namespace ferry::comm {
namespace {

using namespace std::chrono_literals;
using test::from_bytes;
using test::expect_all_ok;
using test::run_world;
using test::to_bytes;
using test::typed_input;

// op over the ranks in `order`, left to right (avg sums).
std::vector<std::byte> fold(const std::vector<std::vector<std::byte>>& x, std::initializer_list<std::uint32_t> order,
                            codec::dtype t, reduce_op op) {
  const reduce_op o = op == reduce_op::avg ? reduce_op::sum : op;
  auto it = order.begin();
  std::vector<std::byte> acc = x[*it];
  const std::size_t n = acc.size() / codec::size_of(t);
  for (++it; it != order.end(); ++it) {
    detail::reduce(o, t, acc.data(), acc.data(), x[*it].data(), wire::host_order, n);
  }
  return acc;
}
std::vector<std::byte> combine2(std::vector<std::byte> a, const std::vector<std::byte>& b, codec::dtype t,
                                reduce_op op) {
  return fold({std::move(a), b}, {0, 1}, t, op);
}
void finish(std::vector<std::byte>& v, codec::dtype t, reduce_op op, std::uint32_t n) {
  if (op == reduce_op::avg) detail::divide(t, v.data(), v.size() / codec::size_of(t), n);
}

std::set<std::string> segments_in_dev_shm() {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ferry-", 0) == 0) names.insert(name);
  }
  return names;
}

// Four ranks of one host: one group, every element combined in rank order
// by one rank, the same bits everywhere, for every op and dtype; buffers
// longer than a round (1 MiB per rank) and shorter than the group; and
// no segment name left behind.
TEST(SharedMemory, OneHostCombinesInRankOrderForEveryOpAndDtype) {
  constexpr std::uint32_t n = 4;
  const auto before = segments_in_dev_shm();
  const auto cases = test::reducible_cases();
  const std::size_t counts[] = {777, 3, 0, 300'001};
  const auto out = run_world(
      n,
      [&](std::uint32_t r, config& c, std::optional<listener>& l) {
        communicator comm(c, std::move(l));
        std::vector<std::byte> all;
        const auto group = comm.host_ranks();
        all.push_back(static_cast<std::byte>(group.size()));
        for (const std::size_t count : counts) {
          for (const auto& [t, op] : cases) {
            if (count > 1000 && t != codec::dtype::f64 && t != codec::dtype::bf16) continue;
            auto v = typed_input(r, t, count);
            comm.allreduce_bytes(t, v, {.op = op});
            all.insert(all.end(), v.begin(), v.end());
          }
        }
        return all;
      },
      [](std::uint32_t, config& c) { c.shared_memory = true; });
  expect_all_ok(out);
  std::size_t at = 1;
  for (std::uint32_t r = 0; r < n; ++r) EXPECT_EQ(out[r].bytes[0], std::byte{n}) << "rank " << r << "'s group";
  for (const std::size_t count : counts) {
    for (const auto& [t, op] : cases) {
      if (count > 1000 && t != codec::dtype::f64 && t != codec::dtype::bf16) continue;
      std::vector<std::vector<std::byte>> xs(n);
      for (std::uint32_t r = 0; r < n; ++r) xs[r] = typed_input(r, t, count);
      auto want = fold(xs, {0, 1, 2, 3}, t, op);
      finish(want, t, op, n);
      for (std::uint32_t r = 0; r < n; ++r) {
        const std::vector<std::byte> got(out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at),
                                         out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at + want.size()));
        EXPECT_EQ(got, want) << count << " x " << codec::name(t) << " " << name(op) << ", rank " << r;
      }
      at += want.size();
    }
  }
  EXPECT_EQ(segments_in_dev_shm(), before) << "a segment's name was left in /dev/shm";
}

// Six ranks as three hosts (FERRY_HOST_ID a a b b b c): each host reduces
// in its segment, the leaders 0, 2 and 5 combine over TCP (the fold of
// three: 0's values into 2's, then 2 with 5), and each leader returns the
// result to its host. Both tree algorithms give that order, and so do the
// ring (Rabenseifner between leaders) and auto (the faster tree for three
// leaders, which algorithm_for reports); every rank has the same bits, and
// the TCP collectives around it still run.
class Hosts : public ::testing::TestWithParam<algorithm> {};

TEST_P(Hosts, GroupsReduceThenLeadersCombineThenBroadcast) {
  constexpr std::uint32_t n = 6;
  const char* ids[n] = {"a", "a", "b", "b", "b", "c"};
  const auto cases = test::reducible_cases();
  // Sums of f64: two rounds (1 MiB per rank each); of f32: one, most of
  // it; every other case: a few chunks (the leaders' TCP algorithms run at
  // 4 KiB), which take the same paths with less data (this test runs under
  // qemu-user and ASan too).
  const auto count_of = [](codec::dtype t, reduce_op op = reduce_op::sum) -> std::size_t {
    return (t == codec::dtype::f64 || t == codec::dtype::f32) && op == reduce_op::sum ? 150'000 : 5'000;
  };
  const auto out = run_world(
      n,
      [&](std::uint32_t r, config& c, std::optional<listener>& l) {
        communicator comm(c, std::move(l));
        std::vector<std::byte> all;
        for (const std::uint32_t m : comm.host_ranks()) all.push_back(static_cast<std::byte>(m));
        for (const auto& [t, op] : cases) {
          auto v = typed_input(r, t, count_of(t, op));
          comm.allreduce_bytes(t, v, {.op = op});
          all.insert(all.end(), v.begin(), v.end());
        }
        std::uint32_t me = r, root = r;
        comm.broadcast(std::span(&root, 1), 5);  // a ring collective after them
        std::vector<std::uint32_t> ranks(n);
        comm.allgather(std::span<const std::uint32_t>(&me, 1), ranks);
        const auto tail = to_bytes(ranks);
        all.insert(all.end(), tail.begin(), tail.end());
        all.push_back(static_cast<std::byte>(root));
        all.push_back(static_cast<std::byte>(comm.algorithm_for(4 * count_of(codec::dtype::f32))));
        return all;
      },
      [&](std::uint32_t r, config& c) {
        c.shared_memory = true;
        c.host_id = ids[r];
        c.algorithm = GetParam();
        c.chunk_bytes = 4096;
      });
  expect_all_ok(out);
  const std::vector<std::vector<std::byte>> groups{{std::byte{0}, std::byte{1}},
                                                   {std::byte{2}, std::byte{3}, std::byte{4}},
                                                   {std::byte{5}}};
  const std::size_t group_of[n] = {0, 0, 1, 1, 1, 2};
  std::vector<std::size_t> at(n);
  for (std::uint32_t r = 0; r < n; ++r) {
    const auto& g = groups[group_of[r]];
    ASSERT_EQ(std::vector<std::byte>(out[r].bytes.begin(), out[r].bytes.begin() + static_cast<std::ptrdiff_t>(g.size())), g);
    at[r] = g.size();
  }
  for (const auto& [t, op] : cases) {
    std::vector<std::vector<std::byte>> xs(n);
    for (std::uint32_t r = 0; r < n; ++r) xs[r] = typed_input(r, t, count_of(t, op));
    auto want = combine2(combine2(fold(xs, {0, 1}, t, op), fold(xs, {2, 3, 4}, t, op), t, op), xs[5], t, op);
    finish(want, t, op, n);
    for (std::uint32_t r = 0; r < n; ++r) {
      const std::vector<std::byte> got(out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at[r]),
                                       out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at[r] + want.size()));
      EXPECT_EQ(got, want) << codec::name(t) << " " << name(op) << ", rank " << r;
      at[r] += want.size();
    }
  }
  for (std::uint32_t r = 0; r < n; ++r) {
    const auto ranks = from_bytes<std::uint32_t>(std::vector<std::byte>(
        out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at[r]), out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at[r] + 4 * n)));
    EXPECT_EQ(ranks, (std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(out[r].bytes[at[r] + 4 * n], std::byte{5});
    const algorithm leaders = GetParam() == algorithm::automatic ? choose_tree(3, 4 * count_of(codec::dtype::f32), link_cost{})
                              : GetParam() == algorithm::ring    ? algorithm::rabenseifner
                                                                 : GetParam();
    EXPECT_EQ(out[r].bytes[at[r] + 4 * n + 1], static_cast<std::byte>(leaders)) << "rank " << r;
  }
}

// Under qemu-user and the sanitizers, the two trees only (ring and auto
// map onto them, above).
INSTANTIATE_TEST_SUITE_P(Leaders, Hosts,
                         ::testing::ValuesIn(test::every_shape
                                                 ? std::vector{algorithm::rabenseifner, algorithm::recursive_doubling,
                                                               algorithm::ring, algorithm::automatic}
                                                 : std::vector{algorithm::rabenseifner, algorithm::recursive_doubling}),
                         [](const auto& p) { return std::string(name(p.param)); });

// Hosts of equal size stripe a long allreduce (NCCL's shape): each host
// reduce-scatters in its segment, member m of every host combines its
// share with the others' member m over TCP, and each host allgathers. The
// order is each host's fold in member order, then the hosts' tree: with
// two or three hosts, (A op B) op C.
struct striped_case {
  std::string name;
  std::vector<std::string> ids;  // each rank's FERRY_HOST_ID
  std::vector<std::tuple<codec::dtype, reduce_op, std::size_t>> allreduces;
  algorithm algo = algorithm::automatic;  // FERRY_ALGORITHM: the peers' tree over each share
};
class Striped : public ::testing::TestWithParam<striped_case> {};

TEST_P(Striped, HostsReduceScatterPeersCombineHostsAllgather) {
  const striped_case& param = GetParam();
  const std::vector<std::string>& ids = param.ids;
  const auto& allreduces = param.allreduces;
  const auto n = static_cast<std::uint32_t>(ids.size());
  const auto out = run_world(
      n,
      [&](std::uint32_t r, config& c, std::optional<listener>& l) {
        communicator comm(c, std::move(l));
        std::vector<std::byte> all;
        for (const auto& [t, op, count] : allreduces) {
          auto v = typed_input(r, t, count);
          comm.allreduce_bytes(t, v, {.op = op});
          all.insert(all.end(), v.begin(), v.end());
        }
        std::uint32_t me = r;
        std::vector<std::uint32_t> ranks(n);
        comm.allgather(std::span<const std::uint32_t>(&me, 1), ranks);  // a ring collective after them
        const auto tail = to_bytes(ranks);
        all.insert(all.end(), tail.begin(), tail.end());
        return all;
      },
      [&](std::uint32_t r, config& c) {
        c.shared_memory = true;
        c.host_id = ids[r];
        c.algorithm = param.algo;
      });
  expect_all_ok(out);
  // Each host's ranks, in rank order; the hosts in the order of their lowest rank.
  std::vector<std::vector<std::uint32_t>> hosts;
  for (std::uint32_t r = 0; r < n; ++r) {
    const auto h = std::ranges::find_if(hosts, [&](const auto& g) { return ids[g.front()] == ids[r]; });
    if (h == hosts.end()) {
      hosts.push_back({r});
    } else {
      h->push_back(r);
    }
  }
  std::size_t at = 0;
  for (const auto& [t, op, count] : allreduces) {
    std::vector<std::vector<std::byte>> xs(n);
    for (std::uint32_t r = 0; r < n; ++r) xs[r] = typed_input(r, t, count);
    std::vector<std::byte> want;
    for (const auto& h : hosts) {
      auto host = xs[h[0]];
      for (std::size_t j = 1; j < h.size(); ++j) host = combine2(std::move(host), xs[h[j]], t, op);
      want = want.empty() ? std::move(host) : combine2(std::move(want), host, t, op);
    }
    finish(want, t, op, n);
    for (std::uint32_t r = 0; r < n; ++r) {
      const std::vector<std::byte> got(out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at),
                                       out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at + want.size()));
      EXPECT_EQ(got, want) << codec::name(t) << " " << name(op) << " of " << count << ", rank " << r;
    }
    at += want.size();
  }
  std::vector<std::uint32_t> every(n);
  std::iota(every.begin(), every.end(), 0U);
  for (std::uint32_t r = 0; r < n; ++r) {
    EXPECT_EQ(from_bytes<std::uint32_t>(std::vector<std::byte>(out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at),
                                                               out[r].bytes.end())),
              every);
  }
}

// Two ranks per host: chunks of 1 MiB, striped from two chunks: f64 3.2 MB
// (four chunks, a short last one), f32 2.4 MB (three); bf16 1.2 MB and i32
// 600 KB take the leaders' path, in the same order; three such hosts
// with recursive doubling asked for. Six per host: chunks of
// 3 MiB, and a last chunk one f32 short of full, whose share for member 3
// is one element longer than a full chunk's (shares are not monotone).
// Three per host (chunks of 1.5 MiB, not a whole number of slots, so every
// chunk ends in a short round), with the ring asked for (Rabenseifner
// between the peers): bf16 min and i32 bxor striped, and f32 whose last
// chunk holds two elements, so that one member's share is empty.
std::vector<striped_case> striped_cases() {
  std::vector<striped_case> all{
      striped_case{"Interleaved2x2",
                   {"a", "b", "a", "b"},
                   {{codec::dtype::f32, reduce_op::sum, 600'000},
                    {codec::dtype::f64, reduce_op::avg, 400'000},
                    {codec::dtype::i32, reduce_op::max, 150'000},
                    {codec::dtype::bf16, reduce_op::sum, 600'000}}},
      striped_case{"Blocks3x2",
                   {"a", "a", "b", "b", "c", "c"},
                   {{codec::dtype::f32, reduce_op::sum, 600'000}, {codec::dtype::f64, reduce_op::avg, 400'000}},
                   algorithm::recursive_doubling},
      striped_case{"Blocks2x3Ring",
                   {"a", "a", "a", "b", "b", "b"},
                   {{codec::dtype::bf16, reduce_op::min, 1'600'001},
                    {codec::dtype::i32, reduce_op::bxor, 800'001},
                    {codec::dtype::f32, reduce_op::sum, 2 * 393'216 + 2}},
                   algorithm::ring},
      striped_case{"Blocks2x6",
                   {"a", "a", "a", "a", "a", "a", "b", "b", "b", "b", "b", "b"},
                   {{codec::dtype::f32, reduce_op::sum, 2 * 786'432 - 1}}}};
  // Twelve ranks, whose chunk geometry no architecture changes, are left
  // to the native tree, and to ASan: theirs is the only share longer than
  // a full chunk's, which the buffers' sizing must hold.
#ifndef __SANITIZE_ADDRESS__
  if (!test::every_shape) std::erase_if(all, [](const striped_case& c) { return c.ids.size() > 6; });
#endif
  return all;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Striped, ::testing::ValuesIn(striped_cases()),
    [](const auto& p) { return p.param.name; });

// A rank with FERRY_SHARED_MEMORY=off stays out: the others form a group
// without it, and the sum is still every rank's. Compressed allreduces take
// the TCP ring whatever the groups.
TEST(SharedMemory, ARankThatSaysOffStaysOutAndCompressedTakesTheRing) {
  constexpr std::uint32_t n = 4;
  const auto out = run_world(
      n,
      [&](std::uint32_t r, config& c, std::optional<listener>& l) {
        communicator comm(c, std::move(l));
        std::vector<std::uint32_t> group(comm.host_ranks().begin(), comm.host_ranks().end());
        std::vector<float> v(1000, static_cast<float>(r + 1));
        comm.allreduce(v);
        std::vector<float> w(1000, static_cast<float>(r + 1));
        comm.allreduce(w, {.comp = compression::bf16});
        group.push_back(static_cast<std::uint32_t>(v[999]));
        group.push_back(static_cast<std::uint32_t>(w[0]));
        return to_bytes(group);
      },
      [](std::uint32_t r, config& c) { c.shared_memory = r != 2; });
  expect_all_ok(out);
  for (std::uint32_t r = 0; r < n; ++r) {
    const auto got = from_bytes<std::uint32_t>(out[r].bytes);
    const std::vector<std::uint32_t> want =
        r == 2 ? std::vector<std::uint32_t>{2, 10, 10} : std::vector<std::uint32_t>{0, 1, 3, 10, 10};
    EXPECT_EQ(got, want) << "rank " << r;
  }
}

// Ranks of one group that disagree on the size fail at once with
// size_mismatch (where the difference is seen, and the others from it).
TEST(SharedMemory, ADifferentSizeFailsTheGroup) {
  const auto out = run_world(
      3,
      [&](std::uint32_t r, config& c, std::optional<listener>& l) {
        communicator comm(c, std::move(l));
        std::vector<float> v(r == 1 ? 100 : 99, 1.0f);
        comm.allreduce(v);
        return std::vector<std::byte>{};
      },
      [](std::uint32_t, config& c) {
        c.shared_memory = true;
        c.timeout = 10s;
      });
  EXPECT_FALSE(out[1].ok);
  EXPECT_EQ(out[1].code, errc::size_mismatch) << out[1].text;
  for (std::uint32_t r = 0; r < 3; ++r) {
    EXPECT_FALSE(out[r].ok) << "rank " << r;
    EXPECT_EQ(out[r].code, errc::size_mismatch) << "rank " << r << ": " << out[r].text;
  }
}

// A rank killed mid-allreduce: the others of its host notice its process
// ended (peer_lost naming it) within seconds, not at the timeout; with
// hosts, the other host's ranks hear it from the dead rank's closed
// connections or their leader (which gives up its segment with the error
// it got over TCP, so its members name the same rank). 1 MiB takes the
// leaders' path; 4 MiB is striped.
void kill_one(std::uint32_t n, std::uint32_t victim, const std::vector<std::string>& ids,
              std::size_t floats = std::size_t{1} << 18) {
  test::expect_killed_rank_named_fast(
      n, victim,
      [&](std::uint32_t r, config& c) {
        c.shared_memory = true;
        c.host_id = ids.empty() ? "" : ids[r];
      },
      floats);
}

TEST(SharedMemory, AKilledRankFailsItsHostFast) { kill_one(3, 1, {}); }
TEST(SharedMemory, AKilledRankFailsEveryHostFast) { kill_one(4, 3, {"a", "a", "b", "b"}); }
TEST(SharedMemory, AKilledLeaderFailsEveryHostFast) { kill_one(4, 2, {"a", "a", "b", "b"}); }
// 4 MiB: striped; the victim's peer (rank 1) learns it on its helper thread.
TEST(SharedMemory, AKilledRankFailsEveryHostFastWhileStriped) { kill_one(4, 3, {"a", "a", "b", "b"}, 1 << 20); }

}  // namespace
}  // namespace ferry::comm
