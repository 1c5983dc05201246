// ferry/trainer/optimizers.h: the optimizers ferry-train steps with (Adam,
// AdamW, SGD, RMSprop), each giving the same bits on every architecture.
//
// Built like adam.h, whose Adam is one of them: only correctly rounded
// IEEE-754 operations (+, -, *, /, sqrt) in float, in a fixed order,
// compiled with -ffp-contract=off; every hyper-parameter is a double
// rounded to float once, as LibTorch turns a Scalar into a float tensor's
// operand. The formulas are LibTorch 1.13's (torch::optim, equal to
// PyTorch's single-tensor paths); results agree with LibTorch's to a few
// ulps (its vectorised kernels fuse and round differently), not bit for
// bit. With t the step count after this update (1 first) and
// g = grad + weight_decay * param where weight decay applies:
//
//   adam     adam.h
//   adamw    param = param * (1 - lr * weight_decay)        (decoupled)
//            then adam.h's step with weight_decay 0
//   sgd      buf   = g                                      (t = 1)
//            buf   = buf * momentum + g * (1 - dampening)   (t > 1)
//            d     = nesterov ? g + momentum * buf : buf    (momentum != 0; else d = g)
//            param = param + (-lr) * d
//   rmsprop  sq    = sq * alpha + (g * g) * (1 - alpha)
//            ga    = ga * alpha + g * (1 - alpha)           (centered)
//            avg   = sqrt(sq - ga * ga) + eps               (centered; else sqrt(sq) + eps)
//            buf   = buf * momentum + g / avg               (momentum > 0)
//            param = param + (-lr) * buf                    (momentum > 0)
//            param = param + (-lr) * (g / avg)              (momentum 0)
//
// Each parameter's state tensors, in state_names() order, carry
// LibTorch's names (exp_avg, exp_avg_sq; momentum_buffer; square_avg,
// momentum_buffer, grad_avg), so checkpoints hold them as LibTorch's
// optimizers do (checkpoint/torch/torch.h).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/trainer/adam.h"

namespace ferry::trainer {

enum class optimizer_kind { adam, adamw, sgd, rmsprop };

inline constexpr optimizer_kind all_optimizers[] = {optimizer_kind::adam, optimizer_kind::adamw,
                                                    optimizer_kind::sgd, optimizer_kind::rmsprop};

/// "adam", "adamw", "sgd", "rmsprop" (LibTorch's class names in lower case).
[[nodiscard]] std::string_view name(optimizer_kind k) noexcept;
[[nodiscard]] std::optional<optimizer_kind> optimizer_from_name(std::string_view name) noexcept;

/// Every optimizer's hyper-parameters under LibTorch's names; each kind
/// reads its own. defaults() gives LibTorch's defaults per kind.
struct optimizer_options {
  optimizer_kind kind = optimizer_kind::adam;
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;  ///< adam, adamw
  double eps = 1e-8;                  ///< adam, adamw, rmsprop
  double weight_decay = 0.0;          ///< all (adamw: decoupled)
  double momentum = 0.0;              ///< sgd, rmsprop
  double dampening = 0.0;             ///< sgd
  bool nesterov = false;              ///< sgd
  double alpha = 0.99;                ///< rmsprop
  bool centered = false;              ///< rmsprop
};

/// LibTorch 1.13's defaults for `k`: lr 1e-3 (adam, adamw), 1e-2
/// (rmsprop); SGD has none in LibTorch, ferry takes 1e-2. Weight decay
/// 1e-2 for adamw, 0 for the others.
[[nodiscard]] optimizer_options defaults(optimizer_kind k) noexcept;

/// Why `o` cannot run, as LibTorch's option checks say it (a negative
/// rate, Nesterov without momentum or with dampening, ...), or nothing.
[[nodiscard]] std::optional<std::string> invalid(const optimizer_options& o);

/// The state each parameter carries, in the order optimizer_step() takes
/// it: {exp_avg, exp_avg_sq} (adam, adamw); {momentum_buffer} (sgd with
/// momentum; none without); {square_avg[, momentum_buffer][, grad_avg]}
/// (rmsprop, with momentum, centered). Each is the parameter's size,
/// zeros before the first step.
[[nodiscard]] std::vector<std::string_view> state_names(const optimizer_options& o);

/// Whether the state records its own step count (LibTorch's adam, adamw
/// and rmsprop states have `step`; sgd's has not).
[[nodiscard]] bool counts_steps(optimizer_kind k) noexcept;

/// One update of one parameter tensor, in place. `step` is the count of
/// updates after this one (1 for the first). Requires: grad and every
/// state span have param's size, state.size() == state_names(o).size(),
/// step >= 1.
void optimizer_step(std::span<float> param, std::span<const float> grad, std::span<const std::span<float>> state,
                    std::int64_t step, const optimizer_options& o) noexcept;

}  // namespace ferry::trainer
