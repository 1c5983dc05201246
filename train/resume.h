// What ferry-train takes from the checkpoint it resumes from (--resume):
// rank 0 reads it (the job then gives the other ranks what rank 0 has).
// The checkpoint's metadata and tensors are those docs/trainer.md lists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "job.h"
#include "model.h"
#include "optimizer.h"
#include "report.h"

namespace ferry::trainer {

/// Where the resumed run goes on from, and the per-rank state it carries.
struct resume_point {
  std::int64_t epoch = 0, step = 0, global_step = 0;  ///< as the checkpoint's trainer.* metadata
  /// Optimizer steps taken: the checkpoint's trainer.updates, else (older
  /// checkpoints) every parameter's Adam step (checked equal).
  std::int64_t updates = 0;
  /// Error-feedback residuals for every rank of this run, sync size each
  /// (trainer/residual.h); empty when the checkpoint has none.
  std::vector<float> residuals;
  /// The partial epoch's counters (loss sum, correct, seen), 3 per rank;
  /// empty unless the checkpoint was written by as many ranks as this run.
  std::vector<double> partial;
};

/// Loads the checkpoint at `path` into `model` and `optim` (whose state
/// objects it replaces, then binds again), restores LibTorch's generator when the checkpoint
/// was written on this architecture, and returns the position. `world` and
/// `steps_per_epoch` are this run's; `residual_size` is the gradient
/// sync's per-rank residual length. Notes settings that differ from the
/// checkpoint's, and the position, through `report`.
/// Throws ferry::exception naming the file (trainer_errc::bad_checkpoint,
/// or the reader's error); LibTorch's own errors come as c10::Error.
resume_point load_checkpoint(const std::filesystem::path& path, const train_config& c, std::uint32_t world,
                             std::int64_t steps_per_epoch, mlp_impl& model, optimizer& optim,
                             std::size_t residual_size, reporter& report);

}  // namespace ferry::trainer
