// ferry-train's checkpoints under stress, as a user runs the job: saves in
// the background (--checkpoint-async) write the bits a synchronous save
// writes; a full disk stops the job at the next step with one line and
// leaves the previous checkpoint; SIGKILLs of one rank or the whole job at
// random moments during sharded and asynchronous saves never leave a
// checkpoint that fails to load, nor an older one than the newest
// published.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "../checkpoint/helpers.h"
#include "job_helpers.h"
#include "ferry/checkpoint/reader.h"

extern char** environ;

namespace ferry::trainer {
namespace {

namespace fs = std::filesystem;
using checkpoint::testing::read_text;
using testing::records;
using testing::run_result;

// Every tensor of `a` is in `b` with the same bits, and no other (the
// metadata differs: the run's options).
void expect_same_tensors(const fs::path& a, const fs::path& b) {
  auto x = checkpoint::open(a);
  auto y = checkpoint::open(b);
  ASSERT_TRUE(x && y);
  ASSERT_EQ(x->tensors().size(), y->tensors().size());
  for (const auto& t : x->tensors()) {
    auto u = x->get(t);
    auto v = y->get(t.name);
    ASSERT_TRUE(u && v) << t.name;
    EXPECT_EQ(u->contiguous_copy(), v->contiguous_copy()) << t.name;
  }
}

class TrainerCheckpoint : public testing::job_dir {
 protected:
  static std::string run() { return std::string("'") + FERRY_RUN + "'"; }
  static std::string job(int limit, int epochs, const std::string& binary = FERRY_TRAIN) {
    return "'" + binary + "' --limit " + std::to_string(limit) + " --test-limit 500 --threads 1 --progress plain --epochs " +
           std::to_string(epochs);
  }
};

// The snapshot is taken while training goes on: every save must hold
// what a synchronous save of the same moment writes, also with saves that
// overlap (one every 5 steps), residuals and a resume from it. The tests'
// build keeps a copy of each published save (FERRY_TRAIN_KEEP_SAVES).
TEST_F(TrainerCheckpoint, AsyncSavesWriteWhatSyncSavesWrite) {
  for (const std::string kind : {"", " --checkpoint-sharded"}) {
    SCOPED_TRACE(kind.empty() ? "one file" : "sharded");
    const auto base = "FERRY_TRAIN_KEEP_SAVES=1 " + run() + " -n 2 " + job(1600, 2, FERRY_TRAIN_HOOKED) +
                      " --compress bf16 --checkpoint-steps 5" + kind;
    ASSERT_EQ(shell(base + " --checkpoint sync.ferry").status, 0);
    const auto r = shell(base + " --checkpoint-async --checkpoint async.ferry --metrics m.jsonl");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("asynchronous checkpoints: "), std::string::npos) << r.out;
    // Every save reported once published, in order, the last at the end.
    const auto saves = records(dir_ / "m.jsonl", "checkpoint");
    ASSERT_EQ(saves.size(), 10u);  // 2 epochs x (4 within + 1 at the end)
    for (std::size_t i = 0; i < saves.size(); ++i) {
      EXPECT_TRUE(saves[i]["async"].get<bool>());
      EXPECT_GT(saves[i]["staging_bytes"].get<std::int64_t>(), 0);
      if (i > 0) {
        EXPECT_GT(saves[i]["global_step"].get<std::int64_t>(), saves[i - 1]["global_step"].get<std::int64_t>());
      }
      const auto step = std::to_string(saves[i]["global_step"].get<std::int64_t>());
      SCOPED_TRACE("step " + step);
      expect_same_tensors(dir_ / ("sync.step" + step + ".ferry"), dir_ / ("async.step" + step + ".ferry"));
    }
    EXPECT_EQ(saves.back()["where"], "epoch 2");
    // Resumed, the async checkpoint goes on as the sync one does.
    const auto more = run() + " -n 2 " + job(1600, 3) + " --compress bf16" + kind;
    ASSERT_EQ(shell(more + " --resume async.ferry --checkpoint a.ferry").status, 0);
    ASSERT_EQ(shell(more + " --resume sync.ferry --checkpoint b.ferry").status, 0);
    expect_same_tensors(dir_ / "a.ferry", dir_ / "b.ferry");
    for (const auto& e : fs::directory_iterator(dir_)) fs::remove_all(e.path());
  }
}

// Incremental sets with two of three hidden layers frozen: a save after
// the first writes well under half the bytes, the checkpoint holds what a
// whole save holds, verifies over its chain and resumes to the same bits.
TEST_F(TrainerCheckpoint, IncrementalSavesWriteWhatChanged) {
  const auto base = run() + " -n 2 " + job(1024, 3) + " --hidden 256,256,64 --freeze 1,2";
  ASSERT_EQ(shell(base + " --checkpoint-sharded --checkpoint whole.ferry").status, 0);
  for (const std::string mode : {"", " --checkpoint-async"}) {
    SCOPED_TRACE(mode);
    const auto r = shell(base + mode + " --checkpoint-incremental --checkpoint-full-every 4 --checkpoint inc.ferry"
                                       " --metrics m.jsonl");
    ASSERT_EQ(r.status, 0) << r.err;
    expect_same_tensors(dir_ / "whole.ferry", dir_ / "inc.ferry");
    auto ck = checkpoint::open(dir_ / "inc.ferry");
    ASSERT_TRUE(ck);
    EXPECT_TRUE(ck->verify());
    EXPECT_EQ(ck->shards().size(), 4u);  // its own 2 and the first save's 2
    const auto saves = records(dir_ / "m.jsonl", "checkpoint");
    ASSERT_EQ(saves.size(), 3u);
    for (std::size_t i = 1; i < saves.size(); ++i) {
      EXPECT_LT(saves[i]["bytes"].get<double>(), 0.45 * saves[0]["bytes"].get<double>()) << i;
    }
  }
  // Resumed: the same bits as from the whole checkpoint.
  const auto more = run() + " -n 2 " + job(1024, 4) + " --hidden 256,256,64 --freeze 1,2";
  ASSERT_EQ(shell(more + " --resume inc.ferry --checkpoint a.ferry").status, 0);
  ASSERT_EQ(shell(more + " --resume whole.ferry --checkpoint b.ferry").status, 0);
  expect_same_tensors(dir_ / "a.ferry", dir_ / "b.ferry");
}

// A background save that cannot be written (a 600 KiB tmpfs holds one
// checkpoint of the default model, not two) stops every rank at the next
// step with one line naming the file; the checkpoint before it loads.
TEST_F(TrainerCheckpoint, FullDiskStopsTheJobAndKeepsThePreviousCheckpoint) {
  const auto mnt = dir_ / "small";
  const checkpoint::testing::small_tmpfs tmpfs(mnt, "600k");
  if (!tmpfs.why().empty()) GTEST_SKIP() << tmpfs.why();
  for (const std::string mode : {" --checkpoint-async", " --checkpoint-async --checkpoint-sharded", ""}) {
    SCOPED_TRACE(mode);
    for (const auto& e : fs::directory_iterator(mnt)) fs::remove(e.path());
    const auto r = shell(run() + " -n 2 " + job(1600, 3) + mode + " --checkpoint small/ck.ferry");
    EXPECT_EQ(r.status, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("small/ck"), std::string::npos) << r.err;
    // One line per rank (and the launcher's), none of them repeated.
    std::istringstream lines(r.err);
    for (std::string line; std::getline(lines, line);) {
      EXPECT_LT(line.size(), 400u) << line;
    }
    auto back = checkpoint::open(mnt / "ck.ferry");
    ASSERT_TRUE(back) << back.error();
    EXPECT_TRUE(back->verify());
    EXPECT_EQ(back->metadata().at("trainer.epoch"), "1");
  }
}

// ferry-run's children (the ranks), from /proc.
std::vector<pid_t> children(pid_t parent) {
  std::vector<pid_t> out;
  std::ifstream in("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) + "/children");
  for (pid_t p = 0; in >> p;) out.push_back(p);
  return out;
}

// The save temporaries (".ck….ferry-tmp.…") in the folder.
std::set<std::string> temporaries(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    auto name = e.path().filename().string();
    if (name.starts_with(".ck") && name.find(".ferry-tmp.") != std::string::npos) out.insert(std::move(name));
  }
  return out;
}

// A save is writing: a temporary not among `before` (those a killed job
// left) is in the folder.
bool saving(const fs::path& dir, const std::set<std::string>& before) {
  for (const auto& name : temporaries(dir)) {
    if (!before.contains(name)) return true;
  }
  return false;
}

// 12 SIGKILLs (three per mode; 24 took 60 s of make test, 50 took 200 s), at random
// moments of jobs that save every other step a model whose saves take
// most of their time (a sharded set, in the background or not, one file
// in the background, an incremental set in the background), of the whole
// job or of one rank. After each, the checkpoint loads and verifies (the
// reader takes no torn set), and is no older than the newest one the job
// reported published; the next job resumes from it and saves over what
// the killed one left.
TEST_F(TrainerCheckpoint, KillsDuringSavesLeaveTheNewestPublishedCheckpoint) {
  const std::string modes[] = {" --checkpoint-sharded", " --checkpoint-sharded --checkpoint-async",
                               " --checkpoint-async",
                               " --checkpoint-incremental --checkpoint-full-every 3 --checkpoint-async --freeze 1"};
  std::mt19937 rng(20261125);
  std::int64_t newest = -1;
  int loaded = 0, mid_save = 0;
  constexpr int rounds = 12;
  for (int round = 0; round < rounds; ++round) {
    const auto& mode = modes[static_cast<std::size_t>(round) % std::size(modes)];
    SCOPED_TRACE("round " + std::to_string(round) + mode);
    const bool whole = rng() % 2 == 0;
    // A new metrics file per round: what this job reported published.
    std::string line = run() + " -n 2 " + job(1024, 1000) + " --hidden 512,512 --checkpoint-steps 2" + mode +
                       " --checkpoint ck.ferry --metrics m.jsonl";
    const bool resuming = fs::exists(dir_ / "ck.ferry");
    if (resuming) line += " --resume ck.ferry";
    const auto left = temporaries(dir_);
    const std::string cmd = "cd '" + dir_.string() + "' && exec " + line + " >/dev/null 2>&1";
    const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
    // Past start-up (data, rendezvous, the first save: a fresh job is waited
    // for until it publishes one, which takes 1-3 s), then anywhere; or,
    // every other round once a checkpoint exists, when a save is writing (a
    // new temporary is on disk), so that enough kills land mid-save on a fast
    // machine too.
    if (resuming) {
      std::this_thread::sleep_for(std::chrono::milliseconds(900));
    } else {
      for (int i = 0; i < 3000 && !fs::exists(dir_ / "ck.ferry"); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    if (rng() % 2 == 0 || !resuming) {
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 1500));
    } else {
      for (int i = 0; i < 1500 && !saving(dir_, left); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 20));
    }
    const auto ranks = children(pid);
    if (whole || ranks.empty()) {
      kill(pid, SIGKILL);  // the ranks die with the launcher (PR_SET_PDEATHSIG)
    } else {
      kill(ranks[rng() % ranks.size()], SIGKILL);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    for (int i = 0; i < 50 && !children(pid).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // orphans' SIGKILL delivered
    for (const auto& rec : records(dir_ / "m.jsonl", "checkpoint")) {
      newest = std::max(newest, rec["global_step"].get<std::int64_t>());
    }
    fs::remove(dir_ / "m.jsonl");
    if (!fs::exists(dir_ / "ck.ferry")) {
      ASSERT_EQ(newest, -1) << "a published checkpoint is gone";
      continue;
    }
    auto ck = checkpoint::open(dir_ / "ck.ferry");
    ASSERT_TRUE(ck) << ck.error();
    ASSERT_TRUE(ck->verify()) << ck->verify().error();
    const std::int64_t step = std::stoll(ck->metadata().at("trainer.global_step"));
    EXPECT_GE(step, newest);
    newest = std::max(newest, step);
    ++loaded;
    // Files of a save in flight: shards or temporaries the index does not
    // name.
    std::size_t files = 0;
    for (const auto& e : fs::directory_iterator(dir_)) files += e.path().filename().string().starts_with("ck");
    mid_save += files > 1 + ck->shards().size() || saving(dir_, left);
  }
  EXPECT_GT(loaded, rounds * 4 / 5);
  EXPECT_GE(mid_save, rounds / 6) << "few kills landed during a save";
  std::printf("%d of %d kills left a save in flight\n", mid_save, rounds);
  // A job that ends normally (at the end of the checkpoint's epoch) leaves
  // the index and its shards, nothing else.
  ASSERT_TRUE(fs::exists(dir_ / "ck.ferry"));
  const auto epoch = std::stoll(checkpoint::open(dir_ / "ck.ferry")->metadata().at("trainer.epoch"));
  const auto last = shell(run() + " -n 2 " + job(1024, static_cast<int>(epoch) + 1) +
                          " --hidden 512,512 --checkpoint-sharded --checkpoint-async --checkpoint ck.ferry"
                          " --resume ck.ferry");
  ASSERT_EQ(last.status, 0) << last.err;
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.path().filename().string().starts_with("ck");
  EXPECT_EQ(files, 3u);
}

}  // namespace
}  // namespace ferry::trainer
