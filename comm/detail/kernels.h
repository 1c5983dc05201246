// ferry/comm/detail/kernels.h: INTERNAL. The arithmetic of the compressed
// ring allreduce: its step (widen, add, average, round to 16 bits with
// error feedback) fused into one pass, and the f32 sum it uses. Every other
// reduction goes through reduce.h. Not part of the API.
//
// Every kernel is lane-wise IEEE arithmetic (vector extensions let the
// compiler use the SIMD unit where there is one), so it gives the same bits
// as the plain scalar loop on every architecture: the ring's results are
// bit-identical across ranks whatever mix of machines runs it.
#pragma once

#include <cstddef>
#include <span>

#include "ferry/comm/frame.h"
#include "ferry/wire/byte_order.h"

namespace ferry::comm::detail {

/// out[i] = a[i] + b[i]. `out` may be `a` (each block is loaded before it
/// is stored); `b` must not overlap `out`.
void add(float* out, const float* a, const float* __restrict b, std::size_t n) noexcept;

/// One chunk of the compressed ring, in a single pass over memory: for
/// each element i,
///   s = a[i]
///   s = s + widen(received[i])      if `received` is set (16-bit values
///                                   of `enc` in `received_order`)
///   s = s / divisor                 if `divisor` is not 0 (an average)
///   s = s + residual[i]             if `residual` is set (error feedback;
///                                   not added otherwise: 0 would turn -0
///                                   into +0)
///   h = round(s) to `enc`           (codec/half.h: nearest even, NaN kept
///                                   and quieted)
///   out[i] = h                      (host byte order)
///   residual[i] = s - widen(h)      if finite, else 0 (losses of infinities
///                                   and NaNs are dropped, not carried)
///   back[i] = widen(h)              if `back` is set
/// Each operation is one IEEE binary32 operation, in this order (where
/// two NaNs meet in an addition, which payload survives is the CPU's rule,
/// as for every IEEE addition). `back`
/// may be `a`; nothing else may overlap. Requires: enc is bf16 or f16;
/// out holds 2 * n bytes, received (if set) 2 * n bytes.
struct compress_step {
  encoding enc = encoding::bf16;
  std::size_t n = 0;
  const float* a = nullptr;
  const std::byte* received = nullptr;
  wire::byte_order received_order = wire::host_order;
  float divisor = 0.0f;
  float* residual = nullptr;
  float* back = nullptr;
  std::byte* out = nullptr;
};
void compress(const compress_step& s) noexcept;

/// out[i] = widen(in[i]) for 16-bit values of `enc` (bf16 or f16) in
/// `order`: exact (frame.h's decode_f32_payload, without its staging copy
/// for bf16). Requires: in holds 2 * n bytes.
void widen(encoding enc, wire::byte_order order, const std::byte* in, float* out, std::size_t n) noexcept;

}  // namespace ferry::comm::detail
