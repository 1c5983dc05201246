// ferry/codec/dtype.h: the element types ferry's tensor formats carry.
//
// Each dtype has a stable one-byte code (written into ferry's formats; never
// renumbered), a size in bytes, and a name: the safetensors dtype string
// where safetensors has the type, else one made the same way.
//
//   code  name     bytes  element
//    1    BOOL       1    0 or 1
//    2    U8         1    unsigned integer
//    3    I8         1    two's complement integer
//    4    U16        2    unsigned integer
//    5    I16        2    two's complement integer
//    6    U32        4    unsigned integer
//    7    I32        4    two's complement integer
//    8    U64        8    unsigned integer
//    9    I64        8    two's complement integer
//   10    F16        2    IEEE 754 binary16
//   11    BF16       2    bfloat16
//   12    F32        4    IEEE 754 binary32
//   13    F64        8    IEEE 754 binary64
//   14    F8_E4M3    1    8-bit float, 4 exponent / 3 mantissa bits (OCP FP8)
//   15    F8_E5M2    1    8-bit float, 5 exponent / 2 mantissa bits (OCP FP8)
//   16  F8_E4M3FNUZ  1    8-bit float, E4M3 with bias 8, 0x80 the only NaN,
//                         no infinities, no -0 (PyTorch's float8_e4m3fnuz)
//   17  F8_E5M2FNUZ  1    8-bit float, E5M2 with bias 16, the same rules
//                         (PyTorch's float8_e5m2fnuz)
//   18    C32        4    complex: real, then imaginary, each an F16
//                         (PyTorch's complex32; no safetensors or NumPy type)
//   19    C64        8    complex: real, then imaginary, each an F32
//                         (NumPy's complex64, safetensors' C64)
//   20    C128      16    complex: real, then imaginary, each an F64
//                         (NumPy's complex128)
//
// Code 0 is never a valid dtype, so zeroed memory is never mistaken for one.
// Multi-byte elements travel with the byte order of their container; the
// byte-order conversion of an element reverses each unit of order_width()
// bytes as an unsigned integer of that size (wire/bulk.h): the whole
// element, or each half of a complex one. That is exact for every dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "ferry/base/float16.h"
#include "ferry/codec/error.h"

namespace ferry::codec {

enum class dtype : std::uint8_t {
  boolean = 1,
  u8 = 2,
  i8 = 3,
  u16 = 4,
  i16 = 5,
  u32 = 6,
  i32 = 7,
  u64 = 8,
  i64 = 9,
  f16 = 10,
  bf16 = 11,
  f32 = 12,
  f64 = 13,
  f8_e4m3 = 14,
  f8_e5m2 = 15,
  f8_e4m3fnuz = 16,
  f8_e5m2fnuz = 17,
  c32 = 18,
  c64 = 19,
  c128 = 20,
};

/// Every dtype, in code order.
inline constexpr dtype all_dtypes[] = {
    dtype::boolean, dtype::u8,  dtype::i8,   dtype::u16, dtype::i16,
    dtype::u32,     dtype::i32, dtype::u64,  dtype::i64, dtype::f16,
    dtype::bf16,    dtype::f32, dtype::f64,  dtype::f8_e4m3, dtype::f8_e5m2,
    dtype::f8_e4m3fnuz, dtype::f8_e5m2fnuz, dtype::c32, dtype::c64, dtype::c128,
};

// The accessors below require a valid dtype; values read from outside must
// come through dtype_from_code() or dtype_from_name().

/// Size of one element in bytes (1, 2, 4, 8 or 16).
[[nodiscard]] std::size_t size_of(dtype t) noexcept;

/// The unit a byte-order conversion reverses: size_of(t), or half of it for
/// a complex dtype (each part is swapped on its own).
[[nodiscard]] std::size_t order_width(dtype t) noexcept;

/// The name: safetensors' where it has the type ("F32", "BF16", "C64"), one
/// made the same way otherwise ("C128", "F8_E4M3FNUZ").
[[nodiscard]] std::string_view name(dtype t) noexcept;

/// True for the real floating-point dtypes (not the complex ones, as in
/// PyTorch).
[[nodiscard]] bool is_floating_point(dtype t) noexcept;

/// The dtype of each part of a complex dtype (F16, F32, F64); t itself for
/// the others.
[[nodiscard]] constexpr dtype part_of(dtype t) noexcept {
  return t == dtype::c32 ? dtype::f16 : t == dtype::c64 ? dtype::f32 : t == dtype::c128 ? dtype::f64 : t;
}

/// Whether tensors of dtypes a and b may view one storage: the same element
/// size and the same unit of byte order (a C64 and an F64 tensor may not:
/// converting the storage's order would scramble one of them).
[[nodiscard]] inline bool same_element_layout(dtype a, dtype b) noexcept {
  return size_of(a) == size_of(b) && order_width(a) == order_width(b);
}

/// True for C32, C64 and C128.
[[nodiscard]] constexpr bool is_complex(dtype t) noexcept {
  return t == dtype::c32 || t == dtype::c64 || t == dtype::c128;
}

/// Parses a safetensors name (exact, case-sensitive). Errors: unknown_dtype.
[[nodiscard]] result<dtype> dtype_from_name(std::string_view name) noexcept;

/// Validates a stored code. Errors: unknown_dtype.
[[nodiscard]] result<dtype> dtype_from_code(std::uint8_t code) noexcept;

/// The dtype of a C++ arithmetic type (bool, fixed-width integers, float,
/// double) or of a float pattern (ferry::f16, bf16, f8_e4m3, f8_e5m2);
/// ill-formed for others.
template <class T>
inline constexpr dtype dtype_of = [] {
  static_assert((std::is_arithmetic_v<T> && sizeof(T) <= 8) || float_pattern<T>, "no dtype for this type");
  if constexpr (std::is_same_v<T, f16>) return dtype::f16;
  else if constexpr (std::is_same_v<T, bf16>) return dtype::bf16;
  else if constexpr (std::is_same_v<T, f8_e4m3>) return dtype::f8_e4m3;
  else if constexpr (std::is_same_v<T, f8_e5m2>) return dtype::f8_e5m2;
  else if constexpr (std::is_same_v<T, bool>) return dtype::boolean;
  else if constexpr (std::is_same_v<T, float>) return dtype::f32;
  else if constexpr (std::is_same_v<T, double>) return dtype::f64;
  else if constexpr (std::is_signed_v<T>) {
    static_assert(!std::is_floating_point_v<T>, "long double has no dtype");
    return sizeof(T) == 1 ? dtype::i8 : sizeof(T) == 2 ? dtype::i16 : sizeof(T) == 4 ? dtype::i32 : dtype::i64;
  } else {
    return sizeof(T) == 1 ? dtype::u8 : sizeof(T) == 2 ? dtype::u16 : sizeof(T) == 4 ? dtype::u32 : dtype::u64;
  }
}();

/// The stable code of t.
[[nodiscard]] constexpr std::uint8_t code(dtype t) noexcept { return static_cast<std::uint8_t>(t); }

}  // namespace ferry::codec
