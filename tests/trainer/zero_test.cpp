// ferry-train --zero, run as a user runs it: each rank keeps the optimizer
// state (stage 1) and the averaged gradients (stage 2) of its shard only,
// and the parameters after every step are the bits of the same run
// without --zero (the checkpoints compare bit for bit, optimizer state
// included), over the ring and through shared memory, fused or overlapped,
// compressed, accumulating, with every optimizer and frozen layers, over
// both backends. Its checkpoints (sets
// whose optimizer tensors every rank writes a piece of) resume with
// another number of ranks, with or without --zero.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ferry/checkpoint/reader.h"
#include "job_helpers.h"

namespace ferry::trainer {
namespace {

using testing::records;

class Zero : public testing::job_dir {
 protected:
  // 960 samples: 3 ranks x 10 batches of 32 per epoch.
  static std::string job(int ranks, int epochs) {
    return std::string("'") + FERRY_RUN + "' -n " + std::to_string(ranks) + " '" + FERRY_TRAIN +
           "' --limit 960 --test-limit 300 --threads 1 --epochs " + std::to_string(epochs);
  }
  // Whether `ferry diff` finds every tensor of a and b bit-identical (the
  // metadata differs: trainer.config records --zero).
  bool same_tensors(const std::string& a, const std::string& b) {
    const auto d = shell(std::string("'") + FERRY_CLI + "' diff --json " + a + " " + b);
    const auto j = nlohmann::json::parse(d.out, nullptr, false);
    bool same = j.is_object() && !j["tensors"].empty();
    for (const auto& row : j.is_object() ? j["tensors"] : nlohmann::json::array()) same = same && row["status"] == "identical";
    EXPECT_TRUE(same) << a << " vs " << b << "\n" << d.out << d.err;
    return same;
  }
  void train(const std::string& line) {
    const auto r = shell(line);
    ASSERT_EQ(r.status, 0) << line << "\n" << r.out << r.err;
  }
  // Runs `line` without and with `zero` (options), saving <name>.ferry and
  // <name>_zero.ferry; whether their tensors are bit-identical.
  bool alike(const std::string& line, const std::string& zero, const std::string& name) {
    train(line + " --checkpoint " + name + ".ferry");
    train(line + " " + zero + " --checkpoint " + name + "_zero.ferry");
    return same_tensors(name + ".ferry", name + "_zero.ferry");
  }
};

TEST_F(Zero, StepsGiveTheBitsOfARunWithout) {
  // Ranks of one host meet in shared memory, where an uncompressed
  // allreduce does not run the flat ring and ZeRO takes the allreduce's
  // result; FERRY_SHARED_MEMORY=off puts them on the ring, whose first half
  // ZeRO runs alone. Both are studied.
  struct study {
    std::string env, options;
    std::vector<std::string> stages;
  };
  const std::string ring = "FERRY_SHARED_MEMORY=off ";
  bool first = true;  // its metrics are kept: m<stage>.jsonl
  for (const auto& s : {study{ring, "", {"1", "2"}}, study{"", "", {"2"}},
                        study{"", "--optimizer adamw --overlap --bucket-kb 8 --compress bf16", {"2"}},
                        study{ring, "--optimizer sgd --momentum 0.9 --accumulate 2 --overlap --bucket-kb 32", {"1"}},
                        study{"", "--optimizer rmsprop --centered --momentum 0.5 --hidden 32,16 --freeze 1", {"2"}}}) {
    SCOPED_TRACE(s.env + s.options);
    train(s.env + job(3, 1) + " " + s.options + " --checkpoint plain.ferry" + (first ? " --metrics m0.jsonl" : ""));
    for (const auto& stage : s.stages) {
      train(s.env + job(3, 1) + " " + s.options + " --zero " + stage + " --checkpoint z.ferry" +
            (first ? " --metrics m" + stage + ".jsonl" : ""));
      EXPECT_TRUE(same_tensors("plain.ferry", "z.ferry")) << "--zero " << stage;
    }
    first = false;
  }
  // Memory (the first study, Adam): its state, twice the 25514
  // parameters, is split over the ranks; stage 2 keeps a third of the
  // gradients' buffer and releases .grad.
  const auto m0 = records(dir_ / "m0.jsonl", "epoch").at(0), m1 = records(dir_ / "m1.jsonl", "epoch").at(0),
             m2 = records(dir_ / "m2.jsonl", "epoch").at(0);
  double total = 0;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(m0["optimizer_bytes"][r].get<double>(), 2 * 25514 * 4.0);
    const double share = m1["optimizer_bytes"][r].get<double>();
    EXPECT_NEAR(share, 2 * 25514 * 4.0 / 3, 8.0) << r;
    total += share;
    EXPECT_EQ(m2["optimizer_bytes"][r].get<double>(), share) << r;
    EXPECT_LT(m2["grad_bytes"][r].get<double>(), m1["grad_bytes"][r].get<double>() / 2) << r;
  }
  EXPECT_EQ(total, 2 * 25514 * 4.0);
}

TEST_F(Zero, CheckpointsResumeWithOtherRanksWithOrWithout) {
  train(job(3, 1) + " --zero 2 --checkpoint half.ferry");
  // A set whose optimizer tensors are whole to a reader.
  auto r = checkpoint::open(dir_ / "half.ferry");
  ASSERT_TRUE(r) << r.error().what();
  const auto* t = r->find("optimizer.fc1.weight.exp_avg");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<std::uint64_t>{32, 784}));
  // The same world resumes to the bits of the run not stopped...
  train(job(3, 2) + " --zero 2 --resume half.ferry --checkpoint resumed.ferry");
  train(job(3, 2) + " --checkpoint straight.ferry");
  EXPECT_TRUE(same_tensors("straight.ferry", "resumed.ferry"));
  // ... and two ranks resume it, with or without --zero, alike.
  EXPECT_TRUE(alike(job(2, 2) + " --resume half.ferry", "--zero 1", "two"));
  // A checkpoint without --zero resumes with it.
  EXPECT_TRUE(alike(job(2, 3) + " --resume two.ferry", "--zero 2", "three"));
}

// LibTorch 1.13's Gloo has no reduce_scatter: the first half is Gloo's
// allreduce, the second its allgather.
TEST_F(Zero, OverGloo) {
  EXPECT_TRUE(alike(job(3, 1) + " --backend gloo", "--zero 1", "gloo"));
  EXPECT_TRUE(alike(job(3, 1) + " --backend gloo --overlap --bucket-kb 8", "--zero 2", "gloo_overlap"));
}

}  // namespace
}  // namespace ferry::trainer
