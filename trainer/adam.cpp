// Compiled with -ffp-contract=off (trainer/CMakeLists.txt): see adam.h.
#include "ferry/trainer/adam.h"

#include <cassert>
#include <cmath>
#include <cstddef>

namespace ferry::trainer {

double power(double beta, std::int64_t step) noexcept {
  double result = 1.0;
  double base = beta;
  for (auto e = static_cast<std::uint64_t>(step); e != 0; e >>= 1) {
    if (e & 1) result *= base;
    base *= base;
  }
  return result;
}

void adam_step(std::span<float> param, std::span<const float> grad, std::span<float> exp_avg,
               std::span<float> exp_avg_sq, std::int64_t step, const adam_options& o) noexcept {
  assert(grad.size() == param.size() && exp_avg.size() == param.size() && exp_avg_sq.size() == param.size());
  assert(step >= 1);
  const auto beta1 = static_cast<float>(o.beta1);
  const auto beta2 = static_cast<float>(o.beta2);
  const auto one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  const auto one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  const auto eps = static_cast<float>(o.eps);
  const auto weight_decay = static_cast<float>(o.weight_decay);
  const auto neg_step_size = static_cast<float>(-(o.lr / (1.0 - power(o.beta1, step))));
  const auto bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - power(o.beta2, step)));
  for (std::size_t i = 0; i < param.size(); ++i) {
    float g = grad[i];
    if (weight_decay != 0.0f) g = g + weight_decay * param[i];
    const float m = exp_avg[i] * beta1 + g * one_minus_beta1;
    const float v = exp_avg_sq[i] * beta2 + (g * g) * one_minus_beta2;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float denom = std::sqrt(v) / bias_correction2_sqrt + eps;
    param[i] = param[i] + neg_step_size * (m / denom);
  }
}

}  // namespace ferry::trainer
