// Two small helpers every part of ferry-train uses (INTERNAL to
// ferry-train): a float32 tensor's elements as a span, and the seconds
// since a moment.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>

#include <ATen/core/Tensor.h>

namespace ferry::trainer {

/// The elements of `t` (float32, contiguous), in place.
inline std::span<float> floats(const at::Tensor& t) {
  return {t.data_ptr<float>(), static_cast<std::size_t>(t.numel())};
}

/// Seconds from `t` to now, on the steady clock.
inline double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace ferry::trainer
