#include "ferry/wire/cursor.h"

#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "../test_bytes.h"

namespace ferry::wire {
namespace {

using ferry::testing::bytes;

TEST(Reader, ReadsScalarsInEitherOrder) {
  const auto in = bytes({0x12, 0x34, 0x12, 0x34, 0x38, 0x85, 0x00, 0x5A, 0xFF});
  reader r(in);
  EXPECT_EQ(*r.read<std::uint16_t>(byte_order::big), 0x1234);
  EXPECT_EQ(*r.read<std::uint16_t>(byte_order::little), 0x3412);
  EXPECT_EQ(*r.read<float>(byte_order::network), 6.342e-5f);
  EXPECT_EQ(*r.read<std::int8_t>(byte_order::little), -1);
  EXPECT_TRUE(r.at_end());
  EXPECT_EQ(r.position(), 9u);
}

TEST(Reader, TruncatedReadLeavesPositionUnchanged) {
  const auto in = bytes({1, 2, 3});
  reader r(in);
  ASSERT_TRUE(r.skip(1));
  EXPECT_EQ(r.read<std::uint32_t>(byte_order::little).error(), errc::truncated);
  EXPECT_EQ(r.read<std::uint64_t>(byte_order::big).error(), errc::truncated);
  EXPECT_EQ(r.read<double>(byte_order::big).error(), errc::truncated);
  EXPECT_EQ(r.read_bytes(3).error(), errc::truncated);
  EXPECT_EQ(r.skip(3).error(), errc::truncated);
  std::array<std::uint16_t, 2> two{};
  EXPECT_EQ(r.read_array<std::uint16_t>(two, byte_order::big).error(), errc::truncated);
  EXPECT_EQ(r.position(), 1u);
  EXPECT_EQ(*r.read<std::uint16_t>(byte_order::big), 0x0203);
  EXPECT_EQ(r.read<std::uint8_t>(byte_order::big).error(), errc::truncated);
}

TEST(Reader, HugeLengthsCannotOverflowTheBoundsCheck) {
  const auto in = bytes({1, 2, 3, 4});
  reader r(in);
  ASSERT_TRUE(r.skip(2));
  EXPECT_EQ(r.read_bytes(SIZE_MAX).error(), errc::truncated);
  EXPECT_EQ(r.read_bytes(SIZE_MAX - 1).error(), errc::truncated);
  EXPECT_EQ(r.skip(SIZE_MAX).error(), errc::truncated);
  std::vector<std::uint64_t> many(1);
  EXPECT_EQ(r.read_array<std::uint64_t>(many, byte_order::little).error(), errc::truncated);
  EXPECT_EQ(r.position(), 2u);
}

TEST(Reader, Seek) {
  const auto in = bytes({1, 2, 3});
  reader r(in);
  EXPECT_TRUE(r.seek(3));
  EXPECT_TRUE(r.at_end());
  EXPECT_EQ(r.seek(4).error(), errc::out_of_range);
  EXPECT_EQ(r.seek(SIZE_MAX).error(), errc::out_of_range);
  EXPECT_EQ(r.position(), 3u);
  ASSERT_TRUE(r.seek(1));
  EXPECT_EQ(*r.read<std::uint8_t>(byte_order::little), 2);
  EXPECT_EQ(r.rest().size(), 1u);
}

TEST(Reader, VarintErrorsLeavePositionUnchanged) {
  const auto overlong = bytes({0x80, 0x00});
  reader a(overlong);
  EXPECT_EQ(a.read_varint().error(), errc::varint_overlong);
  EXPECT_EQ(a.position(), 0u);
  const auto big = bytes({0xFF, 0xFF, 0xFF, 0xFF, 0x1F});
  reader b(big);
  EXPECT_EQ(b.read_varint<std::uint32_t>().error(), errc::varint_overflow);
  EXPECT_EQ(b.read_zigzag<std::int32_t>().error(), errc::varint_overflow);
  EXPECT_EQ(*b.read_varint<std::uint64_t>(), 0x1FFFFFFFFu);
  const auto cut = bytes({0x80});
  reader c(cut);
  EXPECT_EQ(c.read_varint().error(), errc::truncated);
  EXPECT_EQ(c.position(), 0u);
}

TEST(Reader, Zigzag) {
  const auto in = bytes({0x03, 0x04});
  reader r(in);
  EXPECT_EQ(*r.read_zigzag(), -2);
  EXPECT_EQ(*r.read_zigzag<std::int8_t>(), 2);
}

TEST(Reader, CountIsBoundedByLimitAndInput) {
  // count 3, then 6 bytes.
  const auto in = bytes({0x03, 1, 2, 3, 4, 5, 6});
  {
    reader r(in);
    EXPECT_EQ(*r.read_count(2, 100), 3u);
  }
  {
    reader r(in);
    EXPECT_EQ(r.read_count(3, 100).error(), errc::truncated);  // 9 bytes needed, 6 left
    EXPECT_EQ(r.position(), 0u);
    EXPECT_EQ(r.read_count(1, 2).error(), errc::limit_exceeded);
    EXPECT_EQ(r.position(), 0u);
  }
  // Counts far beyond the input are refused without any multiplication.
  const auto big = bytes({0xFF, 0xFF, 0xFF, 0xFF, 0x0F});  // 2^32 - 1
  reader b(big);
  EXPECT_EQ(b.read_count(1, SIZE_MAX).error(), errc::truncated);
  EXPECT_EQ(b.read_count(SIZE_MAX, SIZE_MAX).error(), errc::truncated);
  const auto huge = bytes({0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01});  // 2^64 - 1
  reader h(huge);
  EXPECT_EQ(h.read_count(1, 0xFFFFFFFFu).error(), errc::limit_exceeded);
  EXPECT_EQ(h.read_count(8, 1000).error(), errc::limit_exceeded);
}

TEST(Reader, LengthPrefixed) {
  const auto in = bytes({0x02, 0xAA, 0xBB, 0x05, 0x01});
  reader r(in);
  auto s = r.read_length_prefixed(16);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[1], std::byte{0xBB});
  EXPECT_EQ(r.read_length_prefixed(16).error(), errc::truncated);
  EXPECT_EQ(r.read_length_prefixed(4).error(), errc::limit_exceeded);
  EXPECT_EQ(r.position(), 3u);
}

TEST(Reader, ReadArrayConvertsOrder) {
  const auto in = bytes({0x00, 0x01, 0x00, 0x02, 0x38, 0x85, 0x00, 0x5A});
  reader r(in);
  std::array<std::uint16_t, 2> u{};
  ASSERT_TRUE(r.read_array<std::uint16_t>(u, byte_order::big));
  EXPECT_EQ(u[0], 1);
  EXPECT_EQ(u[1], 2);
  std::array<float, 1> f{};
  ASSERT_TRUE(r.read_array<float>(f, byte_order::big));
  EXPECT_EQ(f[0], 6.342e-5f);
}

TEST(Writer, FixedBufferReportsNoSpaceAndWritesNothing) {
  std::array<std::byte, 5> buf{};
  writer w(buf);
  ASSERT_TRUE(w.write<std::uint32_t>(0x01020304, byte_order::big));
  EXPECT_EQ(w.write<std::uint16_t>(1, byte_order::big).error(), errc::no_space);
  EXPECT_EQ(w.write_varint(300).error(), errc::no_space);
  EXPECT_EQ(w.write_bytes(bytes({1, 2})).error(), errc::no_space);
  EXPECT_EQ(w.write_length_prefixed(bytes({1})).error(), errc::no_space);
  const std::array<std::uint16_t, 1> one{7};
  EXPECT_EQ(w.write_array<std::uint16_t>(one, byte_order::little).error(), errc::no_space);
  EXPECT_EQ(w.position(), 4u);
  ASSERT_TRUE(w.write<std::uint8_t>(9, byte_order::big));
  EXPECT_EQ(w.write<std::uint8_t>(9, byte_order::big).error(), errc::no_space);
  EXPECT_EQ(buf, (std::array<std::byte, 5>{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}, std::byte{9}}));
}

TEST(Writer, VectorSinkAppendsAndRoundTrips) {
  std::vector<std::byte> out = bytes({0xEE});
  vector_writer w(out);
  const std::array<float, 3> floats{1.0f, -0.0f, 6.342e-5f};
  w.write<std::uint64_t>(0x0102030405060708, byte_order::little);
  w.write_varint(300);
  w.write_zigzag(-5);
  w.write_length_prefixed(bytes({0xAA, 0xBB, 0xCC}));
  w.write_array<float>(floats, byte_order::big);
  w.write<double>(-2.5, byte_order::big);
  EXPECT_GE(out.size(), w.position());  // spare room until flushed
  w.flush();
  EXPECT_EQ(out.size(), w.position());
  EXPECT_EQ(w.written().size(), out.size());

  reader r(out);
  EXPECT_EQ(*r.read<std::uint8_t>(byte_order::little), 0xEE);
  EXPECT_EQ(*r.read<std::uint64_t>(byte_order::little), 0x0102030405060708u);
  EXPECT_EQ(*r.read_varint(), 300u);
  EXPECT_EQ(*r.read_zigzag(), -5);
  EXPECT_EQ(r.read_length_prefixed(3)->size(), 3u);
  std::array<float, 3> back{};
  ASSERT_TRUE(r.read_array<float>(back, byte_order::big));
  EXPECT_EQ(to_bits(back[1]), 0x80000000u);
  EXPECT_EQ(back[2], 6.342e-5f);
  EXPECT_EQ(*r.read<double>(byte_order::big), -2.5);
  EXPECT_TRUE(r.at_end());
}

}  // namespace
}  // namespace ferry::wire
