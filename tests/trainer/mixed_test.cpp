// One training ring of an s390x rank (big-endian, qemu-user), an x86-64 rank
// and an aarch64 rank (qemu-user): the job finishes with identical replicas
// (every epoch's CRC32C check passed on all three), the loss falls, and
// the checkpoint the big-endian rank wrote resumes on x86-64, whose
// checkpoint in turn resumes on s390x.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../checkpoint/helpers.h"

namespace ferry::trainer {
namespace {

namespace fs = std::filesystem;
using checkpoint::testing::read_text;
using checkpoint::testing::scratch_dir;

const std::string native = FERRY_NATIVE_TRAIN;
// The foreign ranks' commands: qemu-user and the cross trees' ferry-train
// (tests/CMakeLists.txt: LibTorch 1.13's cross trees, or 2.6's in the
// Debian 13 roots).
const std::string aarch64 = FERRY_AARCH64_TRAIN;
const std::string s390x = FERRY_S390X_TRAIN;
const std::string cli = FERRY_CLI;

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

class MixedTraining : public scratch_dir {
 protected:
  // Runs the ranks (programs in rank order) at once; returns each status.
  std::vector<int> ring(const std::vector<std::string>& programs, const std::string& args) {
    std::string line = "cd '" + dir_.string() + "' && export MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                       std::to_string(free_port()) + " WORLD_SIZE=" + std::to_string(programs.size()) +
                       " FERRY_SECRET=mixed; ";
    for (std::size_t r = 0; r < programs.size(); ++r) {
      const auto n = std::to_string(r);
      line += "RANK=" + n + " timeout 900 " + programs[r] + " " + args + " >out" + n + " 2>err" + n + " & p" + n + "=$!; ";
    }
    for (std::size_t r = 0; r < programs.size(); ++r) {
      line += "wait $p" + std::to_string(r) + "; echo $? >>status; ";
    }
    std::system(("rm -f '" + (dir_ / "status").string() + "'").c_str());
    std::system(line.c_str());
    std::vector<int> status;
    std::ifstream in(dir_ / "status");
    for (int s; in >> s;) status.push_back(s);
    return status;
  }
  // The train loss of each epoch record in m.jsonl (rank 0's metrics).
  std::vector<double> epoch_losses() {
    std::vector<double> losses;
    std::ifstream in(dir_ / "m.jsonl");
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["kind"] == "epoch") losses.push_back(j["train_loss"].get<double>());
    }
    return losses;
  }
  std::string log(int rank) { return read_text(dir_ / ("out" + std::to_string(rank))) + read_text(dir_ / ("err" + std::to_string(rank))); }
};

TEST_F(MixedTraining, BigEndianAndLittleEndianRanksTrainOneModel) {
  // 3 ranks x 1600 samples / 32 = 50 steps per epoch, 100 steps in all.
  const std::string job = "--limit 4800 --test-limit 1000 --epochs 2 --threads 1 --log-every 10";
  const auto status = ring({s390x, native, aarch64}, job + " --checkpoint be.ferry --metrics m.jsonl");
  ASSERT_EQ(status, (std::vector<int>{0, 0, 0})) << log(0) << log(1) << log(2);
  // Rank 0 (s390x) reports; every epoch's replica check passed.
  const auto losses = epoch_losses();
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_LT(losses[1], losses[0]);
  EXPECT_NE(read_text(dir_ / "out0").find("| 1 node x 3 processes | ferry |"), std::string::npos) << log(0);

  // The big-endian rank's checkpoint, resumed on x86-64 for an epoch...
  std::system(("'" + cli + "' inspect '" + (dir_ / "be.ferry").string() + "' >'" + (dir_ / "inspect").string() + "'").c_str());
  EXPECT_NE(read_text(dir_ / "inspect").find("big"), std::string::npos) << read_text(dir_ / "inspect");
  const std::string more = "--limit 4800 --test-limit 1000 --threads 1";
  ASSERT_EQ(ring({native}, more + " --epochs 3 --resume be.ferry --checkpoint le.ferry"), std::vector<int>{0}) << log(0);
  EXPECT_NE(read_text(dir_ / "out0").find("resumed from be.ferry at epoch 3"), std::string::npos) << log(0);
  // ... and x86-64's, resumed on s390x.
  ASSERT_EQ(ring({s390x}, more + " --epochs 4 --resume le.ferry --checkpoint be2.ferry"), std::vector<int>{0}) << log(0);
  EXPECT_NE(read_text(dir_ / "out0").find("resumed from le.ferry at epoch 4"), std::string::npos) << log(0);
}

// The mixed ring saves a sharded checkpoint: shards in both byte orders,
// in the background, the second save (of two) incremental over the first
// (layer 1 frozen: its pieces are kept, confirmed on each rank against
// shards of its own byte order). x86-64 alone resumes it to the bits it
// reaches from the single file the s390x rank 0 writes of the same state;
// s390x resumes x86-64's set.
TEST_F(MixedTraining, ShardsInBothByteOrdersResumeAnywhere) {
  // 3 ranks x 640 samples / 32 = 20 steps, a save after 10; SGD with
  // Nesterov momentum, an update every 2 steps.
  const std::string optimizer = " --optimizer sgd --momentum 0.9 --nesterov --accumulate 2";
  const std::string job =
      "--limit 1920 --test-limit 500 --epochs 1 --threads 1 --freeze 1 --checkpoint-steps 10" + optimizer;
  auto status = ring({s390x, native, aarch64},
                     job + " --checkpoint-sharded --checkpoint-async --checkpoint-incremental --checkpoint set.ferry");
  ASSERT_EQ(status, (std::vector<int>{0, 0, 0})) << log(0) << log(1) << log(2);
  status = ring({s390x, native, aarch64}, job + " --checkpoint one.ferry");
  ASSERT_EQ(status, (std::vector<int>{0, 0, 0})) << log(0) << log(1) << log(2);
  std::system(("'" + cli + "' inspect --json '" + (dir_ / "set.ferry").string() + "' >'" + (dir_ / "inspect").string() + "'").c_str());
  const auto j = nlohmann::json::parse(read_text(dir_ / "inspect"));
  // This save's 3 shards, then the first save's that hold kept pieces.
  ASSERT_GT(j["shards"].size(), 3u);
  EXPECT_EQ(j["shards"][0]["byte_order"], "big");
  EXPECT_EQ(j["shards"][1]["byte_order"], "little");
  EXPECT_NE(j["shards"][3]["save_id"], j["shards"][0]["save_id"]);
  EXPECT_EQ(std::system(("'" + cli + "' verify '" + (dir_ / "set.ferry").string() + "' >/dev/null").c_str()), 0);

  const std::string small = "--limit 1920 --test-limit 500 --threads 1 --freeze 1" + optimizer;
  const std::string more = small + " --epochs 2";
  ASSERT_EQ(ring({native}, more + " --resume set.ferry --checkpoint-sharded --checkpoint a.ferry"), std::vector<int>{0})
      << log(0);
  EXPECT_NE(read_text(dir_ / "out0").find("resumed from set.ferry at epoch 2"), std::string::npos) << log(0);
  ASSERT_EQ(ring({native}, more + " --resume one.ferry --checkpoint-sharded --checkpoint b.ferry"), std::vector<int>{0})
      << log(0);
  const int diff = std::system(("'" + cli + "' diff '" + (dir_ / "a.ferry").string() + "' '" +
                                (dir_ / "b.ferry").string() + "' >'" + (dir_ / "diff").string() + "'").c_str());
  EXPECT_EQ(diff, 0) << read_text(dir_ / "diff");
  ASSERT_EQ(ring({s390x}, small + " --epochs 3 --resume a.ferry --checkpoint c.ferry"), std::vector<int>{0}) << log(0);
  EXPECT_NE(read_text(dir_ / "out0").find("resumed from a.ferry at epoch 3"), std::string::npos) << log(0);
}

// The course's studies keep the replicas identical across byte orders:
// RMSprop (centered, with momentum) over two accumulated batches per
// update, GELU, forward and backward in bfloat16. Each rank computes its
// own gradients (bf16 kernels differ by architecture); the averaged
// gradients and ferry's step agree bit for bit, which every epoch's CRC
// check confirms. Then ZeRO stage 2, where each rank steps its own shard
// on its own architecture and the ranks gather the pieces, gives the same
// bits as that run; the set it saves (optimizer pieces in both byte
// orders) resumes on one x86-64 rank without --zero. (aarch64 sits this
// one out: LibTorch's bf16 matrix product there is oneDNN's, which needs
// the BF16 instructions qemu's CPU lacks; such a rank stops at the start
// in one line.)
TEST_F(MixedTraining, StudiesOptionsKeepReplicasIdentical) {
  // 3 ranks x 640 samples / 32 = 20 batches, 10 updates per epoch.
  const std::string options = "--limit 1920 --test-limit 500 --threads 1 --optimizer rmsprop --lr 1e-3 "
                              "--momentum 0.9 --centered --accumulate 2 --activation gelu --precision bf16";
  auto status = ring({s390x, native, native}, options + " --epochs 2 --metrics m.jsonl --checkpoint plain.ferry");
  ASSERT_EQ(status, (std::vector<int>{0, 0, 0})) << log(0) << log(1) << log(2);
  const auto losses = epoch_losses();
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_LT(losses[1], losses[0]);
  status = ring({s390x, native, native}, options + " --epochs 2 --zero 2 --checkpoint z.ferry");
  ASSERT_EQ(status, (std::vector<int>{0, 0, 0})) << log(0) << log(1) << log(2);
  std::system(("'" + cli + "' diff '" + (dir_ / "plain.ferry").string() + "' '" + (dir_ / "z.ferry").string() + "' >'" +
               (dir_ / "diff").string() + "'").c_str());
  EXPECT_NE(read_text(dir_ / "diff").find("35 of 35 tensors bit-identical"), std::string::npos) << read_text(dir_ / "diff");
  ASSERT_EQ(ring({native}, options + " --epochs 3 --resume z.ferry --checkpoint one.ferry"), std::vector<int>{0}) << log(0);
  EXPECT_NE(read_text(dir_ / "out0").find("resumed from z.ferry at epoch 3"), std::string::npos) << log(0);
}

// Gloo sends host-order integers: the gloo backend refuses a ring of
// mixed byte orders with one clear line on every rank, before Gloo starts.
TEST_F(MixedTraining, GlooRefusesMixedByteOrders) {
  const auto status = ring({native, s390x}, "--limit 640 --epochs 1 --threads 1 --backend gloo");
  ASSERT_EQ(status, (std::vector<int>{1, 1})) << log(0) << log(1);
  for (const int r : {0, 1}) {
    const auto err = read_text(dir_ / ("err" + std::to_string(r)));
    EXPECT_NE(err.find("the gloo backend needs ranks of one byte order and word size: rank 0 is little-endian, 64-bit, "
                       "rank(s) 1 differ; use --backend ferry"),
              std::string::npos)
        << err;
  }
}

}  // namespace
}  // namespace ferry::trainer
