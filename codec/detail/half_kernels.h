// ferry/codec/detail/half_kernels.h: INTERNAL. The SIMD kernels behind the
// bulk conversions of codec/half.h. Not part of the API.
#pragma once

#include <cstddef>

#include "ferry/wire/byte_order.h"

namespace ferry::codec::detail {

#if defined(__x86_64__)
// Requires AVX2 (bf16) or AVX2 + F16C (f16); n elements each side.
void to_bf16_avx2(const float* in, bf16* out, std::size_t n) noexcept;
void bf16_to_float_avx2(const bf16* in, float* out, std::size_t n) noexcept;
void to_f16_f16c(const float* in, f16* out, std::size_t n) noexcept;
void f16_to_float_f16c(const f16* in, float* out, std::size_t n) noexcept;
#elif defined(__aarch64__)
void to_bf16_neon(const float* in, bf16* out, std::size_t n) noexcept;
void bf16_to_float_neon(const bf16* in, float* out, std::size_t n) noexcept;
void to_f16_neon(const float* in, f16* out, std::size_t n) noexcept;
void f16_to_float_neon(const f16* in, float* out, std::size_t n) noexcept;
#endif

}  // namespace ferry::codec::detail
