// Small helpers every part of ferry-train uses (INTERNAL to ferry-train):
// a float32 tensor's elements as a span, the seconds since a moment, and
// throwing a trainer error.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include <ATen/core/Tensor.h>

#include "ferry/trainer/error.h"

namespace ferry::trainer {

/// The elements of `t` (float32, contiguous), in place.
inline std::span<float> floats(const at::Tensor& t) {
  return {t.data_ptr<float>(), static_cast<std::size_t>(t.numel())};
}

/// Seconds from `t` to now, on the steady clock.
inline double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// Throws `code` with `text` (ferry::exception).
[[noreturn]] inline void fail(error_code code, std::string text) {
  throw ferry::exception(error(code, std::move(text)));
}

}  // namespace ferry::trainer
