// ferry-run: starts the ranks of a job on this machine, as torchrun does.
//
//   ferry-run -n 4 ferry-train --epochs 2
//   ferry-run --nnodes 2 --node-rank 0 --master-addr HOST -n 2 ferry-train
//
// Each rank gets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK, OMP_NUM_THREADS (this machine's cores split
// between its ranks, unless set), OMP_WAIT_POLICY=PASSIVE (unless set) and FERRY_SECRET (a fresh random one on a
// single node when neither FERRY_SECRET nor FERRY_SECRET_FILE is set; with
// several nodes every node must be given the same secret). Each line a rank
// prints is prefixed with its rank. When a rank fails, the others get
// --grace seconds to exit by themselves, then SIGTERM, then SIGKILL; ferry-run
// exits with the failed rank's status (128 + signal for a signal).
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli11.h"

namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

struct rank_process {
  int rank = 0;
  pid_t pid = -1;
  int out = -1, err = -1;             // read ends of the rank's stdout and stderr
  std::string out_partial, err_partial;  // text after the last line end
  std::optional<int> status;          // exit status once reaped
};

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

std::string random_secret() {
  unsigned char bytes[32];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const auto n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno != EINTR) throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  std::string hex;
  for (unsigned char b : bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  return hex;
}

// A port the kernel considers free now (the ranks bind it a moment later).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 29500;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
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

}  // namespace

int main(int argc, char** argv) {
  int nproc = 1, nnodes = 1, node_rank = 0, master_port = -1, threads = 0;
  double grace = 5;
  std::string master_addr = "127.0.0.1";
  bool no_prefix = false;
  std::vector<std::string> command;
  CLI::App app{"ferry-run: starts the ranks of a distributed job on this machine, like torchrun. Each rank "
               "gets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, OMP_NUM_THREADS "
               "and FERRY_SECRET (a fresh random one on a single node unless FERRY_SECRET or FERRY_SECRET_FILE "
               "is set). When one rank fails the others are stopped, and ferry-run exits with its status.",
               "ferry-run"};
  ferry::tools::share_option_defaults(app);
  app.add_option("-n,--nproc-per-node", nproc, "ranks on this machine")->check(CLI::Range(1, 1024));
  app.add_option("--nnodes", nnodes, "machines in the job")->check(CLI::Range(1, 65536));
  app.add_option("--node-rank", node_rank, "this machine's index, 0 .. nnodes-1")->check(CLI::NonNegativeNumber);
  app.add_option("--master-addr", master_addr, "address of node 0, where rank 0 listens");
  app.add_option("--master-port", master_port, "rank 0's port (default: a free one on a single node, else 29500)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--threads", threads, "OMP_NUM_THREADS per rank (default: cores / ranks, unless set)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--grace", grace, "seconds the other ranks get to exit by themselves after one fails, before SIGTERM")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-prefix", no_prefix, "print the ranks' output without the [rank] prefix");
  // Everything from the first argument that is not an option on is the
  // program and its own arguments.
  app.prefix_command();
  app.footer("Usage: ferry-run [OPTIONS] PROGRAM [ARGS...]");
  if (const auto status = ferry::tools::parse_command_line(app, argc, argv)) return *status;
  command = app.remaining();
  if (command.empty()) {
    std::fputs("ferry-run: no program to run (usage: ferry-run [OPTIONS] PROGRAM [ARGS...])\n", stderr);
    return 2;
  }
  if (nnodes > 1 && app.count("--master-addr") == 0) {
    std::fputs("ferry-run: with --nnodes > 1, --master-addr must name node 0 (every node's ranks connect to it)\n",
               stderr);
    return 2;
  }
  if (node_rank >= nnodes) {
    std::fprintf(stderr, "ferry-run: --node-rank %d is not below --nnodes %d\n", node_rank, nnodes);
    return 2;
  }
  const char* secret = std::getenv("FERRY_SECRET");
  const char* secret_file = std::getenv("FERRY_SECRET_FILE");
  const bool have_secret = (secret != nullptr && *secret != '\0') || (secret_file != nullptr && *secret_file != '\0');
  if (!have_secret && nnodes > 1) {
    std::fputs("ferry-run: with --nnodes > 1 every node needs the same secret: set FERRY_SECRET or "
               "FERRY_SECRET_FILE\n", stderr);
    return 2;
  }
  if (master_port < 0) master_port = nnodes == 1 ? free_port() : 29500;
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int per_rank = threads > 0 ? threads : std::max(1, cores / nproc);
  const bool tty = isatty(STDOUT_FILENO) == 1;

  setenv("MASTER_ADDR", master_addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(master_port).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(nnodes * nproc).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
  setenv("GROUP_RANK", std::to_string(node_rank).c_str(), 1);
  if (threads > 0 || std::getenv("OMP_NUM_THREADS") == nullptr) setenv("OMP_NUM_THREADS", std::to_string(per_rank).c_str(), 1);
  // Ranks share the cores: OpenMP threads that spin while they wait for
  // work take them from the other ranks (a 2-core machine ran 6x slower).
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  if (!have_secret) setenv("FERRY_SECRET", random_secret().c_str(), 1);
  if (tty) setenv("FERRY_PROGRESS_TTY", "1", 1);

  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a closed output must not kill the launcher before its ranks

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
      std::fprintf(stderr, "ferry-run: pipe: %s\n", std::strerror(errno));
      return 1;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "ferry-run: fork: %s\n", std::strerror(errno));
      return 1;
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
    std::vector<pollfd> fds;
    std::vector<std::pair<std::size_t, bool>> owner;  // rank index, is stderr
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i].out >= 0) fds.push_back({ranks[i].out, POLLIN, 0}), owner.emplace_back(i, false);
      if (ranks[i].err >= 0) fds.push_back({ranks[i].err, POLLIN, 0}), owner.emplace_back(i, true);
    }
    bool running = false;
    for (const auto& r : ranks) running = running || !r.status;
    if (!running && drain_until == never) drain_until = after(1);
    if (fds.empty() && !running) break;
    if (clock::now() >= drain_until) break;
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
    // Reap; among ranks that ended together, one killed by a signal is the
    // likelier cause than one that exited reporting it.
    std::optional<std::size_t> first;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      auto& r = ranks[i];
      int status = 0;
      if (r.status || waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
      r.status = status;
      const bool bad = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (bad && (!first || (WIFSIGNALED(status) && !WIFSIGNALED(*ranks[*first].status)))) first = i;
    }
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
