// ferry/checkpoint/gguf/ggml_dequantize_iq.cpp: the dequantizers of ggml's
// IQ types (256-element blocks that index the grids of ggml_tables*.cpp).
// As in ggml_dequantize.cpp, each repeats ggml's float operations in
// ggml's order; the block layouts are in ggml_types.h.
#include <bit>
#include <cstddef>
#include <cstdint>

#include "ferry/checkpoint/gguf/ggml_block.h"
#include "ferry/checkpoint/gguf/ggml_tables.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

namespace ferry::checkpoint::detail {
namespace {

constexpr float iq1_delta = 0.125f;  // ggml's IQ1S_DELTA and IQ1M_DELTA

// `v` negated where bit `bit` of the sign byte is set. ggml writes
// `v * (set ? -1.f : 1.f)`, which optimising compilers (and ggml's builds)
// turn into flipping the sign bit: for a NaN scale that gives a NaN of the
// other sign than a multiplication would. The flip is written out, so that
// every compiler and optimisation level gives ggml's released bits.
float signed_by(float v, int signs, unsigned bit) noexcept {
  const std::uint32_t flip = static_cast<std::uint32_t>((signs >> bit) & 1) << 31;
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) ^ flip);
}

// Byte j of an index into a table of grid entries.
template <std::size_t N, class Entry>
int grid_at(const std::array<Entry, N>& grid, int index, unsigned j) noexcept {
  return grid_byte(grid[static_cast<std::size_t>(index)], j);
}

}  // namespace

// 8 groups of 32: 4 grid indexes (bytes), then a u32 of 4 x 7 sign bits and
// a 4-bit scale.
void dequantize_iq2_xxs(ggml_block b, float* y) noexcept {
  const float d = b.f16_at(0);
  for (std::size_t ib = 0; ib < 8; ++ib) {
    const std::size_t g = 2 + 8 * ib;
    const std::uint32_t aux = b.u32(g + 4);
    const float db = d * (0.5f + fl(aux >> 28)) * 0.25f;
    for (unsigned l = 0; l < 4; ++l) {
      const int index = b.u8(g + l);
      const int signs = iq2_signs((aux >> (7 * l)) & 127u);
      for (unsigned j = 0; j < 8; ++j) y[j] = signed_by(db * fl(grid_at(iq2xxs_grid, index, j)), signs, j);
      y += 8;
    }
  }
}

// qs[32] u16: a 9-bit grid index and 7 sign bits; two 4-bit scales a group.
void dequantize_iq2_xs(ggml_block b, float* y) noexcept {
  const float d = b.f16_at(0);
  for (std::size_t ib = 0; ib < 8; ++ib) {
    const int sc = b.u8(66 + ib);
    const float db[2] = {d * (0.5f + fl(sc & 0xF)) * 0.25f, d * (0.5f + fl(sc >> 4)) * 0.25f};
    for (std::size_t l = 0; l < 4; ++l) {
      const int q = b.u16(2 + 2 * (4 * ib + l));
      const int signs = iq2_signs(static_cast<unsigned>(q >> 9));
      for (unsigned j = 0; j < 8; ++j) y[j] = signed_by(db[l / 2] * fl(grid_at(iq2xs_grid, q & 511, j)), signs, j);
      y += 8;
    }
  }
}

// qs[32] low index bytes, signs[32], qh[8] (2 high index bits per 8 values),
// scales[8].
void dequantize_iq2_s(ggml_block b, float* y) noexcept {
  const float d = b.f16_at(0);
  std::size_t qs = 2, signs = 34;
  for (std::size_t ib = 0; ib < 8; ++ib) {
    const int sc = b.u8(74 + ib);
    const float db[2] = {d * (0.5f + fl(sc & 0xF)) * 0.25f, d * (0.5f + fl(sc >> 4)) * 0.25f};
    const int qh = b.u8(66 + ib);
    for (std::size_t l = 0; l < 4; ++l) {
      const float dl = db[l / 2];
      const int index = b.u8(qs + l) | ((qh << (8 - 2 * static_cast<int>(l))) & 0x300);
      const int s = b.u8(signs + l);
      for (unsigned j = 0; j < 8; ++j) y[j] = signed_by(dl * fl(grid_at(iq2s_grid, index, j)), s, j);
      y += 8;
    }
    qs += 4;
    signs += 4;
  }
}

// qs[64] grid indexes (4 values each), then 8 u32s of 4 x 7 sign bits and a
// 4-bit scale.
void dequantize_iq3_xxs(ggml_block b, float* y) noexcept {
  const float d = b.f16_at(0);
  std::size_t qs = 2;
  for (std::size_t ib = 0; ib < 8; ++ib) {
    const std::uint32_t aux = b.u32(66 + 4 * ib);
    const float db = d * (0.5f + fl(aux >> 28)) * 0.5f;
    for (std::size_t l = 0; l < 4; ++l) {
      const int signs = iq2_signs((aux >> (7 * l)) & 127u);
      const int i1 = b.u8(qs + 2 * l), i2 = b.u8(qs + 2 * l + 1);
      for (unsigned j = 0; j < 4; ++j) {
        y[j + 0] = signed_by(db * fl(grid_at(iq3xxs_grid, i1, j)), signs, j);
        y[j + 4] = signed_by(db * fl(grid_at(iq3xxs_grid, i2, j)), signs, j + 4);
      }
      y += 8;
    }
    qs += 8;
  }
}

// qs[64] low index bytes, qh[8] 9th index bits, signs[32], scales[4].
void dequantize_iq3_s(ggml_block b, float* y) noexcept {
  const float d = b.f16_at(0);
  std::size_t qs = 2, qh = 66, signs = 74;
  for (std::size_t ib = 0; ib < 8; ib += 2) {
    const int sc = b.u8(106 + ib / 2);
    const float dbs[2] = {d * fl(1 + 2 * (sc & 0xF)), d * fl(1 + 2 * (sc >> 4))};
    for (std::size_t half = 0; half < 2; ++half) {
      const float db = dbs[half];
      const int h = b.u8(qh + half);
      for (std::size_t l = 0; l < 4; ++l) {
        const int shift = 2 * static_cast<int>(l);
        const int i1 = b.u8(qs + 2 * l) | ((h << (8 - shift)) & 256);
        const int i2 = b.u8(qs + 2 * l + 1) | ((h << (7 - shift)) & 256);
        const int s = b.u8(signs + l);
        for (unsigned j = 0; j < 4; ++j) {
          y[j + 0] = signed_by(db * fl(grid_at(iq3s_grid, i1, j)), s, j);
          y[j + 4] = signed_by(db * fl(grid_at(iq3s_grid, i2, j)), s, j + 4);
        }
        y += 8;
      }
      qs += 8;
      signs += 4;
    }
    qh += 2;
  }
}

// qs[32] low index bytes; qh[8] u16: 4 x 3 high index bits, a 3-bit scale
// (bits 12..14) and the sign of the delta (bit 15).
void dequantize_iq1_s(ggml_block b, float* y) noexcept {
  const float d = b.f16_at(0);
  for (std::size_t ib = 0; ib < 8; ++ib) {
    const int h = b.u16(34 + 2 * ib);
    const float dl = d * fl(2 * ((h >> 12) & 7) + 1);
    const float delta = (h & 0x8000) != 0 ? -iq1_delta : iq1_delta;
    for (std::size_t l = 0; l < 4; ++l) {
      const int index = b.u8(2 + 4 * ib + l) | (((h >> (3 * static_cast<int>(l))) & 7) << 8);
      for (unsigned j = 0; j < 8; ++j) {
        y[j] = dl * (fl(static_cast<std::int8_t>(grid_at(iq1s_grid, index, j))) + delta);
      }
      y += 8;
    }
  }
}

// qs[32] low index bytes; qh[16]: per 8 values 3 high index bits and a delta
// sign bit; scales as 4 u16: 3-bit scales, and the top nibbles form the f16
// super-block scale.
void dequantize_iq1_m(ggml_block b, float* y) noexcept {
  int sc[4];
  for (std::size_t k = 0; k < 4; ++k) sc[k] = b.u16(48 + 2 * k);
  const auto scale = static_cast<std::uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) |
                                                (sc[3] & 0xF000));
  const float d = ggml_f16_to_f32(scale);
  for (std::size_t ib = 0; ib < 8; ++ib) {
    const int s = sc[ib / 2];
    const int shift = 6 * static_cast<int>(ib % 2);
    const float dl1 = d * fl(2 * ((s >> shift) & 7) + 1);
    const float dl2 = d * fl(2 * ((s >> (shift + 3)) & 7) + 1);
    const int h0 = b.u8(32 + 2 * ib), h1 = b.u8(33 + 2 * ib);
    const std::size_t qs = 4 * ib;
    const int index[4] = {b.u8(qs + 0) | ((h0 << 8) & 0x700), b.u8(qs + 1) | ((h0 << 4) & 0x700),
                          b.u8(qs + 2) | ((h1 << 8) & 0x700), b.u8(qs + 3) | ((h1 << 4) & 0x700)};
    const float delta[4] = {(h0 & 0x08) != 0 ? -iq1_delta : iq1_delta, (h0 & 0x80) != 0 ? -iq1_delta : iq1_delta,
                            (h1 & 0x08) != 0 ? -iq1_delta : iq1_delta, (h1 & 0x80) != 0 ? -iq1_delta : iq1_delta};
    for (std::size_t l = 0; l < 4; ++l) {
      const float dl = l < 2 ? dl1 : dl2;
      for (unsigned j = 0; j < 8; ++j) {
        y[j] = dl * (fl(static_cast<std::int8_t>(grid_at(iq1s_grid, index[l], j))) + delta[l]);
      }
      y += 8;
    }
  }
}

// d, scales_h u16 (2 high bits of each 6-bit scale), scales_l[4] (low
// nibbles), qs[128] (indexes into kvalues_iq4nl).
void dequantize_iq4_xs(ggml_block b, float* y) noexcept {
  const float d = b.f16_at(0);
  const int scales_h = b.u16(2);
  std::size_t qs = 8;
  for (std::size_t ib = 0; ib < 8; ++ib) {
    const int lo = (b.u8(4 + ib / 2) >> (4 * static_cast<int>(ib % 2))) & 0xF;
    const int ls = lo | (((scales_h >> (2 * static_cast<int>(ib))) & 3) << 4);
    const float dl = d * fl(ls - 32);
    for (std::size_t j = 0; j < 16; ++j) {
      const int q = b.u8(qs + j);
      y[j + 0] = dl * fl(kvalues_iq4nl[static_cast<std::size_t>(q & 0xF)]);
      y[j + 16] = dl * fl(kvalues_iq4nl[static_cast<std::size_t>(q >> 4)]);
    }
    y += 32;
    qs += 16;
  }
}

}  // namespace ferry::checkpoint::detail
