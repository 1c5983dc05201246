#include "ferry/wire/varint.h"

#include <gtest/gtest.h>

#include <array>
#include <limits>
#include <random>
#include <vector>

#include "../test_bytes.h"

namespace ferry::wire {
namespace {

using ferry::testing::bytes;

std::vector<std::byte> encode(std::uint64_t v) {
  std::vector<std::byte> out(10);
  out.resize(encode_varint(v, out.data()));
  return out;
}

TEST(Varint, KnownEncodings) {
  const std::pair<std::uint64_t, std::vector<std::byte>> cases[] = {
      {0, bytes({0x00})},
      {1, bytes({0x01})},
      {127, bytes({0x7F})},
      {128, bytes({0x80, 0x01})},
      {300, bytes({0xAC, 0x02})},
      {16384, bytes({0x80, 0x80, 0x01})},
      {0xFFFFFFFFu, bytes({0xFF, 0xFF, 0xFF, 0xFF, 0x0F})},
      {std::numeric_limits<std::uint64_t>::max(),
       bytes({0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01})},
  };
  for (const auto& [value, encoded] : cases) {
    EXPECT_EQ(encode(value), encoded) << value;
    EXPECT_EQ(varint_size(value), encoded.size());
    auto d = decode_varint(encoded);
    ASSERT_TRUE(d) << value;
    EXPECT_EQ(*d, (decoded<std::uint64_t>{value, encoded.size()}));
  }
}

TEST(Varint, MaxBytes) {
  static_assert(max_varint_bytes<std::uint8_t> == 2);
  static_assert(max_varint_bytes<std::uint16_t> == 3);
  static_assert(max_varint_bytes<std::uint32_t> == 5);
  static_assert(max_varint_bytes<std::uint64_t> == 10);
  SUCCEED();
}

TEST(Varint, DecodesOnlyTheFirstValue) {
  auto d = decode_varint(bytes({0xAC, 0x02, 0xFF}));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->value, 300u);
  EXPECT_EQ(d->size, 2u);
}

TEST(Varint, Truncated) {
  EXPECT_EQ(decode_varint(bytes({})).error(), errc::truncated);
  EXPECT_EQ(decode_varint(bytes({0x80})).error(), errc::truncated);
  EXPECT_EQ(decode_varint(bytes({0xFF, 0xFF, 0xFF})).error(), errc::truncated);
  EXPECT_EQ(decode_varint<std::uint32_t>(bytes({0x80, 0x80, 0x80, 0x80})).error(), errc::truncated);
}

TEST(Varint, Overlong) {
  EXPECT_EQ(decode_varint(bytes({0x80, 0x00})).error(), errc::varint_overlong);
  EXPECT_EQ(decode_varint(bytes({0xFF, 0x00})).error(), errc::varint_overlong);
  EXPECT_EQ(decode_varint(bytes({0x81, 0x80, 0x00})).error(), errc::varint_overlong);
  EXPECT_EQ(decode_varint<std::uint8_t>(bytes({0x80, 0x00})).error(), errc::varint_overlong);
}

TEST(Varint, Overflow) {
  // u64: the 10th byte may only hold bit 63.
  EXPECT_EQ(decode_varint(bytes({0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02})).error(),
            errc::varint_overflow);
  // An 11th byte is never allowed, whatever its value.
  EXPECT_EQ(decode_varint(bytes({0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00})).error(),
            errc::varint_overflow);
  EXPECT_EQ(decode_varint<std::uint32_t>(bytes({0xFF, 0xFF, 0xFF, 0xFF, 0x10})).error(), errc::varint_overflow);
  EXPECT_EQ(decode_varint<std::uint32_t>(bytes({0x80, 0x80, 0x80, 0x80, 0x80, 0x00})).error(),
            errc::varint_overflow);
  EXPECT_EQ(decode_varint<std::uint16_t>(bytes({0xFF, 0xFF, 0x04})).error(), errc::varint_overflow);
  EXPECT_EQ(decode_varint<std::uint8_t>(bytes({0x80, 0x02})).error(), errc::varint_overflow);
  // The largest values still fit.
  EXPECT_EQ(decode_varint<std::uint32_t>(bytes({0xFF, 0xFF, 0xFF, 0xFF, 0x0F}))->value, 0xFFFFFFFFu);
  EXPECT_EQ(decode_varint<std::uint16_t>(bytes({0xFF, 0xFF, 0x03}))->value, 0xFFFFu);
  EXPECT_EQ(decode_varint<std::uint8_t>(bytes({0xFF, 0x01}))->value, 0xFFu);
}

TEST(Varint, EveryU16RoundTrips) {
  for (std::uint32_t v = 0; v <= 0xFFFF; ++v) {
    const auto e = encode(v);
    auto d = decode_varint<std::uint16_t>(e);
    ASSERT_TRUE(d) << v;
    ASSERT_EQ(d->value, v);
    ASSERT_EQ(d->size, e.size());
  }
}

TEST(Varint, RandomAndBoundaryValuesRoundTrip) {
  std::mt19937_64 rng(42);
  std::vector<std::uint64_t> values;
  for (int bit = 0; bit < 64; ++bit) {
    const std::uint64_t p = std::uint64_t{1} << bit;
    values.insert(values.end(), {p - 1, p, p + 1});
  }
  for (int i = 0; i < 10000; ++i) values.push_back(rng() >> (rng() % 64));
  for (auto v : values) {
    const auto e = encode(v);
    auto d = decode_varint(e);
    ASSERT_TRUE(d) << v;
    EXPECT_EQ(d->value, v);
    EXPECT_EQ(d->size, e.size());
    auto d32 = decode_varint<std::uint32_t>(e);
    if (v <= 0xFFFFFFFFu) {
      EXPECT_EQ(d32->value, v);
    } else {
      EXPECT_EQ(d32.error(), errc::varint_overflow);
    }
  }
}

TEST(Zigzag, KnownValues) {
  EXPECT_EQ(zigzag_encode(std::int64_t{0}), 0u);
  EXPECT_EQ(zigzag_encode(std::int64_t{-1}), 1u);
  EXPECT_EQ(zigzag_encode(std::int64_t{1}), 2u);
  EXPECT_EQ(zigzag_encode(std::int64_t{-2}), 3u);
  EXPECT_EQ(zigzag_encode(std::numeric_limits<std::int64_t>::max()), 0xFFFFFFFFFFFFFFFEu);
  EXPECT_EQ(zigzag_encode(std::numeric_limits<std::int64_t>::min()), 0xFFFFFFFFFFFFFFFFu);
  EXPECT_EQ(zigzag_encode(std::int32_t{-2147483647 - 1}), 0xFFFFFFFFu);
  EXPECT_EQ(zigzag_encode(std::int8_t{-128}), 0xFFu);
}

TEST(Zigzag, EveryI16RoundTrips) {
  for (int v = -32768; v <= 32767; ++v) {
    const auto s = static_cast<std::int16_t>(v);
    ASSERT_EQ(zigzag_decode(zigzag_encode(s)), s);
  }
  for (std::int64_t v : {std::numeric_limits<std::int64_t>::min(), std::int64_t{-1}, std::int64_t{0},
                         std::numeric_limits<std::int64_t>::max()}) {
    EXPECT_EQ(zigzag_decode(zigzag_encode(v)), v);
  }
}

}  // namespace
}  // namespace ferry::wire
