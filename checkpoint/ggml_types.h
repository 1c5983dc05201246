// ferry/checkpoint/ggml_types.h: ggml's tensor types (what GGUF files
// store): the type table, the byte-order swap of every type's blocks, and
// ferry's reference dequantizers to f32.
//
// The ground truth is ggml itself: include/ggml.h (enum ggml_type),
// src/ggml.c (type_traits: block size and bytes), src/ggml-common.h (block
// structs) and src/ggml-quants.c (dequantize_row_*), read at
// github.com/ggml-org/ggml d99724f2b141fed9e1a9f402213506c081433465 (the
// ggml that llama.cpp vendors as ggml/). docs/gguf-and-numpy.md has the
// table with every type's swapped fields, and how it is checked.
//
// BLOCKS
//
// A ggml tensor of type T is a row-major run of blocks, each holding
// block_elements consecutive elements in block_bytes bytes, with no padding
// between blocks; a tensor's element count along its first dimension MUST
// be a multiple of block_elements. Types with block_elements == 1 are plain
// arrays of one scalar each. The byte order of a block is that of its
// multi-byte fields only (listed per type below and in ggml_type_info::swaps):
// a "little" block is what ggml writes on x86 and ARM; a "big" block has
// exactly those fields byte-reversed and every other byte unchanged.
//
// Block layouts, field by field. Offsets and sizes in bytes; "f16" is an
// IEEE binary16 pattern, "u16"/"u32"/"i16"/"f32" a field of that width whose
// bytes follow the block's byte order; "[n] u8" is n single bytes, never
// swapped. QK_K = 256. A field marked "as u32" is declared as bytes by ggml
// but read by its dequantizer as one 32-bit integer (memcpy), so it swaps
// as one; a field marked "bytes" is declared wider but read byte by byte.
//
//   F32 (0)      1 elem,   4 B: f32
//   F16 (1)      1 elem,   2 B: f16
//   Q4_0 (2)    32 elem,  18 B: 0 d f16 | 2 qs[16] u8: element j is
//                                qs[j] & 15 (j < 16) or qs[j-16] >> 4, minus 8, times d
//   Q4_1 (3)    32 elem,  20 B: 0 d f16 | 2 m f16 | 4 qs[16] u8: nibble * d + m
//   4, 5         removed from ggml (Q4_2, Q4_3); no layout
//   Q5_0 (6)    32 elem,  22 B: 0 d f16 | 2 qh as u32 (bit j = 5th bit of element j)
//                                | 6 qs[16] u8 (low nibbles, as Q4_0); (q - 16) * d
//   Q5_1 (7)    32 elem,  24 B: 0 d f16 | 2 m f16 | 4 qh as u32 | 8 qs[16] u8; q * d + m
//   Q8_0 (8)    32 elem,  34 B: 0 d f16 | 2 qs[32] i8; q * d
//   Q8_1 (9)    32 elem,  36 B: 0 d f16 | 2 s f16 (d * sum of qs) | 4 qs[32] i8; q * d
//   Q2_K (10)  256 elem,  84 B: 0 scales[16] u8 (low nibble scale, high nibble min)
//                                | 16 qs[64] u8 (2-bit) | 80 d f16 | 82 dmin f16
//   Q3_K (11)  256 elem, 110 B: 0 hmask[32] u8 | 32 qs[64] u8 | 96 scales[12] bytes
//                                (16 6-bit scales; ggml shuffles them as 3 u32s, lane by
//                                lane, so they are bytes) | 108 d f16
//   Q4_K (12)  256 elem, 144 B: 0 d f16 | 2 dmin f16 | 4 scales[12] u8 (8 6-bit scales and
//                                8 6-bit mins) | 16 qs[128] u8
//   Q5_K (13)  256 elem, 176 B: 0 d f16 | 2 dmin f16 | 4 scales[12] u8 | 16 qh[32] u8
//                                | 48 qs[128] u8
//   Q6_K (14)  256 elem, 210 B: 0 ql[128] u8 | 128 qh[64] u8 | 192 scales[16] i8 | 208 d f16
//   Q8_K (15)  256 elem, 292 B: 0 d f32 | 4 qs[256] i8 | 260 bsums[16] i16
//   IQ2_XXS (16) 256 elem, 66 B: 0 d f16 | 2 qs: 8 groups of 8 bytes, each 4 grid
//                                indexes [4] u8 then 1 u32 (4 x 7 sign bits, 4-bit scale
//                                in bits 28..31). ggml declares qs as u16[32]; its
//                                dequantizer reads the bytes as above, not as u16s.
//   IQ2_XS (17) 256 elem,  74 B: 0 d f16 | 2 qs[32] u16 (9-bit grid index, 7 sign bits)
//                                | 66 scales[8] u8
//   IQ3_XXS (18) 256 elem, 98 B: 0 d f16 | 2 qs[64] u8 (grid indexes) | 66 8 x u32
//                                (4 x 7 sign bits, 4-bit scale in bits 28..31)
//   IQ1_S (19)  256 elem,  50 B: 0 d f16 | 2 qs[32] u8 | 34 qh[8] u16
//   IQ4_NL (20)  32 elem,  18 B: 0 d f16 | 2 qs[16] u8 (indexes into kvalues_iq4nl)
//   IQ3_S (21)  256 elem, 110 B: 0 d f16 | 2 qs[64] u8 | 66 qh[8] u8 | 74 signs[32] u8
//                                | 106 scales[4] u8
//   IQ2_S (22)  256 elem,  82 B: 0 d f16 | 2 qs[32] u8 | 34 signs[32] u8 | 66 qh[8] u8
//                                | 74 scales[8] u8
//   IQ4_XS (23) 256 elem, 136 B: 0 d f16 | 2 scales_h u16 | 4 scales_l[4] u8 | 8 qs[128] u8
//   I8 (24), I16 (25), I32 (26), I64 (27), F64 (28): 1 elem of 1, 2, 4, 8, 8 B
//   IQ1_M (29)  256 elem,  56 B: 0 qs[32] u8 | 32 qh[16] u8 | 48 scales: 4 u16 (3-bit
//                                scales; the top nibbles of the 4 u16s, 0 to 3, form the
//                                f16 super-block scale). No f16 field of its own.
//   BF16 (30)    1 elem,   2 B: bfloat16 pattern
//   31..33       removed from ggml (Q4_0_4_4, Q4_0_4_8, Q4_0_8_8: use Q4_0)
//   TQ1_0 (34)  256 elem,  54 B: 0 qs[48] u8 (5 trits a byte) | 48 qh[4] u8 (4 trits a
//                                byte) | 52 d f16
//   TQ2_0 (35)  256 elem,  66 B: 0 qs[64] u8 (2 bits each) | 64 d f16
//   36..38       removed from ggml (IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8: use IQ4_NL)
//   MXFP4 (39)   32 elem,  17 B: 0 e u8 (E8M0 scale) | 1 qs[16] u8 (E2M1 nibbles)
//   NVFP4 (40)   64 elem,  36 B: 0 d[4] u8 (UE4M3 scale per 16 elements) | 4 qs[32] u8
//   Q1_0 (41)   128 elem,  18 B: 0 d f16 | 2 qs[16] u8 (bit j set: +d, clear: -d)
//   Q2_0 (42)    64 elem,  18 B: 0 d f16 | 2 qs[16] u8 (2 bits each: (q - 1) * d)
//
// A number at or above ggml_type_count has never been defined: a reader
// MUST refuse it, and MUST refuse the removed numbers, naming them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "ferry/base/error.h"
#include "ferry/checkpoint/error.h"
#include "ferry/wire/byte_order.h"

namespace ferry::checkpoint {

/// A ggml tensor type, numbered as in ggml's enum ggml_type and GGUF's
/// tensor info (a u32). Only the types ggml still defines are enumerators;
/// the removed numbers have ggml_type_info entries (status removed).
enum class ggml_type : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  tq1_0 = 34,
  tq2_0 = 35,
  mxfp4 = 39,
  nvfp4 = 40,
  q1_0 = 41,
  q2_0 = 42,
};

/// One past the highest number ggml's enum gives (GGML_TYPE_COUNT).
inline constexpr std::uint32_t ggml_type_count = 43;

/// `count` values of `width` bytes (2, 4 or 8) inside one block, the first
/// at byte `offset`, each `stride` bytes after the one before (stride ==
/// width for an array): the multi-byte fields that change with byte order.
struct ggml_swap_run {
  std::uint16_t offset;
  std::uint8_t width;
  std::uint8_t count;
  std::uint16_t stride;
};

enum class ggml_type_status : std::uint8_t {
  active,   ///< ggml defines it; ferry reads, swaps and dequantizes it
  removed,  ///< the number was a ggml type once; files with it are refused
};

struct ggml_type_info {
  std::uint32_t number;
  /// ggml's type_name ("q4_K", "iq2_xxs", "bf16"); for a removed number,
  /// the enumerator ggml's header still names in a comment ("q4_2").
  std::string_view name;
  ggml_type_status status;
  std::uint32_t block_elements;  ///< 0 when removed
  std::uint32_t block_bytes;     ///< 0 when removed
  bool quantized;                ///< ggml's is_quantized
  /// The fields to byte-reverse between little and big blocks; empty for
  /// single-byte types and removed numbers. For plain types (1 element a
  /// block) the one run is the element itself.
  std::span<const ggml_swap_run> swaps;
  /// For a removed number, what ggml says replaced it; empty otherwise.
  std::string_view note;
};

/// The entry for `number`: every number below ggml_type_count has one
/// (removed numbers too, with status removed); nullptr above.
[[nodiscard]] const ggml_type_info* find_ggml_type(std::uint32_t number) noexcept;

/// The entry of an active type.
[[nodiscard]] const ggml_type_info& info(ggml_type t) noexcept;

/// All entries, in number order (ggml_type_count of them).
[[nodiscard]] std::span<const ggml_type_info> all_ggml_types() noexcept;

/// The active type of this name (ggml's spelling, case-insensitive:
/// "q4_K", "Q4_K", "iq2_xxs"); nullopt for others.
[[nodiscard]] std::optional<ggml_type> ggml_type_from_name(std::string_view name) noexcept;

/// The type of a number read from a file. Errors: unknown_ggml_type when
/// the number is not an active type (never defined, or removed; a reader
/// names which through find_ggml_type()).
[[nodiscard]] result<ggml_type> to_ggml_type(std::uint32_t number) noexcept;

/// The bytes that `elements` elements of `t` take. Errors:
/// shape_size_mismatch when `elements` is not a multiple of the block size,
/// shape_overflow when the byte count exceeds 64 bits.
[[nodiscard]] result<std::uint64_t> ggml_byte_size(ggml_type t, std::uint64_t elements) noexcept;

/// Copies whole blocks of `t` from `in` to `out`, converting them from
/// order `from` to order `to` (swapping exactly the fields of `swaps`).
/// Plain types run on wire::convert's bulk kernels.
// Requires: in.size() == out.size(), a multiple of info(t).block_bytes;
// in and out are the same range or do not overlap.
void swap_blocks(ggml_type t, std::span<const std::byte> in, wire::byte_order from, std::span<std::byte> out,
                 wire::byte_order to) noexcept;

/// swap_blocks() in place.
// Requires: data.size() is a multiple of info(t).block_bytes.
void swap_blocks_in_place(ggml_type t, std::span<std::byte> data, wire::byte_order from,
                          wire::byte_order to) noexcept;

/// Dequantizes whole blocks of `t`, stored in `order`, to f32 on any host.
///
/// For every type with a ggml to_float, the result is bit for bit what
/// ggml's reference to_float gives for the little-endian blocks on x86-64
/// (the same float operations in the same order; f16 scales widen as ggml
/// widens them, which turns a signalling NaN quiet). Where ggml's type
/// traits have no to_float, ferry defines one: Q8_1 gives q * d (as Q8_0;
/// s is ignored); Q8_K d * q (what ggml-quants.c's dequantize_row_q8_K
/// computes, though no to_float names it; bsums are ignored); I8..I64 and
/// F64 convert each value to the nearest float; F32 is copied bit for bit.
///
/// Errors: unknown_ggml_type when `t` is not an active type (a number cast
/// from a file without to_ggml_type()).
// Requires: blocks.size() is a multiple of block_bytes and out.size() is
// blocks.size() / block_bytes * block_elements.
[[nodiscard]] result<void> dequantize(ggml_type t, std::span<const std::byte> blocks, wire::byte_order order,
                                      std::span<float> out) noexcept;

}  // namespace ferry::checkpoint
