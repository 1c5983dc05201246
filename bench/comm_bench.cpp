// Allreduce on loopback: ferry's ring against Gloo through LibTorch's c10d
// ProcessGroupGloo, same sizes, same process layout, same run.
//
// Each benchmark is rank 0 of a world whose other ranks are this binary
// re-executed as helpers (fresh processes: no fork after LibTorch started
// threads). Every rank runs two warm-up allreduces and then exactly the
// benchmark's iteration count; rank 0 times each allreduce. Reported: time
// per allreduce and bus bandwidth 2(n-1)/n * bytes / time, for f32 (both),
// and ferry with bf16 compression and error feedback (Gloo has no bf16).
// At 68KB and 64MB, ferry f32 also runs with FERRY_AUTH=frames and
// FERRY_AUTH=encrypt (comm/frame.h's AUTHENTICATION), and a second table
// gives their cost: authenticated time / plain time. Up to 1MB, ferry f32
// also runs recursive doubling and Rabenseifner (FERRY_ALGORITHM), and a
// third table gives their time against the ring's beside the cost model's
// prediction for a link fitted to the 2-rank ring times (comm/cost_model.h).
//
// The ranks share this machine, so "ferry" combines through shared memory
// (comm/detail/shared_memory.h), what a user of one host gets; "ferry_tcp"
// is the same with FERRY_SHARED_MEMORY=off, the TCP ring over loopback,
// and the authenticated and algorithm contenders run over TCP too (their
// tables compare against ferry_tcp).
#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/comm/communicator.h"
#include "ferry/comm/cost_model.h"
#include "gloo_peer.h"
#include "ratio_table.h"

namespace {

using namespace ferry;

constexpr int warmup = 2;
const char* const secret = "comm-bench-secret";

struct size_case {
  const char* label;
  std::size_t count;  // f32 elements
  int iterations;
};
constexpr size_case sizes[] = {
    {"4KB", 1'024, 1000},
    {"68KB", 17'000, 300},      // the reference model's gradients
    {"1MB", 262'144, 60},
    {"16MB", 4'194'304, 8},
    {"64MB", 16'777'216, 3},
};
constexpr int rank_counts[] = {2, 4};
enum class peer { ferry, ferry_bf16, gloo, ferry_frames, ferry_encrypt, ferry_doubling, ferry_rabenseifner, ferry_tcp };
const char* peer_name(peer p) {
  switch (p) {
    case peer::ferry: return "ferry";
    case peer::ferry_bf16: return "ferry_bf16";
    case peer::gloo: return "gloo";
    case peer::ferry_frames: return "ferry_auth_frames";
    case peer::ferry_encrypt: return "ferry_auth_encrypt";
    case peer::ferry_doubling: return "ferry_recursive_doubling";
    case peer::ferry_rabenseifner: return "ferry_rabenseifner";
    case peer::ferry_tcp: return "ferry_tcp";
  }
  return "?";
}
// The sizes the other algorithms run at: where latency counts.
bool algorithm_size(const size_case& s) { return s.count * 4 <= (std::size_t{1} << 20); }
// The sizes the authenticated contenders run at: the reference model's
// gradients and the large end, where the cost per byte shows.
bool auth_size(const size_case& s) { return std::string(s.label) == "68KB" || std::string(s.label) == "64MB"; }

// One rank's allreduce loop object.
struct rank_runner {
  std::optional<comm::communicator> comm;
  std::optional<bench::gloo_group> gloo;
  comm::allreduce_options opts;
  std::optional<comm::error_feedback> ef;
  std::vector<float> data;

  rank_runner(peer p, int rank, int n, const std::string& where, std::size_t count,
              std::optional<comm::listener> l = std::nullopt)
      : data(count, 0.0f) {
    if (p == peer::gloo) {
      gloo.emplace(where, rank, n);
      return;
    }
    comm::config c;
    c.rank = static_cast<std::uint32_t>(rank);
    c.world_size = static_cast<std::uint32_t>(n);
    c.master_port = static_cast<std::uint16_t>(std::stoi(where));
    c.secret = secret;
    if (const char* chunk = std::getenv("FERRY_CHUNK_BYTES")) c.chunk_bytes = static_cast<std::uint32_t>(std::stoul(chunk));
    if (p == peer::ferry_frames) c.auth = comm::frame_auth::frames;
    if (p == peer::ferry_encrypt) c.auth = comm::frame_auth::encrypt;
    if (p == peer::ferry_doubling) c.algorithm = comm::algorithm::recursive_doubling;
    if (p == peer::ferry_rabenseifner) c.algorithm = comm::algorithm::rabenseifner;
    c.shared_memory = p == peer::ferry;
    comm.emplace(c, std::move(l));
    if (p == peer::ferry_bf16) {
      ef.emplace(count);
      opts.comp = comm::compression::bf16;
      opts.feedback = &*ef;
    }
  }
  void step() {
    if (gloo) {
      gloo->allreduce(data.data(), data.size());
    } else {
      comm->allreduce(data, opts);
    }
  }
};

int helper_main(char** argv) {
  const auto p = static_cast<peer>(std::stoi(argv[2]));
  rank_runner r(p, std::stoi(argv[3]), std::stoi(argv[4]), argv[5], std::stoul(argv[6]));
  const int steps = std::stoi(argv[7]);
  for (int i = 0; i < steps; ++i) r.step();
  return 0;
}

void run_case(benchmark::State& state, peer p, int n, size_case s) {
  static int serial = 0;
  std::string where;
  std::optional<comm::listener> l;
  if (p == peer::gloo) {
    where = "/tmp/ferry-comm-bench-gloo-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
    std::remove(where.c_str());
  } else {
    comm::config c;
    c.master_port = 0;
    l.emplace(c);
    where = std::to_string(l->port());
  }
  std::vector<pid_t> helpers;
  for (int rank = 1; rank < n; ++rank) {
    const std::vector<std::string> args = {
        "/proc/self/exe", "--helper", std::to_string(static_cast<int>(p)), std::to_string(rank), std::to_string(n),
        where, std::to_string(s.count), std::to_string(warmup + s.iterations)};
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::vector<char*> c;
      for (const auto& a : args) c.push_back(const_cast<char*>(a.c_str()));
      c.push_back(nullptr);
      ::execv("/proc/self/exe", c.data());
      ::_exit(127);
    }
    helpers.push_back(pid);
  }
  {
    rank_runner r(p, 0, n, where, s.count, std::move(l));
    for (int i = 0; i < warmup; ++i) r.step();
    for (auto _ : state) {
      const auto t0 = std::chrono::steady_clock::now();
      r.step();
      state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  for (pid_t pid : helpers) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) state.SkipWithError("a helper rank failed");
  }
  if (p == peer::gloo) std::remove(where.c_str());
  const double bytes = static_cast<double>(s.count) * 4;
  state.counters["bytes"] = bytes;
  state.counters["busbw"] = benchmark::Counter(2.0 * (n - 1) / n * bytes * static_cast<double>(state.iterations()),
                                               benchmark::Counter::kIsRate);
}

void print_table(const bench::results& r) {
  auto get = [&](peer p, int n, const size_case& s) -> const bench::measurement* {
    const auto it = r.find(std::string(peer_name(p)) + "/" + std::to_string(n) + "/" + s.label);
    return it == r.end() ? nullptr : &it->second;
  };
  std::printf("\nallreduce on loopback, ferry (shared memory) and ferry over TCP vs Gloo (ProcessGroupGloo)\n\n");
  std::printf("| ranks | size | ferry | ferry TCP | Gloo | ferry bf16 | ferry busbw | ferry TCP busbw | Gloo busbw |"
              " Gloo/ferry | Gloo/ferry TCP | Gloo/ferry bf16 |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int n : rank_counts) {
    for (const auto& s : sizes) {
      const auto* f = get(peer::ferry, n, s);
      const auto* tcp = get(peer::ferry_tcp, n, s);
      const auto* g = get(peer::gloo, n, s);
      const auto* b = get(peer::ferry_bf16, n, s);
      if (f == nullptr || tcp == nullptr || g == nullptr || b == nullptr) continue;
      auto t = [](const bench::measurement* m) { return m->ns / 1e3; };
      auto bw = [](const bench::measurement* m) { return m->counter("busbw") / 1e9; };
      std::printf("| %d | %s | %.0f us | %.0f us | %.0f us | %.0f us | %.2f GB/s | %.2f GB/s | %.2f GB/s | %.2fx | %.2fx | "
                  "%.2fx |\n",
                  n, s.label, t(f), t(tcp), t(g), t(b), bw(f), bw(tcp), bw(g), g->ns / f->ns, g->ns / tcp->ns,
                  g->ns / b->ns);
    }
  }
  std::printf("\n| goal (Gloo time / ferry time) | ranks | ferry | ferry TCP | ferry bf16 (TCP) | target |\n"
              "|---|---|---|---|---|---|\n");
  for (int n : rank_counts) {
    for (const auto& s : sizes) {
      const std::string label = s.label;
      const double target = label == "68KB" ? 1.5 : label == "1MB" || label == "4KB" ? 0.0 : 1.2;
      if (target == 0.0) continue;
      const auto* f = get(peer::ferry, n, s);
      const auto* tcp = get(peer::ferry_tcp, n, s);
      const auto* g = get(peer::gloo, n, s);
      const auto* b = get(peer::ferry_bf16, n, s);
      if (f == nullptr || tcp == nullptr || g == nullptr || b == nullptr) continue;
      const double rf = g->ns / f->ns, rt = g->ns / tcp->ns, rb = g->ns / b->ns;
      // Shared memory at four ranks, 16 and 64 MB: >= 3x (issue 29).
      const double shm_target = n == 4 && s.count >= 4'194'304 ? 3.0 : target;
      std::printf("| %s | %d | %.2fx %s (>= %.1fx) | %.2fx %s | %.2fx %s | >= %.1fx |\n", s.label, n, rf,
                  rf >= shm_target ? "met" : "MISSED", shm_target, rt, rt >= target ? "met" : "MISSED", rb,
                  rb >= target ? "met" : "MISSED", target);
    }
  }
  std::printf("\nthe cost of FERRY_AUTH on loopback (ferry f32 over TCP): authenticated time / plain time\n\n"
              "| ranks | size | plain | frames | encrypt | frames / plain | encrypt / plain |\n"
              "|---|---|---|---|---|---|---|\n");
  for (int n : rank_counts) {
    for (const auto& s : sizes) {
      const auto* f = get(peer::ferry_tcp, n, s);
      const auto* a = get(peer::ferry_frames, n, s);
      const auto* e = get(peer::ferry_encrypt, n, s);
      if (f == nullptr || a == nullptr || e == nullptr) continue;
      std::printf("| %d | %s | %.0f us | %.0f us | %.0f us | %.2fx | %.2fx |\n", n, s.label, f->ns / 1e3, a->ns / 1e3,
                  e->ns / 1e3, a->ns / f->ns, e->ns / f->ns);
    }
  }
  // The link of the model, fitted to the 2-rank ring at 4KB and 1MB
  // (t = 2 alpha + n beta + n/2 gamma, gamma the model's default).
  const auto* small = get(peer::ferry_tcp, 2, sizes[0]);
  const auto* large = get(peer::ferry_tcp, 2, sizes[2]);
  if (small == nullptr || large == nullptr) return;
  comm::link_cost link;
  const double n0 = static_cast<double>(sizes[0].count) * 4, n1 = static_cast<double>(sizes[2].count) * 4;
  const double t0 = small->ns * 1e-9 - n0 / 2 * link.gamma_s_per_byte;
  const double t1 = large->ns * 1e-9 - n1 / 2 * link.gamma_s_per_byte;
  link.beta_s_per_byte = std::max(1e-13, (t1 - t0) / (n1 - n0));
  link.alpha_s = std::max(0.0, (t0 - n0 * link.beta_s_per_byte) / 2);
  std::printf("\nallreduce algorithms on loopback (ferry f32 over TCP): time / the ring's time, measured and as\n"
              "comm/cost_model.h predicts for the link fitted to the 2-rank ring (alpha %.1f us, %.2f Gbit/s)\n\n"
              "| ranks | size | ring | recursive doubling | Rabenseifner | doubling / ring (model) |"
              " Rabenseifner / ring (model) | auto picks |\n|---|---|---|---|---|---|---|---|\n",
              link.alpha_s * 1e6, 8e-9 / link.beta_s_per_byte);
  for (int n : rank_counts) {
    for (const auto& s : sizes) {
      const auto* f = get(peer::ferry_tcp, n, s);
      const auto* d = get(peer::ferry_doubling, n, s);
      const auto* b = get(peer::ferry_rabenseifner, n, s);
      if (f == nullptr || d == nullptr || b == nullptr) continue;
      const auto bytes = s.count * 4;
      const auto un = static_cast<std::uint32_t>(n);
      const double ring = comm::predict(comm::algorithm::ring, un, bytes, link);
      std::printf("| %d | %s | %.0f us | %.0f us | %.0f us | %.2fx (%.2fx) | %.2fx (%.2fx) | %s |\n", n, s.label,
                  f->ns / 1e3, d->ns / 1e3, b->ns / 1e3, d->ns / f->ns,
                  comm::predict(comm::algorithm::recursive_doubling, un, bytes, link) / ring, b->ns / f->ns,
                  comm::predict(comm::algorithm::rabenseifner, un, bytes, link) / ring,
                  std::string(comm::name(comm::choose(un, bytes, link))).c_str());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 8 && std::strcmp(argv[1], "--helper") == 0) return helper_main(argv);
  for (int n : rank_counts) {
    for (const auto& s : sizes) {
      for (peer p : {peer::ferry, peer::ferry_tcp, peer::gloo, peer::ferry_bf16, peer::ferry_frames,
                     peer::ferry_encrypt, peer::ferry_doubling, peer::ferry_rabenseifner}) {
        if ((p == peer::ferry_frames || p == peer::ferry_encrypt) && !auth_size(s)) continue;
        if ((p == peer::ferry_doubling || p == peer::ferry_rabenseifner) && !algorithm_size(s)) continue;
        const std::string name = std::string(peer_name(p)) + "/" + std::to_string(n) + "/" + s.label;
        benchmark::RegisterBenchmark(name.c_str(), [p, n, s](benchmark::State& st) { run_case(st, p, n, s); })
            ->Iterations(s.iterations)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  const auto results = bench::run_benchmarks(argc, argv, "comm");
  if (!results) return 1;
  print_table(*results);
  return 0;
}
