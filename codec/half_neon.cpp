// NEON kernels of codec/half.h (aarch64, where Advanced SIMD and the
// FCVTN/FCVTL half-precision conversions are baseline). Each produces exactly
// the bits of the scalar functions in half.h; tails use those directly.
#include <arm_neon.h>

#include <cstring>

#include "ferry/codec/detail/half_kernels.h"
#include "ferry/codec/half.h"

namespace ferry::codec::detail {
namespace {

uint32x4_t load4x32(const void* p) noexcept {
  uint32x4_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Four f32 patterns -> four bf16 patterns in the low halves of 32-bit lanes.
uint32x4_t narrow_bf16(uint32x4_t u) noexcept {
  const uint32x4_t abs = vandq_u32(u, vdupq_n_u32(0x7FFFFFFF));
  const uint32x4_t is_nan = vcgtq_u32(abs, vdupq_n_u32(0x7F800000));
  const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
  const uint32x4_t rounded = vshrq_n_u32(vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7FFF))), 16);
  const uint32x4_t quiet = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(0x40));
  return vbslq_u32(is_nan, quiet, rounded);
}

}  // namespace

void to_bf16_neon(const float* in, bf16* out, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint16x8_t h = vcombine_u16(vmovn_u32(narrow_bf16(load4x32(in + i))),
                                      vmovn_u32(narrow_bf16(load4x32(in + i + 4))));
    std::memcpy(out + i, &h, sizeof h);
  }
  for (; i < n; ++i) out[i] = to_bf16(in[i]);
}

void bf16_to_float_neon(const bf16* in, float* out, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    uint16x4_t h;
    std::memcpy(&h, in + i, sizeof h);
    const uint32x4_t w = vshll_n_u16(h, 16);
    std::memcpy(out + i, &w, sizeof w);
  }
  for (; i < n; ++i) out[i] = to_float(in[i]);
}

void to_f16_neon(const float* in, f16* out, std::size_t n) noexcept {
  // FCVTN rounds by FPCR (nearest-even on Linux) and, with default-NaN mode
  // off, quiets NaNs keeping the top payload bits, as half.h specifies.
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    float32x4_t f;
    std::memcpy(&f, in + i, sizeof f);
    const float16x4_t h = vcvt_f16_f32(f);
    std::memcpy(out + i, &h, sizeof h);
  }
  for (; i < n; ++i) out[i] = to_f16(in[i]);
}

void f16_to_float_neon(const f16* in, float* out, std::size_t n) noexcept {
  // FCVTL quiets signalling NaNs; half.h promises exact widening, so NaN
  // lanes are rebuilt from their bits: sign, all-ones exponent, payload << 13.
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    uint16x4_t h;
    std::memcpy(&h, in + i, sizeof h);
    const uint32x4_t f = vreinterpretq_u32_f32(vcvt_f32_f16(vreinterpret_f16_u16(h)));
    const uint32x4_t h32 = vmovl_u16(h);
    const uint32x4_t is_nan = vcgtq_u32(vandq_u32(h32, vdupq_n_u32(0x7FFF)), vdupq_n_u32(0x7C00));
    const uint32x4_t exact = vorrq_u32(
        vorrq_u32(vshlq_n_u32(vandq_u32(h32, vdupq_n_u32(0x8000)), 16), vdupq_n_u32(0x7F800000)),
        vshlq_n_u32(vandq_u32(h32, vdupq_n_u32(0x03FF)), 13));
    const uint32x4_t w = vbslq_u32(is_nan, exact, f);
    std::memcpy(out + i, &w, sizeof w);
  }
  for (; i < n; ++i) out[i] = to_float(in[i]);
}

}  // namespace ferry::codec::detail
