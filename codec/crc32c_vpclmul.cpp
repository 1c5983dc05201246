// The AVX-512 VPCLMULQDQ path of codec/crc32c.h, compiled with
// -mavx512f -mvpclmulqdq and called only when the CPU reports both (and the
// OS saves ZMM state).
//
// Folding. Write a 16-byte block A of the message as H·x^64 + L, H its first
// 8 bytes, L its last 8 (reflected: a little-endian 64-bit load of 8 bytes
// puts the bit of highest degree in bit 0). Moving A forward by D bits
// multiplies it by x^D, and only its residue mod P matters to the CRC, so
//   A·x^D ≡ H·(x^(D+63) mod P)·x + L·(x^(D-1) mod P)·x.
// A carry-less multiply of two reflected 64-bit operands (bit j standing for
// x^(63-j)) yields the product times x in the reflected 128-bit layout, which
// is where the extra x goes: with the constants in the top 32 bits of their
// operands, clmul(H, K1) ^ clmul(L, K2) is a 128-bit block, at most of degree
// 95, congruent to A·x^D. Four 512-bit accumulators hold 256 bytes; each
// round folds them D = 2048 bits forward onto the next 256 bytes. What is
// left, 256 bytes standing for the whole prefix, and the tail go through the
// crc32 instruction. The starting register is XORed into the first four
// bytes, which for a reflected CRC is the same as starting from it.
#include <immintrin.h>

#include "ferry/codec/detail/crc32c_kernels.h"

namespace ferry::codec::detail {
namespace {

constexpr std::uint64_t operand(std::uint32_t reg) { return std::uint64_t{reg} << 32; }
constexpr std::uint64_t k_high = operand(x_pow(2048 + 63));
constexpr std::uint64_t k_low = operand(x_pow(2048 - 1));
constexpr std::size_t round_bytes = 256;
// Below this the setup costs more than the folding saves.
constexpr std::size_t min_bytes = 1024;

__m512i fold(__m512i acc, __m512i k, const std::byte* next) noexcept {
  const __m512i hi = _mm512_clmulepi64_epi128(acc, k, 0x00);  // H x K1 in every 128-bit lane
  const __m512i lo = _mm512_clmulepi64_epi128(acc, k, 0x11);  // L x K2
  return _mm512_ternarylogic_epi64(hi, lo, _mm512_loadu_si512(next), 0x96);  // three-way XOR
}

}  // namespace

std::uint32_t crc32c_vpclmul(std::uint32_t reg, const std::byte* p, std::size_t n) noexcept {
  if (n < min_bytes) return crc32c_sse42(reg, p, n);
  const __m512i k = _mm512_set_epi64(static_cast<long long>(k_low), static_cast<long long>(k_high),
                                     static_cast<long long>(k_low), static_cast<long long>(k_high),
                                     static_cast<long long>(k_low), static_cast<long long>(k_high),
                                     static_cast<long long>(k_low), static_cast<long long>(k_high));
  __m512i a0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(reg))));
  __m512i a1 = _mm512_loadu_si512(p + 64);
  __m512i a2 = _mm512_loadu_si512(p + 128);
  __m512i a3 = _mm512_loadu_si512(p + 192);
  p += round_bytes;
  n -= round_bytes;
  for (; n >= round_bytes; n -= round_bytes, p += round_bytes) {
    a0 = fold(a0, k, p);
    a1 = fold(a1, k, p + 64);
    a2 = fold(a2, k, p + 128);
    a3 = fold(a3, k, p + 192);
  }
  alignas(64) std::byte rest[round_bytes];
  _mm512_store_si512(rest, a0);
  _mm512_store_si512(rest + 64, a1);
  _mm512_store_si512(rest + 128, a2);
  _mm512_store_si512(rest + 192, a3);
  return crc32c_sse42(crc32c_sse42(0, rest, round_bytes), p, n);
}

}  // namespace ferry::codec::detail
