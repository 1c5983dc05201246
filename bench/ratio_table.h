// Shared main() support for ferry's benchmarks: runs Google Benchmark with
// the JSON report in bench-results/, keeps every run's throughput, and lets
// the binary print ratios of contenders measured in that same run.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace ferry::bench {

/// Throughput (bytes/second) of each benchmark by name, e.g. "memcpy/4096":
/// the median over repetitions.
using results = std::map<std::string, double>;

/// Runs every registered benchmark. Adds --benchmark_out (to
/// bench-results/<report_name>.json) and three repetitions unless the
/// command line sets them. Returns the throughputs, or nothing if a
/// benchmark failed.
std::optional<results> run_benchmarks(int argc, char** argv, const std::string& report_name);

}  // namespace ferry::bench
