// ferry-train's optimizer (INTERNAL to ferry-train): LibTorch's optimizer
// object of the chosen kind holds each parameter's state, so that
// checkpoints carry it under LibTorch's names (ferry::libtorch); ferry's
// step (trainer/optimizers.h) updates that state, the same bits on every
// architecture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "ferry/trainer/optimizers.h"

namespace ferry::trainer {

/// Elements [begin, begin + count) of a tensor, flat.
struct piece {
  std::size_t begin = 0, count = 0;
};

class optimizer {
 public:
  /// Every parameter gets its state now, zeros, step 0 (LibTorch creates
  /// it at the first step; the job broadcasts and saves it before).
  /// ZeRO: with `pieces` (one per parameter), parameter i's state covers
  /// only its elements pieces[i], as 1-d tensors, and step() updates only
  /// those.
  optimizer(const optimizer_options& o, std::vector<at::Tensor> params, std::vector<piece> pieces = {});

  /// LibTorch's object, for ferry::libtorch's optimizer_state and
  /// load_optimizer_state (which replaces its state objects: call bind()
  /// after).
  [[nodiscard]] torch::optim::Optimizer& libtorch() { return *libtorch_; }
  [[nodiscard]] const torch::optim::Optimizer& libtorch() const { return *libtorch_; }
  /// Finds each parameter's state again after LibTorch's objects were
  /// replaced. Throws ferry::exception (trainer_errc::bad_checkpoint,
  /// naming the parameter) when one is missing or not the parameter's
  /// shape.
  void bind(const torch::nn::Module& model);

  /// Every state tensor, parameter by parameter, in state_names() order.
  [[nodiscard]] const std::vector<at::Tensor>& state() const { return state_; }
  /// The step count the states record (LibTorch's `step`), or nothing for
  /// kinds without one (SGD); equal over parameters, else bad_checkpoint.
  [[nodiscard]] std::optional<std::int64_t> recorded_step(const torch::nn::Module& model) const;
  /// Sets every state's step count (where the kind has one).
  void set_step(std::int64_t step);
  /// One update of every trained parameter (requires_grad) from
  /// grads[i], its gradient (its piece's, when sharded); an empty span
  /// skips it. `step` is the count after it (1 first).
  void step(std::int64_t step, std::span<const std::span<const float>> grads);
  /// Whether state covers pieces (ZeRO); parameter i's piece.
  [[nodiscard]] bool sharded() const { return !pieces_.empty(); }
  [[nodiscard]] piece piece_of(std::size_t i) const { return pieces_[i]; }
  /// Bytes of state this rank holds.
  [[nodiscard]] std::uint64_t state_bytes() const;
  [[nodiscard]] const optimizer_options& options() const { return o_; }

 private:
  optimizer_options o_;
  std::vector<at::Tensor> params_;
  std::vector<piece> pieces_;      // empty: every parameter whole
  std::size_t per_param_ = 0;    // state tensors per parameter
  std::vector<at::Tensor> state_;  // params_.size() * per_param_
  std::unique_ptr<torch::optim::Optimizer> libtorch_;
};

}  // namespace ferry::trainer
