// Inputs of the collectives tests that are a pure function of (rank, dtype,
// index), so every architecture makes the same ones: used by ring_test
// (forked worlds), doubling_test and ring_node (the mixed-architecture ring).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "ferry/codec/dtype.h"
#include "ferry/comm/detail/reduce.h"
#include "ferry/comm/options.h"
#include "ferry/wire/byte_order.h"

namespace ferry::comm::test {

/// Every (dtype, op) an allreduce takes, in dtype order.
inline std::vector<std::pair<codec::dtype, reduce_op>> reducible_cases() {
  std::vector<std::pair<codec::dtype, reduce_op>> cases;
  for (const codec::dtype t : codec::all_dtypes) {
    for (const reduce_op op : all_reduce_ops) {
      if (detail::reducible(op, t)) cases.emplace_back(t, op);
    }
  }
  return cases;
}

inline std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// `count` values of `t` as host-order bytes: random patterns (bool: 0 or
/// 1), and for the floats, at every fifth index (shifted by rank), NaNs
/// with payloads (quiet and signalling, both signs), infinities of both
/// signs and -0, which so meet other ranks' numbers and NaNs.
/// A complex dtype's values are pairs of its part dtype's, so they are the
/// same numbers on every architecture too.
inline std::vector<std::byte> typed_input(std::uint32_t rank, codec::dtype t, std::size_t count) {
  if (codec::is_complex(t)) return typed_input(rank ^ 0x5A5Au, codec::part_of(t), 2 * count);
  const std::size_t w = codec::size_of(t);
  std::vector<std::byte> v(count * w);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t x = splitmix((std::uint64_t{rank} << 48) ^ (std::uint64_t{static_cast<unsigned>(t)} << 40) ^ i);
    if (t == codec::dtype::boolean) x &= 1;
    if ((i + rank) % 5 == 0) {
      const std::size_t k = (i / 5 + rank) % 6;
      const std::uint64_t f32[] = {0x7FC00000, 0xFFA0BEEF, 0x7F800001, 0x7F800000, 0xFF800000, 0x80000000};
      const std::uint64_t f64[] = {0x7FF8000000000000, 0xFFF4DEADBEEF0001, 0x7FF0000000000001,
                                   0x7FF0000000000000, 0xFFF0000000000000, 0x8000000000000000};
      const std::uint64_t f16[] = {0x7E00, 0xFE3F, 0x7C01, 0x7C00, 0xFC00, 0x8000};
      const std::uint64_t bf16[] = {0x7FC0, 0xFFA5, 0x7F81, 0x7F80, 0xFF80, 0x8000};
      if (t == codec::dtype::f32) x = f32[k];
      if (t == codec::dtype::f64) x = f64[k];
      if (t == codec::dtype::f16) x = f16[k];
      if (t == codec::dtype::bf16) x = bf16[k];
    }
    for (std::size_t b = 0; b < w; ++b) {
      const std::size_t shift = 8 * (wire::host_order == wire::byte_order::little ? b : w - 1 - b);
      v[i * w + b] = static_cast<std::byte>(x >> shift);
    }
  }
  return v;
}

}  // namespace ferry::comm::test
