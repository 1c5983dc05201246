// ferry-train's model: the reference MLP (INTERNAL to ferry-train).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>

namespace ferry::trainer {

// The reference model: (Linear, BatchNorm1d, ReLU) per hidden width, then
// a Linear to the classes. Names: fc1, bn1, ..., out.
class mlp_impl : public torch::nn::Module {
 public:
  mlp_impl(std::int64_t inputs, const std::vector<std::int64_t>& hidden, std::int64_t classes) {
    std::int64_t in = inputs;
    for (std::size_t i = 0; i < hidden.size(); ++i) {
      const auto n = std::to_string(i + 1);
      fc_.push_back(register_module("fc" + n, torch::nn::Linear(in, hidden[i])));
      bn_.push_back(register_module("bn" + n, torch::nn::BatchNorm1d(hidden[i])));
      in = hidden[i];
    }
    out_ = register_module("out", torch::nn::Linear(in, classes));
  }
  at::Tensor forward(at::Tensor x) {
    for (std::size_t i = 0; i < fc_.size(); ++i) x = torch::relu(bn_[i]->forward(fc_[i]->forward(x)));
    return out_->forward(x);
  }

 private:
  std::vector<torch::nn::Linear> fc_;
  std::vector<torch::nn::BatchNorm1d> bn_;
  torch::nn::Linear out_{nullptr};
};

}  // namespace ferry::trainer
