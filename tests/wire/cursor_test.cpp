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

TEST(Reader, ReadsLittleAndBigEndianByName) {
  const auto in = bytes({0x01, 0x02, 0x03, 0x04, 0x01, 0x02, 0x03, 0x04});
  reader r(in);
  EXPECT_EQ(*r.read_le<std::uint32_t>(), 0x04030201u);
  EXPECT_EQ(*r.read_be<std::uint32_t>(), 0x01020304u);
  EXPECT_EQ(r.read_le<std::uint8_t>().error(), errc::truncated);
  EXPECT_EQ(r.read_be<std::uint16_t>().error(), errc::truncated);
  EXPECT_EQ(r.position(), 8u);
  // Every 16-bit pattern, both orders, against a hand-written reference.
  std::array<std::byte, 2> two{};
  for (unsigned v = 0; v <= 0xFFFF; ++v) {
    two = {std::byte(v >> 8), std::byte(v & 0xFF)};
    reader t(two);
    ASSERT_EQ(*t.read_be_at<std::uint16_t>(0), v);
    ASSERT_EQ(*t.read_le_at<std::uint16_t>(0), ((v & 0xFF) << 8) | (v >> 8));
  }
}

TEST(Reader, ReadFieldsChecksOnceAndReadsNothingOnFailure) {
  const auto in = bytes({0xAA, 0x34, 0x12, 0x78, 0x56, 0x34, 0x12, 0xFF});
  reader r(in);
  std::uint8_t a = 0;
  std::uint16_t b = 0;
  std::uint32_t c = 0;
  ASSERT_TRUE(r.read_le(a, b, c));
  EXPECT_EQ(a, 0xAA);
  EXPECT_EQ(b, 0x1234);
  EXPECT_EQ(c, 0x12345678u);
  EXPECT_EQ(r.position(), 7u);
  // Two more bytes than remain: nothing read, nothing written, no move.
  std::uint8_t x = 7;
  std::uint16_t y = 9;
  EXPECT_EQ(r.read_be(x, y).error(), errc::truncated);
  EXPECT_EQ(x, 7);
  EXPECT_EQ(y, 9);
  EXPECT_EQ(r.position(), 7u);
  ASSERT_TRUE(r.read_be(x));
  EXPECT_EQ(x, 0xFF);
  EXPECT_TRUE(r.at_end());
}

TEST(Reader, AbsoluteReadsDoNotMove) {
  const auto in = bytes({0, 1, 2, 3, 4, 5});
  reader r(in);
  ASSERT_TRUE(r.skip(1));
  EXPECT_EQ(*r.read_be_at<std::uint16_t>(4), 0x0405);
  EXPECT_EQ(*r.read_at<std::uint8_t>(0, byte_order::little), 0);
  EXPECT_EQ(r.read_le_at<std::uint16_t>(5).error(), errc::truncated);
  EXPECT_EQ(r.read_le_at<std::uint8_t>(6).error(), errc::truncated);
  EXPECT_EQ(r.read_le_at<std::uint32_t>(SIZE_MAX).error(), errc::truncated);
  EXPECT_EQ(r.read_le_at<std::uint64_t>(SIZE_MAX - 3).error(), errc::truncated);
  EXPECT_EQ(r.bytes_at(2, 4)->size(), 4u);
  EXPECT_EQ(r.bytes_at(6, 0)->size(), 0u);
  EXPECT_EQ(r.bytes_at(2, 5).error(), errc::truncated);
  EXPECT_EQ(r.bytes_at(7, 0).error(), errc::truncated);
  EXPECT_EQ(r.bytes_at(1, SIZE_MAX).error(), errc::truncated);
  EXPECT_EQ(r.bytes_at(SIZE_MAX, 1).error(), errc::truncated);
  EXPECT_EQ(r.position(), 1u);
}

TEST(Reader, SubReadersAreBoundedAndKnowTheirOffset) {
  const auto in = bytes({0, 1, 2, 3, 4, 5, 6, 7});
  reader r(in);
  ASSERT_TRUE(r.skip(2));
  auto s = r.sub(4);
  ASSERT_TRUE(s);
  EXPECT_EQ(r.position(), 6u);
  EXPECT_EQ(s->size(), 4u);
  EXPECT_EQ(s->position(), 0u);
  EXPECT_EQ(s->base(), 2u);
  EXPECT_EQ(*s->read_be<std::uint16_t>(), 0x0203);
  EXPECT_EQ(s->offset(), 4u);
  // The sub-reader ends where it was told to, not where its parent does.
  EXPECT_EQ(s->read_le<std::uint32_t>().error(), errc::truncated);
  EXPECT_EQ(s->read_bytes(3).error(), errc::truncated);
  EXPECT_EQ(s->read_le_at<std::uint8_t>(4).error(), errc::truncated);
  // A sub-reader of a sub-reader: offsets in the outermost input.
  auto inner = s->sub_at(3, 1);
  ASSERT_TRUE(inner);
  EXPECT_EQ(inner->base(), 5u);
  EXPECT_EQ(*inner->read_le<std::uint8_t>(), 5);
  EXPECT_EQ(inner->offset(), 6u);
  EXPECT_EQ(s->position(), 2u);  // sub_at does not move
  // Bounds at the SIZE_MAX edges, and nothing moves on failure.
  EXPECT_EQ(r.sub(3).error(), errc::truncated);
  EXPECT_EQ(r.sub(SIZE_MAX).error(), errc::truncated);
  EXPECT_EQ(r.sub_at(SIZE_MAX, 0).error(), errc::truncated);
  EXPECT_EQ(r.sub_at(1, SIZE_MAX).error(), errc::truncated);
  EXPECT_EQ(r.sub_at(9, 0).error(), errc::truncated);
  EXPECT_TRUE(r.sub_at(8, 0));
  EXPECT_EQ(r.position(), 6u);
  EXPECT_EQ(r.sub(2)->size(), 2u);
  EXPECT_TRUE(r.at_end());
}

TEST(Reader, ReadUntilADelimiter) {
  const auto in = bytes({'a', 'b', '\n', '\n', 'c'});
  reader r(in);
  EXPECT_EQ(r.read_until(std::byte{'\n'})->size(), 2u);
  EXPECT_EQ(r.position(), 3u);
  EXPECT_EQ(r.read_until(std::byte{'\n'})->size(), 0u);
  EXPECT_EQ(r.read_until(std::byte{'\n'}).error(), errc::truncated);
  EXPECT_EQ(r.position(), 4u);
}

TEST(Reader, OptionsBoundDepthSizeAndAlignment) {
  const auto in = bytes({1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(reader::open(in, {.max_size = 7}).error(), errc::limit_exceeded);
  auto r = reader::open(in, {.max_depth = 2, .max_size = 8});
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->enter());
  EXPECT_TRUE(r->enter());
  EXPECT_EQ(r->enter().error(), errc::depth_exceeded);
  EXPECT_EQ(r->depth(), 2u);
  r->leave();
  EXPECT_TRUE(r->enter());
  // A sub-reader carries the limits and the depth reached.
  auto s = r->sub(4);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->enter().error(), errc::depth_exceeded);
  // Alignment counts from the outermost input.
  EXPECT_TRUE(r->align(4));
  EXPECT_EQ(r->align(8).error(), errc::out_of_range);
  ASSERT_TRUE(s->skip(2));
  EXPECT_TRUE(s->align(2));
  EXPECT_EQ(s->align(4).error(), errc::out_of_range);
  reader lax(in, {.check_alignment = false});
  ASSERT_TRUE(lax.skip(1));
  EXPECT_TRUE(lax.align(8));
  // The default, FlatBuffers' max_depth: 64 levels.
  reader d(in);
  for (int k = 0; k < 64; ++k) ASSERT_TRUE(d.enter()) << k;
  EXPECT_EQ(d.enter().error(), errc::depth_exceeded);
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
