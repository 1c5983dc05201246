// ferry/comm/detail/communicator_impl.h: INTERNAL. The state behind a
// communicator and the members its collectives share. communicator.cpp
// holds the world's collectives, hosts.cpp the paths through host groups
// (shared-memory segments): the leaders' allreduce, the striped one and
// the setup at start (docs/comm-protocol.md section 8). Not part of the API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "ferry/comm/communicator.h"
#include "ferry/comm/detail/link.h"
#include "ferry/comm/detail/plan_checks.h"
#include "ferry/comm/detail/receives.h"
#include "ferry/comm/detail/shared_memory.h"
#include "ferry/comm/detail/worker.h"

namespace ferry::comm {

// The worker is declared last so it is destroyed first: queued collectives
// finish while the link still exists.
struct communicator::impl {
  // The striped allreduce's share per member and chunk (a chunk holds
  // group.size() shares), and how many chunks the segment's reduce-scatters
  // run ahead of its allgathers (the network's slack). On the simulated
  // cluster at 16 MB, 2x2 ran at 0.97 of its link bound with 512 KiB shares
  // against 0.91 with 1 MiB; 4x4 took 283-301 ms against 288-379 ms with
  // 1 MiB and about 800 ms with 256 KiB, whose network steps stalled for
  // 70-160 ms at a time.
  static constexpr std::size_t stripe_share = std::size_t{512} << 10;
  static constexpr std::size_t stripe_ahead = 2;

  detail::link link;
  detail::rx_staging staging;
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
    return !peers.empty() && bytes >= 2 * stripe_chunk();
  }
  // A striped allreduce's chunk: one share per member of this host.
  [[nodiscard]] std::size_t stripe_chunk() const noexcept { return stripe_share * group.size(); }
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

}  // namespace ferry::comm
