#include "ferry/comm/frame.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "ferry/codec/crc32c.h"
#include "ferry/codec/half.h"
#include "ferry/wire/bulk.h"

namespace ferry::comm {
namespace {

using wire::byte_order;

constexpr std::size_t max_frame = std::size_t{1} << 20;

std::vector<std::byte> hex(std::initializer_list<unsigned> b) {
  std::vector<std::byte> out;
  for (unsigned x : b) out.push_back(std::byte{static_cast<std::uint8_t>(x)});
  return out;
}

// The layout, byte for byte: a big-endian sender's frame carrying the worked
// example float 6.342e-5 (0x3885005A).
TEST(Frame, GoldenBigEndianFrame) {
  frame_header h;
  h.order = byte_order::big;
  h.sender = 2;
  h.sequence = 0x0102030405060708;
  h.chunk = 3;
  h.count = 1;
  std::vector<std::byte> frame;
  ASSERT_TRUE(encode_raw(h, hex({0x38, 0x85, 0x00, 0x5A}), frame));
  const auto expected_head = hex({'F', 'D', 'F', '1', 1, 0x01, 12, 0,  // magic, version, flags (big), F32, reserved
                                  0, 0, 0, 2,                           // sender
                                  1, 2, 3, 4, 5, 6, 7, 8,               // sequence
                                  0, 0, 0, 3,                           // chunk
                                  0, 0, 0, 1,                           // count
                                  0x38, 0x85, 0x00, 0x5A});             // payload
  ASSERT_EQ(frame.size(), expected_head.size() + 4);
  EXPECT_TRUE(std::equal(expected_head.begin(), expected_head.end(), frame.begin()));
  const std::uint32_t crc = codec::crc32c(std::span(frame).first(frame.size() - 4));
  EXPECT_EQ(wire::load<std::uint32_t>(frame.data() + frame.size() - 4, byte_order::big), crc);

  // Any receiver reads the same float.
  auto f = decode_frame(frame, max_frame);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->header, h);
  float value = 0;
  ASSERT_TRUE(payload_to_f32(*f, std::span(&value, 1)));
  EXPECT_EQ(wire::to_bits(value), 0x3885005Au);
}

TEST(Frame, SenderNeverSwapsAndReceiverMakesRight) {
  std::vector<float> values = {1.0f, -0.0f, 6.342e-5f, std::bit_cast<float>(0x7F800001u),
                               std::bit_cast<float>(0x00000001u), -INFINITY};
  frame_header h;
  h.sender = 1;
  std::vector<std::byte> frame;
  ASSERT_TRUE(encode_f32(h, values, frame));
  // Sender's payload is its memory, untouched.
  EXPECT_EQ(std::memcmp(frame.data() + frame_header_size, values.data(), values.size() * 4), 0);
  auto f = decode_frame(frame, max_frame);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->header.order, wire::host_order);
  std::vector<float> back(values.size());
  ASSERT_TRUE(payload_to_f32(*f, back));
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_EQ(wire::to_bits(back[i]), wire::to_bits(values[i]));

  // The same values from a machine of the other order decode identically.
  frame_header other = h;
  other.order = wire::host_order == byte_order::little ? byte_order::big : byte_order::little;
  other.count = static_cast<std::uint32_t>(values.size());
  std::vector<std::byte> payload(values.size() * 4);
  ASSERT_TRUE(wire::store_array<float>(values, payload, other.order));
  std::vector<std::byte> swapped;
  ASSERT_TRUE(encode_raw(other, payload, swapped));
  auto g = decode_frame(swapped, max_frame);
  ASSERT_TRUE(g);
  std::vector<float> back2(values.size());
  ASSERT_TRUE(payload_to_f32(*g, back2));
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_EQ(wire::to_bits(back2[i]), wire::to_bits(values[i]));
}

TEST(Frame, CompressedPayloadsMatchTheCodec) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d;
  std::vector<float> values(5000);
  for (auto& v : values) v = d(rng);
  for (encoding e : {encoding::bf16, encoding::f16}) {
    frame_header h;
    h.enc = e;
    std::vector<std::byte> frame;
    ASSERT_TRUE(encode_f32(h, values, frame));
    EXPECT_EQ(frame.size(), frame_header_size + 2 * values.size() + frame_trailer_size);
    auto f = decode_frame(frame, max_frame);
    ASSERT_TRUE(f);
    std::vector<float> back(values.size());
    ASSERT_TRUE(payload_to_f32(*f, back));
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float expected = e == encoding::bf16 ? codec::to_float(codec::to_bf16(values[i]))
                                                 : codec::to_float(codec::to_f16(values[i]));
      ASSERT_EQ(wire::to_bits(back[i]), wire::to_bits(expected)) << i;
    }
  }
}

TEST(Frame, RawFramesOfEveryDtype) {
  for (codec::dtype t : codec::all_dtypes) {
    frame_header h;
    h.type = t;
    h.count = 3;
    std::vector<std::byte> payload(3 * codec::size_of(t), std::byte{0x5A});
    std::vector<std::byte> frame;
    ASSERT_TRUE(encode_raw(h, payload, frame));
    auto f = decode_frame(frame, max_frame);
    ASSERT_TRUE(f) << codec::name(t);
    EXPECT_EQ(f->header.type, t);
    EXPECT_TRUE(std::equal(f->payload.begin(), f->payload.end(), payload.begin()));
  }
  frame_header h;
  h.count = 2;
  std::vector<std::byte> frame;
  EXPECT_EQ(encode_raw(h, std::vector<std::byte>(7), frame).error(), errc::size_mismatch);
  h.type = codec::dtype::f64;
  EXPECT_EQ(encode_f32(h, std::vector<float>(2), frame).error(), errc::bad_value);
}

std::vector<std::byte> sample_frame() {
  std::vector<std::byte> frame;
  const std::vector<float> v = {1, 2, 3, 4};
  (void)encode_f32(frame_header{}, v, frame);
  return frame;
}

TEST(Frame, EveryErrorIsExact) {
  const auto good = sample_frame();
  auto with = [&](std::size_t at, std::uint8_t value) {
    auto b = good;
    b[at] = std::byte{value};
    return decode_frame(b, max_frame).error();
  };
  EXPECT_EQ(with(0, 'X'), errc::bad_magic);
  EXPECT_EQ(with(4, 2), errc::unsupported_version);
  EXPECT_EQ(with(5, static_cast<std::uint8_t>(std::to_integer<unsigned>(good[5]) | 0x10)), errc::bad_value);  // reserved flag bit
  EXPECT_EQ(with(5, static_cast<std::uint8_t>(std::to_integer<unsigned>(good[5]) | 0x06)), errc::bad_value);  // encoding 3
  EXPECT_EQ(with(6, 0), codec_errc::unknown_dtype);
  EXPECT_EQ(with(6, 7), errc::checksum_mismatch);   // I32: same size, caught by the CRC
  EXPECT_EQ(with(6, 13), errc::truncated);          // F64: the frame is too short for it
  EXPECT_EQ(with(7, 1), errc::bad_value);           // reserved byte
  EXPECT_EQ(with(frame_header_size, 0xFF), errc::checksum_mismatch);
  EXPECT_EQ(decode_frame(std::span(good).first(good.size() - 1), max_frame).error(), errc::truncated);
  EXPECT_EQ(decode_frame(std::span(good).first(10), max_frame).error(), errc::truncated);
  auto longer = good;
  longer.push_back(std::byte{0});
  EXPECT_EQ(decode_frame(longer, max_frame).error(), errc::trailing_bytes);
  // Compressed encodings only carry F32.
  frame_header h;
  h.enc = encoding::bf16;
  h.type = codec::dtype::f64;
  h.count = 1;
  std::vector<std::byte> frame;
  ASSERT_TRUE(encode_raw(h, std::vector<std::byte>(2), frame));
  EXPECT_EQ(decode_frame(frame, max_frame).error(), errc::bad_value);
  // payload_to_f32 on another dtype, or the wrong output size.
  frame_header i;
  i.type = codec::dtype::i32;
  i.count = 1;
  frame.clear();
  ASSERT_TRUE(encode_raw(i, std::vector<std::byte>(4), frame));
  auto fi = decode_frame(frame, max_frame);
  ASSERT_TRUE(fi);
  float one = 0;
  EXPECT_EQ(payload_to_f32(*fi, std::span(&one, 1)).error(), errc::bad_value);
  auto ff = decode_frame(good, max_frame);
  std::vector<float> wrong(3);
  EXPECT_EQ(payload_to_f32(*ff, wrong).error(), errc::size_mismatch);
}

TEST(Frame, OversizedFramesAreRejectedFromTheHeaderAlone) {
  // A header claiming 2^32-1 f64 elements: rejected before any payload is
  // read or allocated, whatever follows.
  frame_header h;
  h.type = codec::dtype::f64;
  h.count = UINT32_MAX;
  std::vector<std::byte> header(frame_header_size);
  {
    std::vector<std::byte> frame;
    h.count = 0;
    ASSERT_TRUE(encode_raw(h, {}, frame));
    std::copy_n(frame.begin(), frame_header_size, header.begin());
  }
  wire::store<std::uint32_t>(UINT32_MAX, header.data() + 24, wire::host_order);
  EXPECT_EQ(parse_header(header, max_frame).error(), errc::limit_exceeded);
  wire::store<std::uint32_t>(1, header.data() + 24, wire::host_order);
  EXPECT_TRUE(parse_header(header, max_frame));
  EXPECT_EQ(parse_header(header, 39).error(), errc::limit_exceeded);  // 28 + 8 + 4 = 40
  EXPECT_TRUE(parse_header(header, 40));
}

TEST(Frame, EverySingleBitFlipIsCaught) {
  const auto good = sample_frame();
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      auto b = good;
      b[i] ^= std::byte{static_cast<std::uint8_t>(1u << bit)};
      auto f = decode_frame(b, max_frame);
      ASSERT_FALSE(f) << "byte " << i << " bit " << bit;
    }
  }
}

}  // namespace
}  // namespace ferry::comm
