// ferry/wire/varint.h: LEB128 varints and zigzag encoding.
//
// Layout (unsigned LEB128, as protobuf's varint):
//   A value is split into 7-bit groups, least significant group first. Each
//   group is one byte: bits 0..6 hold the group, bit 7 (0x80) is set on every
//   byte except the last.
//
//   value        bytes
//   0            00
//   1            01
//   127          7F
//   128          80 01
//   300          AC 02
//   2^64 - 1     FF FF FF FF FF FF FF FF FF 01
//
// Canonical form: an encoder MUST emit the shortest encoding (ferry's does);
// a decoder rejects any other, so every value has exactly one encoding:
//   - varint_overlong: the last byte is 0x00 and it is not the only byte
//     (e.g. 80 00 for 0): a redundant high group.
//   - varint_overflow: the value needs more bits than the target type has
//     (u8: 8, u16: 16, u32: 32, u64: 64), or the encoding is longer than
//     max_varint_bytes<T> (2, 3, 5, 10 bytes), whatever its value.
//   - truncated: the input ends on a byte with the continuation bit set.
//   When several apply, the first one met reading left to right is reported;
//   a byte that both ends the varint and overflows reports varint_overflow.
//
// Zigzag maps signed to unsigned so small magnitudes stay short:
//   0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3, ...; n -> (n << 1) ^ (n >> (bits - 1)).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

#include "ferry/base/error.h"

namespace ferry::wire {

/// The longest canonical encoding of a T: ceil(bits / 7).
template <std::unsigned_integral T>
inline constexpr std::size_t max_varint_bytes = (std::numeric_limits<T>::digits + 6) / 7;

/// The number of bytes encode_varint() writes for v (1..10).
[[nodiscard]] constexpr std::size_t varint_size(std::uint64_t v) noexcept {
  std::size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

/// Writes the canonical encoding of v at out and returns its length.
// Requires: [out, out + varint_size(v)) is writable (10 bytes always suffice).
constexpr std::size_t encode_varint(std::uint64_t v, std::byte* out) noexcept {
  std::size_t n = 0;
  while (v >= 0x80) {
    out[n++] = static_cast<std::byte>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out[n++] = static_cast<std::byte>(v);
  return n;
}

/// A decoded value and the number of bytes it took.
template <class T>
struct decoded {
  T value;
  std::size_t size;
  friend constexpr bool operator==(const decoded&, const decoded&) = default;
};

/// Decodes one canonical varint from the front of `in` into a T.
/// Errors: truncated, varint_overlong, varint_overflow (see the layout above).
template <std::unsigned_integral T = std::uint64_t>
[[nodiscard]] constexpr result<decoded<T>> decode_varint(std::span<const std::byte> in) noexcept {
  constexpr std::size_t max_bytes = max_varint_bytes<T>;
  constexpr int bits = std::numeric_limits<T>::digits;
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < max_bytes; ++i) {
    if (i == in.size()) return errc::truncated;
    const auto b = std::to_integer<std::uint8_t>(in[i]);
    const std::uint64_t group = b & 0x7Fu;
    const int shift = static_cast<int>(7 * i);
    // Bits of this group that land at or above `bits` do not fit in T.
    if (bits - shift < 7 && (group >> (bits - shift)) != 0) return errc::varint_overflow;
    v |= group << shift;
    if ((b & 0x80) == 0) {
      if (b == 0 && i != 0) return errc::varint_overlong;
      return decoded<T>{static_cast<T>(v), i + 1};
    }
  }
  // The last permitted byte still had its continuation bit set.
  return errc::varint_overflow;
}

/// Zigzag encoding of a signed integer (see above).
template <std::signed_integral S>
[[nodiscard]] constexpr std::make_unsigned_t<S> zigzag_encode(S n) noexcept {
  using U = std::make_unsigned_t<S>;
  return static_cast<U>(static_cast<U>(static_cast<U>(n) << 1) ^
                        static_cast<U>(n >> (std::numeric_limits<U>::digits - 1)));
}

template <std::unsigned_integral U>
[[nodiscard]] constexpr std::make_signed_t<U> zigzag_decode(U u) noexcept {
  return static_cast<std::make_signed_t<U>>(static_cast<U>((u >> 1) ^ static_cast<U>(0u - (u & 1u))));
}

}  // namespace ferry::wire
