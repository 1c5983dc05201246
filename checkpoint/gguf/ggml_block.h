// ferry/checkpoint/gguf/ggml_block.h: INTERNAL. What the dequantizers of
// ggml_dequantize.cpp and ggml_dequantize_iq.cpp share: reading one
// block's fields in its byte order, and f16 widening as ggml does it. Not
// part of the API.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "ferry/codec/half.h"
#include "ferry/wire/byte_order.h"

namespace ferry::checkpoint::detail {

/// f16 -> f32 as ggml widens (ggml_compute_fp16_to_fp32): exact for every
/// number and infinity, like codec::to_float; a NaN comes out quiet (ggml's
/// route multiplies it by 2^-112, which sets the quiet bit).
[[nodiscard]] inline float ggml_f16_to_f32(std::uint16_t h) noexcept {
  if ((h & 0x7C00u) == 0x7C00u && (h & 0x03FFu) != 0) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    return std::bit_cast<float>(sign | 0x7FC0'0000u | (static_cast<std::uint32_t>(h & 0x03FFu) << 13));
  }
  return codec::to_float(f16{h});
}

/// One block's bytes and their byte order; offsets are within the block.
// Requires: every offset read lies inside the block (the callers' layouts
// are fixed; ggml_types.h lists them).
struct ggml_block {
  const std::byte* p;
  wire::byte_order order;

  [[nodiscard]] int u8(std::size_t at) const noexcept { return std::to_integer<int>(p[at]); }
  [[nodiscard]] int i8(std::size_t at) const noexcept {
    return static_cast<std::int8_t>(std::to_integer<std::uint8_t>(p[at]));
  }
  [[nodiscard]] std::uint16_t u16(std::size_t at) const noexcept {
    return wire::load<std::uint16_t>(p + at, order);
  }
  [[nodiscard]] std::uint32_t u32(std::size_t at) const noexcept {
    return wire::load<std::uint32_t>(p + at, order);
  }
  [[nodiscard]] float f16_at(std::size_t at) const noexcept { return ggml_f16_to_f32(u16(at)); }
};

/// Integer to float, the conversion C applies in ggml's `q * d`.
[[nodiscard]] inline float fl(int v) noexcept { return static_cast<float>(v); }
[[nodiscard]] inline float fl(std::uint32_t v) noexcept { return static_cast<float>(v); }

/// The dequantizers of ggml_dequantize_iq.cpp: one block to 256 floats.
void dequantize_iq2_xxs(ggml_block b, float* y) noexcept;
void dequantize_iq2_xs(ggml_block b, float* y) noexcept;
void dequantize_iq2_s(ggml_block b, float* y) noexcept;
void dequantize_iq3_xxs(ggml_block b, float* y) noexcept;
void dequantize_iq3_s(ggml_block b, float* y) noexcept;
void dequantize_iq1_s(ggml_block b, float* y) noexcept;
void dequantize_iq1_m(ggml_block b, float* y) noexcept;
void dequantize_iq4_xs(ggml_block b, float* y) noexcept;

}  // namespace ferry::checkpoint::detail
