#include "ferry/comm/communicator.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "ferry/comm/detail/all_to_all.h"
#include "ferry/comm/detail/kernels.h"
#include "ferry/comm/detail/link.h"
#include "ferry/comm/detail/receives.h"
#include "ferry/comm/detail/plan_checks.h"
#include "ferry/comm/detail/reduce.h"
#include "ferry/comm/detail/ring_plans.h"
#include "ferry/comm/detail/shared_memory.h"
#include "ferry/comm/detail/tree_allreduce.h"
#include "ferry/comm/detail/worker.h"
#include "ferry/comm/frame.h"
#include "ferry/wire/bulk.h"

namespace ferry::comm {

using detail::rank_name;

using detail::check_bools;
using detail::check_own_bools;
using detail::expect_header;
using detail::frame_count;
using detail::rx_staging;
using detail::copy_plan;
using detail::ring_plan;
using detail::scatter_plan;

namespace {
// A striped allreduce's share per member and chunk (stripe_chunk_bytes),
// and how many chunks the segment's reduce-scatters run ahead of its
// allgathers (the network's slack).
constexpr std::size_t stripe_share = std::size_t{512} << 10;
constexpr std::size_t stripe_ahead = 2;
}  // namespace

// The worker is declared last so it is destroyed first: queued collectives
// finish while the link still exists.
struct communicator::impl {
  detail::link link;
  rx_staging staging;
  link_cost cost;  // rank 0's, with algorithm auto
  // Host groups (join_hosts()): ranks sharing a shared-memory segment.
  std::vector<std::uint32_t> leaders;  // ascending: each group's lowest rank (every rank when no group formed)
  std::vector<std::uint32_t> group;    // this rank's group, ascending (this rank alone without a segment)
  std::unique_ptr<detail::shared_segment> segment;
  // Where every host has the same number of ranks (two or more, on two or
  // more hosts): the rank at this rank's index in every host's group,
  // ascending; the striped allreduce runs over them. Empty otherwise.
  std::vector<std::uint32_t> peers;
  detail::receives receives{link};
  detail::worker worker;

  impl(const comm::config& c, std::optional<listener> l) : link(c, std::move(l)), cost(c.link) {
    worker.set_progress([this](bool may_wait) { return receives.progress(may_wait); });
  }
  ~impl() {
    worker.stop();
    receives.fail_all(std::make_exception_ptr(
        comm_error(comm_errc::aborted, std::nullopt, detail::rank_name(link.rank()) + ": the communicator closed")));
  }

  // The configured algorithm, or with auto the cost model's choice, for
  // the whole world.
  [[nodiscard]] algorithm algorithm_for(std::size_t bytes) const {
    const algorithm a = link.config().algorithm;
    return a == algorithm::automatic ? choose(link.size(), bytes, cost) : a;
  }
  // What the hosts' leaders run: no ring joins them, so the ring becomes
  // Rabenseifner (the same bytes on each leader's link) and auto the faster
  // tree for their number.
  [[nodiscard]] algorithm leaders_algorithm_for(std::size_t bytes) const {
    const algorithm a = link.config().algorithm;
    if (a == algorithm::automatic) return choose_tree(static_cast<std::uint32_t>(leaders.size()), bytes, cost);
    return a == algorithm::ring ? algorithm::rabenseifner : a;
  }
  // Whether uncompressed allreduce goes through host groups.
  [[nodiscard]] bool grouped() const noexcept { return leaders.size() < link.size(); }
  // Whether an allreduce of `bytes` over several hosts is striped: from
  // two chunks, so that the segment's steps overlap the network's. (With
  // one chunk the leaders were faster: at 1 MB, 11.2 ms against 12.9 on
  // the simulated 2x2 cluster, 33.9 against 41.2 on 4x4.)
  [[nodiscard]] bool striped(std::size_t bytes) const noexcept {
    return !peers.empty() && bytes >= 2 * stripe_share * group.size();
  }
  // The network step's algorithm for an allreduce of `bytes` where host
  // groups span several hosts: what each rank runs over its share with its
  // peers (striped), or the leaders over the whole.
  [[nodiscard]] algorithm hosts_algorithm_for(std::size_t bytes, codec::dtype type) const;

  void allreduce(codec::dtype type, std::span<std::byte> data, const allreduce_options& o);
  void host_allreduce(codec::dtype type, std::span<std::byte> data, reduce_op op);
  void striped_allreduce(const detail::host_rounds& rounds, codec::dtype type, std::span<std::byte> data,
                         reduce_op sum_op, std::uint32_t divisor);
  void give_up_segment() noexcept;
  void join_hosts();
  void reduce_scatter(codec::dtype type, std::span<const std::byte> in, std::span<const std::size_t> counts,
                      std::span<std::byte> out, const allreduce_options& o);
  void broadcast(codec::dtype type, std::span<std::byte> data, std::uint32_t root);
  void allgather(codec::dtype type, std::span<const std::byte> mine, std::span<std::byte> out);
  void reduce_scatter_owned(codec::dtype type, std::span<std::byte> data, const allreduce_options& o);
  void allgather_owned(codec::dtype type, std::span<std::byte> data);
  void check_allreduce(codec::dtype type, std::span<const std::byte> data, const allreduce_options& o);
  void barrier();
  void check_ring();
};


// What allreduce and its halves refuse, on every rank alike.
void communicator::impl::check_allreduce(codec::dtype type, std::span<const std::byte> data, const allreduce_options& o) {
  const std::size_t width = codec::size_of(type);
  if (!detail::reducible(o.op, type)) {
    link.fail(comm_errc::unsupported, std::nullopt,
              "allreduce " + std::string(name(o.op)) + " is not defined on " + std::string(codec::name(type)) +
                  " (band, bor and bxor take integers and bool, avg no bool, FP8 none)");
  }
  if (data.size() % width != 0) {
    link.fail(errc::size_mismatch, std::nullopt, "allreduce buffer is not a whole number of elements");
  }
  if (o.comp != compression::none && type != codec::dtype::f32) {
    link.fail(comm_errc::bad_argument, std::nullopt,
              "allreduce compression " + std::string(name(o.comp)) + " applies to F32 values, not " +
                  std::string(codec::name(type)));
  }
  if (o.comp != compression::none && (o.op == reduce_op::min || o.op == reduce_op::max || o.op == reduce_op::product)) {
    link.fail(comm_errc::bad_argument, std::nullopt,
              "allreduce compression " + std::string(name(o.comp)) + " applies to sum and avg, not " +
                  std::string(name(o.op)));
  }
  check_own_bools(link, type, data, "allreduce");
  const std::size_t count = data.size() / width;
  if (o.comp != compression::none && o.feedback != nullptr && o.feedback->residual().size() != count) {
    link.fail(errc::size_mismatch, std::nullopt,
              "error_feedback holds " + std::to_string(o.feedback->residual().size()) + " values for a buffer of " +
                  std::to_string(count));
  }
}

void communicator::impl::allreduce(codec::dtype type, std::span<std::byte> data, const allreduce_options& o) {
  check_allreduce(type, data, o);
  if (o.comp == compression::none && grouped()) {
    host_allreduce(type, data, o.op);
    return;
  }
  const algorithm a = o.comp == compression::none ? algorithm_for(data.size()) : algorithm::ring;
  if (a != algorithm::ring) {
    detail::tree_allreduce(link, staging, a, type, data, o.op);
    return;
  }
  ring_plan p(link, staging, type, data, o);
  link.run(p, [&] {
    p.start();
  });
}

// ZeRO's halves: the ring allreduce's two halves as plans of their own
// (ring_plans.h), whatever the algorithm choice. With one rank the first
// is the allreduce itself (so compression rounds as it does) and the
// second has nothing to do.
void communicator::impl::reduce_scatter_owned(codec::dtype type, std::span<std::byte> data,
                                              const allreduce_options& o) {
  check_allreduce(type, data, o);
  if (link.size() == 1) {
    allreduce(type, data, o);
    return;
  }
  ring_plan p(link, staging, type, data, o, detail::ring_half::scatter);
  link.run(p, [&] {
    p.start();
  });
}

void communicator::impl::allgather_owned(codec::dtype type, std::span<std::byte> data) {
  if (data.size() % codec::size_of(type) != 0) {
    link.fail(errc::size_mismatch, std::nullopt, "allgather_owned buffer is not a whole number of elements");
  }
  if (link.size() == 1) return;
  ring_plan p(link, staging, type, data, {}, detail::ring_half::gather);
  link.run(p, [&] {
    p.start();
  });
}

// With host groups: one group (every rank on one host) combines in its
// segment alone; otherwise each group reduces to its leader there, the
// leaders combine over the network (a tree algorithm over the leaders:
// leaders_algorithm_for), and
// each leader returns the result to its group. Avg sums and divides once,
// by the world size, where the last combining happens. Every element's
// order of combination is fixed by ranks and groups alone.
void communicator::impl::host_allreduce(codec::dtype type, std::span<std::byte> data, reduce_op op) {
  const reduce_op sum_op = op == reduce_op::avg ? reduce_op::sum : op;
  const std::uint32_t divisor = op == reduce_op::avg ? link.size() : 1;
  link.guarded([&] {
    std::optional<detail::host_rounds> rounds;
    if (segment) rounds.emplace(detail::host_rounds{*segment, link.config().timeout, link.rank(), group});
    try {
      if (leaders.size() == 1) {
        rounds->allreduce(sum_op, type, data, divisor);
        return;
      }
      if (striped(data.size())) {
        striped_allreduce(*rounds, type, data, sum_op, divisor);
        return;
      }
      if (rounds) rounds->reduce_to_leader(sum_op, type, data);
      if (group.front() == link.rank()) {
        detail::tree_allreduce(link, staging, leaders_algorithm_for(data.size()), type, data, sum_op, leaders);
        if (divisor > 1) detail::divide(type, data.data(), data.size() / codec::size_of(type), divisor);
      } else {
        link.skip_collective();
      }
      if (rounds) rounds->broadcast_from_leader(data);
    } catch (...) {
      give_up_segment();
      throw;
    }
  });
}

// In a catch block: the group's other ranks stop waiting, and say why (the
// first reason given is kept).
void communicator::impl::give_up_segment() noexcept {
  if (!segment) return;
  try {
    throw;
  } catch (const comm_error& e) {
    segment->give_up(detail::shared_segment::wait_status::gave_up, segment->me(), e.code().value(),
                     e.peer().value_or(~std::uint32_t{0}));
  } catch (...) {
    segment->give_up(detail::shared_segment::wait_status::gave_up, segment->me());
  }
}

namespace {
// A striped allreduce's chunk: 512 KiB per member (the chunks pipeline
// between the segment and the network). On the simulated cluster at 16 MB,
// 2x2 ran at 0.97 of its link bound with these against 0.91 with 1 MiB;
// 4x4 took 283-301 ms against 288-379 ms with 1 MiB and about 800 ms with
// 256 KiB, whose network steps stalled for 70-160 ms at a time.
std::size_t stripe_chunk_bytes(const detail::shared_segment& seg) { return stripe_share * seg.members(); }
}  // namespace

algorithm communicator::impl::hosts_algorithm_for(std::size_t bytes, codec::dtype type) const {
  if (!striped(bytes)) return leaders_algorithm_for(bytes);
  const detail::host_rounds rounds{*segment, link.config().timeout, link.rank(), group};
  return leaders_algorithm_for(rounds.share_bytes(type, std::min(bytes, stripe_chunk_bytes(*segment))));
}

// NCCL's shape, for long messages where every host has the same number L
// of ranks: no leader carries its host alone. The buffer goes in chunks of
// stripe_share per member; each chunk is reduce-scattered in the segment
// (member m keeps the part of every round it combines), each member runs
// the tree algorithm over its share with its peers (the member at its
// index on every other host), and the chunk is allgathered in the segment.
// The network steps run on a helper thread; the segment's reduce-scatters
// run up to stripe_ahead chunks ahead of its allgathers, so that its
// copies and sums overlap the network's work, and stripe_ahead + 1 share
// buffers rotate. Each element is combined in member order on its host,
// then in the peers' tree: the same bits on every rank. Every rank runs
// one network collective per chunk, so the sequence numbers stay the
// world's.
void communicator::impl::striped_allreduce(const detail::host_rounds& rounds, codec::dtype type,
                                           std::span<std::byte> data, reduce_op sum_op, std::uint32_t divisor) {
  const std::size_t chunk = stripe_chunk_bytes(*segment);
  const std::size_t chunks = (data.size() + chunk - 1) / chunk;
  const auto part = [&](std::size_t c) { return data.subspan(c * chunk, std::min(chunk, data.size() - c * chunk)); };
  // A share is not monotone in the chunk's length (elements c·m/L up to
  // c·(m+1)/L of each round): the short last chunk's can be the longer.
  const std::size_t most = std::max(rounds.share_bytes(type, chunk), rounds.share_bytes(type, part(chunks - 1).size()));
  std::array<std::vector<std::byte>, stripe_ahead + 1> shares;
  for (auto& s : shares) s.resize(most);
  const auto share = [&](std::size_t c) {
    return std::span(shares[c % shares.size()]).first(rounds.share_bytes(type, part(c).size()));
  };
  const auto network = [&](std::size_t c) {
    const auto s = share(c);
    detail::tree_allreduce(link, staging, leaders_algorithm_for(s.size()), type, s, sum_op, peers);
    if (divisor > 1) detail::divide(type, s.data(), s.size() / codec::size_of(type), divisor);
  };
  std::mutex m;
  std::condition_variable cv;
  std::size_t posted = 0, done = 0;
  bool stop = false;
  std::exception_ptr failed;
  std::thread helper([&] {
    for (std::size_t c = 0; c < chunks; ++c) {
      {
        std::unique_lock lock(m);
        cv.wait(lock, [&] { return posted > c || stop; });
        if (posted <= c) return;
      }
      try {
        network(c);
      } catch (...) {
        const std::lock_guard lock(m);
        failed = std::current_exception();
        cv.notify_all();
        return;
      }
      const std::lock_guard lock(m);
      done = c + 1;
      cv.notify_all();
    }
  });
  try {
    for (std::size_t c = 0; c < chunks + stripe_ahead; ++c) {
      if (c < chunks) {
        rounds.reduce_scatter(sum_op, type, part(c), share(c));
        const std::lock_guard lock(m);
        posted = c + 1;
        cv.notify_all();
      }
      if (c >= stripe_ahead) {
        const std::size_t g = c - stripe_ahead;
        {
          std::unique_lock lock(m);
          cv.wait(lock, [&] { return done > g || failed; });
          if (done <= g) std::rethrow_exception(failed);
        }
        rounds.allgather(type, share(g), part(g));
      }
    }
  } catch (...) {  // the host stops waiting; the helper finishes its chunk (the network has its own timeouts)
    give_up_segment();
    {
      const std::lock_guard lock(m);
      stop = true;
      cv.notify_all();
    }
    helper.join();
    throw;
  }
  helper.join();
}

// The setup of docs/comm-protocol.md section 8 (shared_memory.h's SETUP):
// three allgathers over the ring, at the communicator's start.
void communicator::impl::join_hosts() {
  const std::uint32_t n = link.size(), me = link.rank();
  std::vector<std::uint32_t> leader(n);
  for (std::uint32_t r = 0; r < n; ++r) leader[r] = r;
  const auto settle = [&] {
    leaders.clear();
    group.clear();
    for (std::uint32_t r = 0; r < n; ++r) {
      if (leader[r] == r) leaders.push_back(r);
      if (leader[r] == leader[me]) group.push_back(r);
    }
  };
  settle();
  if (n == 1) return;
  // 1. Host keys: byte 0 says whether the rank takes part.
  constexpr std::size_t key_bytes = 33;
  std::array<std::byte, key_bytes> key{};
  if (link.config().shared_memory) {
    key[0] = std::byte{1};
    const auto digest = detail::host_key(link.config().host_id);
    std::memcpy(key.data() + 1, digest.data(), digest.size());
  }
  std::vector<std::byte> keys(key_bytes * n);
  allgather(codec::dtype::u8, key, keys);
  const auto key_of = [&](std::uint32_t r) { return std::span(keys).subspan(key_bytes * r, key_bytes); };
  for (std::uint32_t r = 0; r < n; ++r) {
    if (key_of(r)[0] != std::byte{1}) continue;
    for (std::uint32_t q = 0; q < r; ++q) {
      if (std::ranges::equal(key_of(q), key_of(r))) {
        leader[r] = q;
        break;
      }
    }
  }
  settle();
  if (leaders.size() == n) return;
  // 2. Each leader makes its group's segment and announces it.
  const auto members = static_cast<std::uint32_t>(group.size());
  const auto index = static_cast<std::uint32_t>(std::ranges::find(group, me) - group.begin());
  std::string why;
  detail::segment_id id{};
  if (members > 1 && index == 0) {
    try {
      segment = detail::shared_segment::create(members, detail::shared_slot_bytes(members), id);
    } catch (const std::exception& e) {
      why = e.what();
      id = {};
    }
  }
  constexpr std::size_t id_bytes = sizeof(id.name) + sizeof(id.nonce);
  std::array<std::byte, id_bytes> mine{};
  std::memcpy(mine.data(), id.name.data(), sizeof(id.name));
  std::memcpy(mine.data() + sizeof(id.name), id.nonce.data(), sizeof(id.nonce));
  std::vector<std::byte> ids(id_bytes * n);
  allgather(codec::dtype::u8, mine, ids);
  // 3. Members open their leader's and check it; all learn who could.
  if (members > 1 && index > 0) {
    detail::segment_id theirs{};
    std::memcpy(theirs.name.data(), ids.data() + id_bytes * group.front(), sizeof(theirs.name));
    std::memcpy(theirs.nonce.data(), ids.data() + id_bytes * group.front() + sizeof(theirs.name), sizeof(theirs.nonce));
    try {
      segment = detail::shared_segment::open(theirs, members, detail::shared_slot_bytes(members), index);
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  const std::uint8_t ok = members == 1 || segment ? 1 : 0;
  std::vector<std::uint8_t> oks(n);
  allgather(codec::dtype::u8, std::as_bytes(std::span(&ok, 1)), std::as_writable_bytes(std::span(oks)));
  // 4. The name goes; the mappings stay.
  if (segment) segment->unlink();
  std::vector<bool> failed(n, false);
  for (std::uint32_t r = 0; r < n; ++r) failed[leader[r]] = failed[leader[r]] || oks[r] == 0;
  if (failed[leader[me]]) {
    segment.reset();
    if (!why.empty()) std::fprintf(stderr, "ferry: rank %u: %s; this host's ranks use TCP\n", me, why.c_str());
  }
  for (std::uint32_t r = 0; r < n; ++r) {
    if (failed[leader[r]]) leader[r] = r;
  }
  settle();
  // The striped allreduce's peers, where every host has the same number.
  if (leaders.size() < 2 || group.size() < 2) return;
  std::vector<std::vector<std::uint32_t>> hosts(leaders.size());
  for (std::uint32_t r = 0; r < n; ++r) {
    hosts[static_cast<std::size_t>(std::ranges::find(leaders, leader[r]) - leaders.begin())].push_back(r);
  }
  if (std::ranges::any_of(hosts, [&](const auto& h) { return h.size() != group.size(); })) return;
  const auto at = static_cast<std::size_t>(std::ranges::find(group, me) - group.begin());
  for (const auto& h : hosts) peers.push_back(h[at]);
  std::ranges::sort(peers);
}

void communicator::impl::reduce_scatter(codec::dtype type, std::span<const std::byte> in,
                                        std::span<const std::size_t> counts, std::span<std::byte> out,
                                        const allreduce_options& o) {
  const std::size_t width = codec::size_of(type);
  if (!detail::reducible(o.op, type)) {
    link.fail(comm_errc::unsupported, std::nullopt,
              "reduce_scatter " + std::string(name(o.op)) + " is not defined on " + std::string(codec::name(type)));
  }
  if (o.comp != compression::none) {
    link.fail(comm_errc::bad_argument, std::nullopt, "reduce_scatter takes no compression");
  }
  std::size_t total = 0;
  for (const std::size_t c : counts) total += c;
  if (counts.size() != link.size() || in.size() != total * width || out.size() != counts[link.rank()] * width) {
    link.fail(errc::size_mismatch, std::nullopt,
              "reduce_scatter of " + std::to_string(in.size()) + " bytes into " + std::to_string(out.size()) +
                  " with " + std::to_string(counts.size()) + " piece sizes for " + std::to_string(link.size()) +
                  " ranks: the pieces must add up to the input and this rank's to the output");
  }
  check_own_bools(link, type, in, "reduce_scatter");
  if (link.size() == 1) {
    if (!out.empty()) std::memcpy(out.data(), in.data(), out.size());
    return;
  }
  scatter_plan p(link, staging, type, in, counts, out, o.op);
  link.run(p, [&] {
    p.begin();
  });
}

void communicator::impl::broadcast(codec::dtype type, std::span<std::byte> data, std::uint32_t root) {
  if (root >= link.size()) {
    link.fail(comm_errc::bad_config, std::nullopt, "broadcast root " + std::to_string(root) + " is not a rank");
  }
  if (data.size() % codec::size_of(type) != 0) {
    link.fail(errc::size_mismatch, std::nullopt, "broadcast buffer is not a whole number of elements");
  }
  copy_plan p(link, type, data, 1, false);
  p.forward = link.next() != root;
  const std::uint32_t frames = frame_count(link, p.ch.m);  // on every rank, the root too
  p.expected = link.only_from(detail::link::prev_channel, link.rank() == root ? 0 : frames);
  p.sends = p.forward ? p.ch.m : 0;
  link.run(p, [&] {
    if (link.rank() == root) {
      for (std::size_t chunk = 0; chunk < p.ch.m; ++chunk) p.send(0, chunk);
    }
  });
}

void communicator::impl::allgather(codec::dtype type, std::span<const std::byte> mine, std::span<std::byte> out) {
  const std::size_t n = link.size();
  if (mine.size() % codec::size_of(type) != 0 || out.size() != n * mine.size()) {
    link.fail(errc::size_mismatch, std::nullopt,
              "allgather of " + std::to_string(mine.size()) + " bytes per rank into " + std::to_string(out.size()) +
                  " bytes for " + std::to_string(n) + " ranks");
  }
  if (!mine.empty()) std::memcpy(out.data() + link.rank() * mine.size(), mine.data(), mine.size());
  copy_plan p(link, type, out, n, true);
  p.sends = frame_count(link, (n - 1) * p.ch.m);
  p.expected = link.only_from(detail::link::prev_channel, static_cast<std::uint32_t>(p.sends));
  link.run(p, [&] {
    for (std::size_t chunk = 0; chunk < p.ch.m; ++chunk) p.send(0, chunk);
  });
}

void communicator::impl::barrier() {
  const std::uint32_t me = link.rank();
  std::vector<std::uint32_t> all(link.size());
  allgather(codec::dtype::u32, std::as_bytes(std::span(&me, 1)), std::as_writable_bytes(std::span(all)));
  for (std::uint32_t r = 0; r < all.size(); ++r) {
    if (all[r] != r) {
      link.fail(comm_errc::protocol_error, r,
                "barrier saw rank " + std::to_string(r) + " report itself as " + std::to_string(all[r]));
    }
  }
}

// With authenticated frames, the world's first collective checks that every
// rank derived the same ring from rank 0's TABLE, which travels before any
// frame key is in use: rank 0 broadcasts the SHA-256 of its ring (the ranks
// by place, u32 little-endian) and every rank compares it with its own.
// Without it, a TABLE altered on the path could move a rank to another
// place between the same neighbours, and its blocks would be summed in the
// wrong places.
void communicator::impl::check_ring() {
  std::vector<std::byte> ring(4 * link.size());
  for (std::uint32_t p = 0; p < link.size(); ++p) {
    wire::store<std::uint32_t>(link.rank_at(p), ring.data() + 4 * p, wire::byte_order::little);
  }
  std::array<std::byte, 32> mine{};
  unsigned int length = 0;
  if (EVP_Digest(ring.data(), ring.size(), reinterpret_cast<unsigned char*>(mine.data()), &length, EVP_sha256(),
                 nullptr) != 1) {
    link.fail(comm_errc::auth_failed, std::nullopt, "OpenSSL could not compute SHA-256");
  }
  std::array<std::byte, 32> rank0 = mine;
  broadcast(codec::dtype::u8, rank0, 0);
  if (rank0 != mine) {
    link.fail(comm_errc::config_mismatch, 0,
              "this rank's ring differs from rank 0's: the rendezvous TABLE was altered on the way");
  }
}

void combine(reduce_op o, codec::dtype type, std::span<std::byte> acc, std::span<const std::byte> in) {
  const std::size_t width = codec::size_of(type);
  if (!detail::reducible(o, type)) {
    throw comm_error(comm_errc::unsupported, std::nullopt,
                     "combine " + std::string(name(o)) + " is not defined on " + std::string(codec::name(type)));
  }
  if (acc.size() != in.size() || acc.size() % width != 0) {
    throw comm_error(errc::size_mismatch, std::nullopt,
                     "combine of " + std::to_string(in.size()) + " bytes into " + std::to_string(acc.size()) +
                         " bytes of " + std::string(codec::name(type)));
  }
  const reduce_op op = o == reduce_op::avg ? reduce_op::sum : o;
  detail::reduce(op, type, acc.data(), acc.data(), in.data(), wire::host_order, acc.size() / width);
}

// ---------------------------------------------------------------------------
// communicator

communicator::communicator(const comm::config& c, std::optional<listener> rank0) {
  c.validate().value();  // a bad config throws its ferry::exception
  impl_ = std::make_unique<impl>(c, std::move(rank0));
  if (c.auth != frame_auth::none && c.world_size > 1) impl_->check_ring();
  if (c.algorithm == algorithm::automatic && c.world_size > 1) {
    // Every rank must make the same choice: rank 0's link costs are all's.
    std::array<double, 3> cost{c.link.alpha_s, c.link.beta_s_per_byte, c.link.gamma_s_per_byte};
    impl_->broadcast(codec::dtype::f64, std::as_writable_bytes(std::span(cost)), 0);
    impl_->cost = link_cost{cost[0], cost[1], cost[2]};
  }
  impl_->join_hosts();
  if (c.world_size >= 4) {
    // The mesh (the tree algorithms' links, and point-to-point messages'
    // between ranks that are not ring neighbours) forms once every rank has
    // its ring links: after a collective over the ring.
    impl_->barrier();
    impl_->link.form_mesh();
  }
}

communicator communicator::from_env() { return communicator(config::from_env().value()); }

communicator::communicator(communicator&&) noexcept = default;
communicator& communicator::operator=(communicator&&) noexcept = default;
communicator::~communicator() = default;

std::uint32_t communicator::rank() const noexcept { return impl_->link.rank(); }
std::uint32_t communicator::world_size() const noexcept { return impl_->link.size(); }
const config& communicator::config() const noexcept { return impl_->link.config(); }
algorithm communicator::algorithm_for(std::size_t bytes) const {
  if (!impl_->grouped()) return impl_->algorithm_for(bytes);
  // One host: no network step (the ring stands for "none").
  return impl_->leaders.size() == 1 ? algorithm::ring : impl_->hosts_algorithm_for(bytes, codec::dtype::u8);
}
const link_cost& communicator::link_costs() const noexcept { return impl_->cost; }
std::span<const std::uint32_t> communicator::host_ranks() const noexcept { return impl_->group; }
const hello& communicator::prev_peer() const noexcept { return impl_->link.prev_hello(); }
const hello& communicator::next_peer() const noexcept { return impl_->link.next_hello(); }

void communicator::allreduce_bytes(codec::dtype type, std::span<std::byte> data, const allreduce_options& o) {
  impl_->worker.run_inline([&] { impl_->allreduce(type, data, o); });
}

work communicator::start_allreduce_bytes(codec::dtype type, std::span<std::byte> data, const allreduce_options& o) {
  impl* p = impl_.get();
  return work(p->worker.submit([p, type, data, o] { p->allreduce(type, data, o); }));
}

void communicator::reduce_scatter_bytes(codec::dtype type, std::span<const std::byte> in,
                                        std::span<const std::size_t> counts, std::span<std::byte> out,
                                        const allreduce_options& o) {
  impl_->worker.run_inline([&] { impl_->reduce_scatter(type, in, counts, out, o); });
}

work communicator::start_reduce_scatter_bytes(codec::dtype type, std::span<const std::byte> in,
                                              std::vector<std::size_t> counts, std::span<std::byte> out,
                                              const allreduce_options& o) {
  impl* p = impl_.get();
  return work(p->worker.submit(
      [p, type, in, counts = std::move(counts), out, o] { p->reduce_scatter(type, in, counts, out, o); }));
}

work communicator::start_reduce_scatter_owned_bytes(codec::dtype type, std::span<std::byte> data,
                                                    const allreduce_options& o) {
  auto* p = impl_.get();
  return work(impl_->worker.submit([p, type, data, o] { p->reduce_scatter_owned(type, data, o); }));
}

work communicator::start_allgather_owned_bytes(codec::dtype type, std::span<std::byte> data) {
  auto* p = impl_.get();
  return work(impl_->worker.submit([p, type, data] { p->allgather_owned(type, data); }));
}

std::pair<std::size_t, std::size_t> communicator::owned_block(std::size_t count) const noexcept {
  const std::size_t n = impl_->link.size();
  if (n == 1) return {0, count};
  const detail::chunking ch(count, n, 1);
  const std::size_t k = (impl_->link.position() + 1) % n;
  return {ch.block_start(k), ch.block_size(k)};
}

bool communicator::ring_allreduce_for(std::size_t bytes, compression comp) const {
  if (comp != compression::none) return true;
  return !impl_->grouped() && impl_->algorithm_for(bytes) == algorithm::ring;
}

void communicator::broadcast_bytes(codec::dtype type, std::span<std::byte> data, std::uint32_t root) {
  impl_->worker.run_inline([&] { impl_->broadcast(type, data, root); });
}

work communicator::start_broadcast_bytes(codec::dtype type, std::span<std::byte> data, std::uint32_t root) {
  impl* p = impl_.get();
  return work(p->worker.submit([p, type, data, root] { p->broadcast(type, data, root); }));
}

void communicator::allgather_bytes(codec::dtype type, std::span<const std::byte> mine, std::span<std::byte> out) {
  impl_->worker.run_inline([&] { impl_->allgather(type, mine, out); });
}

work communicator::start_allgather_bytes(codec::dtype type, std::span<const std::byte> mine,
                                         std::span<std::byte> out) {
  impl* p = impl_.get();
  return work(p->worker.submit([p, type, mine, out] { p->allgather(type, mine, out); }));
}

void communicator::barrier() {
  impl_->worker.run_inline([&] { impl_->barrier(); });
}

work communicator::start_barrier() {
  impl* p = impl_.get();
  return work(p->worker.submit([p] { p->barrier(); }));
}

void communicator::all_to_all_bytes(codec::dtype type, std::span<const std::byte> in,
                                    std::span<const std::size_t> send_counts, std::span<std::byte> out,
                                    std::span<const std::size_t> recv_counts) {
  impl_->worker.run_inline([&] { detail::all_to_all(impl_->link, type, in, send_counts, out, recv_counts); });
}

work communicator::start_all_to_all_bytes(codec::dtype type, std::span<const std::byte> in,
                                          std::vector<std::size_t> send_counts, std::span<std::byte> out,
                                          std::vector<std::size_t> recv_counts) {
  impl* p = impl_.get();
  return work(p->worker.submit([p, type, in, send_counts = std::move(send_counts), out,
                                recv_counts = std::move(recv_counts)] {
    detail::all_to_all(p->link, type, in, send_counts, out, recv_counts);
  }));
}

void communicator::send_bytes(codec::dtype type, std::span<const std::byte> data, std::uint32_t peer,
                              std::int64_t tag) {
  impl_->worker.run_inline([&] { impl_->link.send_message(peer, tag, type, data); });
}

work communicator::start_send_bytes(codec::dtype type, std::span<const std::byte> data, std::uint32_t peer,
                                    std::int64_t tag) {
  impl* p = impl_.get();
  return work(p->worker.submit([p, type, data, peer, tag] { p->link.send_message(peer, tag, type, data); }));
}

std::uint32_t communicator::recv_bytes(codec::dtype type, std::span<std::byte> data,
                                       std::optional<std::uint32_t> peer, std::int64_t tag) {
  std::uint32_t source = 0;
  start_recv_bytes(type, data, peer, tag, &source).wait();
  return source;
}

work communicator::start_recv_bytes(codec::dtype type, std::span<std::byte> data, std::optional<std::uint32_t> peer,
                                    std::int64_t tag, std::uint32_t* source) {
  impl* p = impl_.get();
  return work(p->worker.submit_deferred([p, type, data, peer, tag, source](const std::shared_ptr<work::state>& st) {
    p->receives.post(detail::receive{.type = type, .data = data, .peer = peer, .tag = tag, .source = source, .state = st});
  }));
}

}  // namespace ferry::comm
