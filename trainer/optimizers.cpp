// Compiled with -ffp-contract=off (trainer/CMakeLists.txt): see optimizers.h.
#include "ferry/trainer/optimizers.h"

#include <cassert>
#include <cmath>
#include <cstddef>

namespace ferry::trainer {
namespace {

// g = grad + weight_decay * param, as LibTorch's grad.add(param, weight_decay).
float decayed(float grad, float param, float weight_decay) noexcept {
  return weight_decay != 0.0f ? grad + weight_decay * param : grad;
}

void sgd(std::span<float> param, std::span<const float> grad, std::span<float> buf, std::int64_t step,
         const optimizer_options& o) noexcept {
  const auto weight_decay = static_cast<float>(o.weight_decay);
  const auto momentum = static_cast<float>(o.momentum);
  const auto one_minus_dampening = static_cast<float>(1.0 - o.dampening);
  const auto neg_lr = static_cast<float>(-o.lr);
  for (std::size_t i = 0; i < param.size(); ++i) {
    float d = decayed(grad[i], param[i], weight_decay);
    if (!buf.empty()) {
      const float b = step == 1 ? d : buf[i] * momentum + d * one_minus_dampening;
      buf[i] = b;
      d = o.nesterov ? d + momentum * b : b;
    }
    param[i] = param[i] + neg_lr * d;
  }
}

void rmsprop(std::span<float> param, std::span<const float> grad, std::span<const std::span<float>> state,
             const optimizer_options& o) noexcept {
  const auto weight_decay = static_cast<float>(o.weight_decay);
  const auto alpha = static_cast<float>(o.alpha);
  const auto one_minus_alpha = static_cast<float>(1.0 - o.alpha);
  const auto eps = static_cast<float>(o.eps);
  const auto momentum = static_cast<float>(o.momentum);
  const auto neg_lr = static_cast<float>(-o.lr);
  const std::span<float> sq = state[0];
  std::size_t next = 1;
  const std::span<float> buf = o.momentum > 0 ? state[next++] : std::span<float>();
  const std::span<float> ga = o.centered ? state[next++] : std::span<float>();
  for (std::size_t i = 0; i < param.size(); ++i) {
    const float g = decayed(grad[i], param[i], weight_decay);
    const float s = sq[i] * alpha + (g * g) * one_minus_alpha;
    sq[i] = s;
    float avg = 0;
    if (!ga.empty()) {
      const float a = ga[i] * alpha + g * one_minus_alpha;
      ga[i] = a;
      avg = std::sqrt(s - a * a) + eps;
    } else {
      avg = std::sqrt(s) + eps;
    }
    if (!buf.empty()) {
      const float b = buf[i] * momentum + g / avg;
      buf[i] = b;
      param[i] = param[i] + neg_lr * b;
    } else {
      param[i] = param[i] + neg_lr * (g / avg);
    }
  }
}

}  // namespace

std::string_view name(optimizer_kind k) noexcept {
  switch (k) {
    case optimizer_kind::adam: return "adam";
    case optimizer_kind::adamw: return "adamw";
    case optimizer_kind::sgd: return "sgd";
    case optimizer_kind::rmsprop: return "rmsprop";
  }
  return "?";
}

std::optional<optimizer_kind> optimizer_from_name(std::string_view n) noexcept {
  for (const auto k : all_optimizers) {
    if (name(k) == n) return k;
  }
  return std::nullopt;
}

optimizer_options defaults(optimizer_kind k) noexcept {
  optimizer_options o;
  o.kind = k;
  if (k == optimizer_kind::adamw) o.weight_decay = 1e-2;
  if (k == optimizer_kind::sgd || k == optimizer_kind::rmsprop) o.lr = 1e-2;
  return o;
}

std::optional<std::string> invalid(const optimizer_options& o) {
  const auto number = [](double v) { return std::to_string(v); };
  if (!(o.lr >= 0)) return "invalid learning rate " + number(o.lr) + " (not >= 0)";
  if (!(o.weight_decay >= 0)) return "invalid weight decay " + number(o.weight_decay) + " (not >= 0)";
  if (!(o.eps >= 0)) return "invalid eps " + number(o.eps) + " (not >= 0)";
  if (!(o.momentum >= 0)) return "invalid momentum " + number(o.momentum) + " (not >= 0)";
  if (!(o.alpha >= 0)) return "invalid alpha " + number(o.alpha) + " (not >= 0)";
  if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1)) return "invalid betas (each in [0, 1))";
  if (o.kind == optimizer_kind::sgd && o.nesterov && !(o.momentum > 0 && o.dampening == 0)) {
    return "Nesterov momentum needs a momentum above 0 and zero dampening";
  }
  return std::nullopt;
}

std::vector<std::string_view> state_names(const optimizer_options& o) {
  switch (o.kind) {
    case optimizer_kind::adam:
    case optimizer_kind::adamw: return {"exp_avg", "exp_avg_sq"};
    case optimizer_kind::sgd:
      if (o.momentum != 0) return {"momentum_buffer"};
      return {};
    case optimizer_kind::rmsprop: {
      std::vector<std::string_view> n{"square_avg"};
      if (o.momentum > 0) n.emplace_back("momentum_buffer");
      if (o.centered) n.emplace_back("grad_avg");
      return n;
    }
  }
  return {};
}

bool counts_steps(optimizer_kind k) noexcept { return k != optimizer_kind::sgd; }

void optimizer_step(std::span<float> param, std::span<const float> grad, std::span<const std::span<float>> state,
                    std::int64_t step, const optimizer_options& o) noexcept {
  assert(grad.size() == param.size() && step >= 1);
  assert(state.size() == state_names(o).size());
  const adam_options adam{.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay};
  switch (o.kind) {
    case optimizer_kind::adam: adam_step(param, grad, state[0], state[1], step, adam); return;
    case optimizer_kind::adamw: {
      if (o.weight_decay != 0) {
        const auto keep = static_cast<float>(1.0 - o.lr * o.weight_decay);
        for (auto& p : param) p = p * keep;
      }
      auto plain = adam;
      plain.weight_decay = 0;
      adam_step(param, grad, state[0], state[1], step, plain);
      return;
    }
    case optimizer_kind::sgd: sgd(param, grad, state.empty() ? std::span<float>() : state[0], step, o); return;
    case optimizer_kind::rmsprop: rmsprop(param, grad, state, o); return;
  }
}

}  // namespace ferry::trainer
