#include "ferry/comm/frame.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>

#include "ferry/codec/crc32c.h"
#include "ferry/comm/communicator.h"
#include "ferry/codec/half.h"
#include "ferry/wire/bulk.h"
#include "collect_sink.h"

namespace ferry::comm {
namespace {

using wire::byte_order;
using test::collect;

constexpr std::size_t max_frame = std::size_t{1} << 20;

// A whole F32 frame of host floats, in the host's order, as a sender builds it.
std::vector<std::byte> encode_f32(frame_header h, std::span<const float> values) {
  h.order = wire::host_order;
  h.count = static_cast<std::uint32_t>(values.size());
  std::vector<std::byte> payload(values.size() * wire_element_size(h));
  encode_f32_payload(h.enc, values, payload);
  return encode_frame(h, payload);
}

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
  frame = encode_frame(h, hex({0x38, 0x85, 0x00, 0x5A}));
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
  ASSERT_TRUE(payload_to_f32(f->header, f->payload, std::span(&value, 1)));
  EXPECT_EQ(wire::to_bits(value), 0x3885005Au);
}

TEST(Frame, SenderNeverSwapsAndReceiverMakesRight) {
  std::vector<float> values = {1.0f, -0.0f, 6.342e-5f, std::bit_cast<float>(0x7F800001u),
                               std::bit_cast<float>(0x00000001u), -INFINITY};
  frame_header h;
  h.sender = 1;
  std::vector<std::byte> frame;
  frame = encode_f32(h, values);
  // Sender's payload is its memory, untouched.
  EXPECT_EQ(std::memcmp(frame.data() + frame_header_size, values.data(), values.size() * 4), 0);
  auto f = decode_frame(frame, max_frame);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->header.order, wire::host_order);
  std::vector<float> back(values.size());
  ASSERT_TRUE(payload_to_f32(f->header, f->payload, back));
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_EQ(wire::to_bits(back[i]), wire::to_bits(values[i]));

  // The same values from a machine of the other order decode identically.
  frame_header other = h;
  other.order = wire::host_order == byte_order::little ? byte_order::big : byte_order::little;
  other.count = static_cast<std::uint32_t>(values.size());
  std::vector<std::byte> payload(values.size() * 4);
  wire::store_array<float>(values, payload, other.order);
  std::vector<std::byte> swapped;
  swapped = encode_frame(other, payload);
  auto g = decode_frame(swapped, max_frame);
  ASSERT_TRUE(g);
  std::vector<float> back2(values.size());
  ASSERT_TRUE(payload_to_f32(g->header, g->payload, back2));
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
    frame = encode_f32(h, values);
    EXPECT_EQ(frame.size(), frame_header_size + 2 * values.size() + frame_trailer_size);
    auto f = decode_frame(frame, max_frame);
    ASSERT_TRUE(f);
    std::vector<float> back(values.size());
    ASSERT_TRUE(payload_to_f32(f->header, f->payload, back));
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
    frame = encode_frame(h, payload);
    auto f = decode_frame(frame, max_frame);
    ASSERT_TRUE(f) << codec::name(t);
    EXPECT_EQ(f->header.type, t);
    EXPECT_TRUE(std::equal(f->payload.begin(), f->payload.end(), payload.begin()));
  }
}

std::vector<std::byte> sample_frame() {
  std::vector<std::byte> frame;
  const std::vector<float> v = {1, 2, 3, 4};
  frame = encode_f32(frame_header{}, v);
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
  EXPECT_EQ(with(5, static_cast<std::uint8_t>(std::to_integer<unsigned>(good[5]) | 0x80)), errc::bad_value);  // bit 7
  // Bit 6 marks a message's frame: it round-trips, under the CRC.
  EXPECT_EQ(with(5, static_cast<std::uint8_t>(std::to_integer<unsigned>(good[5]) | frame_message_flag)),
            errc::checksum_mismatch);
  frame_header m;
  m.p2p = true;
  m.type = codec::dtype::u64;
  m.count = 3;
  m.sequence = 9;
  const auto mf = decode_frame(encode_frame(m, std::vector<std::byte>(24)), max_frame);
  ASSERT_TRUE(mf);
  EXPECT_TRUE(mf->header.p2p);
  EXPECT_EQ(mf->header, m);
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
  frame = encode_frame(h, std::vector<std::byte>(2));
  EXPECT_EQ(decode_frame(frame, max_frame).error(), errc::bad_value);
  // payload_to_f32 on another dtype.
  frame_header i;
  i.type = codec::dtype::i32;
  i.count = 1;
  frame = encode_frame(i, std::vector<std::byte>(4));
  auto fi = decode_frame(frame, max_frame);
  ASSERT_TRUE(fi);
  float one = 0;
  EXPECT_EQ(payload_to_f32(fi->header, fi->payload, std::span(&one, 1)).error(), errc::bad_value);
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
    frame = encode_frame(h, {});
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

// The receiving side as the communicator runs it: frames and ABORTs in
// one stream, fed in every split, land in the sink's buffers (test::collect)
// and come out the same whatever the split.
std::vector<std::byte> sample_stream() {
  std::vector<std::byte> s;
  const std::vector<float> a = {1, 2, 3};
  frame_header h;
  h.chunk = 0;
  auto f1 = encode_f32(h, a);
  h.chunk = 1;
  h.enc = encoding::bf16;
  auto f2 = encode_f32(h, a);
  abort_message m{comm_errc::peer_lost, 2, 1, 9};
  const auto ab = encode_abort(m);
  h.chunk = 2;
  h.enc = encoding::raw;
  auto f3 = encode_f32(h, {});  // an empty payload
  for (const auto* part : {&f1, &f2}) s.insert(s.end(), part->begin(), part->end());
  s.insert(s.end(), ab.begin(), ab.end());
  s.insert(s.end(), f3.begin(), f3.end());
  return s;
}

TEST(FrameDecoder, EverySplitGivesTheSameFrames) {
  const auto stream = sample_stream();
  collect whole;
  frame_decoder d(max_frame);
  ASSERT_TRUE(d.feed(stream, whole));
  EXPECT_TRUE(d.idle());
  ASSERT_EQ(whole.headers.size(), 3u);
  ASSERT_EQ(whole.aborts.size(), 1u);
  EXPECT_EQ(whole.aborts[0].culprit, 1u);
  EXPECT_EQ(whole.headers[1].enc, encoding::bf16);
  EXPECT_TRUE(whole.payloads[2].empty());
  for (std::size_t step = 1; step <= 40; ++step) {
    collect pieces;
    frame_decoder e(max_frame);
    for (std::size_t at = 0; at < stream.size(); at += step) {
      ASSERT_TRUE(e.feed(std::span(stream).subspan(at, std::min(step, stream.size() - at)), pieces)) << step;
    }
    EXPECT_TRUE(e.idle());
    EXPECT_EQ(pieces.headers, whole.headers) << step;
    EXPECT_EQ(pieces.payloads, whole.payloads) << step;
    EXPECT_EQ(pieces.aborts, whole.aborts) << step;
  }
}

TEST(FrameDecoder, BuffersReadAheadOnlyWhenAsked) {
  // A socket reader's view: the payload's rest, its CRC, then the next
  // header, and nothing past the frame without read_ahead.
  const auto stream = sample_stream();
  collect sink;
  frame_decoder d(max_frame);
  std::array<std::span<std::byte>, 3> bufs;
  ASSERT_EQ(d.buffers(bufs, true), 1u);
  EXPECT_EQ(bufs[0].size(), frame_header_size);  // a header needs no decision
  std::memcpy(bufs[0].data(), stream.data(), frame_header_size);
  ASSERT_TRUE(d.advance(frame_header_size, sink));
  ASSERT_EQ(d.buffers(bufs, false), 2u);
  EXPECT_EQ(bufs[0].data(), sink.buffer.data());  // the payload lands where the sink said
  EXPECT_EQ(bufs[0].size(), 12u);
  EXPECT_EQ(bufs[1].size(), frame_trailer_size);
  ASSERT_EQ(d.buffers(bufs, true), 3u);
  EXPECT_EQ(bufs[2].size(), frame_header_size);
  // Fill all three at once, as one readv would.
  std::size_t at = frame_header_size;
  std::size_t n = 0;
  for (const auto& b : bufs) {
    std::memcpy(b.data(), stream.data() + at + n, b.size());
    n += b.size();
  }
  ASSERT_TRUE(d.advance(n, sink));
  EXPECT_EQ(sink.headers.size(), 1u);
  EXPECT_FALSE(d.idle());  // the next header is in, its payload not yet
  ASSERT_EQ(d.buffers(bufs, false), 2u);
  EXPECT_EQ(bufs[0].size(), 6u);  // three bf16 values
}

TEST(FrameDecoder, ErrorsAreExactAndFinal) {
  auto stream = sample_stream();
  stream[frame_header_size + 1] ^= std::byte{1};  // first payload
  collect sink;
  frame_decoder d(max_frame);
  EXPECT_EQ(d.feed(stream, sink).error(), errc::checksum_mismatch);
  EXPECT_TRUE(sink.headers.empty());  // nothing handed on before its CRC
  EXPECT_EQ(d.feed(stream, sink).error(), errc::checksum_mismatch);  // and it stays failed
  collect refusing;
  refusing.refuse = comm_errc::sequence_mismatch;
  frame_decoder e(max_frame);
  EXPECT_EQ(e.feed(sample_stream(), refusing).error(), comm_errc::sequence_mismatch);
  // A frame announcing more than the maximum fails on its header alone.
  frame_decoder small(frame_header_size + frame_trailer_size + 8);
  collect unused;
  const auto fresh = sample_stream();
  EXPECT_EQ(small.feed(std::span(fresh).first(frame_header_size), unused).error(), errc::limit_exceeded);
  // A broken ABORT.
  auto ab = encode_abort(abort_message{comm_errc::timed_out, 1, std::nullopt, 3});
  ab[10] ^= std::byte{4};
  frame_decoder f(max_frame);
  EXPECT_EQ(f.feed(ab, unused).error(), errc::checksum_mismatch);
}

TEST(FrameDecoder, SealMatchesTheWholeFrame) {
  const std::vector<float> v = {6.342e-5f, -0.0f};
  frame_header h;
  h.count = 2;
  const auto payload = std::as_bytes(std::span(v));
  const auto e = seal(h, payload);
  const auto whole = encode_frame(h, payload);
  EXPECT_TRUE(std::equal(e.header.begin(), e.header.end(), whole.begin()));
  EXPECT_TRUE(std::equal(e.trailer.begin(), e.trailer.end(), whole.end() - frame_trailer_size));
}

TEST(Abort, RoundTripsAndRefusesEachBrokenField) {
  const abort_message m{comm_errc::peer_lost, 2, 7, 0x0102030405060708};
  const auto b = encode_abort(m);
  const auto back = parse_abort(b);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->code, m.code);
  EXPECT_EQ(back->reporter, 2u);
  EXPECT_EQ(back->culprit, 7u);
  EXPECT_EQ(back->sequence, 0x0102030405060708u);
  auto bad = b;
  bad[4] ^= std::byte{0xFF};  // version
  EXPECT_EQ(parse_abort(bad).error(), errc::unsupported_version);
  bad = b;
  bad[5] |= std::byte{0x40};  // a flag ABORTs do not take (frames do: bit 6)
  EXPECT_EQ(parse_abort(bad).error(), errc::bad_value);
  for (const std::size_t at : {6u, 8u, 12u, 16u, 24u, 28u}) {
    bad = b;
    bad[at] ^= std::byte{1};  // every field after the flags is under the CRC
    EXPECT_EQ(parse_abort(bad).error(), errc::checksum_mismatch) << at;
  }
}

// The names ferry-train's --compress and ferry.distributed's hooks use.
TEST(Compression, NamesRoundTrip) {
  EXPECT_EQ(name(compression::none), "none");
  EXPECT_EQ(name(compression::bf16), "bf16");
  EXPECT_EQ(name(compression::f16), "f16");
  for (const compression c : all_compressions) EXPECT_EQ(compression_from_name(name(c)), c);
  for (const char* s : {"", "BF16", "fp16", "f32", "none "}) EXPECT_EQ(compression_from_name(s), std::nullopt) << s;
  static_assert(compression_from_name("f16") == compression::f16);
}

// FERRY_AUTH's names.
TEST(FrameAuth, NamesRoundTrip) {
  EXPECT_EQ(name(frame_auth::none), "none");
  EXPECT_EQ(name(frame_auth::frames), "frames");
  EXPECT_EQ(name(frame_auth::encrypt), "encrypt");
  for (const frame_auth a : all_frame_auths) EXPECT_EQ(frame_auth_from_name(name(a)), a);
  for (const char* s : {"", "hmac", "Frames", "encrypt "}) EXPECT_EQ(frame_auth_from_name(s), std::nullopt) << s;
}

}  // namespace
}  // namespace ferry::comm
