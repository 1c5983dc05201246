// ferry-train's options for the course's studies, run as a user runs them:
// gradient accumulation (K batches of b are one batch of K*b), every
// optimizer (trains, checkpoints under LibTorch's names, resumes to the
// same bits), every activation, and the memory figures in the metrics.
// Small runs (a few thousand Fashion-MNIST samples) keep it quick.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "job_helpers.h"
#include "ferry/checkpoint/reader.h"

namespace ferry::trainer {
namespace {

using testing::records;

class Studies : public testing::job_dir {
 protected:
  static std::string run(int ranks) { return std::string("'") + FERRY_RUN + "' -n " + std::to_string(ranks) + " "; }
  static std::string cli() { return std::string("'") + FERRY_CLI + "'"; }
  static std::string job(int limit, int epochs) {
    return std::string("'") + FERRY_TRAIN + "' --limit " + std::to_string(limit) + " --test-limit 500 --epochs " +
           std::to_string(epochs) + " --threads 1";
  }
  // The largest difference between the float tensors of two checkpoints
  // (the same names in both).
  double largest_difference(const std::string& a, const std::string& b) {
    auto x = checkpoint::open(dir_ / a);
    auto y = checkpoint::open(dir_ / b);
    EXPECT_TRUE(x && y);
    if (!x || !y) return INFINITY;
    double worst = 0;
    for (const auto& t : x->tensors()) {
      if (t.dtype != codec::dtype::f32) continue;
      auto u = x->get(t);
      auto v = y->get(t.name);
      EXPECT_TRUE(u && v) << t.name;
      if (!u || !v) return INFINITY;
      const auto p = u->contiguous_copy(), q = v->contiguous_copy();
      EXPECT_EQ(p.size(), q.size()) << t.name;
      for (std::size_t i = 0; i + 4 <= std::min(p.size(), q.size()); i += 4) {
        float f = 0, g = 0;
        std::memcpy(&f, p.data() + i, 4);
        std::memcpy(&g, q.data() + i, 4);
        worst = std::max(worst, static_cast<double>(std::fabs(f - g)));
      }
    }
    return worst;
  }
};

// Without BatchNorm (whose statistics are per batch), 4 accumulated
// batches of 32 are one batch of 128: the same samples per update, the
// same mean gradient but for the order of the sums. 2 ranks x 1000
// samples: 7 groups of 128 and a tail of 104 (3 full batches and 8).
TEST_F(Studies, AccumulatedBatchesAreOneLargeBatch) {
  const auto base = run(2) + job(2000, 2) + " --no-batchnorm --optimizer sgd --momentum 0.9";
  ASSERT_EQ(shell(base + " --batch 32 --accumulate 4 --checkpoint k4.ferry").status, 0);
  ASSERT_EQ(shell(base + " --batch 128 --checkpoint b128.ferry").status, 0);
  EXPECT_LT(largest_difference("k4.ferry", "b128.ferry"), 1e-5);
  // A different batching is not: 16 updates of 64 moved elsewhere.
  ASSERT_EQ(shell(base + " --batch 64 --checkpoint b64.ferry").status, 0);
  EXPECT_GT(largest_difference("k4.ferry", "b64.ferry"), 1e-4);
  // Overlapped with backward, only the group's last backward exchanges:
  // the same bits as after it (2 ranks: a + b whoever adds).
  ASSERT_EQ(shell(base + " --batch 32 --accumulate 4 --overlap --bucket-kb 4 --checkpoint k4o.ferry").status, 0);
  const auto d = shell(cli() + " diff k4.ferry k4o.ferry");  // the configurations differ, the tensors not
  EXPECT_NE(d.out.find("10 of 10 tensors bit-identical"), std::string::npos) << d.out;
}

// Each optimizer learns, saves its state under LibTorch's names, and a run
// stopped after an epoch and resumed gives the uninterrupted run's bits.
TEST_F(Studies, EveryOptimizerResumesToTheSameBits) {
  struct study {
    std::string options, kind;
    std::vector<std::string> fields;
  };
  for (const auto& s : {study{"--optimizer adamw", "adamw", {"step", "exp_avg", "exp_avg_sq"}},
                        study{"--optimizer sgd --momentum 0.9 --nesterov --weight-decay 1e-4", "sgd", {"momentum_buffer"}},
                        study{"--optimizer rmsprop --lr 1e-3 --momentum 0.5 --centered --accumulate 2", "rmsprop",
                              {"step", "square_avg", "momentum_buffer", "grad_avg"}}}) {
    SCOPED_TRACE(s.options);
    const auto straight = shell(run(2) + job(1200, 2) + " " + s.options + " --checkpoint straight.ferry --metrics m.jsonl");
    ASSERT_EQ(straight.status, 0) << straight.err;
    const auto epochs = records(dir_ / "m.jsonl", "epoch");
    ASSERT_EQ(epochs.size(), 2u);
    EXPECT_LT(epochs[1]["train_loss"].get<double>(), epochs[0]["train_loss"].get<double>());
    ASSERT_EQ(shell(run(2) + job(1200, 1) + " " + s.options + " --checkpoint half.ferry").status, 0);
    const auto resumed = shell(run(2) + job(1200, 2) + " " + s.options + " --resume half.ferry --checkpoint resumed.ferry");
    ASSERT_EQ(resumed.status, 0) << resumed.err;
    const auto d = shell(cli() + " diff straight.ferry resumed.ferry");
    EXPECT_EQ(d.status, 0) << d.out << d.err;
    auto r = checkpoint::open(dir_ / "straight.ferry");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->metadata().at("optimizer.type"), s.kind);
    for (const auto& f : s.fields) EXPECT_NE(r->find("optimizer.fc1.weight." + f), nullptr) << f;
  }
  // Another optimizer's checkpoint is refused in one line.
  const auto other = shell(run(1) + job(1200, 3) + " --optimizer adam --resume half.ferry");
  EXPECT_EQ(other.status, 1);
  EXPECT_NE(other.err.find("holds rmsprop state, the optimizer is adam"), std::string::npos) << other.err;
}

TEST_F(Studies, EveryActivationLearns) {
  for (const char* a : {"tanh", "sigmoid", "gelu"}) {
    SCOPED_TRACE(a);
    const auto r = shell(job(2000, 2) + " --activation " + a + " --metrics m.jsonl --checkpoint a.ferry");
    ASSERT_EQ(r.status, 0) << r.err;
    const auto epochs = records(dir_ / "m.jsonl", "epoch");
    ASSERT_EQ(epochs.size(), 2u);
    EXPECT_GT(epochs[1]["test_acc"].get<double>(), 0.6);
  }
}

// Every epoch record carries each rank's peak memory and what it holds:
// Adam's state is twice the parameters, SGD without momentum keeps none.
TEST_F(Studies, EpochRecordsCarryEachRanksMemory) {
  for (const auto& [options, state_per_param] : {std::pair{"", 2.0}, std::pair{"--optimizer sgd", 0.0}}) {
    SCOPED_TRACE(options);
    const auto r = shell(run(2) + job(800, 1) + " " + options + " --metrics m.jsonl");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("| peak memory per rank |"), std::string::npos) << r.out;
    const auto e = records(dir_ / "m.jsonl", "epoch").at(0);
    for (const char* key : {"peak_rss_bytes", "param_bytes", "grad_bytes", "optimizer_bytes"}) {
      ASSERT_EQ(e[key].size(), 2u) << key;
    }
    EXPECT_GT(e["peak_rss_bytes"][1].get<double>(), 10e6);
    // 784*32 + 32 + 2*32 + 32*10 + 10 = 25514 parameters.
    EXPECT_EQ(e["param_bytes"][0].get<double>(), 25514.0 * 4);
    EXPECT_EQ(e["optimizer_bytes"][0].get<double>(), state_per_param * 25514 * 4);
  }
}

// bf16 computes forward and backward in bfloat16 (LibTorch's CPU
// autocast) and still learns; replicas stay identical (the CRC check of
// every epoch). f16 either learns too or, where LibTorch has no float16
// kernel on the CPU (LibTorch 1.13 has no half matrix product), stops in
// one line saying so.
TEST_F(Studies, LowerPrecisionLearnsOrSaysWhyNot) {
  const auto bf16 = shell(run(2) + job(2000, 2) + " --precision bf16 --metrics m.jsonl --checkpoint bf16.ferry");
  ASSERT_EQ(bf16.status, 0) << bf16.err;
  EXPECT_GT(records(dir_ / "m.jsonl", "epoch").at(1)["test_acc"].get<double>(), 0.6);
  ASSERT_EQ(shell(run(2) + job(2000, 2) + " --checkpoint f32.ferry").status, 0);
  const double apart = largest_difference("bf16.ferry", "f32.ferry");
  EXPECT_GT(apart, 1e-4);  // computed otherwise
  EXPECT_LT(apart, 0.5);   // but the same training
  const auto f16 = shell(run(2) + job(2000, 1) + " --precision f16 --metrics m16.jsonl");
  if (f16.status == 0) {
    EXPECT_GT(records(dir_ / "m16.jsonl", "epoch").at(0)["test_acc"].get<double>(), 0.6);
  } else {
    EXPECT_EQ(f16.status, 1);
    EXPECT_NE(f16.err.find("--precision f16: LibTorch cannot compute the model in it on this CPU ("), std::string::npos)
        << f16.err;
  }
}

// --profile: time and memory per kind of module, forward and backward,
// printed and recorded (the course's profiler table).
TEST_F(Studies, ProfileTablePerModule) {
  const auto r = shell(job(2000, 1) + " --profile --profile-batches 20 --activation gelu --metrics m.jsonl");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("profile of 20 batches"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| Linear | forward | 40 |"), std::string::npos) << r.out;  // fc1 and out
  EXPECT_NE(r.out.find("| BatchNorm1d | forward | 20 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| GELU | forward | 20 |"), std::string::npos) << r.out;
  const auto p = records(dir_ / "m.jsonl", "profile");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0]["batches"], 20);
  std::set<std::string> seen;
  for (const auto& row : p[0]["rows"]) {
    seen.insert(row["module"].get<std::string>() + " " + row["pass"].get<std::string>());
    EXPECT_GT(row["ms"].get<double>(), 0) << row;
    if (row["module"] != "other") {
      EXPECT_GT(row["bytes"].get<double>(), 0) << row;
    }
  }
  for (const char* want : {"Linear forward", "Linear backward", "BatchNorm1d forward", "BatchNorm1d backward",
                           "GELU forward", "GELU backward"}) {
    EXPECT_TRUE(seen.contains(want)) << want;
  }
}

TEST_F(Studies, OptionsThatCannotRunAreUsageErrors) {
  for (const auto& [options, message] :
       {std::pair{"--optimizer sgd --nesterov", "--optimizer sgd: Nesterov momentum needs a momentum above 0"},
        std::pair{"--accumulate 4 --checkpoint-steps 10", "--checkpoint-steps 10 is not a multiple of --accumulate 4"},
        std::pair{"--activation swish", "--activation"},
        std::pair{"--momentum 0.9", "--momentum is not an option of --optimizer adam"},
        std::pair{"--optimizer sgd --centered", "--centered is not an option of --optimizer sgd"}}) {
    const auto r = shell(job(100, 1) + " " + options);
    EXPECT_EQ(r.status, 2) << options;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace ferry::trainer
