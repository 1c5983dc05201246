#include "ferry/wire/byte_order.h"

#include <boost/endian/conversion.hpp>
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ferry/wire/bulk.h"

namespace ferry::wire {
namespace {

template <std::size_t N>
std::array<std::byte, N> bytes(const std::uint8_t (&b)[N]) {
  std::array<std::byte, N> out{};
  for (std::size_t i = 0; i < N; ++i) out[i] = std::byte{b[i]};
  return out;
}

// The worked example of docs/wire-and-codec.md (section 1), byte for byte.
TEST(WorkedExample, FloatTravelsThroughNetworkOrder) {
  const float value = 6.342e-5f;
  ASSERT_EQ(to_bits(value), 0x3885005Au);

  const auto little = to_bytes(value, byte_order::little);
  EXPECT_EQ(little, bytes({0x5A, 0x00, 0x85, 0x38}));
  const auto network = to_bytes(value, byte_order::network);
  EXPECT_EQ(network, bytes({0x38, 0x85, 0x00, 0x5A}));

  // A little-endian receiver reverses the network bytes back...
  std::array<std::byte, 4> received{};
  convert(network, byte_order::network, received, byte_order::little, 4);
  EXPECT_EQ(received, bytes({0x5A, 0x00, 0x85, 0x38}));
  // ...and reads the same float, on any host.
  EXPECT_EQ(load<float>(std::span<const std::byte, 4>(received), byte_order::little), value);
  EXPECT_EQ(to_bits(load<float>(network.data(), byte_order::big)), 0x3885005Au);
}

TEST(WorkedExample, IsConstexpr) {
  constexpr auto net = to_bytes(6.342e-5f, byte_order::big);
  static_assert(net[0] == std::byte{0x38} && net[3] == std::byte{0x5A});
  static_assert(to_bits(load<float>(net.data(), byte_order::big)) == 0x3885005Au);
  static_assert(load<std::uint16_t>(net.data(), byte_order::little) == 0x8538);
  static_assert(byteswap(std::uint64_t{0x0102030405060708}) == 0x0807060504030201);
  SUCCEED();
}

// Proves each cross build really runs on the machine it claims to (the
// qemu-user emulator is chosen by the toolchain file).
TEST(Platform, MatchesTheBuildTarget) {
  const std::string_view processor = FERRY_TEST_PROCESSOR;
  RecordProperty("processor", std::string(processor));
  if (processor == "s390x") {
    EXPECT_EQ(host_order, byte_order::big);
    EXPECT_EQ(sizeof(std::size_t), 8u);
  } else if (processor == "arm") {
    EXPECT_EQ(host_order, byte_order::little);
    EXPECT_EQ(sizeof(std::size_t), 4u);
    EXPECT_FALSE(std::is_signed_v<char>);
  } else if (processor == "aarch64") {
    EXPECT_EQ(host_order, byte_order::little);
    EXPECT_EQ(sizeof(std::size_t), 8u);
    EXPECT_FALSE(std::is_signed_v<char>);
  } else {
    EXPECT_EQ(processor, "x86_64");
    EXPECT_EQ(host_order, byte_order::little);
    EXPECT_TRUE(std::is_signed_v<char>);
  }
}

TEST(ByteOrder, EnumValuesAreStable) {
  EXPECT_EQ(static_cast<int>(byte_order::little), 0);
  EXPECT_EQ(static_cast<int>(byte_order::big), 1);
  EXPECT_EQ(byte_order::network, byte_order::big);
  EXPECT_EQ(host_order == byte_order::little, std::endian::native == std::endian::little);
}

// All 65,536 u16 patterns against a hand-written reference and Boost.Endian.
TEST(ByteOrder, EveryU16Pattern) {
  for (std::uint32_t i = 0; i < 0x10000; ++i) {
    const auto v = static_cast<std::uint16_t>(i);
    const auto lo = std::byte{static_cast<std::uint8_t>(v & 0xFF)};
    const auto hi = std::byte{static_cast<std::uint8_t>(v >> 8)};
    const std::array<std::byte, 2> le{lo, hi}, be{hi, lo};
    ASSERT_EQ(to_bytes(v, byte_order::little), le) << i;
    ASSERT_EQ(to_bytes(v, byte_order::big), be) << i;
    ASSERT_EQ(load<std::uint16_t>(le.data(), byte_order::little), v);
    ASSERT_EQ(load<std::uint16_t>(be.data(), byte_order::big), v);
    const auto swapped = static_cast<std::uint16_t>((v << 8) | (v >> 8));
    ASSERT_EQ(byteswap(v), swapped);
    ASSERT_EQ(boost::endian::endian_reverse(v), swapped);
    ASSERT_EQ(load<f16>(be.data(), byte_order::big), f16{v});
    ASSERT_EQ(load<bf16>(le.data(), byte_order::little), bf16{v});
    ASSERT_EQ(to_bits(load<std::int16_t>(be.data(), byte_order::big)), v);
  }
}

template <class T>
void expect_round_trip(T v) {
  // Every offset in a buffer, so unaligned access is exercised.
  std::array<std::byte, 32> buf{};
  for (std::size_t off = 0; off + sizeof(T) <= buf.size(); ++off) {
    for (auto order : {byte_order::little, byte_order::big}) {
      store<T>(v, buf.data() + off, order);
      const T back = load<T>(buf.data() + off, order);
      ASSERT_EQ(to_bits(back), to_bits(v)) << "offset " << off;
      // The stored bytes are the reference shifts of the bit pattern.
      const auto bits = to_bits(v);
      for (std::size_t i = 0; i < sizeof(T); ++i) {
        const std::size_t shift = 8 * (order == byte_order::little ? i : sizeof(T) - 1 - i);
        ASSERT_EQ(std::to_integer<unsigned>(buf[off + i]), (bits >> shift) & 0xFFu);
      }
    }
  }
}

TEST(ByteOrder, EveryScalarTypeRoundTrips) {
  expect_round_trip<std::uint8_t>(0xA5);
  expect_round_trip<std::int8_t>(-100);
  expect_round_trip<std::uint16_t>(0xBEEF);
  expect_round_trip<std::int16_t>(-12345);
  expect_round_trip<std::uint32_t>(0xDEADBEEF);
  expect_round_trip<std::int32_t>(-123456789);
  expect_round_trip<std::uint64_t>(0x0123456789ABCDEF);
  expect_round_trip<std::int64_t>(-1234567890123456789);
  expect_round_trip<float>(6.342e-5f);
  expect_round_trip<double>(-1.0 / 3.0);
  expect_round_trip<f16>(f16{0x3C00});
  expect_round_trip<bf16>(bf16{0xBF80});
}

// NaN payloads (signalling too), signed zeros, subnormals and infinities keep
// their exact bits through scalar and bulk conversion in every order.
TEST(ByteOrder, SpecialFloatsAreBitExact) {
  const std::uint32_t f32_patterns[] = {
      0x7F800001u,  // signalling NaN, smallest payload
      0xFF800001u,  // negative signalling NaN
      0x7FA00000u,  // signalling NaN, top payload bit
      0x7FC12345u,  // quiet NaN with payload
      0xFFFFFFFFu,  // all-ones NaN
      0x80000000u,  // -0.0
      0x00000001u,  // smallest subnormal
      0x807FFFFFu,  // largest negative subnormal
      0x7F800000u, 0xFF800000u,  // infinities
  };
  const std::uint64_t f64_patterns[] = {
      0x7FF0000000000001u, 0xFFF0000000000001u, 0x7FF8DEADBEEF0001u, 0x8000000000000000u,
      0x0000000000000001u, 0x7FF0000000000000u, 0xFFF0000000000000u,
  };
  for (auto p : f32_patterns) expect_round_trip(from_bits<float>(p));
  for (auto p : f64_patterns) expect_round_trip(from_bits<double>(p));

  std::vector<float> values;
  for (auto p : f32_patterns) values.push_back(from_bits<float>(p));
  for (auto order : {byte_order::little, byte_order::big}) {
    std::vector<std::byte> wire(values.size() * 4);
    store_array<float>(values, wire, order);
    std::vector<float> back(values.size());
    load_array<float>(wire, order, std::span<float>(back));
    for (std::size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(to_bits(back[i]), f32_patterns[i]);
      EXPECT_EQ(load<std::uint32_t>(wire.data() + 4 * i, order), f32_patterns[i]);
    }
  }
}

}  // namespace
}  // namespace ferry::wire
