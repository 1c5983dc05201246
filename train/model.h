// ferry-train's model: the reference MLP (INTERNAL to ferry-train).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>

#include "activation.h"

namespace ferry::trainer {

inline at::Tensor activate(activation a, const at::Tensor& x) {
  switch (a) {
    case activation::relu: return torch::relu(x);
    case activation::tanh: return torch::tanh(x);
    case activation::sigmoid: return torch::sigmoid(x);
    case activation::gelu: return torch::gelu(x);  // the exact (erf) form, as torch.nn.GELU()
  }
  return x;
}

// The reference model: (Linear, BatchNorm1d, activation) per hidden width,
// then a Linear to the classes; without BatchNorm when batchnorm is false.
// Names: fc1, bn1, ..., out.
class mlp_impl : public torch::nn::Module {
 public:
  mlp_impl(std::int64_t inputs, const std::vector<std::int64_t>& hidden, std::int64_t classes, activation act,
           bool batchnorm)
      : act_(act) {
    std::int64_t in = inputs;
    for (std::size_t i = 0; i < hidden.size(); ++i) {
      const auto n = std::to_string(i + 1);
      fc_.push_back(register_module("fc" + n, torch::nn::Linear(in, hidden[i])));
      if (batchnorm) bn_.push_back(register_module("bn" + n, torch::nn::BatchNorm1d(hidden[i])));
      in = hidden[i];
    }
    out_ = register_module("out", torch::nn::Linear(in, classes));
  }
  // Each module's forward is a user scope named after its class, for
  // --profile (profile.h); without a profiler running, a scope costs a
  // thread-local check.
  at::Tensor forward(at::Tensor x) {
    for (std::size_t i = 0; i < fc_.size(); ++i) {
      {
        RECORD_USER_SCOPE("Linear");
        x = fc_[i]->forward(x);
      }
      if (!bn_.empty()) {
        RECORD_USER_SCOPE("BatchNorm1d");
        x = bn_[i]->forward(x);
      }
      RECORD_USER_SCOPE(class_name(act_));
      x = activate(act_, x);
    }
    RECORD_USER_SCOPE("Linear");
    return out_->forward(x);
  }

 private:
  activation act_;
  std::vector<torch::nn::Linear> fc_;
  std::vector<torch::nn::BatchNorm1d> bn_;
  torch::nn::Linear out_{nullptr};
};

// LibTorch's CPU autocast in `precision` for the scope (nothing for
// f32): matrix products and the like run in the lower precision on
// casts of the f32 parameters, whose gradients come back in f32.
class autocast_scope {
 public:
  explicit autocast_scope(at::ScalarType precision) : on_(precision != at::kFloat) {
    if (!on_) return;
    was_enabled_ = at::autocast::is_cpu_enabled();
    was_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_autocast_cpu_dtype(precision);
    at::autocast::set_cpu_enabled(true);
  }
  ~autocast_scope() {
    if (!on_) return;
    at::autocast::set_cpu_enabled(was_enabled_);
    at::autocast::set_autocast_cpu_dtype(was_dtype_);
    if (!was_enabled_) at::autocast::clear_cache();
  }
  autocast_scope(const autocast_scope&) = delete;
  autocast_scope& operator=(const autocast_scope&) = delete;

 private:
  bool on_;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
};

}  // namespace ferry::trainer
