// ferry/comm/detail/reduce.h: INTERNAL. The reduction kernels every
// allreduce algorithm uses: out = op(a, b), element by element, for every
// reduce_op and every dtype a reduction is defined on. Not part of the API.
//
// Every rank, on every architecture, computes the same bits from the same
// operands. IEEE arithmetic alone does not promise that: which NaN comes out
// of `NaN + NaN`, and which NaN `inf - inf` makes, is each CPU's choice
// (x86 makes 0xFFC00000, ARM and s390x 0x7FC00000), and a hardware min or
// max picks an operand by its own rule. So the kernels fix those cases:
//
// Floating point (f32, f64; f16 and bf16 are widened to f32, combined, and
// rounded to nearest even once per combine, which gives exactly the 16-bit
// IEEE result: f32 has more than twice their precision):
//   - a NaN operand gives itself, quieted; two NaNs give the first operand
//     (`a`), quieted;
//   - a NaN made from numbers (inf - inf, 0 * inf) is the canonical quiet
//     NaN, positive: 0x7FC00000 (f32, and so 0x7E00 f16, 0x7FC0 bf16),
//     0x7FF8000000000000 (f64);
//   - min and max: a NaN operand wins by the rule above; min(-0, +0) is -0
//     and max(-0, +0) is +0 in either order; otherwise the smaller (larger)
//     operand;
//   - sum and product are one IEEE operation, rounded to nearest even.
// Integers: sum and product wrap around (modulo 2^bits, two's complement for
// the signed types), min and max compare as the type's values, band, bor
// and bxor are bitwise. bool: sum and max are or, product and min are and,
// band, bor and bxor are and, or and xor; a byte other than 0 or 1 is not a
// bool (first_bad_bool finds it: the caller refuses it naming the sender).
// avg: reduce() sums, and divide() makes the one division by the world size
// where the sum is complete (floats: one IEEE division, the NaN rule above;
// integers: truncated toward zero, as C++ and NCCL divide). Not on bool.
// FP8 takes no reduction (reducible() is false). Complex takes sum and avg,
// part by part as its part type.
//
// The kernels are written with GCC's vector extensions (16-byte vectors),
// lane-wise IEEE arithmetic with no contraction, which the compiler maps to
// the SIMD unit where the target has an IEEE-exact one (SSE2 on x86-64,
// NEON on aarch64) and to scalar instructions elsewhere (armhf's VFP, an
// s390x target without the vector facility): the same bits either way. The
// rules above go lane by lane only where a lane needs them (a NaN; a zero
// under min or max). A world of one runs no kernel: its buffer is returned
// as it was.
#pragma once

#include <cstddef>

#include "ferry/codec/dtype.h"
#include "ferry/comm/options.h"
#include "ferry/wire/byte_order.h"

namespace ferry::comm::detail {

/// Whether `op` is defined on `t`: sum, avg, min, max and product on the
/// integers, f16, bf16, f32 and f64; band, bor and bxor on the integers and
/// bool; sum, min, max and product on bool too (not avg). Never on FP8.
[[nodiscard]] bool reducible(reduce_op op, codec::dtype t) noexcept;

/// out[i] = op(a[i], b[i]) for n elements of `t` (avg: the sum). `a` and
/// `out` are in host byte order, `b` in `b_order` (swapped as it is read).
/// `out` may be `a` or `b` exactly; no other overlap. Requires
/// reducible(op, t).
void reduce(reduce_op op, codec::dtype t, std::byte* out, const std::byte* a, const std::byte* b,
            wire::byte_order b_order, std::size_t n) noexcept;

/// data[i] = data[i] / divisor for n elements of `t` in host order: avg's
/// division. Requires reducible(reduce_op::avg, t), divisor >= 1.
void divide(codec::dtype t, std::byte* data, std::size_t n, std::uint32_t divisor) noexcept;

/// The index of the first byte of `data[0, n)` that is neither 0 nor 1, or n.
[[nodiscard]] std::size_t first_bad_bool(const std::byte* data, std::size_t n) noexcept;

}  // namespace ferry::comm::detail
