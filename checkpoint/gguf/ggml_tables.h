// ferry/checkpoint/gguf/ggml_tables.h: INTERNAL. The lookup tables of
// ggml's IQ quantization types, used by the dequantizers in ggml_types.cpp.
// Not part of the API.
//
// The grids are data transcribed from ggml (see ggml_tables.cpp for the
// source and commit); the small tables are written out here. An entry of a
// grid packs one small unsigned value per byte, element j in bits 8j..8j+7
// (grid_byte() reads it), whatever the host's byte order.
//
// Each table's hash, h = h * 1099511628211 + entry (mod 2^64) over the
// entries in order from h = 0, as computed from ggml-common.h itself; a
// test recomputes them to catch a transcription slip:
//   iq2xxs_grid  256   0x558be3f81adf19e1
//   iq2xs_grid   512   0x7ea98ca4b3fd5829
//   iq2s_grid    1024  0x45e54868255bb01c
//   iq3xxs_grid  256   0x0bcc478c8d1a805e
//   iq3s_grid    512   0x538a4aaa7ae95d46
//   iq1s_grid    2048  0x82296bc46d1decfe
//   ksigns_iq2xs 128   0x58769dd104b78e40
//   kvalues_iq4nl 16   0xd60945ed6ddff378 (entries as uint64 two's complement)
//   kvalues_fp4   16   0x6e58875343a32f00 (likewise)
#pragma once

#include <array>
#include <cstdint>

namespace ferry::checkpoint::detail {

extern const std::array<std::uint64_t, 256> iq2xxs_grid;
extern const std::array<std::uint64_t, 512> iq2xs_grid;
extern const std::array<std::uint64_t, 1024> iq2s_grid;
extern const std::array<std::uint32_t, 256> iq3xxs_grid;
extern const std::array<std::uint32_t, 512> iq3s_grid;
/// Bytes are int8 values (-1, 0, +1); grid_int8() reads them.
extern const std::array<std::uint64_t, 2048> iq1s_grid;

/// Byte j (0 = least significant) of a grid entry.
[[nodiscard]] constexpr std::uint8_t grid_byte(std::uint64_t entry, unsigned j) noexcept {
  return static_cast<std::uint8_t>(entry >> (8 * j));
}
[[nodiscard]] constexpr std::int8_t grid_int8(std::uint64_t entry, unsigned j) noexcept {
  return static_cast<std::int8_t>(grid_byte(entry, j));
}

/// The 7 explicit sign bits of 8 values plus an 8th bit that makes the
/// count of set bits even (ggml's ksigns_iq2xs): i | parity(i) << 7.
[[nodiscard]] constexpr std::uint8_t iq2_signs(unsigned seven_bits) noexcept {
  unsigned parity = 0;
  for (unsigned b = seven_bits; b != 0; b &= b - 1) parity ^= 1u;
  return static_cast<std::uint8_t>((seven_bits & 0x7Fu) | (parity << 7));
}
static_assert(iq2_signs(0) == 0 && iq2_signs(1) == 129 && iq2_signs(3) == 3 && iq2_signs(127) == 255 &&
              iq2_signs(126) == 126);

/// IQ4_NL / IQ4_XS non-linear 4-bit values (ggml's kvalues_iq4nl).
inline constexpr std::array<std::int8_t, 16> kvalues_iq4nl = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                              1,    13,   25,  38,  53,  69,  89,  113};

/// FP4 E2M1 values, doubled, for MXFP4 and NVFP4 (ggml's kvalues_fp4).
inline constexpr std::array<std::int8_t, 16> kvalues_fp4 = {0, 1,  2,  3,  4,  6,  8,  12,
                                                            0, -1, -2, -3, -4, -6, -8, -12};

}  // namespace ferry::checkpoint::detail
