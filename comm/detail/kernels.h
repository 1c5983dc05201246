// ferry/comm/detail/kernels.h: INTERNAL. The arithmetic of the ring
// allreduce: the sum of two chunks, and rounding to 16 bits with error
// feedback. Not part of the API.
//
// Every kernel is lane-wise IEEE arithmetic (vector extensions let -O2 use
// the SIMD unit where there is one), so it gives the same bits as the
// plain scalar loop on every architecture: the ring's results are
// bit-identical across ranks whatever mix of machines runs it.
#pragma once

#include <cstddef>
#include <span>

#include "ferry/comm/frame.h"

namespace ferry::comm::detail {

/// out[i] = a[i] + b[i]. `out` may be `a` (each block is loaded before it
/// is stored); `b` must not overlap `out`.
void add(float* out, const float* a, const float* __restrict b, std::size_t n) noexcept;

/// Rounds `in + residual` (just `in` when `residual` is empty: adding 0
/// would turn -0 into +0) to `enc` (bf16 or f16) as a host-order payload in
/// `out`; keeps what the rounding lost in `residual` (non-finite losses are
/// dropped, not carried) and, if `back` is not empty, the rounded values
/// widened again. The rounding and widening are the frame codec's
/// (frame.h). Requires: out.size() == 2 * in.size(); residual and back
/// empty or in.size().
void quantize(encoding enc, std::span<const float> in, std::span<float> residual, std::span<std::byte> out,
              std::span<float> back) noexcept;

}  // namespace ferry::comm::detail
