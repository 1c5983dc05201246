// ferry/codec/detail/crc32c_kernels.h: INTERNAL. GF(2) arithmetic for
// CRC-32C, the shift tables, and the three-stream loop shared by the
// hardware paths. Not part of the API.
//
// A CRC register is a polynomial over GF(2) in reflected form (bit 31 is the
// coefficient of x^0). Feeding n zero bytes into a register r (with no pre-
// or post-conditioning) gives r * x^(8n) mod P; the register is linear in its
// input, so the register after a ++ b equals shift(reg(a), |b|) ^ reg_from_0(b).
// The hardware loops use that to run three independent streams.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ferry::codec::detail {

inline constexpr std::uint32_t crc32c_poly = 0x82F63B78u;  // reflected 0x1EDC6F41

/// a * b mod P, reflected.
constexpr std::uint32_t gf2_multiply(std::uint32_t a, std::uint32_t b) noexcept {
  std::uint32_t product = 0;
  for (int i = 0; i < 32; ++i) {  // i: the power of x that bit 31 - i of a stands for
    if (a & (0x8000'0000u >> i)) product ^= b;
    b = (b & 1u) ? (b >> 1) ^ crc32c_poly : b >> 1;  // b *= x
  }
  return product;
}

/// x^(8 * bytes) mod P.
constexpr std::uint32_t x_pow_8n(std::uint64_t bytes) noexcept {
  std::uint32_t result = 0x8000'0000u;  // x^0
  std::uint32_t square = 0x0080'0000u;  // x^8
  for (; bytes != 0; bytes >>= 1) {
    if (bytes & 1u) result = gf2_multiply(result, square);
    square = gf2_multiply(square, square);
  }
  return result;
}

/// Four tables that multiply a register by x^(8 * Bytes) with four lookups.
template <std::size_t Bytes>
struct shift_table {
  std::array<std::array<std::uint32_t, 256>, 4> t{};
  constexpr shift_table() noexcept {
    const std::uint32_t factor = x_pow_8n(Bytes);
    for (std::uint32_t k = 0; k < 4; ++k) {
      for (std::uint32_t b = 0; b < 256; ++b) t[k][b] = gf2_multiply(b << (8 * k), factor);
    }
  }
  constexpr std::uint32_t operator()(std::uint32_t r) const noexcept {
    return t[0][r & 0xFF] ^ t[1][(r >> 8) & 0xFF] ^ t[2][(r >> 16) & 0xFF] ^ t[3][r >> 24];
  }
};

// Stream lengths of the hardware loops: long blocks amortise the combine,
// short ones keep small buffers on three streams too.
inline constexpr std::size_t crc_long_block = 8192;
inline constexpr std::size_t crc_short_block = 256;
extern const shift_table<crc_long_block> crc_shift_long;
extern const shift_table<crc_short_block> crc_shift_short;

/// Register-level CRC with hardware instructions. `Hw` supplies
/// step64(reg, u64) and step8(reg, u8); it lives in an unnamed namespace of
/// its ISA's translation unit, so this instantiation has internal linkage.
template <class Hw>
inline std::uint32_t crc32c_three_streams(std::uint32_t reg, const std::byte* p, std::size_t n) noexcept {
  auto word = [](const std::byte* q) {
    std::uint64_t w;
    std::memcpy(&w, q, 8);
    if constexpr (std::endian::native == std::endian::big) w = __builtin_bswap64(w);
    return w;
  };
  auto run = [&](std::size_t block, const auto& shift) {
    while (n >= 3 * block) {
      std::uint32_t r1 = 0, r2 = 0;
      for (std::size_t i = 0; i < block; i += 8) {
        reg = Hw::step64(reg, word(p + i));
        r1 = Hw::step64(r1, word(p + block + i));
        r2 = Hw::step64(r2, word(p + 2 * block + i));
      }
      reg = shift(reg) ^ r1;
      reg = shift(reg) ^ r2;
      p += 3 * block;
      n -= 3 * block;
    }
  };
  run(crc_long_block, crc_shift_long);
  run(crc_short_block, crc_shift_short);
  for (; n >= 8; n -= 8, p += 8) reg = Hw::step64(reg, word(p));
  for (; n > 0; --n, ++p) reg = Hw::step8(reg, std::to_integer<std::uint8_t>(*p));
  return reg;
}

/// x^n mod P in the register form of gf2_multiply.
constexpr std::uint32_t x_pow(std::uint64_t n) noexcept {
  return gf2_multiply(x_pow_8n(n / 8), 0x8000'0000u >> (n % 8));
}

#if defined(__x86_64__)
std::uint32_t crc32c_sse42(std::uint32_t reg, const std::byte* p, std::size_t n) noexcept;
/// Folding with 512-bit carry-less multiplies (AVX-512 VPCLMULQDQ); short
/// inputs and the final bytes go through crc32c_sse42.
std::uint32_t crc32c_vpclmul(std::uint32_t reg, const std::byte* p, std::size_t n) noexcept;
#elif defined(__aarch64__) || defined(__arm__)
std::uint32_t crc32c_armv8(std::uint32_t reg, const std::byte* p, std::size_t n) noexcept;
#endif

}  // namespace ferry::codec::detail
