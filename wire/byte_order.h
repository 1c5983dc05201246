// ferry/wire/byte_order.h: byte orders and scalar load/store.
//
// Layout of every scalar ferry moves (this is the whole format of wire/):
//
//   type          bytes  content
//   u8  / i8        1    the value; i8 is two's complement
//   u16 / i16       2    the value, two's complement for i16
//   u32 / i32       4    the value, two's complement for i32
//   u64 / i64       8    the value, two's complement for i64
//   f16             2    IEEE 754 binary16 bit pattern (1 sign, 5 exponent, 10 fraction)
//   f8_e4m3, f8_e5m2  1  OCP FP8 bit patterns (base/float16.h)
//   bf16            2    bfloat16 bit pattern (1 sign, 8 exponent, 7 fraction):
//                        the upper half of an IEEE 754 binary32
//   f32             4    IEEE 754 binary32 bit pattern
//   f64             8    IEEE 754 binary64 bit pattern
//
// In little order the least significant byte of the bit pattern comes first;
// in big order (network order) the most significant byte comes first. A
// floating-point value is stored as the integer holding its bit pattern, so
// the pattern, not the number, is what travels: every NaN payload (signalling
// NaNs included), both zeros, subnormals and infinities arrive bit for bit.
//
// Guarantees of this header:
// - load/store take byte spans of exactly sizeof(T) bytes, or a pointer to
//   that many bytes, with no alignment requirement.
// - Bytes move through std::memcpy/std::bit_cast; a byte-swapped pattern is
//   only ever held in an unsigned integer, never in a float register, so the
//   FPU cannot quiet a signalling NaN. A float is produced from its pattern
//   only once the pattern is in host order.
// - Everything here is constexpr (the constant-evaluation path assembles the
//   bytes with shifts; the run-time path is one load and at most one bswap).
#pragma once

#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>

#include "ferry/base/float16.h"

namespace ferry::wire {

/// The order of bytes within a scalar. `native` is whichever of little or big
/// the host uses; `network` is big, as in RFC 1700. Values are stable and may
/// be written into formats: little = 0, big = 1.
enum class byte_order : std::uint8_t {
  little = 0,
  big = 1,
  native = std::endian::native == std::endian::little ? little : big,
  network = big,
};
static_assert(std::endian::native == std::endian::little ||
                  std::endian::native == std::endian::big,
              "mixed-endian hosts are not supported");

inline constexpr byte_order host_order = byte_order::native;

/// "little" or "big".
[[nodiscard]] constexpr std::string_view name(byte_order o) noexcept {
  return o == byte_order::little ? "little" : "big";
}

/// The order named "little" or "big"; nullopt for any other text.
[[nodiscard]] constexpr std::optional<byte_order> byte_order_from_name(std::string_view s) noexcept {
  if (s == "little") return byte_order::little;
  if (s == "big") return byte_order::big;
  return std::nullopt;
}

/// The scalar types wire/ loads and stores.
template <class T>
concept scalar = std::same_as<T, std::uint8_t> || std::same_as<T, std::int8_t> ||
                 std::same_as<T, std::uint16_t> || std::same_as<T, std::int16_t> ||
                 std::same_as<T, std::uint32_t> || std::same_as<T, std::int32_t> ||
                 std::same_as<T, std::uint64_t> || std::same_as<T, std::int64_t> ||
                 std::same_as<T, float> || std::same_as<T, double> ||
                 float_pattern<T>;

/// The unsigned integer that holds the bit pattern of T.
template <scalar T>
using bits_t = std::conditional_t<
    sizeof(T) == 1, std::uint8_t,
    std::conditional_t<sizeof(T) == 2, std::uint16_t,
                       std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;

/// Reverses the bytes of an unsigned integer.
template <std::unsigned_integral U>
[[nodiscard]] constexpr U byteswap(U v) noexcept {
  if constexpr (sizeof(U) == 1) {
    return v;
  } else if constexpr (sizeof(U) == 2) {
    return __builtin_bswap16(v);
  } else if constexpr (sizeof(U) == 4) {
    return __builtin_bswap32(v);
  } else {
    static_assert(sizeof(U) == 8);
    return __builtin_bswap64(v);
  }
}

/// The bit pattern of v, and the value of a bit pattern.
template <scalar T>
[[nodiscard]] constexpr bits_t<T> to_bits(T v) noexcept {
  if constexpr (float_pattern<T>) {
    return v.bits;
  } else {
    return std::bit_cast<bits_t<T>>(v);
  }
}
template <scalar T>
[[nodiscard]] constexpr T from_bits(bits_t<T> u) noexcept {
  if constexpr (float_pattern<T>) {
    return T{u};
  } else {
    return std::bit_cast<T>(u);
  }
}

/// Loads a T stored in `order` from the sizeof(T) bytes at p.
// Requires: [p, p + sizeof(T)) is readable. No alignment is required.
template <scalar T>
[[nodiscard]] constexpr T load(const std::byte* p, byte_order order) noexcept {
  using U = bits_t<T>;
  U u = 0;
  if (std::is_constant_evaluated()) {
    for (std::size_t i = 0; i < sizeof(U); ++i) {
      const std::size_t shift = 8 * (order == byte_order::little ? i : sizeof(U) - 1 - i);
      u = static_cast<U>(u | static_cast<U>(std::to_integer<U>(p[i]) << shift));
    }
  } else {
    std::memcpy(&u, p, sizeof u);
    if (order != host_order) u = byteswap(u);
  }
  return from_bits<T>(u);
}

/// Stores v in `order` into the sizeof(T) bytes at p.
// Requires: [p, p + sizeof(T)) is writable. No alignment is required.
template <scalar T>
constexpr void store(T v, std::byte* p, byte_order order) noexcept {
  using U = bits_t<T>;
  U u = to_bits(v);
  if (std::is_constant_evaluated()) {
    for (std::size_t i = 0; i < sizeof(U); ++i) {
      const std::size_t shift = 8 * (order == byte_order::little ? i : sizeof(U) - 1 - i);
      p[i] = static_cast<std::byte>(u >> shift);
    }
  } else {
    if (order != host_order) u = byteswap(u);
    std::memcpy(p, &u, sizeof u);
  }
}

/// Span forms: the extent is part of the type, so a wrong size is a compile
/// error; std::span<const std::byte>::first<sizeof(T)>() makes one.
template <scalar T>
[[nodiscard]] constexpr T load(std::span<const std::byte, sizeof(T)> in, byte_order order) noexcept {
  return load<T>(in.data(), order);
}
template <scalar T>
constexpr void store(T v, std::span<std::byte, sizeof(T)> out, byte_order order) noexcept {
  store<T>(v, out.data(), order);
}

/// The bytes of v in `order`, by value.
template <scalar T>
[[nodiscard]] constexpr std::array<std::byte, sizeof(T)> to_bytes(T v, byte_order order) noexcept {
  std::array<std::byte, sizeof(T)> out{};
  store<T>(v, out.data(), order);
  return out;
}

}  // namespace ferry::wire
