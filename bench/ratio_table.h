// Shared main() support for ferry's benchmarks: runs Google Benchmark with
// the JSON report in bench-results/, keeps every run's throughput, and lets
// the binary print ratios of contenders measured in that same run.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace ferry::bench {

/// One benchmark's median over repetitions.
struct measurement {
  double ns = 0;                    ///< real time per iteration
  std::map<std::string, double> counters;  ///< e.g. bytes_per_second
  [[nodiscard]] double counter(const std::string& name) const {
    const auto it = counters.find(name);
    return it == counters.end() ? 0.0 : it->second;
  }
};

/// Each benchmark's measurement by name, e.g. "memcpy/4096".
using results = std::map<std::string, measurement>;

/// Runs every registered benchmark. Adds --benchmark_out (to
/// bench-results/<report_name>.json) and three repetitions unless the
/// command line sets them. Returns the throughputs, or nothing if a
/// benchmark failed.
std::optional<results> run_benchmarks(int argc, char** argv, const std::string& report_name);

}  // namespace ferry::bench
