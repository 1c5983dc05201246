// ferry/checkpoint/gguf/ggml_types.cpp: the ggml type table and the byte-order
// swap of blocks. The dequantizers are in ggml_dequantize.cpp.
#include "ferry/checkpoint/ggml_types.h"

#include <array>
#include <cassert>
#include <cstring>
#include <utility>

#include "ferry/wire/bulk.h"

namespace ferry::checkpoint {
namespace {

using run = ggml_swap_run;

// The swap runs of each type: every field ggml's reference dequantizer
// (or, for the fields no dequantizer reads, ggml's quantizer) loads as a
// multi-byte value, at the width it loads it. See the layouts in the header.
constexpr run one_f16_at_0[] = {{0, 2, 1, 2}};             // d: Q4_0, Q8_0, IQ3_S, IQ2_S, IQ4_NL, Q1_0, Q2_0
constexpr run two_f16_at_0[] = {{0, 2, 2, 2}};             // Q4_1, Q8_1, Q4_K, Q5_K; IQ4_XS's d and scales_h
constexpr run q5_0_runs[] = {{0, 2, 1, 2}, {2, 4, 1, 4}};  // d; qh as u32
constexpr run q5_1_runs[] = {{0, 2, 2, 2}, {4, 4, 1, 4}};  // d, m; qh as u32
constexpr run q2_k_runs[] = {{80, 2, 2, 2}};               // d, dmin
constexpr run q3_k_runs[] = {{108, 2, 1, 2}};              // d
constexpr run q6_k_runs[] = {{208, 2, 1, 2}};              // d
constexpr run q8_k_runs[] = {{0, 4, 1, 4}, {260, 2, 16, 2}};  // d f32; bsums i16
constexpr run iq2_xxs_runs[] = {{0, 2, 1, 2}, {6, 4, 8, 8}};  // d; the u32 of each 8-byte group
constexpr run iq2_xs_runs[] = {{0, 2, 33, 2}};                // d and qs[32] u16: contiguous
constexpr run iq3_xxs_runs[] = {{0, 2, 1, 2}, {66, 4, 8, 4}}; // d; scales_and_signs u32[8]
constexpr run iq1_s_runs[] = {{0, 2, 1, 2}, {34, 2, 8, 2}};   // d; qh u16[8]
constexpr run iq1_m_runs[] = {{48, 2, 4, 2}};                 // scales as u16[4]
constexpr run tq1_0_runs[] = {{52, 2, 1, 2}};                 // d
constexpr run tq2_0_runs[] = {{64, 2, 1, 2}};                 // d
constexpr run plain2[] = {{0, 2, 1, 2}};
constexpr run plain4[] = {{0, 4, 1, 4}};
constexpr run plain8[] = {{0, 8, 1, 8}};
constexpr std::span<const run> none{};

constexpr ggml_type_info active(std::uint32_t n, std::string_view name, std::uint32_t elements, std::uint32_t bytes,
                                bool quantized, std::span<const run> swaps) {
  return {n, name, ggml_type_status::active, elements, bytes, quantized, swaps, {}};
}
constexpr ggml_type_info removed(std::uint32_t n, std::string_view name, std::string_view note) {
  return {n, name, ggml_type_status::removed, 0, 0, false, none, note};
}

constexpr std::string_view repack_q4_0 = "removed from ggml; use Q4_0 (ggml repacks it at run time)";
constexpr std::string_view repack_iq4_nl = "removed from ggml; use IQ4_NL (ggml repacks it at run time)";

constexpr std::array<ggml_type_info, ggml_type_count> table = {{
    active(0, "f32", 1, 4, false, plain4),
    active(1, "f16", 1, 2, false, plain2),
    active(2, "q4_0", 32, 18, true, one_f16_at_0),
    active(3, "q4_1", 32, 20, true, two_f16_at_0),
    removed(4, "q4_2", "removed from ggml in 2023; no converter reads it"),
    removed(5, "q4_3", "removed from ggml in 2023; no converter reads it"),
    active(6, "q5_0", 32, 22, true, q5_0_runs),
    active(7, "q5_1", 32, 24, true, q5_1_runs),
    active(8, "q8_0", 32, 34, true, one_f16_at_0),
    active(9, "q8_1", 32, 36, true, two_f16_at_0),
    active(10, "q2_K", 256, 84, true, q2_k_runs),
    active(11, "q3_K", 256, 110, true, q3_k_runs),
    active(12, "q4_K", 256, 144, true, two_f16_at_0),
    active(13, "q5_K", 256, 176, true, two_f16_at_0),
    active(14, "q6_K", 256, 210, true, q6_k_runs),
    active(15, "q8_K", 256, 292, true, q8_k_runs),
    active(16, "iq2_xxs", 256, 66, true, iq2_xxs_runs),
    active(17, "iq2_xs", 256, 74, true, iq2_xs_runs),
    active(18, "iq3_xxs", 256, 98, true, iq3_xxs_runs),
    active(19, "iq1_s", 256, 50, true, iq1_s_runs),
    active(20, "iq4_nl", 32, 18, true, one_f16_at_0),
    active(21, "iq3_s", 256, 110, true, one_f16_at_0),
    active(22, "iq2_s", 256, 82, true, one_f16_at_0),
    active(23, "iq4_xs", 256, 136, true, two_f16_at_0),
    active(24, "i8", 1, 1, false, none),
    active(25, "i16", 1, 2, false, plain2),
    active(26, "i32", 1, 4, false, plain4),
    active(27, "i64", 1, 8, false, plain8),
    active(28, "f64", 1, 8, false, plain8),
    active(29, "iq1_m", 256, 56, true, iq1_m_runs),
    active(30, "bf16", 1, 2, false, plain2),
    removed(31, "q4_0_4_4", repack_q4_0),
    removed(32, "q4_0_4_8", repack_q4_0),
    removed(33, "q4_0_8_8", repack_q4_0),
    active(34, "tq1_0", 256, 54, true, tq1_0_runs),
    active(35, "tq2_0", 256, 66, true, tq2_0_runs),
    removed(36, "iq4_nl_4_4", repack_iq4_nl),
    removed(37, "iq4_nl_4_8", repack_iq4_nl),
    removed(38, "iq4_nl_8_8", repack_iq4_nl),
    active(39, "mxfp4", 32, 17, true, none),
    active(40, "nvfp4", 64, 36, true, none),
    active(41, "q1_0", 128, 18, true, one_f16_at_0),
    active(42, "q2_0", 64, 18, true, one_f16_at_0),
}};

// Every entry sits at its own number, and every run lies inside its block,
// with no two runs touching the same byte (checked at compile time).
constexpr bool table_is_consistent() {
  for (std::uint32_t i = 0; i < table.size(); ++i) {
    const ggml_type_info& t = table[i];
    if (t.number != i) return false;
    if ((t.status == ggml_type_status::active) != (t.block_bytes != 0)) return false;
    std::array<bool, 512> used{};
    for (const run& r : t.swaps) {
      if (r.width != 2 && r.width != 4 && r.width != 8) return false;
      if (r.count == 0 || r.stride < r.width) return false;
      const std::uint32_t end = r.offset + (r.count - 1u) * r.stride + r.width;
      if (end > t.block_bytes) return false;
      for (std::uint32_t k = 0; k < r.count; ++k) {
        for (std::uint32_t b = 0; b < r.width; ++b) {
          const std::uint32_t at = r.offset + k * r.stride + b;
          if (used[at]) return false;
          used[at] = true;
        }
      }
    }
    if (t.block_elements == 1 && t.block_bytes > 1 && (t.swaps.size() != 1 || t.swaps[0].width != t.block_bytes)) {
      return false;
    }
  }
  return true;
}
static_assert(table_is_consistent());

constexpr bool is_active_number(std::uint32_t n) noexcept {
  return n < table.size() && table[n].status == ggml_type_status::active;
}

// Byte-reverses the fields of `runs` in each block of `data`.
void swap_runs(std::span<const run> runs, std::size_t block_bytes, std::span<std::byte> data) noexcept {
  std::byte* const end = data.data() + data.size();
  if (runs.size() == 1 && runs[0].width == 2 && runs[0].count == 1) {
    // The common case (Q4_0, Q8_0, Q6_K, ...): one f16 a block.
    for (std::byte* b = data.data() + runs[0].offset; b < end; b += block_bytes) std::swap(b[0], b[1]);
    return;
  }
  for (std::byte* block = data.data(); block != end; block += block_bytes) {
    for (const run& r : runs) {
      if (r.stride == r.width) {
        wire::reverse_bytes(block + r.offset, block + r.offset, r.count, r.width);
      } else {
        for (std::size_t k = 0; k < r.count; ++k) {
          std::byte* p = block + r.offset + k * r.stride;
          wire::reverse_bytes(p, p, 1, r.width);
        }
      }
    }
  }
}

bool ascii_iequal(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

}  // namespace

const ggml_type_info* find_ggml_type(std::uint32_t number) noexcept {
  return number < table.size() ? &table[number] : nullptr;
}

const ggml_type_info& info(ggml_type t) noexcept {
  const auto n = static_cast<std::uint32_t>(t);
  assert(is_active_number(n));
  return table[n];
}

std::span<const ggml_type_info> all_ggml_types() noexcept { return table; }

std::optional<ggml_type> ggml_type_from_name(std::string_view name) noexcept {
  for (const ggml_type_info& t : table) {
    if (t.status == ggml_type_status::active && ascii_iequal(t.name, name)) return static_cast<ggml_type>(t.number);
  }
  return std::nullopt;
}

result<ggml_type> to_ggml_type(std::uint32_t number) noexcept {
  if (!is_active_number(number)) return checkpoint_errc::unknown_ggml_type;
  return static_cast<ggml_type>(number);
}

result<std::uint64_t> ggml_byte_size(ggml_type t, std::uint64_t elements) noexcept {
  const ggml_type_info& ti = info(t);
  if (elements % ti.block_elements != 0) return checkpoint_errc::shape_size_mismatch;
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(elements / ti.block_elements, std::uint64_t{ti.block_bytes}, &bytes)) {
    return checkpoint_errc::shape_overflow;
  }
  return bytes;
}

void swap_blocks(ggml_type t, std::span<const std::byte> in, wire::byte_order from, std::span<std::byte> out,
                 wire::byte_order to) noexcept {
  const ggml_type_info& ti = info(t);
  assert(in.size() == out.size() && in.size() % ti.block_bytes == 0);
  if (ti.block_elements == 1) {
    wire::convert(in, from, out, to, ti.block_bytes);
    return;
  }
  if (in.data() != out.data() && !in.empty()) std::memcpy(out.data(), in.data(), in.size());
  if (from != to) swap_runs(ti.swaps, ti.block_bytes, out);
}

void swap_blocks_in_place(ggml_type t, std::span<std::byte> data, wire::byte_order from,
                          wire::byte_order to) noexcept {
  const ggml_type_info& ti = info(t);
  assert(data.size() % ti.block_bytes == 0);
  if (ti.block_elements == 1) {
    wire::convert_in_place(data, ti.block_bytes, from, to);
    return;
  }
  if (from != to) swap_runs(ti.swaps, ti.block_bytes, data);
}

}  // namespace ferry::checkpoint
