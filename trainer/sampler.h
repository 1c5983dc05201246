// ferry/trainer/sampler.h: which samples each rank of a data-parallel job
// reads, index for index what PyTorch's DistributedSampler yields, on every
// architecture.
//
// THE REFERENCE (PyTorch 1.13; torch/utils/data/distributed.py and the CPU
// randperm kernel, aten/src/ATen/native/TensorFactories.cpp)
//
// Generator. torch.Generator().manual_seed(s) seeds a 32-bit Mersenne
// Twister (MT19937) with the low 32 bits of s, by MT19937's standard
// initialisation; std::mt19937(static_cast<uint32_t>(s)) is the same
// engine in the same state. So seeds 5 and 2^32 + 5 give the same
// permutation, in PyTorch and here.
//
// randperm(n). r = [0, 1, ..., n-1]; then for i = 0 .. n-2: z = g() % (n-i),
// where g() is the engine's next 32-bit output, and r[i] is swapped with
// r[i+z]. One draw per element but the last, none for n <= 1. PyTorch 1.13
// does this for every n (checked against it up to n = 214,748,365, where
// later versions switch to a 64-bit draw; ferry follows 1.13).
//
// DistributedSampler(n, world, rank, shuffle, seed, drop_last), in epoch e:
//   num_samples = n / world                    with drop_last
//               = ceil(n / world)              without
//   total_size  = num_samples x world
//   order       = randperm(n) seeded with seed + e when shuffle, else 0..n-1
//   the order is cut to total_size (drop_last) or padded by repeating it
//   from its start until it is total_size long; rank r takes the elements
//   at positions r, r + world, r + 2 world, ... < total_size.
// So element j of rank r is order[(r + j x world) mod n]. PyTorch's
// formula for drop_last, ceil((n - world) / world) when world does not
// divide n, is n / world for every n >= 0 (it is a float ceil in Python,
// exact while n < 2^53).
//
// All of it is integer arithmetic: every architecture, byte order and
// word size computes the same indices (the tests compare x86-64, aarch64,
// armhf and s390x against indices PyTorch printed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry::trainer {

/// torch.randperm(n, generator=torch.Generator().manual_seed(seed)) on the
/// CPU, as PyTorch 1.13 computes it (see above).
// Requires: 0 <= n <= SIZE_MAX.
[[nodiscard]] std::vector<std::int64_t> randperm(std::int64_t n, std::uint64_t seed);

/// One rank's share of a dataset of n samples, epoch after epoch:
/// torch.utils.data.DistributedSampler(dataset of length n, num_replicas =
/// world, rank = rank, shuffle, seed, drop_last), with set_epoch().
///
/// Without drop_last, the last (total_size - n) positions repeat samples
/// from the start of the order, so that every rank gets num_samples: right
/// for training, where ranks must step together, but an evaluation over
/// these shards counts those samples twice (pytorch/pytorch#25162); use
/// exact_shard() there.
///
/// world and rank come from the communicator, which has checked them;
/// out-of-range values are bugs of the caller, asserted.
class distributed_sampler {
 public:
  // Requires: world >= 1, rank < world, n <= SIZE_MAX - world.
  distributed_sampler(std::size_t n, std::uint32_t world, std::uint32_t rank, std::uint64_t seed = 0,
                      bool shuffle = true, bool drop_last = false);

  /// The epoch whose order indices() returns (0 at first). The generator is
  /// seeded with seed + epoch, wrapping modulo 2^64 (where PyTorch would
  /// refuse the sum; only its low 32 bits matter).
  void set_epoch(std::uint64_t epoch) noexcept { epoch_ = epoch; }
  [[nodiscard]] std::uint64_t epoch() const noexcept { return epoch_; }

  /// Samples this rank reads per epoch (len(sampler) in PyTorch): the same
  /// on every rank.
  [[nodiscard]] std::size_t num_samples() const noexcept { return num_samples_; }
  /// num_samples() x world: positions of the padded (or cut) order.
  [[nodiscard]] std::size_t total_size() const noexcept { return num_samples_ * world_; }

  /// This rank's sample indices for the current epoch, in the order to read
  /// them: list(iter(sampler)) in PyTorch. Each is < n.
  [[nodiscard]] std::vector<std::size_t> indices() const;

 private:
  std::size_t n_;
  std::uint32_t world_;
  std::uint32_t rank_;
  std::uint64_t seed_;
  std::uint64_t epoch_ = 0;
  bool shuffle_;
  std::size_t num_samples_;
};

/// An evaluation shard: rank's samples r, r + world, r + 2 world, ... < n,
/// unshuffled and unpadded. Over all ranks every sample appears exactly
/// once, so per-rank sums of a metric add up to the exact total; ranks get
/// n / world or n / world + 1 samples, the first n mod world ranks one more.
/// (The same positions as distributed_sampler(n, world, rank, 0, false)
/// minus the padding.)
// Requires: world >= 1, rank < world.
[[nodiscard]] std::vector<std::size_t> exact_shard(std::size_t n, std::uint32_t world, std::uint32_t rank);

}  // namespace ferry::trainer
