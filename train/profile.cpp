#include "profile.h"

#include <torch/csrc/autograd/profiler_legacy.h>

#include <array>
#include <cstdio>
#include <map>
#include <string_view>
#include <utility>

namespace ferry::trainer {
namespace {

namespace legacy = torch::autograd::profiler;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

constexpr std::string_view engine_prefix = "autograd::engine::evaluate_function: ";

// The module kinds a forward scope names (model.h), in table order.
constexpr std::array<std::string_view, 7> modules{"Linear", "BatchNorm1d", "ReLU", "Tanh", "Sigmoid", "GELU", "other"};

// The module kind whose forward made an autograd node.
std::string_view module_of_node(std::string_view node) {
  if (node == "AddmmBackward0" || node == "MmBackward0" || node == "TBackward0") return "Linear";
  if (node == "NativeBatchNormBackward0") return "BatchNorm1d";
  if (node == "ReluBackward0") return "ReLU";
  if (node == "TanhBackward0") return "Tanh";
  if (node == "SigmoidBackward0") return "Sigmoid";
  if (node == "GeluBackward0") return "GELU";
  return "other";
}

struct open_range {
  std::string name;
  std::uint64_t handle;
  const legacy::LegacyEvent* start;
  std::int64_t bytes = 0;
};

}  // namespace

batch_profiler::~batch_profiler() {
  if (running_) legacy::disableProfilerLegacy();
}

void batch_profiler::before_batch() {
  if (running_ || done_ >= batches_) return;
  legacy::enableProfilerLegacy(ProfilerConfig(ProfilerState::CPU, /*report_input_shapes=*/false, /*profile_memory=*/true));
  running_ = true;
}

void batch_profiler::after_batch() {
  if (!running_) return;
  if (++done_ >= batches_) stop();
}

void batch_profiler::stop() {
  const auto lists = legacy::disableProfilerLegacy();
  running_ = false;
  // Backward nodes appear twice when the engine wraps each in its own
  // range: count the engine's ranges then, the nodes' otherwise.
  bool engine_ranges = false;
  for (const auto& list : lists) {
    for (const auto& e : list) {
      if (e.kind() == legacy::EventKind::PushRange && std::string_view(e.name()).starts_with(engine_prefix)) {
        engine_ranges = true;
      }
    }
  }
  std::map<std::pair<std::string_view, bool>, profile_row> sums;  // (module, backward)
  // A Linear's backward is two nodes (AddmmBackward0 and TBackward0, the
  // weight's transpose): both count in time and memory, one as the call.
  const auto add = [&](std::string_view module, bool backward, double us, std::int64_t bytes, bool call = true) {
    auto& row = sums[{module, backward}];
    row.module = module;
    row.pass = backward ? "backward" : "forward";
    row.calls += call ? 1 : 0;
    row.ms += us / 1000;
    row.bytes += bytes;
  };
  for (const auto& list : lists) {
    std::vector<open_range> open;
    for (const auto& e : list) {
      switch (e.kind()) {
        case legacy::EventKind::PushRange: open.push_back({e.name(), e.handle(), &e}); break;
        case legacy::EventKind::MemoryAlloc:
          if (e.cpuMemoryUsage() > 0) {
            for (auto& r : open) r.bytes += e.cpuMemoryUsage();
          }
          break;
        case legacy::EventKind::PopRange: {
          for (auto it = open.rbegin(); it != open.rend(); ++it) {
            if (it->handle != e.handle()) continue;
            const std::string_view name = it->name;
            const double us = it->start->cpuElapsedUs(e);
            if (name.starts_with(engine_prefix)) {
              const auto node = name.substr(engine_prefix.size());
              if (engine_ranges) add(module_of_node(node), true, us, it->bytes, node != "TBackward0");
            } else if (name.ends_with("Backward0") || name.ends_with("Backward1") ||
                       name == "torch::autograd::AccumulateGrad") {
              if (!engine_ranges) add(module_of_node(name), true, us, it->bytes, name != "TBackward0");
            } else {
              for (const auto m : modules) {
                if (m != "other" && name == m) add(m, false, us, it->bytes);
              }
            }
            open.erase(std::next(it).base());
            break;
          }
          break;
        }
        case legacy::EventKind::Mark: break;
      }
    }
  }
  rows_.clear();
  for (const auto m : modules) {
    for (const bool backward : {false, true}) {
      if (const auto it = sums.find({m, backward}); it != sums.end()) rows_.push_back(it->second);
    }
  }
}

std::string profile_text(const std::vector<profile_row>& rows, std::int64_t batches) {
  std::string out = "profile of " + std::to_string(batches) +
                    " batches (rank 0; LibTorch's profiler, time and memory allocated per kind of module):\n"
                    "| module | pass | calls | time | memory allocated |\n|---|---|--:|--:|--:|\n";
  char line[160];
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "| %s | %s | %lld | %.1f ms | %.1f KB |\n", r.module.c_str(), r.pass.c_str(),
                  static_cast<long long>(r.calls), r.ms, static_cast<double>(r.bytes) / 1e3);
    out += line;
  }
  return out;
}

}  // namespace ferry::trainer
