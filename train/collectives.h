// The collectives the trainer needs, over either backend:
//   ferry  comm::communicator: a ring over TCP that mixes byte orders and
//          word sizes, bf16/f16 compression with error feedback,
//          authenticated peers, a dead peer reported within seconds;
//   gloo   LibTorch's c10d ProcessGroupGloo, the engine PyTorch DDP uses on
//          CPU, for homogeneous clusters that would rather run it.
// Every rank calls the same collectives in the same order. Failures throw
// (comm::comm_error for ferry, a ferry::exception naming the backend for
// gloo); the trainer reports them and exits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "ferry/comm/communicator.h"

namespace ferry::trainer {

class collectives {
 public:
  virtual ~collectives() = default;
  [[nodiscard]] virtual std::uint32_t rank() const = 0;
  [[nodiscard]] virtual std::uint32_t world_size() const = 0;
  /// "ferry" or "gloo".
  [[nodiscard]] virtual std::string name() const = 0;

  /// Rank 0's values to every rank.
  virtual void broadcast(std::span<float> data) = 0;
  virtual void broadcast(std::span<std::int64_t> data) = 0;
  virtual void broadcast(std::span<double> data) = 0;
  /// The average over ranks, in place, the same bits on every rank; queued,
  /// the returned function waits for it. `feedback` (compressed only) must
  /// outlive the wait.
  [[nodiscard]] virtual std::function<void()> start_allreduce_avg(std::span<float> data, comm::compression comp,
                                                                  comm::error_feedback* feedback) = 0;
  /// ZeRO's halves of start_allreduce_avg over a bucket of `count`
  /// elements: the elements [first, first + size) this rank owns (steps,
  /// then gathers), the same partition on every rank for a given count.
  [[nodiscard]] virtual std::pair<std::size_t, std::size_t> owned_block(std::size_t count) const = 0;
  /// Leaves in data's owned block the bits start_allreduce_avg(data, ...)
  /// would leave there (and in `feedback` its residual); the rest of
  /// `data` is scratch. Queued like start_allreduce_avg.
  [[nodiscard]] virtual std::function<void()> start_reduce_scatter_avg(std::span<float> data, comm::compression comp,
                                                                       comm::error_feedback* feedback) = 0;
  /// Every rank's owned block of `data` to every rank, in place; queued.
  [[nodiscard]] virtual std::function<void()> start_allgather_owned(std::span<float> data) = 0;
  /// Every rank's `mine` (same size everywhere) in rank order.
  virtual void allgather(std::span<const double> mine, std::span<double> out) = 0;
  virtual void allgather(std::span<const float> mine, std::span<float> out) = 0;
  virtual void allgather(std::span<const std::int64_t> mine, std::span<std::int64_t> out) = 0;
  virtual void barrier() = 0;
};

/// The ranks whose value in `all` (one per rank) differs from rank 0's, as
/// "1, 3"; empty when every rank agrees.
std::string ranks_unlike_rank0(std::span<const std::int64_t> all);

/// comm::communicator::from_env() (MASTER_ADDR, MASTER_PORT, RANK,
/// WORLD_SIZE, FERRY_SECRET, FERRY_TIMEOUT).
std::unique_ptr<collectives> make_ferry_collectives();

/// ProcessGroupGloo over a c10d TCPStore at MASTER_ADDR:MASTER_PORT+1,
/// after a ferry ring has checked that every rank has this one's byte
/// order and word size (Gloo sends host-order integers and cannot tell).
/// Throws ferry::exception (bad_config) naming the ranks that differ.
/// Exists only where LibTorch was built with Gloo (FERRY_WITH_GLOO).
std::unique_ptr<collectives> make_gloo_collectives();

}  // namespace ferry::trainer
