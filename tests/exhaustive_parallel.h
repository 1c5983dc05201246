// Runs a check over all 2^32 patterns, split across the machine's cores.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

namespace ferry::testing {

/// Calls check(first, count) on consecutive chunks covering [0, 2^32); each
/// call returns the first failing pattern of its chunk, if any. Returns the
/// lowest failing pattern found, if any.
template <class Check>
std::optional<std::uint32_t> for_all_u32(Check check) {
  constexpr std::uint64_t total = std::uint64_t{1} << 32;
  // 2^16 patterns: a chunk's float buffers (256 KiB each) stay in cache.
  constexpr std::uint32_t chunk = 1u << 16;
  std::atomic<std::uint64_t> next{0};
  std::atomic<std::uint64_t> first_failure{total};
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (;;) {
        const std::uint64_t start = next.fetch_add(chunk);
        if (start >= total) return;
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
