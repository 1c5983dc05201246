// ferry-run and ferry-train as a user runs them: the launcher's
// environment, output and failure handling; training that learns with
// replicas kept identical; a killed job resumed to the same bits; a dead
// rank reported by the others within seconds; the gloo backend; ferry plot.
// Small runs (a few thousand Fashion-MNIST samples) keep it quick.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "../checkpoint/helpers.h"
#include "job_helpers.h"
#include "ferry/checkpoint/reader.h"
#include "ferry/checkpoint/writer.h"

extern char** environ;

namespace ferry::trainer {
namespace {

namespace fs = std::filesystem;
using checkpoint::testing::read_text;
using testing::records;
using testing::run_result;

std::size_t lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

class Trainer : public testing::job_dir {
 protected:
  static std::string run() { return std::string("'") + FERRY_RUN + "'"; }
  static std::string train() { return std::string("'") + FERRY_TRAIN + "'"; }
  static std::string cli() { return std::string("'") + FERRY_CLI + "'"; }
  // A small job: the first `limit` training samples, 1000 test samples.
  static std::string job(int limit, int epochs, const std::string& binary = FERRY_TRAIN) {
    return "'" + binary + "' --limit " + std::to_string(limit) + " --test-limit 1000 --epochs " +
           std::to_string(epochs) + " --threads 1";
  }
  // The same with the test hooks (FERRY_TRAIN_DIE, FERRY_TRAIN_FLIP)
  // compiled in: ferry-train-hooked.
  static std::string hooked_job(int limit, int epochs) { return job(limit, epochs, FERRY_TRAIN_HOOKED); }
};

TEST_F(Trainer, HelpGoesToStdoutAndUsageErrorsExitTwo) {
  for (const auto& prog : {run(), train()}) {
    const auto r = shell(prog + " --help");
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << r.out;
    EXPECT_EQ(r.err, "");
  }
  for (const auto& line : {run(), run() + " -n 0 true", run() + " --nnodes 2 true",
                           "FERRY_SECRET=x " + run() + " --nnodes 2 true", train() + " --batch 0",
                           train() + " --compress f8", train() + " --hidden 32,x", train() + " --bogus",
                           train() + " --backend gloo --compress bf16", train() + " --freeze 2",
                           train() + " --checkpoint-full-every 0",
                           train() + " --checkpoint-full-every 4", "FERRY_CPU_FEATURES=avx9 " + train(),
                           "FERRY_LINK_GBPS=fast " + run() + " --explain"}) {
    const auto r = shell(line);
    EXPECT_EQ(r.status, 2) << line;
    EXPECT_EQ(lines(r.err), 1u) << line << ": " << r.err;
  }
  // --explain: the cost model's table for the world, then exit.
  const auto e = shell("FERRY_LINK_LATENCY_US=50 " + run() + " -n 8 --explain");
  EXPECT_EQ(e.status, 0) << e.err;
  EXPECT_NE(e.out.find("8 ranks, alpha 50.0 us"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("| 4 KiB | 0.762 ms | 0.258 ms | 0.362 ms | recursive_doubling |"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("from 13375 B: rabenseifner"), std::string::npos) << e.out;
}

TEST_F(Trainer, BadDataAndCheckpointsGetOneLine) {
  auto r = shell(train() + " --data /nonexistent");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/train-images-idx3-ubyte"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("No such file or directory"), std::string::npos) << r.err;

  std::ofstream(dir_ / "corrupt.ferry") << "not a checkpoint at all";
  r = shell(job(500, 1) + " --resume corrupt.ferry");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("corrupt.ferry"), std::string::npos) << r.err;
}

// Copies checkpoint `in` to `out` with its metadata edited (an empty value
// removes the key), without tensor `drop`, and with `extra` added.
void rewrite(const fs::path& in, const fs::path& out, const std::map<std::string, std::string>& edits,
             const std::string& drop = "", const std::vector<checkpoint::tensor_ref>& extra = {}) {
  const auto r = checkpoint::open(in).value();
  const auto all = r.get_all().value();
  std::vector<checkpoint::tensor_ref> refs;
  for (const auto& t : all) {
    if (t.name() != drop && t.name() != "trainer.partial") refs.push_back(t.ref());
  }
  refs.insert(refs.end(), extra.begin(), extra.end());
  auto meta = r.metadata();
  for (const auto& [k, v] : edits) {
    if (v.empty()) {
      meta.erase(k);
    } else {
      meta[k] = v;
    }
  }
  checkpoint::save(out, refs, meta).value();
}

TEST_F(Trainer, HostileCheckpointsGetOneLineNamingTheProblem) {
  ASSERT_EQ(shell(job(600, 1) + " --checkpoint good.ferry").status, 0);
  const std::uint64_t shape[] = {1, 3}, zero[] = {0, 0};
  const double one = 1.0;
  const checkpoint::tensor_ref stride0{"trainer.partial", codec::dtype::f64, shape, zero, 0, std::as_bytes(std::span(&one, 1))};
  struct bad_case {
    std::map<std::string, std::string> edits;
    std::string drop, args, expect;
  };
  const std::vector<bad_case> cases{
      {{{"trainer.epoch", "x1"}}, "", "--epochs 3", "trainer.epoch is 'x1', not a whole number"},
      {{{"trainer.epoch", "0"}, {"trainer.step", "-3"}}, "", "--epochs 3", "trainer.step is '-3', not a whole number"},
      {{{"trainer.world_size", ""}}, "", "--epochs 3", "bad.ferry: no trainer.world_size"},
      {{}, "", "--epochs 1", "already trained 1 epoch(s); ask for more with --epochs"},
      {{{"trainer.epoch", "0"}, {"trainer.step", "5"}, {"trainer.world_size", "2"}}, "", "--epochs 3",
       "written in the middle of an epoch by 2 rank(s)"},
      {{}, "optimizer.fc1.weight.exp_avg", "--epochs 3", "bad.ferry: optimizer state: tensor 'optimizer.fc1.weight.exp_avg'"},
      {{}, "fc1.weight", "--epochs 3", "bad.ferry: state dict: tensor 'fc1.weight'"},
  };
  for (const auto& c : cases) {
    rewrite(dir_ / "good.ferry", dir_ / "bad.ferry", c.edits, c.drop, {stride0});
    const auto r = shell(job(600, 3) + " " + c.args + " --resume bad.ferry --checkpoint out.ferry");
    EXPECT_EQ(r.status, 1) << c.expect;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("--resume out.ferry"), std::string::npos) << r.err;  // nothing to resume from
  }
  // A stride-0 view for per-rank state reads as its values, not past them.
  rewrite(dir_ / "good.ferry", dir_ / "ok.ferry", {}, "", {stride0});
  const auto ok = shell(job(600, 2) + " --resume ok.ferry --checkpoint out.ferry");
  EXPECT_EQ(ok.status, 0) << ok.err;
}

// --data takes any IDX set: here two 2x4 training images and three test ones.
TEST_F(Trainer, TrainsOnAnyIdxSet) {
  const auto r = shell(train() + " --data '" + FERRY_TEST_DATA_DIR + "/trainer/tiny' --epochs 2 --hidden 4 --threads 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("epoch 2/2: train loss"), std::string::npos) << r.out;
}

// On a terminal the progress line redraws in place (\r, erase line);
// elsewhere it is plain lines.
TEST_F(Trainer, ProgressRedrawsOnATerminalOnly) {
  const auto tty = shell("script -qec \"" + job(2000, 1) + "\" /dev/null");
  ASSERT_EQ(tty.status, 0) << tty.err;
  EXPECT_NE(tty.out.find("\r\033[Kepoch 1/1  step "), std::string::npos) << tty.out;
  const auto plain = shell(job(2000, 1));
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(plain.out.find('\r'), std::string::npos);
  EXPECT_NE(plain.out.find("\nepoch 1/1  step "), std::string::npos) << plain.out;
}

TEST_F(Trainer, LauncherGivesEachRankItsEnvironment) {
  const auto r = shell(run() + " -n 3 sh -c 'echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR "
                               "$OMP_NUM_THREADS $FERRY_SECRET'");
  ASSERT_EQ(r.status, 0) << r.err;
  std::map<std::string, std::string> by_rank;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) by_rank[line.substr(0, 4)] = line.substr(4);
  ASSERT_EQ(by_rank.size(), 3u) << r.out;
  std::string secret;
  for (int k = 0; k < 3; ++k) {
    std::istringstream f(by_rank["[" + std::to_string(k) + "] "]);
    std::string rank, local, world, local_world, addr, threads, s;
    f >> rank >> local >> world >> local_world >> addr >> threads >> s;
    EXPECT_EQ(rank, std::to_string(k));
    EXPECT_EQ(local, std::to_string(k));
    EXPECT_EQ(world, "3");
    EXPECT_EQ(local_world, "3");
    EXPECT_EQ(addr, "127.0.0.1");
    EXPECT_GE(std::stoi(threads), 1);
    EXPECT_EQ(s.size(), 64u);  // 32 random bytes in hex, the same for every rank
    if (k > 0) {
      EXPECT_EQ(s, secret);
    }
    secret = s;
  }
  // Multi-node: ranks numbered from this node's first.
  const auto m = shell("FERRY_SECRET=x " + run() + " --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 -n 2 --no-prefix sh -c 'echo $RANK'");
  EXPECT_EQ(m.status, 0);
  EXPECT_TRUE(m.out == "2\n3\n" || m.out == "3\n2\n") << m.out;
}

TEST_F(Trainer, LauncherStopsEveryRankWhenOneFails) {
  const auto start = std::chrono::steady_clock::now();
  const auto r = shell(run() + " --grace 1 -n 3 sh -c 'if [ $RANK = 1 ]; then exit 7; fi; sleep 60'");
  EXPECT_EQ(r.status, 7);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_NE(r.err.find("ferry-run: rank 1 exited with status 7"), std::string::npos) << r.err;
}

TEST_F(Trainer, FourRanksLearnWithIdenticalReplicas) {
  const auto r = shell(run() + " -n 4 " + job(4000, 2) + " --metrics m.jsonl --summary s.json");
  ASSERT_EQ(r.status, 0) << r.err;
  // Every epoch's CRC check passed (a mismatch stops the job); the loss
  // falls and the model learns.
  const auto epochs = records(dir_ / "m.jsonl", "epoch");
  ASSERT_EQ(epochs.size(), 2u);
  EXPECT_LT(epochs[1]["train_loss"].get<double>(), epochs[0]["train_loss"].get<double>());
  EXPECT_GT(epochs[1]["test_acc"].get<double>(), 0.65);
  EXPECT_EQ(epochs[1]["compute_s"].size(), 4u);
  EXPECT_FALSE(records(dir_ / "m.jsonl", "step").empty());
  const auto s = nlohmann::json::parse(read_text(dir_ / "s.json"));
  EXPECT_EQ(s["world"], 4);
  EXPECT_EQ(s["layout"], "1 node x 4 processes");
  EXPECT_NE(r.out.find("| 1 node x 4 processes | ferry |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[0] epoch 2/2: train loss"), std::string::npos) << r.out;
  // ferry plot draws the curves.
  const auto p = shell(cli() + " plot m.jsonl -o curves.svg");
  ASSERT_EQ(p.status, 0) << p.err;
  const auto svg = read_text(dir_ / "curves.svg");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  for (const char* text : {"<svg", "</svg>", ">epoch<", "accuracy (%)", "cross-entropy loss", "test"}) {
    EXPECT_NE(svg.find(text), std::string::npos) << text;
  }
  for (const char* record : {R"({"kind": "epoch"})", R"({"kind": "step", "epoch": 1, "step": 1, "steps": 0, "global_step": 1, "loss": 1})",
                             R"({"kind": "epoch", "epoch": 1e300, "train_loss": 1, "train_acc": 1, "test_acc": 1})", "[1, 2]"}) {
    std::ofstream(dir_ / "bad.jsonl") << "\n" << record << "\n";
    const auto bad = shell(cli() + " plot bad.jsonl -o x.svg");
    EXPECT_EQ(bad.status, 1) << record;
    EXPECT_EQ(bad.err, "ferry: bad.jsonl:2: not a ferry-train metrics record (JSON lines of kind step or epoch)\n")
        << record;
  }
}

// 4 epochs straight against 2 epochs, a kill, a resume and 2 more: the
// same bits (parameters, buffers, Adam state, error-feedback residuals).
// The second job shards SGD's momentum and the gradients (ZeRO stage 2):
// the rank killed holds half of the optimizer state, which its set's part
// brings back.
TEST_F(Trainer, KilledJobResumesToTheSameBits) {
  // 2 ranks x 1500 samples / 32 = 47 steps per epoch; the kill lands in
  // epoch 3, after the end-of-epoch-2 checkpoint.
  for (const std::string extra : {"", " --compress bf16 --overlap --bucket-kb 16 --checkpoint-steps 10 --accumulate 2 "
                                      "--optimizer sgd --momentum 0.9 --zero 2"}) {
    SCOPED_TRACE(extra);
    const auto base = run() + " -n 2 " + hooked_job(3000, 4) + extra;
    ASSERT_EQ(shell(base + " --checkpoint straight.ferry").status, 0);
    const auto killed = shell("FERRY_TRAIN_DIE=1:110 " + base + " --checkpoint resumed.ferry");
    EXPECT_NE(killed.status, 0);
    EXPECT_NE(killed.err.find("ferry-run: rank 1 was killed by SIGKILL"), std::string::npos) << killed.err;
    EXPECT_NE(killed.err.find("--resume resumed.ferry"), std::string::npos) << killed.err;
    const auto resumed = shell(base + " --checkpoint resumed.ferry --resume resumed.ferry");
    ASSERT_EQ(resumed.status, 0) << resumed.err;
    EXPECT_NE(resumed.out.find("resumed from resumed.ferry at epoch"), std::string::npos) << resumed.out;
    const auto d = shell(cli() + " diff straight.ferry resumed.ferry");
    EXPECT_EQ(d.status, 0) << d.out << d.err;
  }
}

// Every rank writes a shard; the set holds what rank 0 alone would have
// written, and resumes on another number of ranks to the same bits as a
// run resumed from rank 0's single file.
TEST_F(Trainer, ShardedCheckpointResumesOnAnotherWorld) {
  struct worlds {
    int saved, resumed;
    std::string extra;
  };
  // Fewer ranks (compressed and overlapped), and more.
  for (const auto& w : {worlds{4, 3, " --compress bf16 --overlap --bucket-kb 16"}, worlds{1, 4, ""}}) {
    SCOPED_TRACE(std::to_string(w.saved) + " -> " + std::to_string(w.resumed) + w.extra);
    const auto saving = run() + " -n " + std::to_string(w.saved) + " " + job(1200, 1) + w.extra;
    ASSERT_EQ(shell(saving + " --checkpoint-sharded --checkpoint set.ferry").status, 0);
    ASSERT_EQ(shell(saving + " --checkpoint one.ferry").status, 0);
    {
      auto set = checkpoint::open(dir_ / "set.ferry");
      auto one = checkpoint::open(dir_ / "one.ferry");
      ASSERT_TRUE(set && one);
      EXPECT_EQ(set->format(), checkpoint::file_format::ferry_set);
      EXPECT_EQ(set->shards().size(), static_cast<std::size_t>(w.saved));
      EXPECT_TRUE(set->verify());
      ASSERT_EQ(set->tensors().size(), one->tensors().size());
      for (const auto& t : one->tensors()) {
        auto a = one->get(t);
        auto b = set->get(t.name);
        ASSERT_TRUE(a && b) << t.name;
        EXPECT_EQ(a->contiguous_copy(), b->contiguous_copy()) << t.name;
      }
      EXPECT_EQ(set->metadata().at("trainer.epoch"), one->metadata().at("trainer.epoch"));
    }
    const auto resuming = run() + " -n " + std::to_string(w.resumed) + " " + job(1200, 2) + w.extra;
    const auto from_set = shell(resuming + " --resume set.ferry --checkpoint a.ferry");
    ASSERT_EQ(from_set.status, 0) << from_set.err;
    EXPECT_NE(from_set.out.find("resumed from set.ferry at epoch 2"), std::string::npos) << from_set.out;
    ASSERT_EQ(shell(resuming + " --resume one.ferry --checkpoint b.ferry").status, 0);
    const auto d = shell(cli() + " diff a.ferry b.ferry");
    EXPECT_EQ(d.status, 0) << d.out << d.err;
  }
}

// A replica that drifts (one flipped bit) stops the job at the epoch's
// CRC check, naming the rank.
TEST_F(Trainer, DriftingReplicaStopsTheJobNamingIt) {
  const auto r = shell("FERRY_TRAIN_FLIP=2:5 " + run() + " -n 3 " + hooked_job(1500, 2));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("replicas differ after epoch 1: rank(s) 2 disagree with rank 0"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("epoch 2/2:"), std::string::npos) << r.out;
  // The shipped ferry-train reads no test hook from its environment.
  const auto shipped = shell("FERRY_TRAIN_FLIP=0:1 FERRY_TRAIN_DIE=0:2 " + job(500, 1));
  EXPECT_EQ(shipped.status, 0) << shipped.err;
}

TEST_F(Trainer, OverlappedBucketsGiveTheFusedBits) {
  // Two ranks: a + b is the same sum whichever rank owns a segment.
  ASSERT_EQ(shell(run() + " -n 2 " + job(2000, 1) + " --checkpoint fused.ferry").status, 0);
  ASSERT_EQ(shell(run() + " -n 2 " + job(2000, 1) + " --overlap --bucket-kb 4 --checkpoint overlap.ferry").status, 0);
  // The tensors agree; the metadata (the run's configuration) does not.
  const auto d = shell(cli() + " diff fused.ferry overlap.ferry");
  EXPECT_NE(d.out.find("29 of 29 tensors bit-identical"), std::string::npos) << d.out;
}

// Without a launcher that stops them, the surviving ranks notice the dead
// one by themselves, name it, and say how to resume, within 5 s.
TEST_F(Trainer, SurvivorsReportADeadRankWithinFiveSeconds) {
  const int world = 3;
  std::vector<pid_t> pids(world);
  for (int r = 0; r < world; ++r) {
    const auto err = (dir_ / ("err" + std::to_string(r))).string();
    const std::string cmd = "cd '" + dir_.string() + "' && RANK=" + std::to_string(r) + " WORLD_SIZE=3 MASTER_PORT=" +
                            std::to_string(29800 + ::getpid() % 100) +
                            " FERRY_SECRET=s FERRY_TRAIN_DIE=1:40 exec " + hooked_job(20000, 1) +
                            " --checkpoint-steps 10 >/dev/null 2>'" + err + "'";
    const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
    ASSERT_EQ(posix_spawn(&pids[static_cast<std::size_t>(r)], "/bin/sh", nullptr, nullptr,
                          const_cast<char* const*>(argv), environ),
              0);
  }
  std::vector<std::chrono::steady_clock::time_point> ended(world);
  std::vector<int> status(world, -1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (int left = world; left > 0 && std::chrono::steady_clock::now() < deadline;) {
    for (int r = 0; r < world; ++r) {
      if (status[static_cast<std::size_t>(r)] != -1) continue;
      int st = 0;
      if (waitpid(pids[static_cast<std::size_t>(r)], &st, WNOHANG) == pids[static_cast<std::size_t>(r)]) {
        status[static_cast<std::size_t>(r)] = st;
        ended[static_cast<std::size_t>(r)] = std::chrono::steady_clock::now();
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int r = 0; r < world; ++r) {
    if (status[static_cast<std::size_t>(r)] == -1) kill(pids[static_cast<std::size_t>(r)], SIGKILL);
  }
  ASSERT_TRUE(WIFSIGNALED(status[1]) && WTERMSIG(status[1]) == SIGKILL);
  for (const int r : {0, 2}) {
    ASSERT_TRUE(WIFEXITED(status[static_cast<std::size_t>(r)])) << r;
    EXPECT_EQ(WEXITSTATUS(status[static_cast<std::size_t>(r)]), 1);
    EXPECT_LT(ended[static_cast<std::size_t>(r)] - ended[1], std::chrono::seconds(5)) << r;
    const auto err = read_text(dir_ / ("err" + std::to_string(r)));
    EXPECT_EQ(lines(err), 1u) << err;
    EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
    EXPECT_NE(err.find("--resume"), std::string::npos) << err;
  }
}

TEST_F(Trainer, GlooBackendRunsTheSameJob) {
  const auto r = shell(run() + " -n 2 " + job(2000, 1) + " --backend gloo --metrics g.jsonl");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("| 1 node x 2 processes | gloo |"), std::string::npos) << r.out;
  EXPECT_EQ(records(dir_ / "g.jsonl", "epoch").size(), 1u);
}

}  // namespace
}  // namespace ferry::trainer
