// ferry-train's --profile (INTERNAL to ferry-train): LibTorch's profiler
// over the first N batches of the run (fewer when the first epoch has
// fewer; evaluation is never profiled), its events summed per kind of
// module and pass, as the course's profiler tables: Linear, BatchNorm and
// the activation, forward and backward, each with its calls, time and the
// memory its operators allocated.
//
// Forward: the model marks each module's forward with a user scope
// (model.h: "Linear", "BatchNorm1d", "ReLU", ...). Backward: the autograd
// nodes LibTorch records, by the module kind whose operator made them
// (AddmmBackward0 and TBackward0: Linear; NativeBatchNormBackward0:
// BatchNorm1d; ReluBackward0, ...: the activation); the rest (the loss,
// gradient accumulation, autocast's casts) is "other". Time is each
// event's own wall time, summed; memory the bytes allocated inside it,
// frees not subtracted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::trainer {

struct profile_row {
  std::string module;  ///< "Linear", "BatchNorm1d", "ReLU", ..., "other"
  std::string pass;    ///< "forward" or "backward"
  std::int64_t calls = 0;
  double ms = 0;
  std::int64_t bytes = 0;  ///< allocated, frees not subtracted
};

class batch_profiler {
 public:
  /// Profiles batches 1..batches of this process (0: none).
  explicit batch_profiler(std::int64_t batches) : batches_(batches) {}
  ~batch_profiler();
  batch_profiler(const batch_profiler&) = delete;
  batch_profiler& operator=(const batch_profiler&) = delete;

  /// Around each batch's forward and backward: the profiler starts before
  /// the first and stops after the last profiled one.
  void before_batch();
  void after_batch();
  /// Stops a profile the run ended before it was complete.
  void finish() {
    if (running_) stop();
  }
  /// The table, rows in the order Linear, BatchNorm1d, the activation,
  /// other; forward before backward. Empty until profiling stopped.
  [[nodiscard]] const std::vector<profile_row>& table() const { return rows_; }
  [[nodiscard]] std::int64_t profiled_batches() const { return done_; }

 private:
  void stop();
  std::int64_t batches_;
  std::int64_t done_ = 0;
  bool running_ = false;
  std::vector<profile_row> rows_;
};

/// The table as Markdown, for the terminal.
std::string profile_text(const std::vector<profile_row>& rows, std::int64_t batches);

}  // namespace ferry::trainer
