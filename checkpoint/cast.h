// ferry/checkpoint/cast.h: element conversions for converting and comparing
// checkpoints (what `ferry convert --cast` and `ferry diff` use).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "ferry/base/error.h"
#include "ferry/codec/dtype.h"

namespace ferry::checkpoint {

/// Whether `cast()` can write this dtype: f16, bf16, f32, f64.
[[nodiscard]] bool is_cast_target(codec::dtype t) noexcept;

/// Converts host-order elements of floating dtype `from` (f16, bf16, f32,
/// f64, every FP8) to `to` (is_cast_target), rounding to nearest
/// even (f64 to f16 or bf16 rounds through f32). NaN stays NaN, infinities
/// and signed zeros stay. Errors: bad_value when either dtype is not
/// floating or `to` is not a cast target.
// Requires: in.size() is a multiple of from's size.
[[nodiscard]] result<std::vector<std::byte>> cast(codec::dtype from, std::span<const std::byte> in, codec::dtype to);

/// The host-order element at `p` as a double (exact except 64-bit integers
/// beyond 2^53, which round).
[[nodiscard]] double element_as_double(codec::dtype t, const std::byte* p) noexcept;

}  // namespace ferry::checkpoint
