// ferry-train's ZeRO bookkeeping around the step (INTERNAL to ferry-train):
// which piece of each parameter's optimizer state a rank keeps, the pieces
// handed out from a whole state when a run resumes, and the pieces written
// as parts of the whole tensors of a checkpoint set. The exchange and the
// step on pieces are gradient_sync.h's and optimizer.h's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ferry/checkpoint/torch/torch.h"
#include "gradient_sync.h"
#include "optimizer.h"
#include "sharded.h"

namespace ferry::trainer {

class collectives;

/// The piece of each of `params` (the model's parameters, in order) whose
/// optimizer state this rank keeps: a trained one's (trained_index[i] its
/// index in `sync`, else -1) is its share of the gradient buckets; a
/// frozen one's (never stepped, but saved) is whole on rank 0, empty
/// elsewhere.
std::vector<piece> owned_pieces(const std::vector<at::Tensor>& params, std::span<const std::ptrdiff_t> trained_index,
                                const gradient_sync& sync, std::uint32_t rank);

/// Every rank's pieces of rank 0's `whole` state (null on the other ranks)
/// into `sharded`, one state tensor at a time, as rank 0 broadcasts it. A
/// collective.
void share_pieces(collectives& comm, const optimizer* whole, optimizer& sharded, const std::vector<at::Tensor>& params);

/// The state tensors of `tensors` (this rank's pieces, as
/// ferry::libtorch::optimizer_state named them after `model`'s parameters)
/// move to `parts`, as parts of the whole tensors a checkpoint without
/// --zero holds; what stays (the step counts) is the same on every rank.
void move_to_parts(ferry::libtorch::tensor_map& tensors, const optimizer& sharded, const torch::nn::Module& model,
                   std::vector<shard_item>& parts);

}  // namespace ferry::trainer
