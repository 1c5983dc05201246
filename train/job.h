// ferry-train's training job: the reference MLP on an IDX classification set
// (Fashion-MNIST by default), data-parallel over `collectives`.
//
// What every rank does, in this order:
//   start       build the model from the seed, then take rank 0's parameters
//               and buffers (or rank 0's checkpoint, with --resume);
//   step        forward and backward on this rank's batch, gradients
//               averaged over ranks in buckets (fused after backward, or
//               overlapped with it), then ferry's optimizer step
//               (trainer/optimizers.h), which gives the same bits on every
//               architecture; with --accumulate K, K batches' gradients
//               are summed first and exchanged once; with --zero, each
//               rank steps only its shard and the parameters are gathered;
//   epoch end   BatchNorm running statistics averaged over ranks, the whole
//               test set evaluated once (each rank a shard, counts summed),
//               a CRC32C of every parameter and buffer compared across
//               ranks (a mismatch stops the job naming the ranks), and a
//               checkpoint when due: by rank 0, or a set of shards every
//               rank writes (--checkpoint-sharded); at once, or from a
//               snapshot in the background (--checkpoint-async, saver.h).
//
// job.cpp holds the job, one function per step of the above; resume.h
// reads the checkpoint a run resumes from (--resume). This header stays
// clear of LibTorch's module headers (model.h): main.cpp and the test
// hooks include it, and those headers are most of a file's compile time.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ferry/comm/communicator.h"
#include "activation.h"
#include "ferry/trainer/optimizers.h"

namespace ferry::trainer {

class collectives;

struct train_config {
  std::filesystem::path data = "/usr/share/datasets/fashion-mnist";
  std::vector<std::int64_t> hidden{32};  ///< hidden layer widths, each Linear + BatchNorm1d + activation
  activation act = activation::relu;
  bool batchnorm = true;  ///< a BatchNorm1d after each hidden Linear
  /// Hidden layers (1-based) whose Linear and BatchNorm parameters are not
  /// trained: no gradient, no optimizer step (their running statistics
  /// still move).
  std::vector<std::int64_t> freeze;
  optimizer_options optimizer = defaults(optimizer_kind::adam);
  std::int64_t batch = 32;  ///< per rank, per micro-batch
  /// Micro-batches whose gradients are summed before one exchange and one
  /// optimizer step (the loss of each weighted by its share of the
  /// group's samples, so K batches of b give the gradient of one of K*b).
  std::int64_t accumulate = 1;
  /// Forward and backward in this precision (kFloat, kBFloat16, kHalf)
  /// under LibTorch's CPU autocast; the parameters (master weights), the
  /// exchanged gradients and the optimizer stay f32.
  at::ScalarType precision = at::kFloat;
  /// --profile: LibTorch's profiler over the first N batches (0: off),
  /// its table per kind of module printed and recorded by rank 0.
  std::int64_t profile = 0;
  std::int64_t epochs = 10;
  std::uint64_t seed = 0;   ///< model init and the sampler (seed + epoch)
  bool drop_last = false;   ///< the sampler's, as PyTorch's DistributedSampler
  std::size_t limit = 0;       ///< train on the first N samples only (0: all)
  std::size_t test_limit = 0;  ///< evaluate the first N test samples only (0: all)
  comm::compression compress = comm::compression::none;
  std::string backend = "ferry";
  bool overlap = false;                  ///< allreduce buckets from backward's hooks
  /// ZeRO stage: 1 the optimizer's state, 2 also the gradients, sharded
  /// over the ranks (gradient_sync.h); 0 none.
  int zero = 0;
  std::size_t bucket_bytes = 1 << 20;    ///< bucket size when overlapping
  std::filesystem::path checkpoint = "ferry-train.ferry";
  /// Every rank writes a shard of a checkpoint set and rank 0 its index at
  /// `checkpoint` (sharded.h); otherwise rank 0 writes one file.
  bool checkpoint_sharded = false;
  /// Training pauses only for a snapshot; a background thread writes
  /// (saver.h).
  bool checkpoint_async = false;
  /// Sets whose pieces equal the last save's are kept, not written again
  /// (checkpoint/set.h); every checkpoint_full_every-th save is whole.
  bool checkpoint_incremental = false;
  std::int64_t checkpoint_full_every = 8;
  std::int64_t checkpoint_every = 1;  ///< epochs between checkpoints (0: at the end only)
  std::int64_t checkpoint_steps = 0;  ///< also every N steps within an epoch (0: never)
  std::filesystem::path resume;
  std::filesystem::path metrics;  ///< JSON lines, rank 0 (empty: none)
  std::filesystem::path summary;  ///< one JSON object at the end, rank 0 (empty: none)
  std::int64_t log_every = 50;    ///< steps between "step" records in the metrics
  int progress = -1;              ///< -1 auto (redraw on a terminal), 0 plain lines, 1 redraw
  int threads = 0;                ///< LibTorch threads per rank (0: from the environment)
  /// Test hooks (set from FERRY_TRAIN_DIE=RANK:STEP and
  /// FERRY_TRAIN_FLIP=RANK:STEP by the tests' build, ferry-train-hooked,
  /// only): that rank kills itself with SIGKILL, as a crash would, or
  /// flips one bit of a parameter, as a faulty replica would, after that
  /// global step; -1 for none.
  std::int64_t die_rank = -1, die_at_step = -1;
  std::int64_t flip_rank = -1, flip_at_step = -1;
  /// Test hook (FERRY_TRAIN_KEEP_SAVES=1, ferry-train-hooked only): rank 0
  /// copies each published checkpoint (a set: its index, which keeps its
  /// shards) to <stem>.step<global step>.ferry, so saves can be compared.
  bool keep_saves = false;
};

/// The configuration as JSON (stored in checkpoints as trainer.config).
std::string to_json(const train_config& c);

/// Why the model's forward and backward cannot run in `precision` on this
/// machine, as LibTorch says it, or nothing (model.cpp).
std::optional<std::string> precision_unsupported(at::ScalarType precision, activation act, bool batchnorm);

struct train_result {
  /// From `started` (before the rendezvous) to the end of the final
  /// evaluation, on rank 0: what PyTorch DDP's reference script measures.
  double wall_s = 0;
  double train_loss = 0, train_acc = 0, test_acc = 0;
  std::int64_t epochs = 0;
  std::uint64_t peak_rss_bytes = 0;  ///< the largest rank's peak resident memory
};

/// A classification set in memory: images as float [n, pixels] (pixels /
/// 255, as torchvision's ToTensor), labels as int64 [n].
struct data_split {
  at::Tensor images, labels;
  std::size_t count = 0;
};
struct train_data {
  data_split train, test;
};
/// Reads `c.data`'s train and t10k splits (the first c.limit and
/// c.test_limit samples). Throws ferry::exception naming the file.
std::shared_ptr<const train_data> load_data(const train_config& c);

/// Runs the job; every rank calls it. Throws comm::comm_error when a peer
/// fails, ferry::exception for data, checkpoint and replica errors.
train_result train(const train_config& c, collectives& comm, const train_data& data,
                   std::chrono::steady_clock::time_point started);

}  // namespace ferry::trainer
