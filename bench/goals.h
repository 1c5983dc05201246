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

/// The ceiling under a load: the words of `parts` read once by `threads`
/// threads (one pool for all parts), each XOR-ing an equal share of the
/// words. Returns the XOR so that the reads cannot be optimised away.
inline std::uint64_t read_once(std::span<const std::span<const std::uint64_t>> parts,
                               unsigned threads = std::max(1u, std::thread::hardware_concurrency())) {
  std::size_t total = 0;
  for (const auto& p : parts) total += p.size();
  std::vector<std::uint64_t> out(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      // This thread's words are [begin, end) of all parts laid end to end.
      const std::size_t begin = total * t / threads, end = total * (t + 1) / threads;
      std::uint64_t a = 0, b = 0, c = 0, d = 0;
      std::size_t start = 0;  // of `part` among all words
      for (const auto& part : parts) {
        if (start >= end) break;
        const std::size_t lo = std::max(begin, start), hi = std::min(end, start + part.size());
        const std::uint64_t* w = part.data() + (lo - start);
        start += part.size();
        if (lo >= hi) continue;
        const std::size_t n = hi - lo;
        std::size_t i = 0;
        for (; i + 4 <= n; i += 4) {
          a ^= w[i];
          b ^= w[i + 1];
          c ^= w[i + 2];
          d ^= w[i + 3];
        }
        for (; i < n; ++i) a ^= w[i];
      }
      out[t] = a ^ b ^ c ^ d;
    });
  }
  for (auto& p : pool) p.join();
  std::uint64_t x = 0;
  for (const auto v : out) x ^= v;
  return x;
}

inline std::uint64_t read_once(std::span<const std::uint64_t> words,
                               unsigned threads = std::max(1u, std::thread::hardware_concurrency())) {
  return read_once(std::span(&words, 1), threads);
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

/// The benchmark loop of read() of the whole file at `path` into one
/// buffer (the machine's ceiling for a load that copies). The first read
/// is not timed: on a 2-core VM it took 2 s a GiB and later ones 0.07 s
/// (the buffer already zero-filled, the file in the page cache: a cost of
/// the VM's first copy into those pages, not of the file).
inline void time_read_whole(benchmark::State& state, const std::string& path) {
  const int probe = ::open(path.c_str(), O_RDONLY);
  struct stat st {};
  if (probe < 0 || ::fstat(probe, &st) != 0) {
    std::fprintf(stderr, "read whole: cannot open %s\n", path.c_str());
    std::exit(1);
  }
  ::close(probe);
  std::vector<std::byte> buffer(static_cast<std::size_t>(st.st_size));
  const auto read_file = [&] {
    const int fd = ::open(path.c_str(), O_RDONLY);
    for (std::size_t done = 0; done < buffer.size();) {
      const ssize_t n = fd < 0 ? -1 : ::read(fd, buffer.data() + done, buffer.size() - done);
      if (n <= 0) {
        std::fprintf(stderr, "read whole: cannot read %s\n", path.c_str());
        std::exit(1);
      }
      done += static_cast<std::size_t>(n);
    }
    ::close(fd);
  };
  read_file();
  for (auto _ : state) {
    read_file();
    benchmark::DoNotOptimize(buffer.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(buffer.size() * state.iterations()));
}

}  // namespace ferry::bench
