// Bulk conversion against the scalar reference. This file is compiled twice:
// once as is (every kernel the CPU has is exercised), and once with
// FERRY_TEST_FORCE_PORTABLE, which pins dispatch to the portable path before
// any test runs.
#include "ferry/wire/bulk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "ferry/base/cpu.h"

namespace ferry::wire {
namespace {

using namespace ferry::base;  // the cpu feature controls

#ifdef FERRY_TEST_FORCE_PORTABLE
const bool forced = (limit_cpu_features(0), true);
TEST(Dispatch, IsForcedToThePortablePath) {
  EXPECT_TRUE(forced);
  EXPECT_EQ(bulk_kernel_name(), "scalar");
}
#endif

// The feature sets that select each kernel this machine has.
std::vector<cpu_feature_set> kernel_feature_sets() {
#ifdef FERRY_TEST_FORCE_PORTABLE
  return {0};
#else
  return {0,
          static_cast<cpu_feature_set>(cpu_feature::sse2),
          cpu_feature::sse2 | cpu_feature::ssse3,
          cpu_feature::sse2 | cpu_feature::ssse3 | cpu_feature::avx2,
          all_cpu_features};
#endif
}

struct restore_features {
  ~restore_features() {
#ifndef FERRY_TEST_FORCE_PORTABLE
    limit_cpu_features(all_cpu_features);
#endif
  }
};

std::vector<std::byte> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = std::byte{static_cast<std::uint8_t>(rng())};
  return v;
}

// The element-by-element reference, through the scalar layer.
std::vector<std::byte> reference_reverse(std::span<const std::byte> in, std::size_t width) {
  std::vector<std::byte> out(in.size());
  for (std::size_t i = 0; i + width <= in.size(); i += width) {
    for (std::size_t j = 0; j < width; ++j) out[i + j] = in[i + width - 1 - j];
  }
  return out;
}

TEST(Bulk, EveryLengthAndMisalignmentMatchesScalar) {
  restore_features restore;
  for (cpu_feature_set features : kernel_feature_sets()) {
    limit_cpu_features(features);
    SCOPED_TRACE(std::string(bulk_kernel_name()));
    for (std::size_t width : {2u, 4u, 8u}) {
      const auto source = random_bytes(1024 * width + 64, static_cast<std::uint32_t>(width));
      std::vector<std::byte> in_buf(1024 * width + 64), out_buf(1024 * width + 64);
      for (std::size_t count = 0; count <= 1024; ++count) {
        const std::size_t n = count * width;
        const auto expected = reference_reverse(std::span(source).first(n), width);
        // Every misalignment for up to 192 elements (past the unrolled
        // block of four 64-byte registers, 256 bytes, at every width), then
        // two per length, which cycle through all 64.
        for (std::size_t misalign = 0; misalign < 64; ++misalign) {
          if (count > 192 && misalign != count % 64 && misalign != (count * 7 + 3) % 64) continue;
          const std::size_t out_off = (misalign * 13 + 5) % 64;
          std::byte* in = in_buf.data() + misalign;
          std::byte* out = out_buf.data() + out_off;
          std::memcpy(in, source.data(), n);
          // Copying conversion; the byte past the end must stay untouched.
          out[n] = std::byte{0x5C};
          reverse_bytes(in, out, count, width);
          ASSERT_TRUE(std::equal(out, out + n, expected.begin()))
              << "width " << width << " count " << count << " misalign " << misalign;
          ASSERT_EQ(out[n], std::byte{0x5C});
          // In place.
          reverse_bytes(in, in, count, width);
          ASSERT_TRUE(std::equal(in, in + n, expected.begin()))
              << "in place, width " << width << " count " << count << " misalign " << misalign;
        }
      }
    }
  }
}

TEST(Bulk, LargeBuffersUseEveryPathAndAgree) {
  // Past the streaming threshold, so the non-temporal path runs too.
  restore_features restore;
  const std::size_t n = (std::size_t{16} << 20) + 12;
  const auto source = random_bytes(n + 1, 7);
  for (std::size_t width : {2u, 4u, 8u}) {
    const std::size_t count = n / width;
    const auto expected = reference_reverse(std::span(source).first(count * width), width);
    for (cpu_feature_set features : kernel_feature_sets()) {
      limit_cpu_features(features);
      std::vector<std::byte> out(count * width + width);
      // Destination offsets: aligned, one element in (the streaming path
      // writes an unaligned head first), and one byte in (no streaming).
      for (std::size_t shift : {std::size_t{0}, width, std::size_t{1}}) {
        reverse_bytes(source.data(), out.data() + shift, count, width);
        ASSERT_EQ(std::memcmp(out.data() + shift, expected.data(), count * width), 0)
            << bulk_kernel_name() << " width " << width << " shift " << shift;
      }
    }
  }
}

TEST(Bulk, ConvertHandlesEveryOrderPair) {
  const auto source = random_bytes(4096, 3);
  const byte_order orders[] = {byte_order::little, byte_order::big, byte_order::native, byte_order::network};
  for (std::size_t width : {1u, 2u, 4u, 8u}) {
    const auto reversed = reference_reverse(source, width);
    for (auto from : orders) {
      for (auto to : orders) {
        const auto& expected = (from == to || width == 1) ? source : reversed;
        std::vector<std::byte> out(source.size());
        convert(source, from, out, to, width);
        EXPECT_EQ(out, expected);
        std::vector<std::byte> in_place = source;
        convert_in_place(in_place, width, from, to);
        EXPECT_EQ(in_place, expected);
      }
    }
  }
}

// Mismatched sizes are a caller's bug, asserted (not tested: release
// builds define NDEBUG). Empty spans are fine.
TEST(Bulk, EmptySpans) {
  convert({}, byte_order::little, {}, byte_order::big, 8);
  convert_in_place({}, 8, byte_order::little, byte_order::big);
  load_array<double>({}, byte_order::big, std::span<double>());
  store_array<double>({}, {}, byte_order::big);
}

TEST(Bulk, TypedArraysKeepEveryBit) {
  std::vector<double> d = {-0.0, 1e-310, std::bit_cast<double>(std::uint64_t{0x7FF0000000000001}),
                           -std::numeric_limits<double>::infinity(), 3.25};
  std::vector<std::byte> big(d.size() * 8);
  store_array<double>(d, big, byte_order::big);
  EXPECT_EQ(big[0], std::byte{0x80});
  EXPECT_EQ(big[16 + 7], std::byte{0x01});
  std::vector<double> back(d.size());
  load_array<double>(big, byte_order::big, std::span<double>(back));
  for (std::size_t i = 0; i < d.size(); ++i) EXPECT_EQ(to_bits(back[i]), to_bits(d[i]));

  std::vector<f16> h = {f16{0x7C01}, f16{0x8000}, f16{0x0001}};
  std::vector<std::byte> hb(6);
  store_array<f16>(h, hb, byte_order::big);
  EXPECT_EQ(hb[0], std::byte{0x7C});
  EXPECT_EQ(hb[1], std::byte{0x01});
}

TEST(Dispatch, KernelNameFollowsEnabledFeatures) {
  restore_features restore;
  const auto name = bulk_kernel_name();
  EXPECT_TRUE(name == "avx512bw" || name == "avx2" || name == "ssse3" || name == "sse2" || name == "neon" || name == "scalar") << name;
#ifndef FERRY_TEST_FORCE_PORTABLE
  limit_cpu_features(0);
  EXPECT_EQ(bulk_kernel_name(), "scalar");
  EXPECT_EQ(describe_cpu_features(enabled_cpu_features()), "none (portable paths)");
  limit_cpu_features(all_cpu_features);
  EXPECT_EQ(enabled_cpu_features(), detected_cpu_features());
#if defined(__x86_64__)
  EXPECT_TRUE(has(detected_cpu_features(), cpu_feature::sse2));
  EXPECT_NE(bulk_kernel_name(), "scalar");
#elif defined(__aarch64__)
  EXPECT_EQ(bulk_kernel_name(), "neon");
#else
  EXPECT_EQ(bulk_kernel_name(), "scalar");
#endif
#endif
}

}  // namespace
}  // namespace ferry::wire
