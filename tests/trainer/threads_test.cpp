// ferry-train's threads under ThreadSanitizer (the tsan tree only, label
// tsan): the ring's worker, backward's hooks starting bucket exchanges
// (--overlap), ZeRO's staged buckets, the asynchronous saver's snapshot and
// background writes (--checkpoint-async, sets and single files,
// incremental), a resume, and the gloo backend. Any report makes the
// program exit non-zero (TSAN_OPTIONS from the tsan test preset: LibTorch's
// own frames are set aside by tests/tsan-libtorch.supp).
#include <gtest/gtest.h>

#include <string>

#include "job_helpers.h"

namespace ferry::trainer {
namespace {

class Threads : public testing::job_dir {
 protected:
  void train(const std::string& options, const std::string& env = "") {
    const auto r = shell(env + "'" + FERRY_RUN + "' -n 2 '" + FERRY_TRAIN +
                         "' --limit 640 --test-limit 200 --threads 1 " + options);
    EXPECT_EQ(r.status, 0) << options << "\n" << r.out << r.err;
    EXPECT_EQ(r.err.find("ThreadSanitizer"), std::string::npos) << r.err;
  }
};

TEST_F(Threads, OverlapZeroAndTheAsynchronousSaver) {
  train("--epochs 2 --overlap --bucket-kb 8 --compress bf16 --zero 2 --checkpoint-async --checkpoint-incremental "
        "--checkpoint-steps 4 --checkpoint set.ferry");
  train("--epochs 3 --resume set.ferry --overlap --checkpoint-async --checkpoint one.ferry");
  // The ring rather than shared memory: ZeRO's reduce-scatter half alone.
  train("--epochs 1 --accumulate 2 --overlap --bucket-kb 8 --zero 1 --checkpoint-async --checkpoint-sharded "
        "--checkpoint-steps 4 --checkpoint sharded.ferry",
        "FERRY_SHARED_MEMORY=off ");
}

TEST_F(Threads, Gloo) { train("--epochs 1 --backend gloo --overlap --bucket-kb 8 --zero 2 --checkpoint g.ferry"); }

}  // namespace
}  // namespace ferry::trainer
