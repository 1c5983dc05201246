// Checkpoint sets under crashes and full disks: a process writing sets is
// killed at 50 moments (mid-shard, between shards, inside the index's
// commit, during the cleanup); each time the newest committed set loads and
// verifies, and no torn set ever loads. A save into a full file system
// fails with one line and leaves the previous set whole.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "ferry/checkpoint/set.h"
#include "helpers.h"

namespace ferry::checkpoint::testing {
namespace {

// Version k of a small model: values that say k, in 6 tensors over 4 shards.
struct version {
  std::vector<std::vector<float>> data;
  std::vector<std::vector<std::uint64_t>> shapes;
  std::vector<std::string> names;
  std::vector<tensor_ref> refs;
  explicit version(std::int64_t k, std::size_t scale = 1) {
    for (std::size_t i = 0; i < 6; ++i) {
      const std::uint64_t rows = (i + 1) * 16 * scale;
      shapes.push_back({rows, 1024});
      data.emplace_back(rows * 1024, static_cast<float>(k) + static_cast<float>(i) / 8);
      names.push_back("layer" + std::to_string(i));
    }
    for (std::size_t i = 0; i < 6; ++i) {
      refs.push_back({names[i], codec::dtype::f32, shapes[i], {}, 0, std::as_bytes(std::span(data[i]))});
    }
  }
};

void save_version(const fs::path& index, std::int64_t k, std::size_t scale = 1) {
  version v(k, scale);
  write_options opt;  // fsync'ed, as a job's saves are
  auto r = save_set(index, v.refs, 4, {{"k", std::to_string(k)}}, opt);
  if (!r) {
    std::fprintf(stderr, "%s\n", r.error().what().c_str());
    std::abort();
  }
}

// The set at `index` is whole version k: every tensor's values say k.
void expect_version(const reader& r, std::int64_t k) {
  version v(k);
  ASSERT_EQ(r.tensors().size(), v.refs.size());
  for (const auto& ref : v.refs) {
    auto t = r.get(ref.name);
    ASSERT_TRUE(t) << t.error();
    const auto b = t->bytes();
    ASSERT_EQ(b.size(), ref.storage.size());
    ASSERT_EQ(std::memcmp(b.data(), ref.storage.data(), b.size()), 0) << ref.name << " is not version " << k;
  }
}

class SetCrash : public scratch_dir {};

TEST_F(SetCrash, KilledSavesLeaveTheNewestCommittedSet) {
  const auto index = dir_ / "model.ferry";
  save_version(index, 0);
  std::int64_t committed = 0;
  std::mt19937 rng(20261124);
  int uncommitted_seen = 0;
  constexpr int rounds = 50;
  for (int round = 0; round < rounds; ++round) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(fds[0]);
      for (std::int64_t k = committed + 1;; ++k) {
        save_version(index, k);
        if (::write(fds[1], &k, sizeof k) != sizeof k) ::_exit(3);  // the parent hears it only once it is committed
      }
    }
    ::close(fds[1]);
    // The child's own pace: the time between two of its reports is one
    // save as it runs now (however slow the machine, the disk or the other
    // tests make it). The kill then lands at a moment of the next save
    // that sweeps the whole save over the rounds (stratified: one random
    // moment in each fiftieth), so every phase of a save is hit.
    const auto report = [&] {
      std::int64_t k = 0;
      EXPECT_EQ(::read(fds[0], &k, sizeof k), static_cast<ssize_t>(sizeof k));
      committed = k;
      return std::chrono::steady_clock::now();
    };
    const auto first = report();
    const auto save = report() - first;
    const double at = (round + std::uniform_real_distribution<double>(0, 1)(rng)) / rounds;
    std::this_thread::sleep_for(std::chrono::duration_cast<std::chrono::microseconds>(save * at));
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "round " << round;
    for (std::int64_t k; ::read(fds[0], &k, sizeof k) == sizeof k;) committed = k;
    ::close(fds[0]);

    auto r = open(index);
    ASSERT_TRUE(r) << "round " << round << ": " << r.error();
    ASSERT_TRUE(r->verify()) << "round " << round;
    const auto k = std::stoll(r->metadata().at("k"));
    // The newest committed save, or the one whose index landed just before
    // the kill (committed, not yet reported).
    ASSERT_TRUE(k == committed || k == committed + 1) << "round " << round << ": set " << k << ", committed " << committed;
    expect_version(*r, k);
    committed = k;
    std::size_t shard_files = 0;
    for (const auto& e : fs::directory_iterator(dir_)) shard_files += e.path().filename().string().find("-of-") != std::string::npos;
    uncommitted_seen += shard_files > r->shards().size();
  }
  EXPECT_GT(uncommitted_seen, 0) << "no kill landed between a save's shards and its index";
  // The next save removes what the killed ones left.
  save_version(index, committed + 1);
  std::size_t left = 0;
  for (const auto& e : fs::directory_iterator(dir_)) left += e.path().filename().string() != "model.ferry";
  EXPECT_EQ(left, 4u);
}

TEST_F(SetCrash, FullDiskFailsWithOneLineAndKeepsThePreviousSet) {
  const auto mnt = dir_ / "small";
  // 2 MiB: one set of 6 x ~0.33 MiB fits, a second beside it does not.
  const small_tmpfs tmpfs(mnt, "2m");
  if (!tmpfs.why().empty()) GTEST_SKIP() << tmpfs.why();
  const auto index = mnt / "model.ferry";
  save_version(index, 1);
  version big(2);
  write_options opt;
  const auto r = save_set(index, big.refs, 4, {{"k", "2"}}, opt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::io_error);
  EXPECT_EQ(r.error().sys_errno(), ENOSPC);
  const std::string what = r.error().what();
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  EXPECT_NE(what.find(mnt.string()), std::string::npos) << what;
  EXPECT_NE(what.find("No space left on device"), std::string::npos) << what;
  auto back = open(index);
  ASSERT_TRUE(back) << back.error();
  ASSERT_TRUE(back->verify());
  EXPECT_EQ(back->metadata().at("k"), "1");
  expect_version(*back, 1);
}

}  // namespace
}  // namespace ferry::checkpoint::testing
