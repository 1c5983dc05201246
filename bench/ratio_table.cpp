#include "ratio_table.h"

#include <benchmark/benchmark.h>

#include <filesystem>
#include <vector>

namespace ferry::bench {
namespace {

class recording_reporter : public benchmark::ConsoleReporter {
 public:
  explicit recording_reporter(results& out) : out_(out) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& run : runs) {
      if (run.error_occurred) failed = true;
      // "memcpy/4096", without min_time or repetition decorations.
      std::string name = run.run_name.function_name;
      if (!run.run_name.args.empty()) name += "/" + run.run_name.args;
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      const bool single = run.run_type == Run::RT_Iteration && out_.count(name) == 0;
      if (!median && !single) continue;
      measurement m;
      const double to_ns = run.time_unit == benchmark::kSecond        ? 1e9
                           : run.time_unit == benchmark::kMillisecond ? 1e6
                           : run.time_unit == benchmark::kMicrosecond ? 1e3
                                                                      : 1.0;
      m.ns = run.GetAdjustedRealTime() * to_ns;
      for (const auto& [key, counter] : run.counters) m.counters[key] = counter.value;
      out_[name] = std::move(m);
    }
    ConsoleReporter::ReportRuns(runs);
  }
  bool failed = false;

 private:
  results& out_;
};

bool has_flag(int argc, char** argv, const std::string& flag) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]).rfind(flag, 0) == 0) return true;
  }
  return false;
}

}  // namespace

std::optional<results> run_benchmarks(int argc, char** argv, const std::string& report_name) {
  std::vector<std::string> args(argv, argv + argc);
  if (!has_flag(argc, argv, "--benchmark_out=")) {
    std::filesystem::create_directories("bench-results");
    args.push_back("--benchmark_out=bench-results/" + report_name + ".json");
  }
  if (!has_flag(argc, argv, "--benchmark_out_format=")) args.push_back("--benchmark_out_format=json");
  if (!has_flag(argc, argv, "--benchmark_repetitions=")) {
    args.push_back("--benchmark_repetitions=3");
    args.push_back("--benchmark_report_aggregates_only=true");
  }
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  int n = static_cast<int>(cargs.size());
  benchmark::Initialize(&n, cargs.data());
  if (benchmark::ReportUnrecognizedArguments(n, cargs.data())) return std::nullopt;

  results out;
  recording_reporter display(out);
  benchmark::RunSpecifiedBenchmarks(&display);
  benchmark::Shutdown();
  if (display.failed) return std::nullopt;
  return out;
}

}  // namespace ferry::bench
