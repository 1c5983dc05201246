// wire/ and codec/ against memcpy (the physical limit), Boost.Endian's
// endian_reverse_inplace loop, a naive byte loop, and zlib's crc32, at
// 4 KiB, 256 KiB and 64 MiB. Ends with the ratio table docs/benchmarks.md
// shows: the swap kernels' goal is memcpy of the same bytes in the same run
// (bench/goals.h); their ratios to Boost.Endian's loop are reported, since
// no kernel can beat that loop by more than memcpy does.
#include <benchmark/benchmark.h>
#include <boost/endian/conversion.hpp>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "ferry/codec/crc32c.h"
#include "ferry/codec/half.h"
#include "ferry/wire/bulk.h"
#include "ferry/base/cpu.h"
#include "goals.h"
#include "ratio_table.h"

namespace {

using namespace ferry;

constexpr std::int64_t sizes[] = {4 << 10, 256 << 10, 64 << 20};

struct buffers {
  std::vector<float> in;
  std::vector<std::byte> out;
  explicit buffers(std::size_t bytes) : in(bytes / 4), out(bytes) {
    std::mt19937 rng(7);
    std::normal_distribution<float> d;
    for (auto& f : in) f = d(rng);
    std::memset(out.data(), 0, out.size());  // fault the pages in before timing
  }
  std::span<const std::byte> in_bytes() const { return std::as_bytes(std::span(in)); }
};

void finish(benchmark::State& state) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void memcpy_bench(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    std::memcpy(b.out.data(), b.in.data(), b.out.size());
    benchmark::ClobberMemory();
  }
  finish(state);
}

void ferry_swap32_copy(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    wire::store_array<float>(b.in, b.out, wire::byte_order::big);
    benchmark::ClobberMemory();
  }
  finish(state);
}

void ferry_swap32_inplace(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    wire::convert_in_place(std::as_writable_bytes(std::span(b.in)), 4, wire::byte_order::little,
                           wire::byte_order::big);
    benchmark::ClobberMemory();
  }
  finish(state);
}

// What a user writes today: Boost.Endian over the array in a plain loop.
void boost_endian_reverse_inplace(benchmark::State& state) {
  std::vector<std::uint32_t> v(static_cast<std::size_t>(state.range(0)) / 4);
  std::iota(v.begin(), v.end(), 0u);
  for (auto _ : state) {
    for (auto& x : v) boost::endian::endian_reverse_inplace(x);
    benchmark::ClobberMemory();
  }
  finish(state);
}

// The naive byte-by-byte reversal.
void byte_loop(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  const auto in = b.in_bytes();
  for (auto _ : state) {
    for (std::size_t i = 0; i < in.size(); i += 4) {
      for (std::size_t j = 0; j < 4; ++j) b.out[i + j] = in[i + 3 - j];
    }
    benchmark::ClobberMemory();
  }
  finish(state);
}

void ferry_f32_to_bf16(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  std::vector<bf16> out(b.in.size());
  for (auto _ : state) {
    codec::to_bf16(b.in, out);
    benchmark::ClobberMemory();
  }
  finish(state);
}

void ferry_f32_to_f16(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  std::vector<f16> out(b.in.size());
  for (auto _ : state) {
    codec::to_f16(b.in, out);
    benchmark::ClobberMemory();
  }
  finish(state);
}

void ferry_crc32c(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(codec::crc32c(b.in_bytes()));
  finish(state);
}

void zlib_crc32(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  const auto in = b.in_bytes();
  for (auto _ : state) {
    benchmark::DoNotOptimize(crc32_z(0, reinterpret_cast<const Bytef*>(in.data()), in.size()));  // NOLINT: zlib's API
  }
  finish(state);
}

void register_all() {
  const std::pair<const char*, void (*)(benchmark::State&)> all[] = {
      {"memcpy", memcpy_bench},
      {"ferry_swap32_copy", ferry_swap32_copy},
      {"ferry_swap32_inplace", ferry_swap32_inplace},
      {"boost_endian_reverse_inplace", boost_endian_reverse_inplace},
      {"byte_loop", byte_loop},
      {"ferry_f32_to_bf16", ferry_f32_to_bf16},
      {"ferry_f32_to_f16", ferry_f32_to_f16},
      {"ferry_crc32c", ferry_crc32c},
      {"zlib_crc32", zlib_crc32},
  };
  for (const auto& [name, fn] : all) {
    auto* b = benchmark::RegisterBenchmark(name, fn);
    for (auto s : sizes) b->Arg(s);
    b->MinTime(0.2);
  }
}

const char* verdict(double ratio, double goal) { return ratio >= goal ? "met" : "MISSED"; }

void print_table(const bench::results& r) {
  auto get = [&](const std::string& name, std::int64_t size) {
    const auto it = r.find(name + "/" + std::to_string(size));
    return it == r.end() ? 0.0 : it->second.counter("bytes_per_second");
  };
  auto gbps = [](double v) { return v / 1e9; };
  std::printf("\nferry wire/codec, GB/s (median of 3), kernels: bulk=%s crc32c=%s half=%s\n\n",
              std::string(wire::bulk_kernel_name()).c_str(), std::string(codec::crc32c_kernel_name()).c_str(),
              std::string(codec::half_kernel_name()).c_str());
  std::printf("| size | memcpy | ferry swap32 copy | ferry swap32 in place | Boost.Endian loop | byte loop |"
              " f32->bf16 | f32->f16 | ferry CRC32C | zlib crc32 |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (auto s : sizes) {
    std::printf("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n",
                s >= (1 << 20) ? (std::to_string(s >> 20) + " MiB").c_str() : (std::to_string(s >> 10) + " KiB").c_str(),
                gbps(get("memcpy", s)), gbps(get("ferry_swap32_copy", s)), gbps(get("ferry_swap32_inplace", s)),
                gbps(get("boost_endian_reverse_inplace", s)), gbps(get("byte_loop", s)),
                gbps(get("ferry_f32_to_bf16", s)), gbps(get("ferry_f32_to_f16", s)), gbps(get("ferry_crc32c", s)),
                gbps(get("zlib_crc32", s)));
  }
  std::printf("\n| goal | measured | target | |\n|---|---|---|---|\n");
  // One goal per kernel and size, against memcpy of the same bytes measured
  // in this run: the ceiling of a kernel that reads and writes every byte.
  const double goal = bench::swap_of_memcpy;
  const auto target = bench::at_least(goal);
  for (auto s : sizes) {
    const std::string size = s >= (1 << 20) ? std::to_string(s >> 20) + " MiB" : std::to_string(s >> 10) + " KiB";
    for (const auto& [kernel, label] : {std::pair{"ferry_swap32_copy", "swap32 copy"},
                                        std::pair{"ferry_swap32_inplace", "swap32 in place"}}) {
      const double ratio = get(kernel, s) / get("memcpy", s);
      std::printf("| %s / memcpy, %s | %.2fx | %s | %s |\n", label, size.c_str(), ratio, target.c_str(),
                  verdict(ratio, goal));
    }
  }
  // Reported beside their ceiling: a swap at memcpy speed is memcpy / Boost
  // times Boost's loop, whatever that ratio is on this machine.
  for (std::int64_t s : {std::int64_t{4} << 10, std::int64_t{256} << 10}) {
    const double boost = get("boost_endian_reverse_inplace", s);
    std::printf("| swap32 copy / Boost.Endian loop, %lld KiB | %.2fx | reported (memcpy / Boost: %.2fx) | |\n",
                static_cast<long long>(s >> 10), get("ferry_swap32_copy", s) / boost, get("memcpy", s) / boost);
    std::printf("| swap32 in place / Boost.Endian loop, %lld KiB | %.2fx | reported | |\n",
                static_cast<long long>(s >> 10), get("ferry_swap32_inplace", s) / boost);
  }
  const double crc = get("ferry_crc32c", 256 << 10) / get("zlib_crc32", 256 << 10);
  std::printf("| CRC32C / zlib crc32, 256 KiB | %.2fx | >= 3x | %s |\n", crc, verdict(crc, 3));
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  const auto results = ferry::bench::run_benchmarks(argc, argv, "wire_codec");
  if (!results) return 1;
  print_table(*results);
  return 0;
}
