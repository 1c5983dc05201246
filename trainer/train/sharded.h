// ferry-train --checkpoint-sharded: every rank writes a shard of one
// checkpoint set (checkpoint/set.h), at once, and rank 0 commits it.
//
// Replicated state (parameters, buffers, Adam's state: the same bits on
// every rank, checked each epoch) is written once in total: plan_shards()
// splits it by bytes over the ranks, the same plan on every rank. Per-rank
// state is written by its own rank, as that rank's row of a [world, n]
// table (`trainer.residual`, `trainer.partial`), so a reader of the set
// sees the same tensors as in a checkpoint rank 0 wrote alone. Rank 0 picks
// the save's id and, once every rank's shard is committed, gathers their
// records and publishes the index.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ferry/checkpoint/torch/torch.h"

namespace ferry::trainer {

class collectives;

/// A rank's row of a per-rank table of `columns` values: the set's tensor
/// `name` is [world, columns].
struct rank_row {
  std::string name;
  at::Tensor values;  ///< 1-d, contiguous, CPU
};

/// Every rank calls it with the same `replicated` tensors and metadata.
/// `own`: this rank's rows; `alone`: tensors only this rank writes, whole
/// (its generator's state on rank 0). Throws ferry::exception naming the
/// file (every rank, when any rank failed, naming that rank) and
/// comm::comm_error when a peer is lost.
void save_sharded(const std::filesystem::path& index, collectives& comm, const ferry::torch::tensor_map& replicated,
                  std::span<const rank_row> own, const ferry::torch::tensor_map& alone,
                  const ferry::torch::metadata_map& metadata);

}  // namespace ferry::trainer
