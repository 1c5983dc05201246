// Atomicity: a child process writing checkpoints is SIGKILLed at many
// points, during the tensor writes and during commit. Afterwards the target
// is always one complete file (the old one or a new one, byte for byte),
// and the next commit removes the temporaries the killed writers left.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "ferry/base/file.h"
#include "helpers.h"

namespace ferry::checkpoint::testing {
namespace {

class Atomic : public scratch_dir {};

// Version v of a checkpoint big enough that writing it takes a while:
// 64 tensors of 64 KiB whose bytes depend on v.
void write_version(const fs::path& p, int v) {
  std::vector<std::byte> data(64 * 1024);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 31 + static_cast<std::size_t>(v));
  const std::uint64_t shape[] = {16 * 1024};
  auto w = writer::create(p);  // sync on: fsync and rename, as in production
  if (!w) std::abort();
  for (int i = 0; i < 64; ++i) {
    const std::string name = "layer." + std::to_string(i);
    if (!w->add({name, codec::dtype::f32, shape, {}, 0, data})) std::abort();
  }
  if (!w->set_metadata("version", std::to_string(v))) std::abort();
  if (!w->commit()) std::abort();
}

TEST_F(Atomic, KilledWritersLeaveTheOldOrTheNewFile) {
  const auto target = dir_ / "model.ferry";
  // The complete file of each version, for byte comparison.
  std::vector<std::vector<std::byte>> versions;
  for (int v = 0; v < 2; ++v) {
    write_version(dir_ / ("v" + std::to_string(v) + ".ferry"), v);
    versions.push_back(slurp(dir_ / ("v" + std::to_string(v) + ".ferry")));
  }
  write_sample(target, wire::host_order);
  versions.push_back(slurp(target));

  int killed_mid_write = 0;
  for (int round = 0; round < 40; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Alternate between the versions forever, committing each.
      for (int i = 0;; ++i) write_version(target, i % 2);
    }
    // Kill after 0..~40 ms: inside add(), inside commit(), between commits.
    std::this_thread::sleep_for(std::chrono::microseconds(round * round * 25));
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status));

    const auto now = slurp(target);
    const bool whole = std::find(versions.begin(), versions.end(), now) != versions.end();
    ASSERT_TRUE(whole) << "round " << round << ": target is " << now.size() << " bytes of no version";
    auto r = open(target);
    ASSERT_TRUE(r) << r.error();
    ASSERT_TRUE(r->verify());
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename().string().find(".ferry-tmp.") != std::string::npos) ++killed_mid_write;
    }
  }
  // Kills landed mid-write (temporaries left): the next commit cleans them.
  write_version(target, 1);
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find(".ferry-tmp."), std::string::npos) << e.path();
  }
  EXPECT_GT(killed_mid_write, 0);
}

// Killed exactly between fsync and rename: the old file stays. Killed
// exactly after the rename, before the folder's fsync: the new file is there.
TEST_F(Atomic, KilledInsideCommit) {
  const auto target = dir_ / "model.ferry";
  write_version(dir_ / "new.ferry", 1);
  const auto new_bytes = slurp(dir_ / "new.ferry");
  for (const auto stage : {base::detail::commit_stage::synced, base::detail::commit_stage::renamed}) {
    write_version(target, 0);
    const auto old_bytes = slurp(target);
    static base::detail::commit_stage kill_at;
    kill_at = stage;
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      base::detail::commit_hook = [](base::detail::commit_stage s) {
        if (s == kill_at) ::raise(SIGKILL);
      };
      write_version(target, 1);
      ::_exit(0);  // not reached
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    const auto now = slurp(target);
    if (stage == base::detail::commit_stage::synced) {
      EXPECT_TRUE(now == old_bytes) << "killed before the rename: the old file";
      std::size_t temporaries = 0;
      for (const auto& e : fs::directory_iterator(dir_)) {
        temporaries += e.path().filename().string().find(".ferry-tmp.") != std::string::npos;
      }
      EXPECT_EQ(temporaries, 1u);  // the complete new file, unpublished
    } else {
      EXPECT_TRUE(now == new_bytes) << "killed after the rename: the new file";
    }
    ASSERT_TRUE(open(target));
  }
}

}  // namespace
}  // namespace ferry::checkpoint::testing
