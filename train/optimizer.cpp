#include "optimizer.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/torch.h>

#include <functional>
#include <span>
#include <unordered_map>

#include "ferry/checkpoint/torch/optimizer_key.h"
#include "ferry/trainer/error.h"
#include "common.h"

namespace ferry::trainer {
namespace {

[[noreturn]] void bad_state(std::string text) { fail(trainer_errc::bad_checkpoint, std::move(text)); }

libtorch::optimizer_key_t key_of(const at::Tensor& p) { return libtorch::optimizer_key(p); }

// This run's hyper-parameters into every group of LibTorch's object (a
// checkpoint's replaced them), so that the next checkpoint records them.
void set_group_options(torch::optim::Optimizer& opt, const optimizer_options& o) {
  for (auto& group : opt.param_groups()) {
    auto& base = group.options();
    switch (o.kind) {
      case optimizer_kind::adam:
        static_cast<torch::optim::AdamOptions&>(base) =
            torch::optim::AdamOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay);
        break;
      case optimizer_kind::adamw:
        static_cast<torch::optim::AdamWOptions&>(base) =
            torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay);
        break;
      case optimizer_kind::sgd:
        static_cast<torch::optim::SGDOptions&>(base) = torch::optim::SGDOptions(o.lr)
                                                           .momentum(o.momentum)
                                                           .dampening(o.dampening)
                                                           .weight_decay(o.weight_decay)
                                                           .nesterov(o.nesterov);
        break;
      case optimizer_kind::rmsprop:
        static_cast<torch::optim::RMSpropOptions&>(base) = torch::optim::RMSpropOptions(o.lr)
                                                               .alpha(o.alpha)
                                                               .eps(o.eps)
                                                               .weight_decay(o.weight_decay)
                                                               .momentum(o.momentum)
                                                               .centered(o.centered);
        break;
    }
  }
}

// LibTorch's optimizer of o's kind over `params`, with o's hyper-parameters.
std::unique_ptr<torch::optim::Optimizer> make_libtorch(const optimizer_options& o, const std::vector<at::Tensor>& params) {
  std::unique_ptr<torch::optim::Optimizer> opt;
  switch (o.kind) {
    case optimizer_kind::adam: opt = std::make_unique<torch::optim::Adam>(params); break;
    case optimizer_kind::adamw: opt = std::make_unique<torch::optim::AdamW>(params); break;
    case optimizer_kind::sgd: opt = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o.lr)); break;
    case optimizer_kind::rmsprop: opt = std::make_unique<torch::optim::RMSprop>(params); break;
  }
  set_group_options(*opt, o);
  return opt;
}

// A parameter's state fields, by LibTorch's name: read and replaced.
struct field_access {
  std::function<at::Tensor(const std::string&)> get;
  std::function<void(const std::string&, at::Tensor)> set;
};

template <class State>
field_access access_adam(State& st) {
  return {[&st](const std::string& f) { return f == "exp_avg" ? st.exp_avg() : st.exp_avg_sq(); },
          [&st](const std::string& f, at::Tensor t) {
            if (f == "exp_avg") st.exp_avg(std::move(t));
            else st.exp_avg_sq(std::move(t));
          }};
}

field_access access(optimizer_kind k, torch::optim::OptimizerParamState& base) {
  switch (k) {
    case optimizer_kind::adam: return access_adam(static_cast<torch::optim::AdamParamState&>(base));
    case optimizer_kind::adamw: return access_adam(static_cast<torch::optim::AdamWParamState&>(base));
    case optimizer_kind::sgd: {
      auto& st = static_cast<torch::optim::SGDParamState&>(base);
      return {[&st](const std::string&) { return st.momentum_buffer(); },
              [&st](const std::string&, at::Tensor t) { st.momentum_buffer(std::move(t)); }};
    }
    case optimizer_kind::rmsprop: {
      auto& st = static_cast<torch::optim::RMSpropParamState&>(base);
      return {[&st](const std::string& f) {
                return f == "square_avg" ? st.square_avg() : f == "momentum_buffer" ? st.momentum_buffer() : st.grad_avg();
              },
              [&st](const std::string& f, at::Tensor t) {
                if (f == "square_avg") st.square_avg(std::move(t));
                else if (f == "momentum_buffer") st.momentum_buffer(std::move(t));
                else st.grad_avg(std::move(t));
              }};
    }
  }
  return {};
}

// A fresh state object for one parameter (or piece) shaped as `p`: zeros,
// step 0.
std::unique_ptr<torch::optim::OptimizerParamState> fresh_state(const optimizer_options& o, const at::Tensor& p) {
  std::unique_ptr<torch::optim::OptimizerParamState> st;
  switch (o.kind) {
    case optimizer_kind::adam: st = std::make_unique<torch::optim::AdamParamState>(); break;
    case optimizer_kind::adamw: st = std::make_unique<torch::optim::AdamWParamState>(); break;
    case optimizer_kind::sgd: st = std::make_unique<torch::optim::SGDParamState>(); break;
    case optimizer_kind::rmsprop: st = std::make_unique<torch::optim::RMSpropParamState>(); break;
  }
  const auto a = access(o.kind, *st);
  for (const auto field : state_names(o)) a.set(std::string(field), torch::zeros_like(p));
  return st;
}

std::int64_t step_of(optimizer_kind k, const torch::optim::OptimizerParamState& st) {
  switch (k) {
    case optimizer_kind::adam: return static_cast<const torch::optim::AdamParamState&>(st).step();
    case optimizer_kind::adamw: return static_cast<const torch::optim::AdamWParamState&>(st).step();
    case optimizer_kind::rmsprop: return static_cast<const torch::optim::RMSpropParamState&>(st).step();
    case optimizer_kind::sgd: break;
  }
  return 0;
}

void set_step_of(optimizer_kind k, torch::optim::OptimizerParamState& st, std::int64_t step) {
  switch (k) {
    case optimizer_kind::adam: static_cast<torch::optim::AdamParamState&>(st).step(step); break;
    case optimizer_kind::adamw: static_cast<torch::optim::AdamWParamState&>(st).step(step); break;
    case optimizer_kind::rmsprop: static_cast<torch::optim::RMSpropParamState&>(st).step(step); break;
    case optimizer_kind::sgd: break;
  }
}

}  // namespace

optimizer::optimizer(const optimizer_options& o, std::vector<at::Tensor> params, std::vector<piece> pieces)
    : o_(o),
      params_(std::move(params)),
      pieces_(std::move(pieces)),
      per_param_(state_names(o).size()),
      libtorch_(make_libtorch(o, params_)) {
  if (per_param_ == 0) return;  // SGD without momentum keeps nothing
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    libtorch_->state()[key_of(p)] =
        fresh_state(o_, sharded() ? at::empty({static_cast<std::int64_t>(pieces_[i].count)}, p.options()) : p);
  }
  for (const auto& p : params_) {
    const auto a = access(o_.kind, *libtorch_->state()[key_of(p)]);
    for (const auto field : state_names(o_)) state_.push_back(a.get(std::string(field)));
  }
}

void optimizer::bind(const torch::nn::Module& model) {
  set_group_options(*libtorch_, o_);
  state_.clear();
  if (per_param_ == 0) return;
  std::unordered_map<const void*, std::string> names;
  for (const auto& item : model.named_parameters()) names.emplace(item.value().unsafeGetTensorImpl(), item.key());
  const std::string kind(name(o_.kind));
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    const auto shape = sharded() ? std::vector<std::int64_t>{static_cast<std::int64_t>(pieces_[i].count)} : p.sizes().vec();
    const auto& who = names[p.unsafeGetTensorImpl()];
    const auto it = libtorch_->state().find(key_of(p));
    if (it == libtorch_->state().end()) bad_state("no " + kind + " state for " + who);
    const auto a = access(o_.kind, *it->second);
    for (const auto field : state_names(o_)) {
      const std::string f(field);
      auto t = a.get(f);
      if (!t.defined() || t.sizes().vec() != shape || t.scalar_type() != at::kFloat) {
        bad_state("the " + kind + " state of " + who + " has no f32 " + f + " of its shape (saved with another --momentum "
             "or --centered? resume with the checkpoint's)");
      }
      t = t.contiguous();
      a.set(f, t);
      state_.push_back(t);
    }
  }
}

std::optional<std::int64_t> optimizer::recorded_step(const torch::nn::Module& model) const {
  if (!counts_steps(o_.kind)) return std::nullopt;
  std::optional<std::int64_t> step;
  for (const auto& item : model.named_parameters()) {
    const auto it = libtorch_->state().find(key_of(item.value()));
    if (it == libtorch_->state().end()) continue;  // bind() has checked the trained ones
    const auto s = step_of(o_.kind, *it->second);
    if (s < 0) bad_state("a negative " + std::string(name(o_.kind)) + " step (" + item.key() + ")");
    if (step && *step != s) bad_state("the parameters' " + std::string(name(o_.kind)) + " steps differ (" + item.key() + ")");
    step = s;
  }
  return step.value_or(0);
}

void optimizer::set_step(std::int64_t step) {
  for (auto& [key, st] : libtorch_->state()) set_step_of(o_.kind, *st, step);
}

void optimizer::step(std::int64_t step, std::span<const std::span<const float>> grads) {
  std::vector<std::span<float>> spans(per_param_);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].requires_grad() || grads[i].empty()) continue;  // frozen, or another rank's piece
    auto param = floats(params_[i]);
    if (sharded()) param = param.subspan(pieces_[i].begin, pieces_[i].count);
    for (std::size_t k = 0; k < per_param_; ++k) spans[k] = floats(state_[i * per_param_ + k]);
    optimizer_step(param, grads[i], spans, step, o_);
  }
  set_step(step);
}

std::uint64_t optimizer::state_bytes() const {
  std::uint64_t n = 0;
  for (const auto& t : state_) n += static_cast<std::uint64_t>(t.nbytes());
  return n;
}

}  // namespace ferry::trainer
