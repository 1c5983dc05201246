// ferry's ring across a simulated cluster: two network namespaces joined by
// a bridge, each link shaped to 1 Gbit/s with tbf (scripts/netns-cluster,
// prefix "ferryt", its own so it never meets bench/comm_cluster's "ferryc"
// or bench/train_compare's "ferry-tc").
//
// Each rank is a forked child that enters its node with setns(2) before it
// opens a socket, so every byte between nodes crosses the shaped veths; the
// only addresses used are the nodes' (10.77.0.x). Checked: the sums are
// bit-exact (finite values of every magnitude, signed zeros, subnormals, a
// NaN payload), and a 16 MB allreduce takes no less than the link allows
// (which proves the namespaces and the shaping are real). A 2x2 world with
// cyclically numbered ranks (node 0 holds ranks 0 and 2) completes with the
// right sums, its compressed allreduces and broadcasts too (the ring's
// places differ from the ranks there); ordered by node (the default) the
// ring crosses each link once per direction, in rank order twice.
// `up --delay`, by netem and by the delay line (tools/netns-delay), either
// delays every packet (a round trip of at least twice the delay) or, where
// that way is missing, fails with one line and leaves nothing behind.
//
// Needs root, ip and tc; otherwise every test is skipped with the reason.
// The topology is removed after the suite, also when a test fails, and on
// SIGINT/SIGTERM/SIGHUP; one left by a killed run is removed by the next
// run's `up`. Concurrent runs (several build trees) take turns through a
// lock file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ferry/comm/communicator.h"
#include "ferry/wire/byte_order.h"
#include "world.h"

namespace ferry::comm {
namespace {

constexpr const char* cluster_script = FERRY_NETNS_CLUSTER;
constexpr const char* prefix = "ferryt";
constexpr double link_rate = 125e6;               // 1 Gbit/s in bytes per second
constexpr double tbf_burst = 256.0 * 1024;        // netns-cluster's bucket: bytes that may pass above the rate
constexpr std::uint16_t port = 29655;

struct command_result {
  int status = -1;
  std::string output;  // stdout and stderr
};

// Runs `argv` (no shell), capturing its output.
command_result run_command(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> c;
    for (const auto& a : argv) c.push_back(const_cast<char*>(a.c_str()));
    c.push_back(nullptr);
    ::execvp(c[0], c.data());
    std::fprintf(stderr, "cannot run %s: %s\n", c[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(fds[1]);
  command_result r;
  char buf[4096];
  for (;;) {
    const ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got <= 0) break;
    r.output.append(buf, static_cast<std::size_t>(got));
  }
  ::close(fds[0]);
  ::waitpid(pid, &r.status, 0);
  while (!r.output.empty() && r.output.back() == '\n') r.output.pop_back();
  return r;
}

bool succeeded(const command_result& r) { return WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0; }

command_result cluster(const std::vector<std::string>& args, const char* topology = prefix) {
  std::vector<std::string> argv{cluster_script, "--prefix", topology};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

// Teardown on a signal: fork + exec are async-signal-safe.
extern "C" void on_signal(int sig) {
  for (const char* topology : {prefix, "ferryd"}) {  // the suite's, and the delay tests'
    const pid_t pid = ::fork();
    if (pid == 0) {
      const char* argv[] = {cluster_script, "--prefix", topology, "down", nullptr};
      ::execv(cluster_script, const_cast<char* const*>(argv));
      ::_exit(127);
    }
    if (pid > 0) ::waitpid(pid, nullptr, 0);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

using wire::to_bits;

constexpr std::uint32_t nan_payload = 0x7FC0BEEFu;  // quiet, so addition keeps it as is

// Two ranks: any finite floats (addition of two operands is commutative, so
// the sum does not depend on which rank the ring adds first), signed zeros
// in all four pairings, subnormals, and a NaN payload on one side.
float two_rank_value(std::uint32_t rank, std::size_t i) {
  if (i % 61 == 5) return (i / 61 + rank) % 2 ? -0.0f : 0.0f;
  if (i % 61 == 9) return -0.0f;
  if (i == 77) return rank == 0 ? wire::from_bits<float>(nan_payload) : 1.5f;
  const std::uint64_t h = splitmix((std::uint64_t{rank} << 48) ^ i);
  std::uint32_t bits = static_cast<std::uint32_t>(h) & 0x807FFFFFu;
  bits |= static_cast<std::uint32_t>(97 + (h >> 32) % 60) << 23;  // 2^-30 .. 2^29
  if (i % 101 == 7) bits &= 0x807FFFFFu;                           // subnormal
  return wire::from_bits<float>(bits);
}

// Any number of ranks: integers (exact in any order of addition), -0 on
// every rank (the sum is -0 only if no +0 creeps in), a NaN payload on one.
float many_rank_value(std::uint32_t rank, std::size_t i) {
  if (i % 97 == 3) return -0.0f;
  if (i == 10) return rank == 2 ? wire::from_bits<float>(nan_payload) : 3.0f;
  return static_cast<float>(static_cast<int>((i * 7 + rank * 13) % 201) - 100);
}

struct rank_report {
  bool ok = false;
  std::string error;
  std::vector<float> data;     // the first allreduce's result
  std::vector<double> times;   // rank 0: the timed allreduces, seconds
  std::vector<std::uint32_t> ring;  // each rank's successor on the ring
};

template <class T>
void put(std::string& out, const std::vector<T>& v) {
  const std::uint64_t n = v.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <class T>
bool get(const std::string& in, std::size_t& at, std::vector<T>& v) {
  std::uint64_t n = 0;
  if (in.size() - at < 8) return false;
  std::memcpy(&n, in.data() + at, 8);
  at += 8;
  if (n > (in.size() - at) / sizeof(T)) return false;
  v.resize(n);
  if (n != 0) std::memcpy(v.data(), in.data() + at, n * sizeof(T));
  at += n * sizeof(T);
  return true;
}

struct world_spec {
  std::vector<int> node_of_rank;  // node index per rank
  std::size_t count = 0;
  std::function<float(std::uint32_t, std::size_t)> value;
  int timed = 0;  // timed allreduces after the first
  std::function<void(config&)> tweak;  // adjusts every rank's config
};

// Forks one child per rank; each enters its node's network namespace, then
// forms the ring, allreduces its input once (the result is returned), then
// `timed` more times (rank 0 times them).
std::vector<rank_report> run_world(const world_spec& w, const std::string& master) {
  const auto n = static_cast<std::uint32_t>(w.node_of_rank.size());
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (std::uint32_t r = 0; r < n; ++r) {
    int fds[2];
    if (::pipe(fds) != 0) std::abort();
    const pid_t pid = ::fork();
    if (pid == 0) {
      // The suite's teardown handler is the parent's: a rank killed by that
      // teardown must simply die.
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
      ::close(fds[0]);
      std::string out;
      std::uint8_t ok = 0;
      std::string error;
      std::vector<float> data;
      std::vector<double> times;
      std::vector<std::uint32_t> ring;
      try {
        const std::string ns = "/run/netns/" + std::string(prefix) + "-node" + std::to_string(w.node_of_rank[r]);
        const int fd = ::open(ns.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
          throw std::runtime_error("cannot enter " + ns + ": " + std::strerror(errno));
        }
        ::close(fd);
        config c;
        c.rank = r;
        c.world_size = n;
        c.master_addr = master;
        c.master_port = port;
        c.secret = "cluster-test-secret-0123456789";
        c.timeout = std::chrono::milliseconds(20'000);
        if (w.tweak) w.tweak(c);
        communicator comm(c);
        ring = comm.allgather(comm.next_peer().rank);
        data.resize(w.count);
        for (std::size_t i = 0; i < w.count; ++i) data[i] = w.value(r, i);
        comm.allreduce(data);
        // The other collectives on the same ring (whose places may differ
        // from the ranks): compressed allreduces of small integers (exact
        // in 16 bits, so the sum is known whatever its order) and a
        // broadcast from every rank.
        for (const compression comp : {compression::bf16, compression::f16}) {
          std::vector<float> v(1001);
          for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((r + 1) * (i % 7));
          comm.allreduce(v, {.comp = comp});
          for (std::size_t i = 0; i < v.size(); ++i) {
            if (v[i] != static_cast<float>(n * (n + 1) / 2 * (i % 7))) {
              throw std::runtime_error("compressed allreduce: element " + std::to_string(i) + " is wrong");
            }
          }
        }
        for (std::uint32_t root = 0; root < n; ++root) {
          std::vector<std::uint32_t> b(333, r == root ? 1000 * root + 7 : 0);
          comm.broadcast(std::span<std::uint32_t>(b), root);
          for (const std::uint32_t x : b) {
            if (x != 1000 * root + 7) throw std::runtime_error("broadcast from rank " + std::to_string(root) + " is wrong");
          }
        }
        std::vector<float> scratch = data;
        for (int k = 0; k < w.timed; ++k) {
          comm.barrier();  // every rank starts together: the time is the transfer's
          const auto t0 = std::chrono::steady_clock::now();
          comm.allreduce(scratch);
          times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        comm.barrier();
        ok = 1;
      } catch (const std::exception& e) {
        error = e.what();
      }
      out.push_back(static_cast<char>(ok));
      put(out, std::vector<char>(error.begin(), error.end()));
      put(out, data);
      put(out, times);
      put(out, ring);
      test::detail::write_all(fds[1], out.data(), out.size());
      ::close(fds[1]);
      ::_exit(0);
    }
    ::close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  std::vector<rank_report> reports(n);
  for (std::uint32_t r = 0; r < n; ++r) {
    std::string in;
    char buf[65536];
    for (;;) {
      const ssize_t got = ::read(pipes[r], buf, sizeof buf);
      if (got <= 0) break;
      in.append(buf, static_cast<std::size_t>(got));
    }
    ::close(pipes[r]);
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    rank_report& rep = reports[r];
    std::size_t at = 1;
    std::vector<char> error;
    if (in.empty() || !get(in, at, error) || !get(in, at, rep.data) || !get(in, at, rep.times) ||
        !get(in, at, rep.ring)) {
      rep.error = "rank died without reporting (wait status " + std::to_string(status) + ")";
      continue;
    }
    rep.ok = in[0] != 0;
    rep.error.assign(error.begin(), error.end());
  }
  return reports;
}

// Indices where `got` differs from `want` bit for bit, with the first few named.
::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << ", expected " << want.size();
  }
  std::size_t wrong = 0;
  std::string first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (to_bits(got[i]) != to_bits(want[i])) {
      if (wrong++ < 3) {
        char line[128];
        std::snprintf(line, sizeof line, " [%zu] 0x%08x, expected 0x%08x;", i, to_bits(got[i]), to_bits(want[i]));
        first += line;
      }
    }
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << wrong << " of " << got.size() << " values differ:" << first;
}

// Runs a 2x2 world with cyclic ranks; checks the sums and returns how many
// times the busiest link carries the ring per direction.
int two_by_two_cyclic(const std::string& master, const std::function<void(config&)>& tweak) {
  world_spec w;
  w.node_of_rank = {0, 1, 0, 1};  // cyclic: node 0 holds ranks 0 and 2
  w.count = 1'000'003;
  w.value = many_rank_value;
  w.tweak = tweak;
  const auto reports = run_world(w, master);
  for (std::uint32_t r = 0; r < reports.size(); ++r) {
    EXPECT_TRUE(reports[r].ok) << "rank " << r << ": " << reports[r].error;
    if (!reports[r].ok) return -1;
  }
  std::vector<float> want(w.count);
  for (std::size_t i = 0; i < w.count; ++i) {
    float s = 0.0f;
    for (std::uint32_t r = 0; r < 4; ++r) s = r == 0 ? many_rank_value(r, i) : s + many_rank_value(r, i);
    want[i] = s;
  }
  EXPECT_EQ(to_bits(want[10]), nan_payload);
  EXPECT_EQ(to_bits(want[3]), 0x80000000u);
  for (std::uint32_t r = 0; r < reports.size(); ++r) EXPECT_TRUE(same_bits(reports[r].data, want)) << "rank " << r;

  const auto& ring = reports[0].ring;
  EXPECT_EQ(ring.size(), 4u);
  if (ring.size() != 4) return -1;
  std::string text = "0";
  std::map<int, int> leaving;  // node -> ring edges leaving it
  for (std::uint32_t r = 0, k = 0; k < 4; ++k) {
    if (w.node_of_rank[r] != w.node_of_rank[ring[r]]) ++leaving[w.node_of_rank[r]];
    r = ring[r];
    text += " -> " + std::to_string(r);
  }
  const int crossings = std::max(leaving[0], leaving[1]);
  std::printf("[ cluster  ] 2x2 with cyclic ranks%s: ring %s, the busiest link carries it %d time(s) per direction\n",
              tweak ? " in rank order" : "", text.c_str(), crossings);
  return crossings;
}

class Cluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_reason_.clear();
    if (::geteuid() != 0) {
      skip_reason_ = "needs root for network namespaces (running as uid " + std::to_string(::geteuid()) + ")";
      return;
    }
    if (!succeeded(run_command({"ip", "-V"})) || !succeeded(run_command({"tc", "-V"}))) {
      skip_reason_ = "needs ip and tc from iproute2";
      return;
    }
    lock_fd_ = ::open("/tmp/ferry-netns-ferryt.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd_ >= 0) ::flock(lock_fd_, LOCK_EX);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, on_signal);
    const auto up = cluster({"up", "--nodes", "2", "--rate", "1gbit"});
    if (!succeeded(up)) {
      skip_reason_ = "cannot build the simulated cluster: " + up.output;
      cluster({"down"});
      return;
    }
    up_ = true;
    master_ = cluster({"addr", "0"}).output;
  }

  static void TearDownTestSuite() {
    if (up_) {
      const auto down = cluster({"down"});
      if (!succeeded(down)) ADD_FAILURE() << "netns-cluster down: " << down.output;
      up_ = false;
    }
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
    if (lock_fd_ >= 0) ::close(lock_fd_);
    lock_fd_ = -1;
  }

  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }

  static inline std::string skip_reason_;
  static inline bool up_ = false;
  static inline std::string master_;
  static inline int lock_fd_ = -1;
};

TEST_F(Cluster, TwoNodesSumBitExactAndNoFasterThanTheLink) {
  world_spec w;
  w.node_of_rank = {0, 1};
  w.count = 4'194'304;  // 16 MB: tbf's 256 KiB burst is 1.6 % of it
  w.value = two_rank_value;
  w.timed = 3;
  const auto reports = run_world(w, master_);
  for (std::uint32_t r = 0; r < reports.size(); ++r) ASSERT_TRUE(reports[r].ok) << "rank " << r << ": " << reports[r].error;

  std::vector<float> want(w.count);
  for (std::size_t i = 0; i < w.count; ++i) want[i] = two_rank_value(0, i) + two_rank_value(1, i);
  EXPECT_EQ(to_bits(want[77]), nan_payload);
  for (std::uint32_t r = 0; r < reports.size(); ++r) EXPECT_TRUE(same_bits(reports[r].data, want)) << "rank " << r;

  // A ring of two moves the whole buffer over the link in each direction:
  // at 1 Gbit/s that cannot take less than bytes / R, less what tbf's
  // bucket lets through above the rate.
  const double bytes = static_cast<double>(w.count) * sizeof(float);
  const double limit = bytes / link_rate;
  const double floor = (bytes - tbf_burst) / link_rate;
  const auto& times = reports[0].times;
  ASSERT_EQ(times.size(), 3u);
  const double fastest = *std::min_element(times.begin(), times.end());
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[1];
  std::printf("[ cluster  ] 16 MB over one 1 Gbit/s link: median %.1f ms, fastest %.1f ms; link limit %.1f ms; "
              "fraction of the limit %.2f\n",
              median * 1e3, fastest * 1e3, limit * 1e3, limit / median);
  EXPECT_GE(fastest, floor) << "faster than a 1 Gbit/s link allows: the traffic did not cross the shaped link";
}

TEST_F(Cluster, TwoByTwoCyclicRanksSumExact) {
  EXPECT_EQ(two_by_two_cyclic(master_, {}), 1) << "the default ring should visit each node's ranks together";
}

TEST_F(Cluster, TwoByTwoCyclicRanksInRankOrder) {
  // The careless ring: rank r sends to rank r + 1, across a link every time.
  EXPECT_EQ(two_by_two_cyclic(master_, [](config& c) { c.order = ring_order::rank; }), 2);
}

// Prefix "ferryd": a topology of its own beside the suite's. `way` is
// netem or queue (tools/netns-delay, the delay line on NFQUEUE): where it
// works, a TCP round trip between the nodes takes at least twice the delay
// and bulk TCP traffic still crosses; where it cannot, `up` fails with one
// line naming what is missing and leaves nothing behind.
void check_delay(const std::string& way) {
  std::vector<std::string> by{"--delay-by", way};
#ifdef FERRY_NETNS_DELAY
  by.insert(by.end(), {"--delay-line", FERRY_NETNS_DELAY});
#endif
  auto delayed = [&](std::vector<std::string> args) {
    args.insert(args.end(), by.begin(), by.end());
    return cluster(args, "ferryd");
  };
  const auto has = delayed({"has-delay"});  // the way, or what is missing
  const auto up = delayed({"up", "--nodes", "2", "--delay", "2ms"});  // the tbf under the delay too
  if (!succeeded(has)) {
    EXPECT_FALSE(succeeded(up));
    EXPECT_NE(up.output.find(way == "netem" ? "netem" : "delay line"), std::string::npos) << up.output;
    EXPECT_EQ(up.output.find('\n'), std::string::npos) << up.output;  // one line (the last newline trimmed)
    EXPECT_EQ(run_command({"sh", "-c", "ip netns list | grep -c '^ferryd-'"}).output, "0");
    std::printf("[ cluster  ] no delay by %s here: up --delay says so: %s\n", way.c_str(), up.output.c_str());
    return;
  }
  EXPECT_EQ(has.output, way);
  ASSERT_TRUE(succeeded(up)) << up.output;
  const auto check = delayed({"check"});
  const auto down = delayed({"down"});
  ASSERT_TRUE(succeeded(check)) << check.output;
  EXPECT_TRUE(succeeded(down)) << down.output;
  const auto at = check.output.find("round trip median ");
  ASSERT_NE(at, std::string::npos) << check.output;
  const double rtt_us = std::stod(check.output.substr(at + 18));
  std::printf("[ cluster  ] 2 ms of delay (%s) per packet sent, 1 Gbit/s: round trip %.0f us\n", way.c_str(), rtt_us);
  EXPECT_GE(rtt_us, 4000) << check.output;
  EXPECT_LT(rtt_us, 40000) << check.output;
  const auto bulk = check.output.find("Gbit/s");
  EXPECT_NE(bulk, std::string::npos) << "no bulk TCP transfer crossed the delayed link: " << check.output;
  if (way == "queue") {  // down prints the delay line's summary
    EXPECT_NE(down.output.find("packets delayed by 2000.0 us"), std::string::npos) << down.output;
    std::printf("[ cluster  ] %s\n", down.output.c_str());
  }
}

TEST_F(Cluster, NetemDelaysEveryPacketOrSaysTheKernelCannot) { check_delay("netem"); }

TEST_F(Cluster, DelayLineDelaysEveryPacketOrSaysItCannot) { check_delay("queue"); }

}  // namespace
}  // namespace ferry::comm
