// ferry-train's gradient averaging over the collectives, fused or
// overlapped with backward, with error feedback when compressed, and
// ZeRO's sharding (INTERNAL to ferry-train).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include <torch/csrc/autograd/function_hook.h>
#include <torch/torch.h>

#include "collectives.h"
#include "ferry/comm/communicator.h"
#include "optimizer.h"

namespace ferry::trainer {

/// Gradient averaging. Gradients live in one flat buffer, parameters in
/// reverse order (backward produces them roughly last layer first), cut
/// into buckets. Fused: one allreduce of everything after backward.
/// Overlapped: each bucket's allreduce starts from the post hook of the
/// AccumulateGrad node of its last parameter (as DDP's reducer does), while
/// backward continues; buckets start strictly in order, so every rank
/// queues the same collectives in the same order. Accumulating (DDP's
/// no_sync), the hooks of every backward but a group's last do nothing.
///
/// ZeRO (stage 1 or 2, with more than one rank): each bucket is cut into
/// one block per rank (collectives::owned_block). A rank's block of each
/// bucket is reduce-scattered instead of allreduced, with the bits the
/// allreduce leaves there; the rank steps only the pieces of parameters
/// inside its blocks (owned(), owned_grad()), then gather_params() sends
/// them to every rank. Stage 1 keeps the flat buffer; stage 2 keeps only
/// this rank's blocks between steps: a bucket is staged from its first
/// gradient until its exchange is done (launching a bucket waits for the
/// one two before it, so two exchange while the next fills), and each
/// parameter's .grad is released once copied (but summed in place over an
/// --accumulate group, whose last backward alone exchanges).
class gradient_sync {
 public:
  gradient_sync(const std::vector<at::Tensor>& params, collectives& comm, comm::compression comp, bool overlap,
                std::size_t bucket_bytes, int zero);
  gradient_sync(const gradient_sync&) = delete;
  gradient_sync& operator=(const gradient_sync&) = delete;

  [[nodiscard]] std::size_t bucket_count() const { return buckets_.size(); }
  /// Elements over every bucket.
  [[nodiscard]] std::size_t size() const { return total_; }
  /// 0, 1 or 2: the ZeRO stage in effect (0 with one rank).
  [[nodiscard]] int zero() const { return zero_; }

  /// Before each backward; `sync` false for the micro-batches of an update
  /// group but its last (--accumulate): their gradients only add up in
  /// place, and after_backward() is not called.
  void before_backward(bool sync);
  /// Averages every gradient (ZeRO: this rank's blocks of it); returns the
  /// seconds spent waiting. Without ZeRO the averages are in each .grad.
  double after_backward();

  /// ZeRO: the piece of parameter i (of the constructor's list) this rank
  /// steps, possibly empty; its averaged gradient after after_backward().
  [[nodiscard]] piece owned(std::size_t i) const { return owned_[i]; }
  [[nodiscard]] std::span<const float> owned_grad(std::size_t i) const;
  /// ZeRO, after the step: every rank's pieces of the parameters to every
  /// rank. Returns the seconds spent waiting.
  double gather_params();

  /// Bytes of gradients this object holds between steps: the flat buffer
  /// or (stage 2) the owned blocks, and the error-feedback residuals
  /// (compressed: a whole bucket's each, at every stage).
  [[nodiscard]] std::size_t held_bytes() const;

  /// Error-feedback residuals (compressed runs), flat in bucket order.
  [[nodiscard]] std::vector<float> residuals() const;
  void set_residuals(std::span<const float> r);

 private:
  struct ready_hook final : torch::autograd::FunctionPostHook {
    ready_hook(gradient_sync* s, std::size_t i) : sync(s), index(i) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list&) override {
      sync->ready(index);
      return outputs;
    }
    gradient_sync* sync;
    std::size_t index;
  };
  struct bucket {
    std::size_t offset = 0, count = 0, params = 0, ready = 0;
    std::size_t param0 = 0;           // its first parameter in order_
    std::size_t first = 0, size = 0;  // this rank's block, within the bucket (ZeRO)
    std::size_t kept = 0;             // stage 2: where the block sits in kept_
    std::unique_ptr<float[]> staged;  // stage 2: the bucket while exchanged
    std::function<void()> wait;       // the exchange under way
    bool launched = false, done = false;
  };

  // The piece of order_[k] (owned_ is in the constructor's order).
  piece& owned_of(std::size_t k) { return owned_[order_.size() - 1 - k]; }
  float* data_of(bucket& b);
  void copy_in(std::size_t k);
  void ready(std::size_t k);
  void launch(std::size_t b);
  void finish(std::size_t b);
  void scatter_params(std::size_t b);

  collectives& comm_;
  comm::compression comp_;
  bool overlap_;
  bool alone_;
  int zero_;
  std::size_t total_ = 0;
  std::vector<at::Tensor> order_;  // the parameters, last first
  std::vector<std::size_t> bucket_of_, offset_;
  std::vector<bucket> buckets_;
  std::vector<float> flat_;   // every bucket (stage 0 and 1)
  std::vector<float> kept_;   // this rank's blocks (stage 2)
  std::vector<piece> owned_;  // per parameter, in the constructor's order
  std::vector<comm::error_feedback> feedback_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::size_t next_ = 0;
  bool syncing_ = true;
};

}  // namespace ferry::trainer
