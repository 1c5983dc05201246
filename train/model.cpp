// ferry-train's model (model.h): what main.cpp asks before a job starts.
#include <torch/torch.h>

#include "job.h"
#include "model.h"

namespace ferry::trainer {

// LibTorch 1.13 has no float16 matrix product on the CPU; on aarch64,
// oneDNN's bfloat16 one needs the CPU's BF16 instructions. One small
// model's step, tried, finds either.
std::optional<std::string> precision_unsupported(at::ScalarType precision, activation act, bool batchnorm) {
  if (precision == at::kFloat) return std::nullopt;
  try {
    // LibTorch 1.13's CPU autocast takes bfloat16 only; the matrix product
    // says why float16 could not run at all.
    const auto a = torch::ones({2, 2}, at::TensorOptions().dtype(precision));
    (void)at::mm(a, a);
    mlp_impl probe(4, {4}, 2, act, batchnorm);
    at::Tensor out;
    {
      autocast_scope low(precision);
      out = probe.forward(torch::ones({2, 4}));
    }
    out.to(at::kFloat).sum().backward();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {  // oneDNN's, where it has no kernel for the type (aarch64 without BF16)
    return e.what();
  }
  return std::nullopt;
}

}  // namespace ferry::trainer
