// The allreduce through host groups (ranks that share a shared-memory
// segment): the leaders' path, the striped one, and the groups' setup at
// the communicator's start (docs/comm-protocol.md section 8).
#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "ferry/comm/detail/communicator_impl.h"
#include "ferry/comm/detail/reduce.h"
#include "ferry/comm/detail/tree_allreduce.h"

namespace ferry::comm {

// With host groups: one group (every rank on one host) combines in its
// segment alone; otherwise each group reduces to its leader there, the
// leaders combine over the network (a tree algorithm over the leaders:
// leaders_algorithm_for), and
// each leader returns the result to its group. Avg sums and divides once,
// by the world size, where the last combining happens. Every element's
// order of combination is fixed by ranks, groups and the buffer's size
// alone (the size picks the path, the chunks and the tree algorithm), so
// every rank gets the same bits.
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

algorithm communicator::impl::hosts_algorithm_for(std::size_t bytes, codec::dtype type) const {
  if (!striped(bytes)) return leaders_algorithm_for(bytes);
  const detail::host_rounds rounds{*segment, link.config().timeout, link.rank(), group};
  return leaders_algorithm_for(rounds.share_bytes(type, stripe_chunk()));  // a full chunk's
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
  const std::size_t chunk = stripe_chunk();
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
        if (stop) return;
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
}  // namespace ferry::comm
