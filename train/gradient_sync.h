// ferry-train's gradient averaging over the collectives, fused or
// overlapped with backward, with error feedback when compressed (INTERNAL
// to ferry-train).
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
#include "ferry/base/error.h"
#include "ferry/comm/communicator.h"

namespace ferry::trainer {

// Gradient averaging. Gradients live in one flat buffer, parameters in
// reverse order (backward produces them roughly last layer first), cut
// into buckets. Fused: one allreduce of everything after backward.
// Overlapped: each bucket's allreduce starts from the post hook of the
// AccumulateGrad node of its last parameter (as DDP's reducer does), while
// backward continues; buckets start strictly in order, so every rank
// queues the same collectives in the same order. Accumulating (DDP's
// no_sync), the hooks of every backward but a group's last do nothing.
class gradient_sync {
 public:
  gradient_sync(const std::vector<at::Tensor>& params, collectives& comm, comm::compression comp, bool overlap,
                std::size_t bucket_bytes)
      : comm_(comm), comp_(comp), overlap_(overlap && comm.world_size() > 1), alone_(comm.world_size() == 1) {
    for (auto it = params.rbegin(); it != params.rend(); ++it) order_.push_back(*it);
    std::size_t total = 0;
    bucket_of_.resize(order_.size());
    offset_.resize(order_.size());
    for (std::size_t i = 0; i < order_.size(); ++i) {
      const auto n = static_cast<std::size_t>(order_[i].numel());
      if (buckets_.empty() || (overlap_ && buckets_.back().count > 0 && (buckets_.back().count + n) * 4 > bucket_bytes)) {
        buckets_.push_back({total, 0, 0, 0});
      }
      bucket_of_[i] = buckets_.size() - 1;
      offset_[i] = total;
      buckets_.back().count += n;
      buckets_.back().params += 1;
      total += n;
    }
    flat_.assign(total, 0.0f);
    for (auto& b : buckets_) feedback_.emplace_back(comp_ == comm::compression::none ? 0 : b.count);
    if (overlap_) {
      for (std::size_t i = 0; i < order_.size(); ++i) {
        auto acc = torch::autograd::impl::grad_accumulator(order_[i]);
        acc->add_post_hook(std::make_unique<ready_hook>(this, i));
        accumulators_.push_back(std::move(acc));
      }
    }
  }
  gradient_sync(const gradient_sync&) = delete;
  gradient_sync& operator=(const gradient_sync&) = delete;

  [[nodiscard]] std::size_t bucket_count() const { return buckets_.size(); }
  [[nodiscard]] std::size_t size() const { return flat_.size(); }

  /// Before each backward; `sync` false for the micro-batches of an update
  /// group but its last (--accumulate): their gradients only add up in
  /// place, and after_backward() is not called.
  void before_backward(bool sync) {
    syncing_ = sync;
    for (auto& b : buckets_) b.ready = 0;
    for (auto& w : waits_) w = nullptr;
    waits_.resize(buckets_.size());
    next_ = 0;
  }
  /// Averages every gradient; returns the seconds spent waiting.
  double after_backward() {
    if (alone_) return 0;  // one rank's average is its own gradient
    const auto t = std::chrono::steady_clock::now();
    if (!overlap_) {
      for (std::size_t i = 0; i < order_.size(); ++i) copy_in(i);
      for (std::size_t b = 0; b < buckets_.size(); ++b) launch(b);
    }
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      if (!waits_[b]) throw ferry::exception(error(errc::bad_value, "a gradient bucket was never filled (a parameter without gradient)"));
      waits_[b]();
    }
    for (std::size_t i = 0; i < order_.size(); ++i) {
      auto& g = order_[i].mutable_grad();
      if (!g.is_contiguous()) g = g.contiguous();
      std::copy_n(flat_.begin() + static_cast<std::ptrdiff_t>(offset_[i]), g.numel(), g.data_ptr<float>());
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }
  /// Error-feedback residuals (compressed runs), flat in bucket order.
  [[nodiscard]] std::vector<float> residuals() const {
    std::vector<float> out;
    for (const auto& f : feedback_) out.insert(out.end(), f.residual().begin(), f.residual().end());
    return out;
  }
  void set_residuals(std::span<const float> r) {
    std::size_t at = 0;
    for (auto& f : feedback_) {
      std::copy_n(r.begin() + static_cast<std::ptrdiff_t>(at), f.residual().size(), f.residual().begin());
      at += f.residual().size();
    }
  }

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
    std::size_t offset, count, params, ready;
  };

  void copy_in(std::size_t i) {
    const auto& g = order_[i].grad();
    if (!g.defined()) throw ferry::exception(error(errc::bad_value, "a parameter has no gradient"));
    std::copy_n(g.contiguous().data_ptr<float>(), g.numel(), flat_.begin() + static_cast<std::ptrdiff_t>(offset_[i]));
  }
  void ready(std::size_t i) {
    if (!syncing_) return;
    copy_in(i);
    auto& b = buckets_[bucket_of_[i]];
    if (++b.ready < b.params) return;
    while (next_ < buckets_.size() && buckets_[next_].ready == buckets_[next_].params) launch(next_++);
  }
  void launch(std::size_t b) {
    const auto& bk = buckets_[b];
    std::span<float> data(flat_.data() + bk.offset, bk.count);
    waits_[b] = comm_.start_allreduce_avg(data, comp_, comp_ == comm::compression::none ? nullptr : &feedback_[b]);
  }

  collectives& comm_;
  comm::compression comp_;
  bool overlap_;
  bool alone_;
  std::vector<at::Tensor> order_;
  std::vector<std::size_t> bucket_of_, offset_;
  std::vector<bucket> buckets_;
  std::vector<float> flat_;
  std::vector<comm::error_feedback> feedback_;
  std::vector<std::function<void()>> waits_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::size_t next_ = 0;
  bool syncing_ = true;
};

}  // namespace ferry::trainer
