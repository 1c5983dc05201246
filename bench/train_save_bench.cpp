// Asynchronous checkpoints in a real training job: ferry-train (under
// ferry-run, 2 ranks, one LibTorch thread each) on the large reference
// model (--hidden 4096,4096,4096: 36.8M parameters, 442 MB with Adam's
// state) over 2048 Fashion-MNIST samples per epoch, 3 epochs, a sharded
// checkpoint after every epoch:
//
//   no saves   --checkpoint-every 0 (the one at the end is not counted)
//   sync       --checkpoint-sharded
//   async      --checkpoint-sharded --checkpoint-async
//
// From each job's metrics file: the training throughput from the end of
// epoch 1 to the end of epoch 3 (two epochs, with the saves after epochs 1
// and 2 in between: their stalls, and their background writes competing
// for the cores), and each save's stall (rank 0: the whole save when
// synchronous; the snapshot, the optimizer step's wait for the copy and
// the per-step exchanges while it was pending, when asynchronous).
// Checkpoints go to build/bench/train-save-data (a disk), removed at the
// end.
#include <sys/wait.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "ratio_table.h"

namespace {

namespace fs = std::filesystem;

const fs::path data_dir = fs::absolute("build/bench/train-save-data");
constexpr int samples = 2048, epochs = 3;

struct job_figures {
  double images_per_s = 0;  // epochs 2..3, saves in between
  double max_stall_s = 0, mean_stall_s = 0;
  double save_bytes = 0;
};

job_figures run_job(const std::string& options) {
  fs::remove_all(data_dir);
  fs::create_directories(data_dir);
  const auto metrics = data_dir / "metrics.jsonl";
  const std::string cmd = "cd '" + data_dir.string() + "' && '" FERRY_RUN "' -n 2 '" FERRY_TRAIN
                          "' --hidden 4096,4096,4096 --batch 64 --threads 1 --progress plain --limit " +
                          std::to_string(samples) + " --test-limit 1000 --epochs " + std::to_string(epochs) +
                          " --checkpoint ck.ferry --metrics metrics.jsonl " + options + " >/dev/null";
  const int rc = std::system(cmd.c_str());
  if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) throw std::runtime_error("ferry-train failed: " + cmd);
  job_figures f;
  double first_end = 0, last_end = 0;
  int saves = 0;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["kind"] == "epoch" && j["epoch"] == 1) first_end = j["wall_s"].get<double>();
    if (j["kind"] == "epoch" && j["epoch"] == epochs) last_end = j["wall_s"].get<double>();
    // The saves after epochs 1 and 2 (the one at the end is not training's).
    // A save's stall counts the per-step exchanges while it was pending.
    if (j["kind"] == "checkpoint" && j["where"] != "epoch " + std::to_string(epochs)) {
      const double stall = j["stall_s"].get<double>() + j["poll_s"].get<double>();
      f.max_stall_s = std::max(f.max_stall_s, stall);
      f.mean_stall_s += stall;
      f.save_bytes = j["bytes"].get<double>();
      ++saves;
    }
  }
  if (saves > 0) f.mean_stall_s /= saves;
  f.images_per_s = static_cast<double>(samples) * (epochs - 1) / (last_end - first_end);
  return f;
}

void report(benchmark::State& st, const std::string& options) {
  job_figures f;
  for (auto _ : st) {
    f = run_job(options);
    st.SetIterationTime(f.images_per_s > 0 ? static_cast<double>(samples) * (epochs - 1) / f.images_per_s : 0);
  }
  st.counters["images_per_s"] = f.images_per_s;
  st.counters["max_stall_s"] = f.max_stall_s;
  st.counters["mean_stall_s"] = f.mean_stall_s;
  st.counters["save_bytes"] = f.save_bytes;
}

void BM_train_no_saves(benchmark::State& st) { report(st, "--checkpoint-every 0"); }
void BM_train_sync_saves(benchmark::State& st) { report(st, "--checkpoint-sharded"); }
void BM_train_async_saves(benchmark::State& st) { report(st, "--checkpoint-sharded --checkpoint-async"); }

void print_table(const ferry::bench::results& r) {
  const auto& none = r.at("BM_train_no_saves");
  const auto& sync = r.at("BM_train_sync_saves");
  const auto& async = r.at("BM_train_async_saves");
  std::printf("\n| job, 2 ranks, 442 MB of state | images/s | longest stall per save | mean save stall |\n"
              "|---|--:|--:|--:|\n");
  for (const auto& [name, m] : {std::pair<const char*, const ferry::bench::measurement*>{"no saves", &none},
                                {"sync save every epoch", &sync},
                                {"async save every epoch", &async}}) {
    std::printf("| %s | %.0f | %.1f ms | %.1f ms |\n", name, m->counter("images_per_s"),
                1e3 * m->counter("max_stall_s"), 1e3 * m->counter("mean_stall_s"));
  }
  const double stall = async.counter("max_stall_s") / sync.counter("mean_stall_s");
  const double throughput = async.counter("images_per_s") / none.counter("images_per_s");
  std::printf("\n| goal | measured | target | met |\n|---|--:|--:|---|\n");
  std::printf("| longest async stall / mean sync save | %.4f | <= 0.10 | %s |\n", stall, stall <= 0.10 ? "yes" : "no");
  std::printf("| throughput, async save every epoch / no saves | %.3f | >= 0.9 | %s |\n", throughput,
              throughput >= 0.9 ? "yes" : "no");
  std::printf("| (sync save every epoch / no saves) | %.3f | | |\n",
              sync.counter("images_per_s") / none.counter("images_per_s"));
}

}  // namespace

int main(int argc, char** argv) {
  using bench_fn = void (*)(benchmark::State&);
  for (const auto& [name, fn] : {std::pair<const char*, bench_fn>{"BM_train_no_saves", BM_train_no_saves},
                                 {"BM_train_sync_saves", BM_train_sync_saves},
                                 {"BM_train_async_saves", BM_train_async_saves}}) {
    benchmark::RegisterBenchmark(name, fn)->Unit(benchmark::kSecond)->UseManualTime()->Iterations(1);
  }
  // Each job takes half a minute: one repetition (before the command
  // line's own flags, which win).
  std::string flags[] = {"--benchmark_repetitions=1"};
  std::vector<char*> args(argv, argv + argc);
  for (auto& f : flags) args.insert(args.begin() + 1, f.data());
  const auto results = ferry::bench::run_benchmarks(static_cast<int>(args.size()), args.data(), "train_save");
  fs::remove_all(data_dir);
  if (!results) return 1;
  print_table(*results);
  return 0;
}
