// AVX2 and F16C kernels of codec/half.h, compiled with -mavx2 -mf16c and
// called only when the CPU has them. Each produces exactly the bits of the
// scalar functions in half.h; the tails use those functions directly.
#include <immintrin.h>

#include <cstring>

#include "ferry/codec/detail/half_kernels.h"
#include "ferry/codec/half.h"

namespace ferry::codec::detail {
namespace {

__m256i load8x32(const void* p) noexcept {
  __m256i v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
__m128i load8x16(const void* p) noexcept {
  __m128i v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Eight f32 patterns -> eight bf16 patterns in the low halves of 32-bit lanes.
__m256i narrow_bf16(__m256i u) noexcept {
  const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, is_nan);
}

}  // namespace

void to_bf16_avx2(const float* in, bf16* out, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = narrow_bf16(load8x32(in + i));
    const __m256i b = narrow_bf16(load8x32(in + i + 8));
    // packus interleaves 128-bit lanes; the permute puts a0..7 before b0..7.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
    std::memcpy(out + i, &packed, sizeof packed);
  }
  for (; i < n; ++i) out[i] = to_bf16(in[i]);
}

void bf16_to_float_avx2(const bf16* in, float* out, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(load8x16(in + i)), 16);
    std::memcpy(out + i, &w, sizeof w);
  }
  for (; i < n; ++i) out[i] = to_float(in[i]);
}

void to_f16_f16c(const float* in, f16* out, std::size_t n) noexcept {
  // vcvtps2ph with an immediate rounding mode ignores MXCSR.RC; it quiets
  // NaNs keeping the top payload bits, as half.h specifies.
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 f;
    std::memcpy(&f, in + i, sizeof f);
    const __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    std::memcpy(out + i, &h, sizeof h);
  }
  for (; i < n; ++i) out[i] = to_f16(in[i]);
}

void f16_to_float_f16c(const f16* in, float* out, std::size_t n) noexcept {
  // vcvtph2ps quiets signalling NaNs; half.h promises exact widening, so NaN
  // lanes are rebuilt from their bits: sign, all-ones exponent, payload << 13.
  const __m256i exp_mask = _mm256_set1_epi32(0x7C00);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = load8x16(in + i);
    const __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h));
    const __m256i h32 = _mm256_cvtepu16_epi32(h);
    const __m256i abs = _mm256_and_si256(h32, _mm256_set1_epi32(0x7FFF));
    const __m256i is_nan = _mm256_cmpgt_epi32(abs, exp_mask);
    const __m256i exact = _mm256_or_si256(
        _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x8000)), 16),
                        _mm256_set1_epi32(0x7F800000)),
        _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x03FF)), 13));
    const __m256i w = _mm256_blendv_epi8(f, exact, is_nan);
    std::memcpy(out + i, &w, sizeof w);
  }
  for (; i < n; ++i) out[i] = to_float(in[i]);
}

}  // namespace ferry::codec::detail
