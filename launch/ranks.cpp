// What ranks.h declares: ferry-run's ranks, started, relayed and stopped.
#include "ranks.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ferry::launch {
namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    if (name == nullptr) return "was killed by signal " + std::to_string(sig);
    return "was killed by SIG" + std::string(name);
  }
  return "stopped";
}
int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Writes each complete line of `data` prefixed, and keeps the rest for the
// next read. A line ends at \n, or at \r: a rank redrawing its progress
// line writes "\r\033[K" and the text, so each redraw reaches the terminal
// when the next one starts it (a lone \r is dropped).
void emit(FILE* to, const std::string& prefix, std::string& partial, const char* data, std::size_t n) {
  partial.append(data, n);
  std::size_t start = 0;
  for (std::size_t i = 0; i < partial.size(); ++i) {
    if (partial[i] != '\n' && partial[i] != '\r') continue;
    if (i > start || partial[i] == '\n') {
      std::fputs(prefix.c_str(), to);
      std::fwrite(partial.data() + start, 1, i + 1 - start, to);
    }
    start = i + 1;
  }
  partial.erase(0, start);
  std::fflush(to);
}

// Whether any rank's stdout or stderr (or a process it left behind) is open.
bool any_output_open(const std::vector<rank_process>& ranks) {
  for (const auto& r : ranks) {
    if (r.out >= 0 || r.err >= 0) return true;
  }
  return false;
}

// Waits up to 100 ms for the ranks' output and relays what came, each
// line prefixed with "[rank] " unless no_prefix; closes what has ended.
void relay_output(std::vector<rank_process>& ranks, bool no_prefix) {
  std::vector<pollfd> fds;
  std::vector<std::pair<std::size_t, bool>> owner;  // rank index, is stderr
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i].out >= 0) fds.push_back({ranks[i].out, POLLIN, 0}), owner.emplace_back(i, false);
    if (ranks[i].err >= 0) fds.push_back({ranks[i].err, POLLIN, 0}), owner.emplace_back(i, true);
  }
  poll(fds.data(), fds.size(), 100);
  for (std::size_t k = 0; k < fds.size(); ++k) {
    if (fds[k].revents == 0) continue;
    auto& r = ranks[owner[k].first];
    const bool is_err = owner[k].second;
    const std::string prefix = no_prefix ? "" : "[" + std::to_string(r.rank) + "] ";
    auto& partial = is_err ? r.err_partial : r.out_partial;
    char buf[65536];
    const auto n = read(fds[k].fd, buf, sizeof buf);
    if (n > 0) {
      emit(is_err ? stderr : stdout, prefix, partial, buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      if (!partial.empty()) emit(is_err ? stderr : stdout, prefix, partial, "\n", 1);
      close(fds[k].fd);
      (is_err ? r.err : r.out) = -1;
    }
  }
}

// Reaps the ranks that have ended. Returns one that failed (a status
// other than 0, or a signal), if any did: among ranks that ended together,
// one killed by a signal is the likelier cause than one that exited
// reporting it.
std::optional<std::size_t> reap(std::vector<rank_process>& ranks) {
  std::optional<std::size_t> first;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    auto& r = ranks[i];
    int status = 0;
    if (r.status || waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
    r.status = status;
    const bool bad = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (bad && (!first || (WIFSIGNALED(status) && !WIFSIGNALED(*ranks[*first].status)))) first = i;
  }
  return first;
}

}  // namespace

void catch_stop_signals() {
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a closed output must not kill the launcher before its ranks
}

std::vector<rank_process> start_ranks(std::vector<std::string> command, int nproc, int node_rank) {
  std::vector<char*> args;
  for (auto& a : command) args.push_back(a.data());
  args.push_back(nullptr);
  std::vector<rank_process> ranks(static_cast<std::size_t>(nproc));
  const pid_t parent = getpid();
  for (int local = 0; local < nproc; ++local) {
    auto& r = ranks[static_cast<std::size_t>(local)];
    r.rank = node_rank * nproc + local;
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    }
    const pid_t pid = fork();
    if (pid < 0) {
      throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
      // A rank must not outlive its launcher.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      // Its own process group, so stopping a rank stops what it started.
      setpgid(0, 0);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      signal(SIGPIPE, SIG_DFL);
      dup2(out[1], STDOUT_FILENO);
      dup2(err[1], STDERR_FILENO);
      setenv("RANK", std::to_string(r.rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
      execvp(args[0], args.data());
      std::fprintf(stderr, "ferry-run: cannot run %s: %s\n", args[0], std::strerror(errno));
      _exit(127);
    }
    setpgid(pid, pid);
    close(out[1]);
    close(err[1]);
    r.pid = pid;
    r.out = out[0];
    r.err = err[0];
  }
  return ranks;
}

int watch_ranks(std::vector<rank_process>& ranks, double grace, bool no_prefix) {
  // After a failure the others get --grace seconds to notice and exit by
  // themselves (a ferry rank reports the lost peer and how to resume), then
  // SIGTERM, then SIGKILL two seconds later.
  using clock = std::chrono::steady_clock;
  const auto after = [](double seconds) {
    return clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(seconds));
  };
  std::optional<std::size_t> failed;  // the first rank that failed
  constexpr auto never = clock::time_point::max();
  clock::time_point term_at = never, kill_at = never;
  int forwarded = 0;
  const auto signal_running = [&](int sig) {
    for (auto& r : ranks) {
      if (!r.status) kill(-r.pid, sig);
    }
  };
  // Output still open once every rank has ended belongs to processes they
  // left behind: read it for a second more, not forever.
  clock::time_point drain_until = never;
  for (;;) {
    bool running = false;
    for (const auto& r : ranks) running = running || !r.status;
    if (!running && drain_until == never) drain_until = after(1);
    if (!running && !any_output_open(ranks)) break;
    if (clock::now() >= drain_until) break;
    relay_output(ranks, no_prefix);
    const auto first = reap(ranks);
    if (first && !failed && forwarded == 0) {
      failed = first;
      const auto& r = ranks[*first];
      std::fprintf(stderr, "ferry-run: rank %d %s; stopping the other ranks\n", r.rank, describe_status(*r.status).c_str());
      term_at = after(grace);
    }
    if (g_signal != 0 && forwarded == 0) {
      forwarded = g_signal;
      g_signal = 0;
      signal_running(forwarded);
      kill_at = after(grace);
    } else if (g_signal != 0) {
      signal_running(SIGKILL);  // a second Ctrl-C: no more waiting
      g_signal = 0;
    }
    if (clock::now() >= term_at) {
      signal_running(SIGTERM);
      term_at = never;
      kill_at = after(2);
    }
    if (clock::now() >= kill_at) {
      signal_running(SIGKILL);
      kill_at = never;
    }
  }
  if (forwarded != 0) return 128 + forwarded;
  if (failed) return exit_code(*ranks[*failed].status);
  return 0;
}

}  // namespace ferry::launch
