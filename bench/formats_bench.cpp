// GGUF and NumPy files (issue 27's goals), each against its peer in the
// same run:
//
//   GGUF byte-order conversion of a 1 GiB file of mixed types (q4_K, q6_K,
//        q8_0, iq2_xxs, q5_K, f16, bf16, f32 tensors of 16 MiB, random
//        blocks) into a new file, fsync'ed (convert_gguf_order), against
//        copying the same file's bytes with read() + write() + fsync.
//   GGUF open + read every tensor (all tensors' bytes XOR-ed by one thread
//        per core: bench::read_once), against read() of the whole file.
//   .npy load of a 1 GiB f32 array in this host's order and in the other
//        (ferry converts it), open + get + read every byte, against
//        numpy.load timed in Python (python3-numpy; the swapped array
//        then made native with astype, as a user must to compute on it).
//   .npz (deflate) load of a 256 MiB f32 array, the same against
//        numpy.load(...)["x"].
// Files live in build/bench/formats-data and are removed at the end; loads
// are from the page cache.
#include <fcntl.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ferry/checkpoint/ggml_types.h"
#include "ferry/checkpoint/gguf.h"
#include "ferry/checkpoint/npy.h"
#include "ferry/checkpoint/reader.h"
#include "goals.h"
#include "ratio_table.h"

namespace {

namespace fs = std::filesystem;
namespace ckpt = ferry::checkpoint;
using ferry::wire::byte_order;

const fs::path data_dir = fs::absolute("build/bench/formats-data");
fs::path file(const char* name) { return data_dir / name; }

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "formats_bench: %s failed\n", what);
    std::exit(1);
  }
}

template <class R>
void check_result(const R& r, const char* what) {
  if (!r) std::fprintf(stderr, "formats_bench: %s: %s\n", what, r.error().what().c_str());
  check(r.has_value(), what);
}

// splitmix64 bytes, fast enough for a GiB.
void fill_random(std::span<std::byte> out, std::uint64_t seed) {
  std::size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    seed += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(out.data() + i, &z, 8);
  }
  for (; i < out.size(); ++i) out[i] = std::byte{0x5A};
}

// --- GGUF ---------------------------------------------------------------------

constexpr std::uint64_t gguf_tensor_bytes = std::uint64_t{16} << 20;
constexpr std::size_t gguf_tensors = 64;  // 1 GiB

void write_gguf() {
  const ckpt::ggml_type types[] = {ckpt::ggml_type::q4_k, ckpt::ggml_type::q6_k, ckpt::ggml_type::q8_0,
                                   ckpt::ggml_type::iq2_xxs, ckpt::ggml_type::q5_k, ckpt::ggml_type::f16,
                                   ckpt::ggml_type::bf16, ckpt::ggml_type::f32};
  std::vector<std::string> names;
  std::vector<std::vector<std::byte>> data;
  std::vector<ckpt::gguf_tensor_ref> refs;
  names.reserve(gguf_tensors);
  for (std::size_t i = 0; i < gguf_tensors; ++i) {
    const ckpt::ggml_type t = types[i % std::size(types)];
    const ckpt::ggml_type_info& ti = ckpt::info(t);
    const std::uint64_t blocks = gguf_tensor_bytes / ti.block_bytes;
    names.push_back("blk." + std::to_string(i) + ".weight");
    data.emplace_back(static_cast<std::size_t>(blocks * ti.block_bytes));
    fill_random(data.back(), i + 1);
    refs.push_back({names.back(), t, {blocks * ti.block_elements}, data.back()});
  }
  const std::vector<ckpt::gguf_kv> md = {{"general.architecture", std::string("llama")},
                                         {"general.name", std::string("formats_bench")}};
  ckpt::gguf_write_options opt;
  opt.sync = false;
  check_result(ckpt::save_gguf(file("model.gguf"), md, refs, opt), "save_gguf");
}

void BM_gguf_convert_order(benchmark::State& state) {
  const auto in = file("model.gguf"), out = file("model-swapped.gguf");
  const auto other = ferry::wire::host_order == byte_order::little ? byte_order::big : byte_order::little;
  for (auto _ : state) check_result(ckpt::convert_gguf_order(in, out, other), "convert_gguf_order");
  state.SetBytesProcessed(static_cast<std::int64_t>(fs::file_size(in) * state.iterations()));
}

// The peer: the same bytes copied with read() and write(), then fsync.
void BM_copy_write_fsync(benchmark::State& state) {
  const auto in = file("model.gguf"), out = file("model-copy.gguf");
  std::vector<char> buf(std::size_t{8} << 20);
  for (auto _ : state) {
    const int from = ::open(in.c_str(), O_RDONLY);
    const int to = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    check(from >= 0 && to >= 0, "open for copy");
    for (ssize_t n; (n = ::read(from, buf.data(), buf.size())) > 0;) {
      for (ssize_t done = 0; done < n;) {
        const ssize_t w = ::write(to, buf.data() + done, static_cast<std::size_t>(n - done));
        check(w > 0, "write");
        done += w;
      }
    }
    check(::fsync(to) == 0, "fsync");
    ::close(from);
    ::close(to);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(fs::file_size(in) * state.iterations()));
}

// Every tensor's bytes read once (XOR-ed by one pool of a thread per core
// sharing all tensors' words): what a consumer of the whole file must do
// at least. A pool per tensor cost 30 ms a GiB in thread starts.
std::uint64_t read_tensors(const std::vector<ckpt::tensor>& all) {
  std::vector<std::span<const std::uint64_t>> parts;
  parts.reserve(all.size());
  for (const auto& t : all) {
    const auto b = t.storage_bytes();
    parts.emplace_back(reinterpret_cast<const std::uint64_t*>(b.data()), b.size() / 8);  // 8-aligned storages
  }
  return ferry::bench::read_once(parts);
}

// One untimed load first, as the read() peer reads once untimed: the
// file in the page cache (convert_gguf_order's output leaves it) and the
// process warmed the same way on both sides.
void open_read(benchmark::State& state, const fs::path& p) {
  const auto load = [&] {
    auto r = ckpt::open(p);
    check_result(r, "open");
    auto all = r->get_all();
    check_result(all, "get_all");
    benchmark::DoNotOptimize(read_tensors(*all));
  };
  load();
  for (auto _ : state) load();
  state.SetBytesProcessed(static_cast<std::int64_t>(fs::file_size(p) * state.iterations()));
}

void BM_gguf_open_read(benchmark::State& state) { open_read(state, file("model.gguf")); }
void BM_gguf_open_read_swapped(benchmark::State& state) { open_read(state, file("model-swapped.gguf")); }

void BM_gguf_read_whole_file(benchmark::State& state) { ferry::bench::time_read_whole(state, file("model.gguf").string()); }

// --- NumPy --------------------------------------------------------------------

constexpr std::uint64_t npy_elements = std::uint64_t{1} << 28;  // 1 GiB of f32
constexpr std::uint64_t npz_elements = std::uint64_t{1} << 26;  // 256 MiB

void write_numpy() {
  // Random finite floats (random sign and mantissa, exponent 2^-1..2^0):
  // deflate gains little on them, as on most trained weights.
  std::vector<float> v(static_cast<std::size_t>(npy_elements));
  fill_random(std::as_writable_bytes(std::span(v)), 9);
  for (float& x : v) {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    u = (u & 0x807FFFFFu) | 0x3F000000u;
    std::memcpy(&x, &u, 4);
  }
  const std::uint64_t shape[] = {npy_elements};
  const std::uint64_t small[] = {npz_elements};
  const ckpt::tensor_ref whole{"x", ferry::codec::dtype::f32, shape, {}, 0, std::as_bytes(std::span(v))};
  const ckpt::tensor_ref part{"x", ferry::codec::dtype::f32, small, {}, 0,
                              std::as_bytes(std::span(v)).first(static_cast<std::size_t>(npz_elements) * 4)};
  ckpt::npy_options opt;
  opt.sync = false;
  check_result(ckpt::save_npy(file("native.npy"), whole, opt), "save_npy");
  opt.order = ferry::wire::host_order == byte_order::little ? byte_order::big : byte_order::little;
  check_result(ckpt::save_npy(file("swapped.npy"), whole, opt), "save_npy swapped");
  opt.order = ferry::wire::host_order;
  opt.compress = true;
  const ckpt::tensor_ref one[] = {part};
  check_result(ckpt::save_npz(file("deflated.npz"), one, opt), "save_npz");
}

void BM_npy_load_native(benchmark::State& state) { open_read(state, file("native.npy")); }
void BM_npy_load_swapped(benchmark::State& state) { open_read(state, file("swapped.npy")); }
void BM_npz_load_deflated(benchmark::State& state) {
  for (auto _ : state) {
    auto r = ckpt::open(file("deflated.npz"));
    check_result(r, "open npz");
    auto all = r->get_all();
    check_result(all, "get_all npz");
    benchmark::DoNotOptimize(read_tensors(*all));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(npz_elements * 4 * state.iterations()));
}

// numpy.load's median seconds over 5 loads after a first (bench/numpy_load.py).
double numpy_seconds(const char* how, const fs::path& p) {
  const std::string cmd = std::string("/usr/bin/python3 '") + FERRY_NUMPY_LOAD + "' " + how + " '" + p.string() + "'";
  std::FILE* f = ::popen(cmd.c_str(), "r");
  check(f != nullptr, "popen python3");
  double seconds = 0;
  const bool ok = std::fscanf(f, "%lf", &seconds) == 1;
  check(::pclose(f) == 0 && ok, "numpy_load.py");
  return seconds;
}

void print_tables(const ferry::bench::results& r, double np_native, double np_swapped, double np_npz) {
  const auto ms = [&](const char* name) { return r.count(name) ? r.at(name).ns / 1e6 : 0.0; };
  const auto gbps = [&](const char* name) { return r.count(name) ? r.at(name).counter("bytes_per_second") / 1e9 : 0.0; };
  std::printf("\nGGUF: 1 GiB, 64 tensors of 16 MiB (q4_K q6_K q8_0 iq2_xxs q5_K f16 bf16 f32); NumPy: 1 GiB .npy, "
              "256 MiB deflated .npz; page cache, median of 3\n\n| run | time | rate |\n|---|---|---|\n");
  for (const char* n : {"BM_gguf_convert_order", "BM_copy_write_fsync", "BM_gguf_open_read", "BM_gguf_open_read_swapped",
                        "BM_gguf_read_whole_file", "BM_npy_load_native", "BM_npy_load_swapped", "BM_npz_load_deflated"}) {
    if (r.count(n)) std::printf("| %s | %.1f ms | %.2f GB/s |\n", n + 3, ms(n), gbps(n));
  }
  std::printf("| numpy.load native .npy | %.1f ms | |\n| numpy.load swapped .npy + astype | %.1f ms | |\n"
              "| numpy.load .npz | %.1f ms | |\n", np_native * 1e3, np_swapped * 1e3, np_npz * 1e3);
  std::printf("\n| goal | measured | target |\n|---|---|---|\n");
  const auto row = [](const char* goal, double v, double target) {
    std::printf("| %s | %.2fx %s | %s |\n", goal, v, v >= target ? "(met)" : "(MISSED)", ferry::bench::at_least(target).c_str());
  };
  namespace g = ferry::bench;
  row("GGUF conversion rate / copy+fsync rate", gbps("BM_gguf_convert_order") / gbps("BM_copy_write_fsync"),
      g::gguf_convert_of_copy_fsync);
  row("GGUF open+read rate / read() rate", gbps("BM_gguf_open_read") / gbps("BM_gguf_read_whole_file"),
      g::open_read_of_read);
  row("numpy.load time / ferry time, native .npy", np_native * 1e3 / ms("BM_npy_load_native"), g::npy_of_numpy_native);
  row("numpy.load+astype time / ferry time, swapped .npy", np_swapped * 1e3 / ms("BM_npy_load_swapped"),
      g::npy_of_numpy_swapped);
  row("numpy.load time / ferry time, deflated .npz", np_npz * 1e3 / ms("BM_npz_load_deflated"), g::npz_of_numpy);
}

}  // namespace

int main(int argc, char** argv) {
  fs::create_directories(data_dir);
  write_gguf();
  check_result(ckpt::convert_gguf_order(file("model.gguf"), file("model-swapped.gguf"),
                                        ferry::wire::host_order == byte_order::little ? byte_order::big
                                                                                      : byte_order::little),
               "convert_gguf_order");
  write_numpy();
  const double np_native = numpy_seconds("npy", file("native.npy"));
  const double np_swapped = numpy_seconds("npy-native", file("swapped.npy"));
  const double np_npz = numpy_seconds("npz", file("deflated.npz"));

  const auto reg = [](const char* name, void (*fn)(benchmark::State&), int iterations = 0) {
    auto* b = benchmark::RegisterBenchmark(name, fn)->Unit(benchmark::kMillisecond)->UseRealTime();
    if (iterations > 0) b->Iterations(iterations);
  };
  reg("BM_gguf_convert_order", BM_gguf_convert_order, 3);
  reg("BM_copy_write_fsync", BM_copy_write_fsync, 3);
  reg("BM_gguf_open_read", BM_gguf_open_read);
  reg("BM_gguf_open_read_swapped", BM_gguf_open_read_swapped);
  reg("BM_gguf_read_whole_file", BM_gguf_read_whole_file);
  reg("BM_npy_load_native", BM_npy_load_native);
  reg("BM_npy_load_swapped", BM_npy_load_swapped);
  reg("BM_npz_load_deflated", BM_npz_load_deflated);
  const auto results = ferry::bench::run_benchmarks(argc, argv, "formats");
  fs::remove_all(data_dir);
  if (!results) return 1;
  print_tables(*results, np_native, np_swapped, np_npz);
  return 0;
}
