// The goals ferry's benchmarks print, each stated against the machine's own
// ceiling measured in the same run, and each stated once: a benchmark that
// measures the same thing as another takes its target from here, so two
// benchmarks cannot state different goals for one measurement.
#pragma once

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace ferry::bench {

/// A byte-swap kernel (copy or in place) against memcpy of the same bytes at
/// the same size: memcpy is the ceiling of any kernel that reads and writes
/// every byte once. Peers slower than memcpy (Boost.Endian's loop) are
/// reported, never a goal: a ratio to them is bounded by memcpy / peer.
inline constexpr double swap_of_memcpy = 0.95;

/// A load that reads every byte (every CRC32C checked, one thread per core)
/// against reading the same file's bytes once, mapped and faulted in
/// beforehand, with as many threads (read_once below): no CRC-checked load can
/// beat it. torch.load and read() are reported beside it, not goals.
inline constexpr double crc_load_of_read_once = 0.85;

/// GGUF byte-order conversion into a new fsync'ed file against copying the
/// same bytes with read() + write() + fsync (formats_bench).
inline constexpr double gguf_convert_of_copy_fsync = 0.8;

/// Opening a file and reading every tensor's bytes against read() of the
/// whole file (formats_bench, GGUF).
inline constexpr double open_read_of_read = 0.8;

/// A .npy load (every byte read, in this host's order) against
/// numpy.load: of a file in this host's order, and of one in the other
/// order made native (formats_bench); a deflated .npz likewise.
inline constexpr double npy_of_numpy_native = 1.0;
inline constexpr double npy_of_numpy_swapped = 2.0;
inline constexpr double npz_of_numpy = 1.0;

/// ">= 0.85x": a goal's target as the tables print it.
inline std::string at_least(double goal) {
  char text[32];
  std::snprintf(text, sizeof text, ">= %.2fx", goal);
  return text;
}

/// The ceiling under a CRC-checked load: `words` read once by `threads`
/// threads, each XOR-ing its share. Returns the XOR so that the reads cannot
/// be optimised away.
inline std::uint64_t read_once(std::span<const std::uint64_t> words,
                               unsigned threads = std::max(1u, std::thread::hardware_concurrency())) {
  const std::size_t n = words.size();
  std::vector<std::uint64_t> out(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::uint64_t a = 0, b = 0, c = 0, d = 0;
      const std::size_t end = n * (t + 1) / threads;
      std::size_t i = n * t / threads;
      for (; i + 4 <= end; i += 4) {
        a ^= words[i];
        b ^= words[i + 1];
        c ^= words[i + 2];
        d ^= words[i + 3];
      }
      for (; i < end; ++i) a ^= words[i];
      out[t] = a ^ b ^ c ^ d;
    });
  }
  for (auto& p : pool) p.join();
  std::uint64_t x = 0;
  for (const auto v : out) x ^= v;
  return x;
}

/// The benchmark loop of the read-once ceiling over the file at `path`:
/// mapped and faulted in before timing, then read_once each iteration.
inline void time_read_once(benchmark::State& state, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    std::fprintf(stderr, "read once: cannot open %s\n", path.c_str());
    std::exit(1);
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    std::fprintf(stderr, "read once: cannot map %s\n", path.c_str());
    std::exit(1);
  }
  const std::span words(static_cast<const std::uint64_t*>(map), size / 8);
  for (auto _ : state) benchmark::DoNotOptimize(read_once(words));
  ::munmap(map, size);
  state.SetBytesProcessed(static_cast<std::int64_t>(size * state.iterations()));
}

}  // namespace ferry::bench
