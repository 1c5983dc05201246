#include "ferry/codec/crc32c.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include <random>
#include <string_view>
#include <vector>

#include "../restore_cpu_features.h"
#include "ferry/base/cpu.h"

namespace ferry::codec {
namespace {

using base::cpu_feature_set;

std::span<const std::byte> as_bytes(std::string_view s) { return std::as_bytes(std::span(s)); }

// Bit-at-a-time CRC-32C, written from the definition: the independent reference.
std::uint32_t crc32c_bitwise(std::span<const std::byte> data) {
  std::uint32_t crc = 0xFFFFFFFFu;
  for (std::byte b : data) {
    crc ^= std::to_integer<std::uint32_t>(b);
    for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

TEST(Crc32c, CheckValue) {
  EXPECT_EQ(crc32c(as_bytes("123456789")), 0xE3069283u);
  EXPECT_EQ(crc32c({}), 0u);
}

// RFC 3720 (iSCSI), appendix B.4.
TEST(Crc32c, Rfc3720Vectors) {
  std::vector<std::byte> zeros(32, std::byte{0}), ones(32, std::byte{0xFF}), up(32), down(32);
  for (std::size_t i = 0; i < 32; ++i) {
    up[i] = std::byte{static_cast<std::uint8_t>(i)};
    down[i] = std::byte{static_cast<std::uint8_t>(31 - i)};
  }
  const std::uint8_t pdu[48] = {0x01, 0xC0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
                                0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
                                0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  ferry::test::restore_cpu_features restore;
  for (cpu_feature_set f : {cpu_feature_set{0}, base::all_cpu_features}) {
    base::limit_cpu_features(f);
    SCOPED_TRACE(std::string(crc32c_kernel_name()));
    std::vector<std::byte> long_zeros(4096, std::byte{0});  // long enough for the folding path
    EXPECT_EQ(crc32c(long_zeros), crc32c_bitwise(long_zeros));
    EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
    EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
    EXPECT_EQ(crc32c(up), 0x46DD794Eu);
    EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
    EXPECT_EQ(crc32c(std::as_bytes(std::span(pdu))), 0xD9963A56u);
  }
}

TEST(Crc32c, AllPathsAgreeOnRandomLengthsAndAlignments) {
  ferry::test::restore_cpu_features restore;
  std::mt19937 rng(1234);
  std::vector<std::byte> buf(3 * 8192 * 2 + 4096);
  for (auto& b : buf) b = std::byte{static_cast<std::uint8_t>(rng())};
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 1100; ++n) lengths.push_back(n);
  for (std::size_t n : {3 * 256 - 1, 3 * 256, 3 * 256 + 1, 3 * 8192 - 1, 3 * 8192, 3 * 8192 + 7, 2 * 3 * 8192 + 3 * 256 + 9,
                        // the folding path: its minimum, whole rounds of 256, and tails
                        1023, 1024, 1025, 1279, 1280, 1281, 4096, 4096 + 255, 40000}) {
    lengths.push_back(n);
  }
  for (int i = 0; i < 200; ++i) lengths.push_back(rng() % (buf.size() - 64));
  for (std::size_t n : lengths) {
    const std::size_t align = rng() % 64;
    const auto piece = std::span<const std::byte>(buf).subspan(align, n);
    const std::uint32_t expected = crc32c_bitwise(piece);
    for (cpu_feature_set f : {cpu_feature_set{0}, base::cpu_feature::sse4_2 | base::cpu_feature::arm_crc32,
                              base::all_cpu_features}) {
      base::limit_cpu_features(f);
      ASSERT_EQ(crc32c(piece), expected) << crc32c_kernel_name() << " length " << n << " align " << align;
    }
  }
}

TEST(Crc32c, ExtendAndCombine) {
  std::mt19937 rng(99);
  std::vector<std::byte> buf(100000);
  for (auto& b : buf) b = std::byte{static_cast<std::uint8_t>(rng())};
  const std::uint32_t whole = crc32c(buf);
  for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{777}, std::size_t{65536}, buf.size()}) {
    const auto a = std::span<const std::byte>(buf).first(cut);
    const auto b = std::span<const std::byte>(buf).subspan(cut);
    EXPECT_EQ(crc32c_extend(crc32c(a), b), whole) << cut;
    EXPECT_EQ(crc32c_combine(crc32c(a), crc32c(b), b.size()), whole) << cut;
  }
  EXPECT_EQ(crc32c_extend(0, buf), whole);
}

TEST(Crc32c, KernelName) {
  const auto name = crc32c_kernel_name();
#if defined(__x86_64__)
  const auto f = base::detected_cpu_features();
  EXPECT_EQ(name, base::has(f, base::cpu_feature::vpclmulqdq) ? "avx512-vpclmulqdq"
                  : base::has(f, base::cpu_feature::sse4_2) ? "sse4.2"
                                                             : "table");
#elif defined(__aarch64__) || defined(__arm__)
  EXPECT_EQ(name, base::has(base::detected_cpu_features(), base::cpu_feature::arm_crc32) ? "armv8-crc" : "table");
#else
  EXPECT_EQ(name, "table");
#endif
  // The armhf tree runs this binary again under `qemu-arm -cpu max` (an
  // ARMv8 core: CRC32C instructions) and `-cpu cortex-a15` (ARMv7: none),
  // saying which kernel the run must pick.
  if (const char* want = std::getenv("FERRY_EXPECT_CRC32C_KERNEL")) {
    EXPECT_EQ(name, want);
  }
}

}  // namespace
}  // namespace ferry::codec
