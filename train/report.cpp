#include "report.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "ferry/base/error.h"

namespace ferry::trainer {
namespace {

// One field of every rank's memory, as whole bytes.
std::vector<std::uint64_t> column(const std::vector<rank_memory>& m, double rank_memory::*field) {
  std::vector<std::uint64_t> out;
  for (const auto& r : m) out.push_back(static_cast<std::uint64_t>(r.*field));
  return out;
}

}  // namespace

std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<long>(seconds + 0.5);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%ld:%02ld", s / 60, s % 60);
  }
  return text;
}

reporter::reporter(int progress, const std::filesystem::path& metrics, bool append) {
  const char* tty = std::getenv("FERRY_PROGRESS_TTY");
  redraw_ = progress == 1 || (progress < 0 && (isatty(STDOUT_FILENO) == 1 || (tty != nullptr && *tty == '1')));
  if (!metrics.empty()) {
    metrics_.open(metrics, append ? std::ios::app : std::ios::trunc);
    if (!metrics_) throw ferry::exception(error(errc::io_error, metrics.string(), errno));
  }
}

void reporter::line(const std::string& text) {
  if (drawn_) std::fputs("\r\033[K", stdout);
  drawn_ = false;
  std::fputs(text.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void reporter::progress(std::int64_t epoch, std::int64_t epochs, std::int64_t step, std::int64_t steps, double loss,
                        double images_per_s, double eta_s) {
  char text[160];
  std::snprintf(text, sizeof text, "epoch %lld/%lld  step %lld/%lld  loss %.4f  %.0f img/s  ETA %s",
                static_cast<long long>(epoch), static_cast<long long>(epochs), static_cast<long long>(step),
                static_cast<long long>(steps), loss, images_per_s, clock_text(eta_s).c_str());
  if (redraw_) {
    const auto now = std::chrono::steady_clock::now();
    if (step != steps && now - last_draw_ < std::chrono::milliseconds(200)) return;
    last_draw_ = now;
    std::fprintf(stdout, "\r\033[K%s", text);
    std::fflush(stdout);
    drawn_ = true;
    return;
  }
  const std::int64_t tenth = step * 10 / std::max<std::int64_t>(steps, 1);
  if (tenth == last_tenth_ || tenth == 0) return;
  last_tenth_ = tenth;
  line(text);
}

void reporter::record(const std::string& json) {
  if (!metrics_.is_open()) return;
  metrics_ << json << '\n';
  metrics_.flush();
}

void reporter::step_record(std::int64_t epoch, std::int64_t step, std::int64_t steps, std::int64_t global_step,
                           double loss) {
  record(nlohmann::json{{"kind", "step"}, {"epoch", epoch}, {"step", step}, {"steps", steps}, {"global_step", global_step},
                        {"loss", loss}}
             .dump());
}

void reporter::epoch_end(const epoch_stats& s) {
  last_tenth_ = -1;
  char text[256];
  std::snprintf(text, sizeof text,
                "epoch %lld/%lld: train loss %.4f, train accuracy %.2f %%, test accuracy %.2f %%, %.1f s, %.0f img/s",
                static_cast<long long>(s.epoch), static_cast<long long>(s.epochs), s.train_loss, 100 * s.train_acc,
                100 * s.test_acc, s.seconds, s.images_per_s);
  line(text);
  // Per-rank time, and stragglers: ranks whose compute time is more than
  // 10 % above the median rank's (the others wait for them every step).
  std::vector<double> sorted = s.compute_s;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  std::string ranks = "  rank  compute s  comm s  peak memory  optimizer state";
  std::string stragglers;
  for (std::size_t r = 0; r < s.compute_s.size(); ++r) {
    std::snprintf(text, sizeof text, "\n  %4zu  %9.2f  %6.2f  %8.1f MB  %12.1f MB", r, s.compute_s[r], s.comm_s[r],
                  s.memory[r].peak_rss / 1e6, s.memory[r].optimizer / 1e6);
    ranks += text;
    if (s.compute_s.size() > 1 && s.compute_s[r] > 1.1 * median) {
      std::snprintf(text, sizeof text, "%s%zu (+%.0f %%)", stragglers.empty() ? "" : ", ", r,
                    100 * (s.compute_s[r] / median - 1));
      stragglers += text;
    }
  }
  line(ranks);
  if (!stragglers.empty()) line("  stragglers (compute time above the median rank's): rank " + stragglers);
  record(nlohmann::json{{"kind", "epoch"},
                        {"epoch", s.epoch},
                        {"epochs", s.epochs},
                        {"train_loss", s.train_loss},
                        {"train_acc", s.train_acc},
                        {"test_acc", s.test_acc},
                        {"seconds", s.seconds},
                        {"images_per_s", s.images_per_s},
                        {"wall_s", s.wall_s},
                        {"compute_s", s.compute_s},
                        {"comm_s", s.comm_s},
                        {"peak_rss_bytes", column(s.memory, &rank_memory::peak_rss)},
                        {"param_bytes", column(s.memory, &rank_memory::params)},
                        {"grad_bytes", column(s.memory, &rank_memory::grads)},
                        {"optimizer_bytes", column(s.memory, &rank_memory::optimizer)},
                        {"crc32c", s.crc}}
             .dump());
}

void reporter::profile(const std::vector<profile_row>& rows, std::int64_t batches) {
  line(profile_text(rows, batches));
  auto table = nlohmann::json::array();
  for (const auto& r : rows) {
    table.push_back({{"module", r.module}, {"pass", r.pass}, {"calls", r.calls}, {"ms", r.ms}, {"bytes", r.bytes}});
  }
  record(nlohmann::json{{"kind", "profile"}, {"batches", batches}, {"rows", table}}.dump());
}

void reporter::checkpoint(const save_stats& s) {
  record(nlohmann::json{{"kind", "checkpoint"}, {"where", s.where}, {"global_step", s.global_step}, {"path", s.path}, {"async", s.async},
                        {"sharded", s.sharded}, {"stall_s", s.stall_s}, {"poll_s", s.poll_s},
                        {"seconds", s.seconds}, {"bytes", s.bytes}, {"staging_bytes", s.staging_bytes}}
             .dump());
}

}  // namespace ferry::trainer
