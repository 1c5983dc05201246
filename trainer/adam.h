// ferry/trainer/adam.h: the Adam step that keeps data-parallel replicas
// bit-identical on every architecture.
//
// Ranks hold identical averaged gradients (comm/'s allreduce gives every
// rank the same bits), but identical gradients do not make identical
// parameters when compilers contract a*b+c into one fused multiply-add on
// one ISA (aarch64, s390x) and not on another (x86-64 without -march), or
// when a library's pow() differs. This step uses only IEEE-754 operations
// that are correctly rounded everywhere (+, -, *, /, sqrt), in float, in
// a fixed order, compiled with -ffp-contract=off; the bias corrections
// beta^step are formed by exact-order repeated squaring in double, not by
// pow(). The same inputs give the same bits on x86-64, aarch64, armhf and
// s390x; tests/trainer/adam_test.cpp checks a golden CRC on each.
//
// The formula is PyTorch's Adam (torch.optim.Adam, amsgrad off, the
// single-tensor path), with PyTorch's rounding points: the step size
// lr / (1 - beta1^t) and sqrt(1 - beta2^t) are doubles rounded to float
// once, as a Python float becomes a float tensor's scalar:
//
//   t     += 1
//   g      = grad + weight_decay * param               (when weight_decay != 0)
//   m      = m * beta1 + g * (1 - beta1)
//   v      = v * beta2 + (g * g) * (1 - beta2)
//   denom  = sqrt(v) / sqrt(1 - beta2^t) + eps
//   param  = param + (-lr / (1 - beta1^t)) * (m / denom)
//
// Results agree with LibTorch's own Adam to a few ulps (its vectorised
// kernels round differently), not bit for bit.
#pragma once

#include <cstdint>
#include <span>

namespace ferry::trainer {

struct adam_options {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

/// beta^step by repeated squaring in double: the same bits everywhere.
[[nodiscard]] double power(double beta, std::int64_t step) noexcept;

/// One Adam step over one parameter tensor, in place. `step` is the step
/// count after this update (1 for the first). Requires: every span has
/// param's size; step >= 1.
void adam_step(std::span<float> param, std::span<const float> grad, std::span<float> exp_avg,
               std::span<float> exp_avg_sq, std::int64_t step, const adam_options& o) noexcept;

}  // namespace ferry::trainer
