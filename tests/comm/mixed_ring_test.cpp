// One ring of an x86-64 rank, an armhf rank and an s390x rank (both under
// qemu-user) must end with exactly the bytes of an all-x86-64 ring; and so
// must four and five such ranks under recursive doubling and Rabenseifner.
// The node binaries come from the cross build trees (make cross builds
// them before running this test).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

struct node {
  std::vector<std::string> argv;  // emulator prefix and binary
};

node native() { return {{FERRY_NATIVE_NODE}}; }
node armhf() { return {{"qemu-arm", "-L", "/usr/arm-linux-gnueabihf", FERRY_ARMHF_NODE}}; }
node s390x() { return {{"qemu-s390x", "-L", "/usr/s390x-linux-gnu", FERRY_S390X_NODE}}; }

pid_t spawn(const node& n, std::vector<std::string> args, int stdout_fd, const std::string& auth,
            const std::string& algorithm, const std::string& host_id) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (stdout_fd >= 0) ::dup2(stdout_fd, 1);
    std::vector<std::string> all = n.argv;
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> cargs;
    for (auto& a : all) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    ::setenv("FERRY_SECRET", "mixed-ring-secret", 1);
    if (!auth.empty()) ::setenv("FERRY_AUTH", auth.c_str(), 1);
    if (!algorithm.empty()) ::setenv("FERRY_ALGORITHM", algorithm.c_str(), 1);
    if (!host_id.empty()) {  // shared memory between the ranks of each host id
      ::setenv("FERRY_SHARED_MEMORY", "on", 1);
      ::setenv("FERRY_HOST_ID", host_id.c_str(), 1);
    }
    ::execvp(cargs[0], cargs.data());
    std::perror("exec");
    ::_exit(127);
  }
  return pid;
}

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Runs one ring; returns each rank's output file.
std::vector<std::string> run_ring(const std::vector<node>& nodes, const std::string& tag, const std::string& auth = "",
                                  const std::string& algorithm = "", const std::vector<std::string>& hosts = {}) {
  const auto host = [&](std::size_t r) { return r < hosts.size() ? hosts[r] : std::string(); };
  const std::string dir = ::testing::TempDir();
  const auto n = std::to_string(nodes.size());
  std::vector<std::string> outs;
  for (std::size_t r = 0; r < nodes.size(); ++r) outs.push_back(dir + "ring-" + tag + "-" + std::to_string(r));
  for (const auto& o : outs) std::remove(o.c_str());
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  std::vector<pid_t> pids{spawn(nodes[0], {"0", n, "0", outs[0]}, fds[1], auth, algorithm, host(0))};
  ::close(fds[1]);
  std::string line;
  char c;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(fds[0]);
  EXPECT_EQ(line.rfind("port ", 0), 0u) << "rank 0 said: " << line;
  const std::string port = line.size() > 5 ? line.substr(5) : "0";
  for (std::size_t r = 1; r < nodes.size(); ++r) pids.push_back(spawn(nodes[r], {std::to_string(r), n, port, outs[r]}, -1, auth, algorithm, host(r)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  for (std::size_t r = 0; r < pids.size(); ++r) {
    int status = 0;
    while (::waitpid(pids[r], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t p : pids) ::kill(p, SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << tag << " rank " << r << " failed";
  }
  return outs;
}

TEST(MixedRing, X86ArmhfS390xMatchesAllX86BitForBit) {
  const auto mixed = run_ring({native(), armhf(), s390x()}, "mixed");
  const auto x86 = run_ring({native(), native(), native()}, "x86");
  const auto reference = slurp(x86[0]);
  ASSERT_GT(reference.size(), 1000u);
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(slurp(x86[r]), reference) << "x86 ring, rank " << r;
    EXPECT_EQ(slurp(mixed[r]), reference) << "mixed ring, rank " << r;
    // Each rank's residual is its own, and the same whatever the host.
    const auto res = slurp(x86[r] + ".residual");
    ASSERT_FALSE(res.empty());
    EXPECT_EQ(slurp(mixed[r] + ".residual"), res) << "rank " << r;
  }
}

TEST(MixedRing, AuthenticatedWithABigEndianRankGivesTheSameBits) {
  // FERRY_AUTH=encrypt (its tag covers the frames' bytes as sent, in each
  // sender's order): an s390x rank between two x86-64 ones.
  const auto plain = run_ring({native(), native(), native()}, "plain");
  const auto sealed = run_ring({native(), s390x(), native()}, "encrypt", "encrypt");
  const auto reference = slurp(plain[0]);
  ASSERT_GT(reference.size(), 1000u);
  for (std::size_t r = 0; r < 3; ++r) EXPECT_EQ(slurp(sealed[r]), reference) << "rank " << r;
}

TEST(MixedRing, RecursiveDoublingAndRabenseifnerOverTheMeshMatchAllX86BitForBit) {
  // Four ranks: two steps each way, one of them over mesh links (ranks 0-2
  // and 1-3 are not ring neighbours); big-endian and 32-bit partners on
  // both sides of each exchange. Five ranks add the fold, from a big-endian
  // rank to a little-endian one and back.
  for (const std::string algorithm : {"recursive_doubling", "rabenseifner"}) {
    for (const auto& nodes : {std::vector<node>{native(), s390x(), armhf(), native()},
                              std::vector<node>{s390x(), native(), armhf(), native(), armhf()}}) {
      const auto tag = algorithm + "-" + std::to_string(nodes.size());
      const auto mixed = run_ring(nodes, tag + "-mixed", "", algorithm);
      const auto x86 = run_ring(std::vector<node>(nodes.size(), native()), tag + "-x86", "", algorithm);
      const auto reference = slurp(x86[0]);
      ASSERT_GT(reference.size(), 1000u);
      for (std::size_t r = 0; r < nodes.size(); ++r) {
        EXPECT_EQ(slurp(x86[r]), reference) << tag << ", x86 ranks, rank " << r;
        EXPECT_EQ(slurp(mixed[r]), reference) << tag << ", mixed ranks, rank " << r;
      }
    }
  }
}

// Ranks on `nodes` with FERRY_HOST_ID `hosts` (shared memory on) end with
// the same bits as all-x86 ranks with the same hosts.
void expect_hosts_match_all_x86(const std::vector<node>& nodes, const std::vector<std::string>& hosts,
                                const std::string& tag) {
  const auto mixed = run_ring(nodes, tag + "-mixed", "", "", hosts);
  const auto x86 = run_ring(std::vector<node>(nodes.size(), native()), tag + "-x86", "", "", hosts);
  const auto reference = slurp(x86[0]);
  ASSERT_GT(reference.size(), 1000u);
  for (std::size_t r = 0; r < nodes.size(); ++r) {
    EXPECT_EQ(slurp(x86[r]), reference) << tag << ", x86 ranks, rank " << r;
    EXPECT_EQ(slurp(mixed[r]), reference) << tag << ", mixed ranks, rank " << r;
  }
}

TEST(MixedRing, SharedMemoryHostsMatchAllX86BitForBit) {
  // Hosts a (two x86-64 ranks), b (two armhf ranks under qemu, sharing a
  // segment there) and c (s390x): each host reduces in its segment, the
  // leaders 0, 2 and 4 combine over TCP across byte orders, and the result
  // is the same bits as all-x86 ranks with the same hosts.
  expect_hosts_match_all_x86({native(), native(), armhf(), armhf(), s390x()}, {"a", "a", "b", "b", "c"}, "shm");
}

TEST(MixedRing, StripedHostsMatchAllX86BitForBit) {
  // Hosts a (x86-64 ranks 0 and 2) and b (s390x ranks 1 and 3, sharing a
  // segment under qemu): a long allreduce is striped, each rank combining
  // its share with the other host's rank at its index, across byte orders.
  expect_hosts_match_all_x86({native(), s390x(), native(), s390x()}, {"a", "b", "a", "b"}, "striped");
}

}  // namespace
