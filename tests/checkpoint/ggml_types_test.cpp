// The ggml type table, the byte-order swap of blocks and the dequantizers
// (checkpoint/ggml_types.h). The golden hashes are of ggml's own to_float
// output (libggml-base.so of @node-llama-cpp/linux-x64 3.22.1, x86-64) for
// the input bytes make_blocks() gives; Q8_K, which ggml's type table gives
// no to_float, is of ggml-quants.c's dequantize_row_q8_K (ggml d99724f2,
// built by hand). ferry must reproduce them bit for bit from the
// little-endian blocks and from their big-endian conversion, on every host.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ferry/checkpoint/gguf/ggml_tables.h"
#include "ferry/checkpoint/ggml_types.h"

namespace ferry::checkpoint::testing {
namespace {

using wire::byte_order;

// Deterministic bytes (splitmix64, little-endian): raw random bit patterns,
// so scales include subnormals, infinities and NaNs.
std::vector<std::byte> make_blocks(ggml_type t, std::size_t n_blocks) {
  std::uint64_t s = 0x9E3779B97F4A7C15ull * (static_cast<std::uint64_t>(t) + 1);
  std::vector<std::byte> out(n_blocks * info(t).block_bytes);
  for (std::size_t i = 0; i < out.size(); i += 8) {
    s += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    for (std::size_t k = 0; k < 8 && i + k < out.size(); ++k) out[i + k] = static_cast<std::byte>(z >> (8 * k));
  }
  return out;
}

// FNV-1a over the float bit patterns, each taken least significant byte first.
std::uint64_t hash_floats(const std::vector<float>& v) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (float f : v) {
    const auto u = std::bit_cast<std::uint32_t>(f);
    for (unsigned k = 0; k < 4; ++k) {
      h ^= (u >> (8 * k)) & 0xFFu;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

struct golden {
  ggml_type type;
  std::uint64_t hash;  // of ggml's output for make_blocks(type, 16)
};

constexpr golden goldens[] = {
    {ggml_type::q4_0, 0x71864f6023671d34ull},
    {ggml_type::q4_1, 0x79977b9d03024386ull},
    {ggml_type::q5_0, 0x98b8a64f3d31f9a5ull},
    {ggml_type::q5_1, 0x891dd6c5ee70c718ull},
    {ggml_type::q8_0, 0x90105c96fa6cb037ull},
    {ggml_type::q2_k, 0x18516c90ceb20a29ull},
    {ggml_type::q3_k, 0x37847253de92c4f4ull},
    {ggml_type::q4_k, 0xc22308cd71f26437ull},
    {ggml_type::q5_k, 0x2dbee558f16ca674ull},
    {ggml_type::q6_k, 0x5509f3bd6f1305b5ull},
    {ggml_type::q8_k, 0xeff5b4072e7af8e1ull},
    {ggml_type::iq2_xxs, 0x1c03156f95a61438ull},
    {ggml_type::iq2_xs, 0x6e7f0cc0059ee53eull},
    {ggml_type::iq3_xxs, 0xb3eb911e80aa537full},
    {ggml_type::iq1_s, 0x34014ce89a009867ull},
    {ggml_type::iq4_nl, 0x77bfa57c316384d0ull},
    {ggml_type::iq3_s, 0x6c50f18bc5556330ull},
    {ggml_type::iq2_s, 0x01be9cfb44f61aa2ull},
    {ggml_type::iq4_xs, 0x269d1e9b668d14e1ull},
    {ggml_type::iq1_m, 0x4bc9fcd121818e08ull},
    {ggml_type::tq1_0, 0x60ade281598e2e9full},
    {ggml_type::tq2_0, 0xf251191bde041db3ull},
    {ggml_type::mxfp4, 0xa6273769118e7503ull},
    {ggml_type::nvfp4, 0x55db2330d49902c4ull},
    {ggml_type::q1_0, 0xf69cbe0dc0010f25ull},
    {ggml_type::q2_0, 0x468b8f5977620007ull},
};

TEST(GgmlTypes, EveryNumberBelowTheCountHasAnEntry) {
  ASSERT_EQ(all_ggml_types().size(), ggml_type_count);
  int removed = 0;
  for (std::uint32_t n = 0; n < ggml_type_count; ++n) {
    const ggml_type_info* t = find_ggml_type(n);
    ASSERT_NE(t, nullptr) << n;
    EXPECT_EQ(t->number, n);
    EXPECT_FALSE(t->name.empty());
    if (t->status == ggml_type_status::removed) {
      ++removed;
      EXPECT_EQ(t->block_bytes, 0u);
      EXPECT_FALSE(t->note.empty());
      EXPECT_EQ(to_ggml_type(n).error(), checkpoint_errc::unknown_ggml_type);
    } else {
      EXPECT_EQ(to_ggml_type(n).value(), static_cast<ggml_type>(n));
      EXPECT_EQ(ggml_type_from_name(t->name), static_cast<ggml_type>(n));
    }
  }
  EXPECT_EQ(removed, 8);  // 4, 5, 31..33, 36..38
  EXPECT_EQ(find_ggml_type(4)->name, "q4_2");
  EXPECT_EQ(find_ggml_type(ggml_type_count), nullptr);
  EXPECT_EQ(find_ggml_type(0xFFFF'FFFFu), nullptr);
  EXPECT_EQ(to_ggml_type(ggml_type_count).error(), checkpoint_errc::unknown_ggml_type);
}

TEST(GgmlTypes, SizesAndNames) {
  EXPECT_EQ(info(ggml_type::q4_k).name, "q4_K");
  EXPECT_EQ(ggml_type_from_name("Q6_K"), ggml_type::q6_k);
  EXPECT_EQ(ggml_type_from_name("q4_0_4_4"), std::nullopt);
  EXPECT_EQ(info(ggml_type::q8_k).block_bytes, 292u);
  EXPECT_EQ(info(ggml_type::iq2_xxs).block_bytes, 66u);
  EXPECT_EQ(info(ggml_type::nvfp4).block_elements, 64u);
  EXPECT_EQ(ggml_byte_size(ggml_type::q4_0, 64).value(), 36u);
  EXPECT_EQ(ggml_byte_size(ggml_type::q4_0, 33).error(), checkpoint_errc::shape_size_mismatch);
  EXPECT_EQ(ggml_byte_size(ggml_type::q8_k, ~std::uint64_t{255}).error(), checkpoint_errc::shape_overflow);
  EXPECT_EQ(ggml_byte_size(ggml_type::f64, std::uint64_t{1} << 61).error(), checkpoint_errc::shape_overflow);
}

TEST(GgmlTypes, DequantizeGivesGgmlsBitsInBothOrders) {
  for (const golden& g : goldens) {
    const ggml_type_info& t = info(g.type);
    const std::vector<std::byte> le = make_blocks(g.type, 16);
    std::vector<std::byte> be(le.size());
    swap_blocks(g.type, le, byte_order::little, be, byte_order::big);
    std::vector<float> out(16 * t.block_elements);
    ASSERT_TRUE(dequantize(g.type, le, byte_order::little, out).has_value());
    EXPECT_EQ(hash_floats(out), g.hash) << t.name << " little";
    std::fill(out.begin(), out.end(), 0.0f);
    ASSERT_TRUE(dequantize(g.type, be, byte_order::big, out).has_value());
    EXPECT_EQ(hash_floats(out), g.hash) << t.name << " big";
  }
}

TEST(GgmlTypes, SwapTouchesExactlyTheRunsAndRoundTrips) {
  for (const ggml_type_info& t : all_ggml_types()) {
    if (t.status != ggml_type_status::active) continue;
    const auto type = static_cast<ggml_type>(t.number);
    const std::size_t n = t.block_elements == 1 ? 64 : 5;
    const std::vector<std::byte> le = make_blocks(type, n);
    std::vector<std::byte> be(le.size()), back(le.size());
    swap_blocks(type, le, byte_order::little, be, byte_order::big);
    swap_blocks(type, be, byte_order::big, back, byte_order::little);
    EXPECT_EQ(back, le) << t.name;
    std::vector<std::byte> in_place = le;
    swap_blocks_in_place(type, in_place, byte_order::little, byte_order::big);
    EXPECT_EQ(in_place, be) << t.name;
    // Same order: a copy.
    swap_blocks(type, le, byte_order::big, back, byte_order::big);
    EXPECT_EQ(back, le) << t.name;
    // Each run's values reversed, every other byte unchanged.
    std::vector<std::byte> expect = le;
    for (std::size_t b = 0; b < n; ++b) {
      for (const ggml_swap_run& r : t.swaps) {
        for (std::size_t k = 0; k < r.count; ++k) {
          const std::size_t at = b * t.block_bytes + r.offset + k * r.stride;
          for (std::size_t i = 0; i < r.width; ++i) expect[at + i] = le[at + r.width - 1 - i];
        }
      }
    }
    EXPECT_EQ(be, expect) << t.name;
  }
}

TEST(GgmlTypes, PlainTypes) {
  const std::byte f16_one_le[] = {std::byte{0x00}, std::byte{0x3C}};
  const std::byte f16_one_be[] = {std::byte{0x3C}, std::byte{0x00}};
  float f = 0;
  ASSERT_TRUE(dequantize(ggml_type::f16, f16_one_le, byte_order::little, {&f, 1}).has_value());
  EXPECT_EQ(f, 1.0f);
  ASSERT_TRUE(dequantize(ggml_type::f16, f16_one_be, byte_order::big, {&f, 1}).has_value());
  EXPECT_EQ(f, 1.0f);
  // ggml widens a signalling f16 NaN to a quiet one.
  const std::byte snan[] = {std::byte{0x01}, std::byte{0x7C}};
  ASSERT_TRUE(dequantize(ggml_type::f16, snan, byte_order::little, {&f, 1}).has_value());
  EXPECT_EQ(std::bit_cast<std::uint32_t>(f), 0x7FC0'2000u);
  // f32 is copied bit for bit, signalling NaN included.
  const std::byte f32_snan_be[] = {std::byte{0x7F}, std::byte{0x80}, std::byte{0x00}, std::byte{0x01}};
  ASSERT_TRUE(dequantize(ggml_type::f32, f32_snan_be, byte_order::big, {&f, 1}).has_value());
  EXPECT_EQ(std::bit_cast<std::uint32_t>(f), 0x7F80'0001u);
  const std::byte i16_be[] = {std::byte{0xFF}, std::byte{0xFE}};
  ASSERT_TRUE(dequantize(ggml_type::i16, i16_be, byte_order::big, {&f, 1}).has_value());
  EXPECT_EQ(f, -2.0f);
}

TEST(GgmlTypes, RemovedTypesAreRefused) {
  float f = 0;
  EXPECT_EQ(dequantize(static_cast<ggml_type>(31), {}, byte_order::little, {&f, 0}).error(),
            checkpoint_errc::unknown_ggml_type);
  EXPECT_EQ(dequantize(static_cast<ggml_type>(ggml_type_count), {}, byte_order::little, {&f, 0}).error(),
            checkpoint_errc::unknown_ggml_type);
}

// The transcription of ggml's tables, against hashes taken from ggml-common.h.
template <class A>
std::uint64_t hash_table(const A& table) {
  std::uint64_t h = 0;
  for (auto v : table) {
    const auto x = static_cast<std::uint64_t>(static_cast<std::int64_t>(v));  // int8 entries sign-extended
    h = h * std::uint64_t{1099511628211u} + x;
  }
  return h;
}

TEST(GgmlTypes, TablesMatchGgml) {
  EXPECT_EQ(hash_table(detail::iq2xxs_grid), 0x558be3f81adf19e1ull);
  EXPECT_EQ(hash_table(detail::iq2xs_grid), 0x7ea98ca4b3fd5829ull);
  EXPECT_EQ(hash_table(detail::iq2s_grid), 0x45e54868255bb01cull);
  EXPECT_EQ(hash_table(detail::iq3xxs_grid), 0x0bcc478c8d1a805eull);
  EXPECT_EQ(hash_table(detail::iq3s_grid), 0x538a4aaa7ae95d46ull);
  EXPECT_EQ(hash_table(detail::iq1s_grid), 0x82296bc46d1decfeull);
  EXPECT_EQ(hash_table(detail::kvalues_iq4nl), 0xd60945ed6ddff378ull);
  EXPECT_EQ(hash_table(detail::kvalues_fp4), 0x6e58875343a32f00ull);
  std::array<std::uint8_t, 128> ksigns{};
  for (unsigned i = 0; i < 128; ++i) ksigns[i] = detail::iq2_signs(i);
  EXPECT_EQ(hash_table(ksigns), 0x58769dd104b78e40ull);
}

}  // namespace
}  // namespace ferry::checkpoint::testing
