// Runs a check over the 2^32 patterns, split across the machine's cores:
// all of them under `make soak` (FERRY_SWEEP=full), a fixed sample of them
// in make test.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

namespace ferry::testing {

/// Whether the sweep covers every pattern: FERRY_SWEEP=full in the
/// environment (make soak). Otherwise it covers a sample (below).
inline bool full_sweep() {
  const char* s = std::getenv("FERRY_SWEEP");
  return s != nullptr && std::string_view(s) == "full";
}

/// The sample make test sweeps: a chunk is 2^16 consecutive patterns, which
/// as f32 share the sign, the exponent and the mantissa's top 7 bits. Its
/// low 16 bits hold every bit that narrowing to bf16, or to a normal f16,
/// rounds away; so every sign and exponent (zeros and subnormals,
/// infinities and NaNs included) is swept with the top bits 0, 1, 0x3F,
/// 0x40, 0x7E and 0x7F (the carries into the exponent, the middle of the
/// binade) and two more that vary with the exponent, so that all 128 values
/// occur. Where f16 is subnormal (f32 exponents 2^-25 to 2^-15: biased 102
/// to 112), narrowing rounds away top bits too: those exponents are swept
/// whole. About 1 chunk in 10.
inline bool in_sample(std::uint32_t chunk_index) {
  const std::uint32_t top = chunk_index & 0x7F;
  const std::uint32_t exponent = (chunk_index >> 7) & 0xFF;
  if (exponent >= 102 && exponent <= 112) return true;
  switch (top) {
    case 0x00: case 0x01: case 0x3F: case 0x40: case 0x7E: case 0x7F: return true;
    default: return top == (exponent * 37) % 128 || top == (exponent * 91 + 17) % 128;
  }
}

/// Calls check(first, count) on consecutive chunks covering [0, 2^32), or
/// on the sample of them unless full_sweep(); each call returns the first
/// failing pattern of its chunk, if any. Returns the lowest failing pattern
/// found, if any.
template <class Check>
std::optional<std::uint32_t> for_all_u32(Check check) {
  constexpr std::uint64_t total = std::uint64_t{1} << 32;
  // 2^16 patterns: a chunk's float buffers (256 KiB each) stay in cache.
  constexpr std::uint32_t chunk = 1u << 16;
  const bool full = full_sweep();
  std::atomic<std::uint64_t> next{0};
  std::atomic<std::uint64_t> first_failure{total};
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (;;) {
        const std::uint64_t start = next.fetch_add(chunk);
        if (start >= total) return;
        if (!full && !in_sample(static_cast<std::uint32_t>(start / chunk))) continue;
        if (auto bad = check(static_cast<std::uint32_t>(start), chunk)) {
          std::uint64_t cur = first_failure.load();
          while (*bad < cur && !first_failure.compare_exchange_weak(cur, *bad)) {
          }
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  if (first_failure.load() == total) return std::nullopt;
  return static_cast<std::uint32_t>(first_failure.load());
}

}  // namespace ferry::testing
