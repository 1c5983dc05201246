// Checkpoint sets (checkpoint/set.h) against the disk and memory they
// stand on, on 1 GiB of state: 8 f32 tensors of 64 MiB (split across
// shards), 120 of 4 MiB and 100 small ones.
//
//   incremental: the same state with half its bytes changed, saved over a
//         full save (base_on): bytes written against the full save's, and
//         its time beside the full save's (it computes every piece's
//         CRC32C and reads back the unchanged ones to confirm them).
//   save: 4 ranks (threads, each a shard_writer: planned pieces, fsync,
//         rename) and the index, against one write() + fsync of the same
//         bytes into a new file renamed into place (the best one process
//         does with the page cache).
//   load: the 4-shard set by 2 ranks (threads), each loading the whole
//         state into its own memory with reader::read_into, every CRC32C
//         checked, against 2 threads each read()ing the 4 shard files
//         whole. Files in the page cache, put there the same way (dropped,
//         then read in 16 MiB reads).
// Files live in build/bench/set-data (a disk) and are removed at the end.
#include <fcntl.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ferry/checkpoint/reader.h"
#include "ferry/checkpoint/set.h"
#include "ratio_table.h"

namespace {

namespace fs = std::filesystem;
namespace ckpt = ferry::checkpoint;

const fs::path data_dir = fs::absolute("build/bench/set-data");
constexpr std::uint32_t save_ranks = 4, load_ranks = 2;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "set_bench: %s failed\n", what.c_str());
    std::exit(1);
  }
}

struct state {
  std::vector<std::string> names;
  std::vector<std::vector<std::uint64_t>> shapes;
  std::vector<std::vector<float>> data;
  std::uint64_t bytes = 0;
  state() {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1, 1);
    const auto add = [&](std::string name, std::vector<std::uint64_t> shape) {
      std::uint64_t n = 1;
      for (auto e : shape) n *= e;
      std::vector<float> v(n);
      for (auto& x : v) x = dist(rng);
      names.push_back(std::move(name));
      shapes.push_back(std::move(shape));
      bytes += n * 4;
      data.push_back(std::move(v));
    };
    for (int i = 0; i < 8; ++i) add("embed." + std::to_string(i), {4096, 4096});
    for (int i = 0; i < 120; ++i) add("layers." + std::to_string(i) + ".weight", {1024, 1024});
    for (int i = 0; i < 100; ++i) add("small." + std::to_string(i), {static_cast<std::uint64_t>(64 + i)});
  }
  [[nodiscard]] std::vector<ckpt::tensor_ref> refs() const {
    std::vector<ckpt::tensor_ref> out;
    for (std::size_t i = 0; i < names.size(); ++i) {
      out.push_back({names[i], ferry::codec::dtype::f32, shapes[i], {}, 0, std::as_bytes(std::span(data[i]))});
    }
    return out;
  }
};

const state& workload() {
  static const state s;
  return s;
}

// Every rank's shard at once, then the index: what save_set() does with a
// thread per rank (it caps threads at the cores; ranks are processes).
// With `records`: incremental (shard_writer::base_on), over its records
// when it holds the last save's, which it then holds. Returns the bytes
// written.
std::uint64_t save_set_4_ranks(const fs::path& index, const ckpt::write_options& opt,
                               const std::vector<ckpt::tensor_ref>& refs,
                               std::vector<ckpt::shard_record>* records = nullptr) {
  const auto plan = ckpt::plan_shards(refs, save_ranks);
  const auto id = ckpt::new_save_id();
  std::vector<std::optional<ckpt::shard_record>> written(save_ranks);
  std::vector<std::thread> ranks;
  for (std::uint32_t k = 0; k < save_ranks; ++k) {
    ranks.emplace_back([&, k] {
      auto w = ckpt::shard_writer::create(index, id, k, save_ranks, opt);
      check(w.has_value(), "shard_writer");
      if (records != nullptr) w->base_on(records->empty() ? nullptr : &(*records)[k]);
      for (const auto& p : plan[k]) check(w->add_piece(refs[p.tensor], p.begin, p.count).has_value(), "add_piece");
      auto r = w->commit();
      check(r.has_value(), "shard commit");
      written[k] = std::move(*r);
    });
  }
  for (auto& t : ranks) t.join();
  std::vector<ckpt::shard_record> all;
  std::uint64_t bytes = 0;
  for (auto& r : written) {
    bytes += r->size;
    all.push_back(std::move(*r));
  }
  check(ckpt::commit_set(index, id, save_ranks, all, {}, opt).has_value(), "commit_set");
  if (records != nullptr) *records = std::move(all);
  return bytes;
}

void BM_save_set_4_ranks(benchmark::State& st) {
  const auto refs = workload().refs();
  for (auto _ : st) save_set_4_ranks(data_dir / "saved.ferry", {}, refs);
  st.SetBytesProcessed(static_cast<std::int64_t>(workload().bytes * st.iterations()));
}

// Incremental: a full save of the state, then (timed) saves of the state
// with half its bytes changed (4 of the 8 big tensors, 60 of the 120
// middle ones, 50 of the small ones: every value + 1), each over that full
// save. bytes_ratio: bytes written by one of them / by the full save.
void BM_save_set_incremental_4_ranks(benchmark::State& st) {
  const auto& base = workload();
  state changed = base;
  std::uint64_t changed_bytes = 0;
  for (std::size_t i = 0; i < changed.data.size(); ++i) {
    const bool odd = i < 8 ? i % 2 == 1 : i < 128 ? (i - 8) % 2 == 1 : (i - 128) % 2 == 1;
    if (!odd) continue;
    for (auto& x : changed.data[i]) x += 1.0f;
    changed_bytes += changed.data[i].size() * 4;
  }
  const auto index = data_dir / "incremental.ferry";
  std::vector<ckpt::shard_record> first;
  const std::uint64_t full = save_set_4_ranks(index, {}, base.refs(), &first);
  const auto refs = changed.refs();
  std::uint64_t written = 0;
  for (auto _ : st) {
    auto records = first;
    written = save_set_4_ranks(index, {}, refs, &records);
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(base.bytes * st.iterations()));
  st.counters["bytes_ratio"] = static_cast<double>(written) / static_cast<double>(full);
  st.counters["changed_share"] = static_cast<double>(changed_bytes) / static_cast<double>(base.bytes);
}

void BM_write_fsync(benchmark::State& st) {
  const auto& w = workload();
  for (auto _ : st) {
    const auto tmp = data_dir / "written.tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    check(fd >= 0, "open for writing");
    for (const auto& d : w.data) {
      const auto* p = reinterpret_cast<const char*>(d.data());
      std::size_t left = d.size() * 4;
      while (left > 0) {
        const ssize_t n = ::write(fd, p, left);
        check(n > 0, "write");
        p += n;
        left -= static_cast<std::size_t>(n);
      }
    }
    check(::fsync(fd) == 0, "fsync");
    ::close(fd);
    check(::rename(tmp.c_str(), (data_dir / "written.raw").c_str()) == 0, "rename");
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(w.bytes * st.iterations()));
}

// Memory each loading rank reads into, allocated and faulted in once.
struct rank_memory {
  std::vector<std::vector<std::byte>> tensors;  // per tensor, read_into's targets
  std::vector<std::byte> raw;                   // the peer's
};
std::vector<rank_memory>& memory() {
  static std::vector<rank_memory> m(load_ranks);
  return m;
}

void BM_load_set_4_to_2_ranks(benchmark::State& st) {
  std::uint64_t bytes = 0;
  for (auto _ : st) {
    std::vector<std::thread> ranks;
    for (std::uint32_t k = 0; k < load_ranks; ++k) {
      ranks.emplace_back([k] {
        auto r = ckpt::open(data_dir / "model.ferry");
        check(r.has_value(), "open set");
        auto& mem = memory()[k].tensors;
        mem.resize(r->tensors().size());
        for (std::size_t i = 0; i < r->tensors().size(); ++i) {
          const auto& t = r->tensors()[i];
          mem[i].resize(t.nbytes());
          check(r->read_into(t, mem[i]).has_value(), "read_into " + t.name);
        }
      });
    }
    for (auto& t : ranks) t.join();
    bytes = workload().bytes * load_ranks;
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(bytes * st.iterations()));
}

std::vector<fs::path> shard_files() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(data_dir)) {
    const auto n = e.path().filename().string();
    if (n.starts_with("model-") && n.ends_with(".ferry")) out.push_back(e.path());
  }
  return out;
}

void BM_read_shards_2_ranks(benchmark::State& st) {
  const auto files = shard_files();
  std::uint64_t bytes = 0;
  for (auto _ : st) {
    std::vector<std::thread> ranks;
    for (std::uint32_t k = 0; k < load_ranks; ++k) {
      ranks.emplace_back([&, k] {
        auto& raw = memory()[k].raw;
        std::size_t at = 0;
        for (const auto& f : files) {
          const int fd = ::open(f.c_str(), O_RDONLY);
          check(fd >= 0, "open " + f.string());
          const auto size = static_cast<std::size_t>(fs::file_size(f));
          if (raw.size() < at + size) raw.resize(at + size);
          for (std::size_t done = 0; done < size;) {
            const ssize_t n = ::read(fd, raw.data() + at + done, size - done);
            check(n > 0, "read");
            done += static_cast<std::size_t>(n);
          }
          ::close(fd);
          at += size;
        }
      });
    }
    for (auto& t : ranks) t.join();
    bytes = workload().bytes * load_ranks;
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(bytes * st.iterations()));
}

void into_page_cache(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  check(fd >= 0, "open " + p.string());
  check(::fdatasync(fd) == 0, "fdatasync");
  check(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0, "fadvise");
  std::vector<char> buffer(std::size_t{16} << 20);
  for (ssize_t n; (n = ::read(fd, buffer.data(), buffer.size())) != 0;) check(n > 0, "read " + p.string());
  ::close(fd);
}

void print_table(const ferry::bench::results& r) {
  const auto ms = [&](const char* n) { return r.count(n) ? r.at(n).ns / 1e6 : 0.0; };
  const auto gbps = [&](const char* n) { return r.count(n) ? r.at(n).counter("bytes_per_second") / 1e9 : 0.0; };
  std::printf("\ncheckpoint sets: 1 GiB of state (8 x 64 MiB + 120 x 4 MiB + 100 small f32), medians\n\n");
  std::printf("| run | time | rate |\n|---|---|---|\n");
  for (const char* n : {"BM_save_set_4_ranks", "BM_save_set_incremental_4_ranks", "BM_write_fsync",
                        "BM_load_set_4_to_2_ranks", "BM_read_shards_2_ranks"}) {
    std::printf("| %s | %.1f ms | %.2f GB/s |\n", n + 3, ms(n), gbps(n));
  }
  std::printf("\n| goal | measured | target |\n|---|---|---|\n");
  const auto row = [](const char* goal, double v, const char* target, bool met) {
    std::printf("| %s | %.2fx %s | %s |\n", goal, v, met ? "(met)" : "(MISSED)", target);
  };
  const double save = gbps("BM_save_set_4_ranks") / gbps("BM_write_fsync");
  row("sharded save, 4 ranks / one write()+fsync", save, ">= 0.8x", save >= 0.8);
  const double load = gbps("BM_load_set_4_to_2_ranks") / gbps("BM_read_shards_2_ranks");
  row("load 4 -> 2 ranks, every CRC / read()", load, ">= 0.8x", load >= 0.8);
  const auto& inc = r.count("BM_save_set_incremental_4_ranks") ? r.at("BM_save_set_incremental_4_ranks")
                                                               : ferry::bench::measurement{};
  const double bytes = inc.counter("bytes_ratio");
  char goal[128];
  std::snprintf(goal, sizeof goal, "incremental save, %.0f %% of the bytes changed: bytes written / full save",
                100 * inc.counter("changed_share"));
  row(goal, bytes, "<= 0.55x", bytes > 0 && bytes <= 0.55);
}

}  // namespace

int main(int argc, char** argv) {
  fs::create_directories(data_dir);
  {
    ckpt::write_options fast;
    fast.sync = false;
    save_set_4_ranks(data_dir / "model.ferry", fast, workload().refs());
  }
  for (const auto& f : shard_files()) into_page_cache(f);
  into_page_cache(data_dir / "model.ferry");
  const auto reg = [](const char* name, void (*fn)(benchmark::State&), int iterations = 0) {
    auto* b = benchmark::RegisterBenchmark(name, fn)->Unit(benchmark::kMillisecond)->UseRealTime();
    if (iterations > 0) b->Iterations(iterations);
  };
  reg("BM_save_set_4_ranks", BM_save_set_4_ranks, 1);
  reg("BM_write_fsync", BM_write_fsync, 1);
  reg("BM_save_set_incremental_4_ranks", BM_save_set_incremental_4_ranks, 1);
  reg("BM_load_set_4_to_2_ranks", BM_load_set_4_to_2_ranks);
  reg("BM_read_shards_2_ranks", BM_read_shards_2_ranks);
  // Disk and memory drift between runs: 5 repetitions, interleaved at
  // random (before the command line's own flags, which win).
  std::string flags[] = {"--benchmark_repetitions=5", "--benchmark_enable_random_interleaving=true",
                         "--benchmark_report_aggregates_only=true"};
  std::vector<char*> args(argv, argv + argc);
  for (auto& f : flags) args.insert(args.begin() + 1, f.data());
  const auto results = ferry::bench::run_benchmarks(static_cast<int>(args.size()), args.data(), "set");
  fs::remove_all(data_dir);
  if (!results) return 1;
  print_table(*results);
  return 0;
}
