// What rank 0 prints and writes: the progress line, the per-epoch summary,
// the metrics file (JSON lines) and the final results table.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "profile.h"

namespace ferry::trainer {

/// One rank's memory, in bytes.
struct rank_memory {
  double peak_rss = 0;   ///< peak resident set since the process started
  double params = 0;     ///< parameters
  double grads = 0;      ///< gradients and the exchange's flat buffer
  double optimizer = 0;  ///< optimizer state
};

struct epoch_stats {
  std::int64_t epoch = 0, epochs = 0;  // epoch counts from 1 here
  double train_loss = 0, train_acc = 0, test_acc = 0;
  double seconds = 0, images_per_s = 0;
  double wall_s = 0;  // since the job started, at the end of this epoch (before its checkpoint)
  std::vector<double> compute_s, comm_s;  // per rank
  std::vector<rank_memory> memory;        // per rank
  std::uint32_t crc = 0;
};

/// One checkpoint, once published (rank 0's view).
struct save_stats {
  std::string where;              ///< "epoch 3"
  std::int64_t global_step = 0;   ///< the steps it holds
  std::string path;               ///< the file or the set's index
  bool async = false, sharded = false;
  double stall_s = 0;  ///< training paused for it: the snapshot (async) or the whole save
  double poll_s = 0;   ///< async: the per-step exchanges while it was pending
  double seconds = 0;  ///< from the snapshot to publication
  std::uint64_t bytes = 0;          ///< written, every shard counted
  std::uint64_t staging_bytes = 0;  ///< async: this rank's staging memory
};

class reporter {
 public:
  /// progress: -1 redraws when stdout is a terminal (or FERRY_PROGRESS_TTY
  /// is set by ferry-run), 0 plain lines, 1 redraws. Opens `metrics`
  /// (truncated, or appended to when resuming). Throws ferry::exception
  /// (io_error) when it cannot.
  reporter(int progress, const std::filesystem::path& metrics, bool append);
  /// The progress line, at most a few times a second (and at the epoch's
  /// last step); plain mode prints a line at every tenth of the epoch.
  void progress(std::int64_t epoch, std::int64_t epochs, std::int64_t step, std::int64_t steps, double loss,
                double images_per_s, double eta_s);
  void step_record(std::int64_t epoch, std::int64_t step, std::int64_t steps, std::int64_t global_step, double loss);
  void epoch_end(const epoch_stats& s);
  /// The --profile table: printed, and a "profile" record in the metrics.
  void profile(const std::vector<profile_row>& rows, std::int64_t batches);
  /// A "checkpoint" record in the metrics (no line on the terminal).
  void checkpoint(const save_stats& s);
  /// A line of text, ending any progress line being redrawn.
  void line(const std::string& text);

 private:
  void record(const std::string& json);
  bool redraw_ = false;
  bool drawn_ = false;
  std::int64_t last_tenth_ = -1;
  std::chrono::steady_clock::time_point last_draw_{};
  std::ofstream metrics_;
};

/// "1:02:03", "4:05".
std::string clock_text(double seconds);

}  // namespace ferry::trainer
