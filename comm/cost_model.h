// ferry/comm/cost_model.h: how long each allreduce algorithm should take,
// and which one FERRY_ALGORITHM=auto picks.
//
// The classic model (Thakur, Rabenseifner and Gropp, IJHPCA 2005): a message
// of b bytes between two ranks costs alpha + b * beta, and combining b bytes
// costs b * gamma. For p ranks and n bytes:
//
//   ring                2(p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma
//   recursive doubling  lg p alpha + lg p n beta + lg p n gamma
//   Rabenseifner        2 lg p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma
//
// where p is not a power of two, the last two add the fold: the ranks
// beyond the largest power of two p2 send their buffer to a partner first
// and get the result last (2 alpha + 2 n beta + n gamma more, with p2 in
// place of p). The ring's 2(p-1) latencies lose to recursive doubling's
// lg p on short messages; its bandwidth term, about 2n, wins on long ones,
// where recursive doubling sends n per step. Rabenseifner has the ring's
// bandwidth with 2 lg p latencies: between the two, and on long messages
// too where p is a power of two and latency counts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ferry/comm/options.h"

namespace ferry::comm {

/// The cost of one link and of the kernels. Defaults: a 1 Gbit/s Ethernet
/// link (50 us, 117 MB/s of payload) and a reduction at 4 GB/s.
struct link_cost {
  double alpha_s = 50e-6;             ///< seconds per message (FERRY_LINK_LATENCY_US)
  double beta_s_per_byte = 1 / 117e6;  ///< seconds per byte on the link (FERRY_LINK_GBPS)
  double gamma_s_per_byte = 1 / 4e9;   ///< seconds per byte combined
};

/// The predicted seconds of an allreduce of `bytes` on `world` ranks by
/// `a` (automatic: the one choose() picks).
[[nodiscard]] double predict(algorithm a, std::uint32_t world, std::size_t bytes, const link_cost& c) noexcept;

/// A tree algorithm replaces the ring only where its prediction is at most
/// this fraction of the ring's. The model leaves out what favours the ring
/// on long messages: its chunks pipeline across its steps and it keeps two
/// connections busy, where each step of the others starts a new exchange,
/// often on a connection that sat idle since the last call (TCP then
/// restarts from its initial window). On the simulated cluster (8 ranks,
/// 1 Gbit/s; docs/benchmarks.md) Rabenseifner took 0.70 of the ring's time
/// at 64 KB, where the model said 0.73, and 1.18 at 1 MB, where it said
/// 0.97.
inline constexpr double ring_margin = 0.9;

/// The faster of recursive doubling and Rabenseifner by prediction
/// (Rabenseifner on a tie): what hosts' leaders run with auto, since no
/// ring joins them.
[[nodiscard]] algorithm choose_tree(std::uint32_t world, std::size_t bytes, const link_cost& c) noexcept;

/// The ring, unless recursive doubling or Rabenseifner (the faster of the
/// two) is predicted to take at most ring_margin of the ring's time; the
/// ring for worlds of one.
[[nodiscard]] algorithm choose(std::uint32_t world, std::size_t bytes, const link_cost& c) noexcept;

/// The sizes at which choose() changes its answer for `world` ranks,
/// between 1 byte and 1 GiB: (first size of the new choice, that choice).
[[nodiscard]] std::vector<std::pair<std::size_t, algorithm>> crossovers(std::uint32_t world, const link_cost& c);

/// A table for people: the predictions of each algorithm at sizes from
/// 4 KiB to 256 MiB, the choice, and the crossovers.
[[nodiscard]] std::string explain(std::uint32_t world, const link_cost& c);

}  // namespace ferry::comm
