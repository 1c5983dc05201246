// ferry/checkpoint/gguf/ggml_dequantize.cpp: ferry's reference dequantizers of
// every ggml type (ggml_types.h, dequantize()).
//
// Each function below turns one block into its block_elements floats,
// reading every multi-byte field in the block's byte order. To give ggml's
// bits, each one performs the float operations of ggml's dequantize_row_*
// (ggml-quants.c) in the same order and association, with the same integer
// to float conversions: (float)q * d is not d * (float)q's sibling
// (d * sc) * q, and a * b - c must not be contracted into a fused
// multiply-add. GCC does not contract in ISO C++ mode (-std=c++20); clang
// does unless told not to, hence the pragma.
#include <array>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ferry/checkpoint/gguf/ggml_block.h"
#include "ferry/checkpoint/gguf/ggml_tables.h"
#include "ferry/checkpoint/ggml_types.h"
#include "ferry/codec/half.h"
#include "ferry/wire/bulk.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

namespace ferry::checkpoint {
namespace {

using wire::byte_order;

using detail::fl;
using block = detail::ggml_block;

// E8M0 scale halved (ggml_e8m0_to_fp32_half): 2^(x - 128), exactly.
float e8m0_half(int x) noexcept {
  const std::uint32_t bits = x < 2 ? 0x0020'0000u << x : static_cast<std::uint32_t>(x - 1) << 23;
  return std::bit_cast<float>(bits);
}

// Unsigned E4M3 scale, halved (ggml_ue4m3_to_fp32); bit 7 is ignored and
// 0x7F reads as zero, as in ggml.
float ue4m3_half(int x) noexcept {
  if (x == 0 || x == 0x7F) return 0.0f;
  const int e = (x >> 3) & 0xF;
  const int m = x & 0x7;
  const float raw = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                           : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  return raw * 0.5f;
}


// ---- 32-element blocks --------------------------------------------------

void q4_0(block b, float* y) noexcept {
  const float d = b.f16_at(0);
  for (int j = 0; j < 16; ++j) {
    const int q = b.u8(2 + static_cast<std::size_t>(j));
    y[j] = fl((q & 0x0F) - 8) * d;
    y[j + 16] = fl((q >> 4) - 8) * d;
  }
}

void q4_1(block b, float* y) noexcept {
  const float d = b.f16_at(0), m = b.f16_at(2);
  for (int j = 0; j < 16; ++j) {
    const int q = b.u8(4 + static_cast<std::size_t>(j));
    y[j] = fl(q & 0x0F) * d + m;
    y[j + 16] = fl(q >> 4) * d + m;
  }
}

// The 5th bits of Q5_0/Q5_1: element j's is bit j of the u32 qh.
int q5_high(std::uint32_t qh, int j) noexcept {
  return static_cast<int>(((qh >> j) << 4) & 0x10u);
}

void q5_0(block b, float* y) noexcept {
  const float d = b.f16_at(0);
  const std::uint32_t qh = b.u32(2);
  for (int j = 0; j < 16; ++j) {
    const int q = b.u8(6 + static_cast<std::size_t>(j));
    y[j] = fl(((q & 0x0F) | q5_high(qh, j)) - 16) * d;
    y[j + 16] = fl(((q >> 4) | q5_high(qh, j + 16)) - 16) * d;
  }
}

void q5_1(block b, float* y) noexcept {
  const float d = b.f16_at(0), m = b.f16_at(2);
  const std::uint32_t qh = b.u32(4);
  for (int j = 0; j < 16; ++j) {
    const int q = b.u8(8 + static_cast<std::size_t>(j));
    y[j] = fl((q & 0x0F) | q5_high(qh, j)) * d + m;
    y[j + 16] = fl((q >> 4) | q5_high(qh, j + 16)) * d + m;
  }
}

void q8_0(block b, float* y) noexcept {
  const float d = b.f16_at(0);
  for (std::size_t j = 0; j < 32; ++j) y[j] = fl(b.i8(2 + j)) * d;
}

// ggml has no to_float for Q8_1; ferry's is Q8_0's (s is a sum for dot products).
void q8_1(block b, float* y) noexcept {
  const float d = b.f16_at(0);
  for (std::size_t j = 0; j < 32; ++j) y[j] = fl(b.i8(4 + j)) * d;
}

void iq4_nl(block b, float* y) noexcept {
  const float d = b.f16_at(0);
  for (int j = 0; j < 16; ++j) {
    const int q = b.u8(2 + static_cast<std::size_t>(j));
    y[j] = d * fl(detail::kvalues_iq4nl[static_cast<std::size_t>(q & 0xF)]);
    y[j + 16] = d * fl(detail::kvalues_iq4nl[static_cast<std::size_t>(q >> 4)]);
  }
}

void mxfp4(block b, float* y) noexcept {
  const float d = e8m0_half(b.u8(0));
  for (int j = 0; j < 16; ++j) {
    const int q = b.u8(1 + static_cast<std::size_t>(j));
    y[j] = fl(detail::kvalues_fp4[static_cast<std::size_t>(q & 0xF)]) * d;
    y[j + 16] = fl(detail::kvalues_fp4[static_cast<std::size_t>(q >> 4)]) * d;
  }
}

// ---- small newer blocks ---------------------------------------------------

void nvfp4(block b, float* y) noexcept {
  for (int s = 0; s < 4; ++s) {
    const float d = ue4m3_half(b.u8(static_cast<std::size_t>(s)));
    float* ys = y + 16 * s;
    for (int j = 0; j < 8; ++j) {
      const int q = b.u8(4 + static_cast<std::size_t>(8 * s + j));
      ys[j] = fl(detail::kvalues_fp4[static_cast<std::size_t>(q & 0xF)]) * d;
      ys[j + 8] = fl(detail::kvalues_fp4[static_cast<std::size_t>(q >> 4)]) * d;
    }
  }
}

void q1_0(block b, float* y) noexcept {
  const float d = b.f16_at(0);
  const float neg_d = -d;
  for (int j = 0; j < 128; ++j) {
    const int bit = (b.u8(2 + static_cast<std::size_t>(j / 8)) >> (j % 8)) & 1;
    y[j] = bit ? d : neg_d;
  }
}

void q2_0(block b, float* y) noexcept {
  const float d = b.f16_at(0);
  for (int j = 0; j < 64; ++j) {
    const int q = (b.u8(2 + static_cast<std::size_t>(j / 4)) >> ((j % 4) * 2)) & 3;
    y[j] = fl(q - 1) * d;
  }
}

// ---- K-quants (256 elements) ---------------------------------------------

void q2_k(block b, float* y) noexcept {
  const float d = b.f16_at(80), min = b.f16_at(82);
  std::size_t q = 16, is = 0;
  for (int n = 0; n < 256; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (std::size_t half = 0; half < 2; ++half) {
        const int sc = b.u8(is++);
        const float dl = d * fl(sc & 0xF), ml = min * fl(sc >> 4);
        for (std::size_t l = 0; l < 16; ++l) *y++ = dl * fl((b.u8(q + 16 * half + l) >> shift) & 3) - ml;
      }
    }
    q += 32;
  }
}

void q3_k(block b, float* y) noexcept {
  const float d_all = b.f16_at(108);
  // The 16 6-bit scales: low nibbles from bytes 0..7, high bit pairs from 8..11.
  std::array<int, 16> scales{};
  for (std::size_t j = 0; j < 4; ++j) {
    const int lo0 = b.u8(96 + j), lo1 = b.u8(100 + j), hi = b.u8(104 + j);
    scales[j] = (lo0 & 0xF) | ((hi & 3) << 4);
    scales[4 + j] = (lo1 & 0xF) | (((hi >> 2) & 3) << 4);
    scales[8 + j] = (lo0 >> 4) | (((hi >> 4) & 3) << 4);
    scales[12 + j] = (lo1 >> 4) | (((hi >> 6) & 3) << 4);
  }
  std::size_t q = 32, is = 0;
  int m = 1;
  for (int n = 0; n < 256; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (std::size_t half = 0; half < 2; ++half) {
        const float dl = d_all * fl(scales[is++] - 32);
        for (std::size_t l = 0; l < 16; ++l) {
          const std::size_t k = 16 * half + l;
          const int v = ((b.u8(q + k) >> shift) & 3) - ((b.u8(k) & m) ? 0 : 4);
          *y++ = dl * fl(v);
        }
      }
      m <<= 1;
    }
    q += 32;
  }
}

// ggml's get_scale_min_k4: scale and min j (0..7) of the 12 bytes at `at`.
void scale_min_k4(block b, std::size_t at, std::size_t j, int& sc, int& mn) noexcept {
  if (j < 4) {
    sc = b.u8(at + j) & 63;
    mn = b.u8(at + j + 4) & 63;
  } else {
    sc = (b.u8(at + j + 4) & 0xF) | ((b.u8(at + j - 4) >> 6) << 4);
    mn = (b.u8(at + j + 4) >> 4) | ((b.u8(at + j) >> 6) << 4);
  }
}

void q4_k(block b, float* y) noexcept {
  const float d = b.f16_at(0), min = b.f16_at(2);
  std::size_t q = 16;
  for (std::size_t is = 0; is < 8; is += 2) {
    int sc = 0, mn = 0;
    scale_min_k4(b, 4, is, sc, mn);
    const float d1 = d * fl(sc), m1 = min * fl(mn);
    scale_min_k4(b, 4, is + 1, sc, mn);
    const float d2 = d * fl(sc), m2 = min * fl(mn);
    for (std::size_t l = 0; l < 32; ++l) *y++ = d1 * fl(b.u8(q + l) & 0xF) - m1;
    for (std::size_t l = 0; l < 32; ++l) *y++ = d2 * fl(b.u8(q + l) >> 4) - m2;
    q += 32;
  }
}

void q5_k(block b, float* y) noexcept {
  const float d = b.f16_at(0), min = b.f16_at(2);
  std::size_t ql = 48;
  int u1 = 1, u2 = 2;
  for (std::size_t is = 0; is < 8; is += 2) {
    int sc = 0, mn = 0;
    scale_min_k4(b, 4, is, sc, mn);
    const float d1 = d * fl(sc), m1 = min * fl(mn);
    scale_min_k4(b, 4, is + 1, sc, mn);
    const float d2 = d * fl(sc), m2 = min * fl(mn);
    for (std::size_t l = 0; l < 32; ++l) {
      *y++ = d1 * fl((b.u8(ql + l) & 0xF) + ((b.u8(16 + l) & u1) ? 16 : 0)) - m1;
    }
    for (std::size_t l = 0; l < 32; ++l) {
      *y++ = d2 * fl((b.u8(ql + l) >> 4) + ((b.u8(16 + l) & u2) ? 16 : 0)) - m2;
    }
    ql += 32;
    u1 <<= 2;
    u2 <<= 2;
  }
}

void q6_k(block b, float* y) noexcept {
  const float d = b.f16_at(208);
  std::size_t ql = 0, qh = 128, sc = 192;
  for (int n = 0; n < 256; n += 128) {
    for (std::size_t l = 0; l < 32; ++l) {
      const std::size_t is = l / 16;
      const int h = b.u8(qh + l);
      const int q1 = ((b.u8(ql + l) & 0xF) | ((h & 3) << 4)) - 32;
      const int q2 = ((b.u8(ql + l + 32) & 0xF) | (((h >> 2) & 3) << 4)) - 32;
      const int q3 = ((b.u8(ql + l) >> 4) | (((h >> 4) & 3) << 4)) - 32;
      const int q4 = ((b.u8(ql + l + 32) >> 4) | (((h >> 6) & 3) << 4)) - 32;
      y[l] = d * fl(b.i8(sc + is)) * fl(q1);
      y[l + 32] = d * fl(b.i8(sc + is + 2)) * fl(q2);
      y[l + 64] = d * fl(b.i8(sc + is + 4)) * fl(q3);
      y[l + 96] = d * fl(b.i8(sc + is + 6)) * fl(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// ggml's dequantize_row_q8_K: d (an f32) times each quant.
void q8_k(block b, float* y) noexcept {
  const float d = std::bit_cast<float>(b.u32(0));
  for (std::size_t j = 0; j < 256; ++j) y[j] = d * fl(b.i8(4 + j));
}

// ---- ternary ------------------------------------------------------------------

// Trit n (0..4) of a byte holding 5 of them, as ggml extracts it.
float trit(int byte, int pow3, float d) noexcept {
  const int q = (byte * pow3) & 0xFF;
  const int xi = (q * 3) >> 8;
  return fl(xi - 1) * d;
}

void tq1_0(block b, float* y) noexcept {
  static constexpr int pow3[5] = {1, 3, 9, 27, 81};
  const float d = b.f16_at(52);
  for (std::size_t n = 0; n < 5; ++n) {
    for (std::size_t m = 0; m < 32; ++m) *y++ = trit(b.u8(m), pow3[n], d);
  }
  for (std::size_t n = 0; n < 5; ++n) {
    for (std::size_t m = 0; m < 16; ++m) *y++ = trit(b.u8(32 + m), pow3[n], d);
  }
  for (std::size_t n = 0; n < 4; ++n) {
    for (std::size_t j = 0; j < 4; ++j) *y++ = trit(b.u8(48 + j), pow3[n], d);
  }
}

void tq2_0(block b, float* y) noexcept {
  const float d = b.f16_at(64);
  for (std::size_t j = 0; j < 64; j += 32) {
    for (int l = 0; l < 4; ++l) {
      for (std::size_t m = 0; m < 32; ++m) *y++ = fl(((b.u8(j + m) >> (2 * l)) & 3) - 1) * d;
    }
  }
}

}  // namespace

namespace {

using block_fn = void (*)(const std::byte*, byte_order, float*) noexcept;

// The IQ dequantizers live in ggml_dequantize_iq.cpp.

template <void (*F)(block, float*) noexcept>
void adapt(const std::byte* p, byte_order o, float* y) noexcept {
  F(block{p, o}, y);
}

block_fn block_dequantizer(ggml_type t) noexcept {
  switch (t) {
    case ggml_type::q4_0: return adapt<q4_0>;
    case ggml_type::q4_1: return adapt<q4_1>;
    case ggml_type::q5_0: return adapt<q5_0>;
    case ggml_type::q5_1: return adapt<q5_1>;
    case ggml_type::q8_0: return adapt<q8_0>;
    case ggml_type::q8_1: return adapt<q8_1>;
    case ggml_type::q2_k: return adapt<q2_k>;
    case ggml_type::q3_k: return adapt<q3_k>;
    case ggml_type::q4_k: return adapt<q4_k>;
    case ggml_type::q5_k: return adapt<q5_k>;
    case ggml_type::q6_k: return adapt<q6_k>;
    case ggml_type::q8_k: return adapt<q8_k>;
    case ggml_type::iq2_xxs: return adapt<detail::dequantize_iq2_xxs>;
    case ggml_type::iq2_xs: return adapt<detail::dequantize_iq2_xs>;
    case ggml_type::iq3_xxs: return adapt<detail::dequantize_iq3_xxs>;
    case ggml_type::iq1_s: return adapt<detail::dequantize_iq1_s>;
    case ggml_type::iq4_nl: return adapt<iq4_nl>;
    case ggml_type::iq3_s: return adapt<detail::dequantize_iq3_s>;
    case ggml_type::iq2_s: return adapt<detail::dequantize_iq2_s>;
    case ggml_type::iq4_xs: return adapt<detail::dequantize_iq4_xs>;
    case ggml_type::iq1_m: return adapt<detail::dequantize_iq1_m>;
    case ggml_type::tq1_0: return adapt<tq1_0>;
    case ggml_type::tq2_0: return adapt<tq2_0>;
    case ggml_type::mxfp4: return adapt<mxfp4>;
    case ggml_type::nvfp4: return adapt<nvfp4>;
    case ggml_type::q1_0: return adapt<q1_0>;
    case ggml_type::q2_0: return adapt<q2_0>;
    default: return nullptr;  // plain types, handled by dequantize_plain()
  }
}

template <class T>
void plain_to_float(std::span<const std::byte> in, byte_order o, std::span<float> out) noexcept {
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(wire::load<T>(in.data() + i * sizeof(T), o));
}

void dequantize_plain(ggml_type t, std::span<const std::byte> in, byte_order o, std::span<float> out) noexcept {
  switch (t) {
    case ggml_type::f32: wire::convert(in, o, std::as_writable_bytes(out), wire::host_order, 4); return;
    case ggml_type::f16:
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = detail::ggml_f16_to_f32(wire::load<std::uint16_t>(in.data() + 2 * i, o));
      return;
    case ggml_type::bf16:
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = codec::to_float(wire::load<bf16>(in.data() + 2 * i, o));
      return;
    case ggml_type::f64: plain_to_float<double>(in, o, out); return;
    case ggml_type::i8: plain_to_float<std::int8_t>(in, o, out); return;
    case ggml_type::i16: plain_to_float<std::int16_t>(in, o, out); return;
    case ggml_type::i32: plain_to_float<std::int32_t>(in, o, out); return;
    case ggml_type::i64: plain_to_float<std::int64_t>(in, o, out); return;
    default: assert(false && "not a plain ggml type"); return;
  }
}

}  // namespace

result<void> dequantize(ggml_type t, std::span<const std::byte> blocks, byte_order order,
                        std::span<float> out) noexcept {
  const ggml_type_info* ti = find_ggml_type(static_cast<std::uint32_t>(t));
  if (ti == nullptr || ti->status != ggml_type_status::active) return checkpoint_errc::unknown_ggml_type;
  assert(blocks.size() % ti->block_bytes == 0);
  const std::size_t n_blocks = blocks.size() / ti->block_bytes;
  assert(out.size() == n_blocks * ti->block_elements);
  if (ti->block_elements == 1) {
    dequantize_plain(t, blocks, order, out);
    return {};
  }
  const block_fn fn = block_dequantizer(t);
  assert(fn != nullptr);
  for (std::size_t i = 0; i < n_blocks; ++i) fn(blocks.data() + i * ti->block_bytes, order, out.data() + i * ti->block_elements);
  return {};
}

}  // namespace ferry::checkpoint
