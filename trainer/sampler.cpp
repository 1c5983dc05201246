#include "ferry/trainer/sampler.h"

#include <cassert>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>

namespace ferry::trainer {
namespace {

// PyTorch's CPU randperm into out[0..n): the identity, then one swap per
// position but the last, each with a 32-bit draw modulo what remains.
template <class T>
void permute(std::vector<T>& out, std::uint64_t seed) {
  std::iota(out.begin(), out.end(), T{0});
  // at::mt19937 keeps the low 32 bits of the 64-bit seed, then runs the
  // standard MT19937 initialisation, as std::mt19937 does.
  std::mt19937 engine(static_cast<std::uint32_t>(seed));
  const std::uint64_t n = out.size();
  for (std::uint64_t i = 0; i + 1 < n; ++i) {
    const std::uint64_t z = std::uint64_t{engine()} % (n - i);
    std::swap(out[static_cast<std::size_t>(i)], out[static_cast<std::size_t>(i + z)]);
  }
}

}  // namespace

std::vector<std::int64_t> randperm(std::int64_t n, std::uint64_t seed) {
  assert(n >= 0 && static_cast<std::uint64_t>(n) <= SIZE_MAX);
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  permute(out, seed);
  return out;
}

distributed_sampler::distributed_sampler(std::size_t n, std::uint32_t world, std::uint32_t rank, std::uint64_t seed,
                                         bool shuffle, bool drop_last)
    : n_(n), world_(world), rank_(rank), seed_(seed), shuffle_(shuffle) {
  assert(world >= 1 && rank < world);
  assert(n <= SIZE_MAX - world);
  num_samples_ = drop_last ? n / world : n / world + (n % world != 0 ? 1 : 0);
}

std::vector<std::size_t> distributed_sampler::indices() const {
  std::vector<std::size_t> out(num_samples_);
  if (num_samples_ == 0) return out;
  std::vector<std::size_t> order(n_);
  if (shuffle_) {
    permute(order, seed_ + epoch_);  // wraps modulo 2^64; only the low 32 bits count
  } else {
    std::iota(order.begin(), order.end(), std::size_t{0});
  }
  // Position p of the padded order is order[p mod n]; p < total_size.
  std::size_t p = rank_;
  for (std::size_t j = 0; j < num_samples_; ++j, p += world_) out[j] = order[p % n_];
  return out;
}

std::vector<std::size_t> exact_shard(std::size_t n, std::uint32_t world, std::uint32_t rank) {
  assert(world >= 1 && rank < world);
  std::vector<std::size_t> out;
  if (rank >= n) return out;
  out.reserve((n - rank - 1) / world + 1);
  for (std::size_t p = rank;; p += world) {
    out.push_back(p);
    if (n - p <= world) break;  // p + world >= n, without overflow
  }
  return out;
}

}  // namespace ferry::trainer
