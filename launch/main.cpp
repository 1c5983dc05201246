// ferry-run: starts the ranks of a job on this machine, as torchrun does.
//
//   ferry-run -n 4 ferry-train --epochs 2
//   ferry-run --nnodes 2 --node-rank 0 --master-addr HOST -n 2 ferry-train
//
// Each rank gets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK, OMP_NUM_THREADS (this machine's cores split
// between its ranks, unless set), OMP_WAIT_POLICY=PASSIVE (unless set),
// USE_LIBUV=0 (unless set: torch 2.x's TCPStore asks for libuv, which
// Debian's torch 2.6 is built without, so gloo's env:// rendezvous would
// fail) and FERRY_SECRET (a fresh random one on a
// single node when neither FERRY_SECRET nor FERRY_SECRET_FILE is set; with
// several nodes every node must be given the same secret). Each line a rank
// prints is prefixed with its rank. When a rank fails, the others get
// --grace seconds to exit by themselves, then SIGTERM, then SIGKILL; ferry-run
// exits with the failed rank's status (128 + signal for a signal).
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cli11.h"
#include "ferry/comm/config.h"
#include "ferry/comm/cost_model.h"
#include "ranks.h"

namespace {

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

// Whether `port` (0: any) can be bound on every IPv4 address now; the port
// bound, or 0.
int try_bind(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  socklen_t len = sizeof a;
  int bound = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    bound = ntohs(a.sin_port);
  }
  close(fd);
  return bound;
}

// A port free now, which rank 0 binds a moment later: a random one below
// the kernel's ephemeral range (ip_local_port_range), so that no
// connection made meanwhile (this job's or another's) can take it as its
// local end and fail rank 0's bind with EADDRINUSE. Else any free port.
int free_port() {
  constexpr int lowest = 10000;
  int ephemeral = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral;
  if (ephemeral - lowest >= 1000) {
    std::random_device rd;
    std::uniform_int_distribution<int> pick(lowest, ephemeral - 1);
    for (int attempt = 0; attempt < 64; ++attempt) {
      if (const int port = try_bind(pick(rd)); port != 0) return port;
    }
  }
  const int any = try_bind(0);
  return any != 0 ? any : 29500;
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
  bool explain = false;
  app.add_flag("--explain", explain,
               "print what comm's cost model predicts for an allreduce on this world (--nproc-per-node x --nnodes "
               "ranks; FERRY_LINK_LATENCY_US, FERRY_LINK_GBPS) and which algorithm FERRY_ALGORITHM=auto takes, "
               "then exit");
  // Everything from the first argument that is not an option on is the
  // program and its own arguments.
  app.prefix_command();
  app.footer("Usage: ferry-run [OPTIONS] PROGRAM [ARGS...]");
  if (const auto status = ferry::tools::parse_command_line(app, argc, argv)) return *status;
  command = app.remaining();
  if (explain) {
    const auto link = ferry::comm::config::link_cost_from_env();
    if (!link) {
      std::fprintf(stderr, "ferry-run: %s\n", link.error().what().c_str());
      return 2;
    }
    std::fputs(ferry::comm::explain(static_cast<std::uint32_t>(nnodes * nproc), *link).c_str(), stdout);
    if (nnodes > 1 && nproc > 1) {
      std::printf("with shared memory (FERRY_SHARED_MEMORY=on, the default) each node's %d ranks combine in memory; "
                  "below %d KiB only the %d nodes' leaders use the network, from there the buffer is striped (each of "
                  "a node's ranks carries 1/%d of it, 512 KiB at a time); either way the network runs the "
                  "faster of recursive_doubling and rabenseifner for %d ranks (the columns of ferry-run -n %d "
                  "--explain)\n",
                  nproc, 1024 * nproc, nnodes, nproc, nnodes, nnodes);
    }
    return 0;
  }
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
  setenv("USE_LIBUV", "0", 0);
  if (!have_secret) setenv("FERRY_SECRET", random_secret().c_str(), 1);
  if (tty) setenv("FERRY_PROGRESS_TTY", "1", 1);

  ferry::launch::catch_stop_signals();
  std::vector<ferry::launch::rank_process> ranks;
  try {
    ranks = ferry::launch::start_ranks(command, nproc, node_rank);
  } catch (const std::runtime_error& e) {
    std::fprintf(stderr, "ferry-run: %s\n", e.what());
    return 1;
  }
  return ferry::launch::watch_ranks(ranks, grace, no_prefix);
}
