// Frame authentication without a network (runs on every architecture): the
// seal and open of frames and ABORTs in both modes, every single-bit flip
// refused, counters, the HKDF keys, FERRY_AUTH and the HELLO's auth byte,
// and the test vectors of docs/comm-protocol.md section 7.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/codec/crc32c.h"
#include "ferry/comm/config.h"
#include "ferry/comm/frame.h"
#include "collect_sink.h"
#include "ferry/comm/handshake.h"
#include "ferry/wire/byte_order.h"
#include "hello_sample.h"

namespace ferry::comm {
namespace {

constexpr std::size_t max_frame = 1 << 20;
constexpr frame_auth modes[] = {frame_auth::frames, frame_auth::encrypt};

frame_key key_of(std::uint8_t seed) {
  frame_key k{};
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = std::byte(static_cast<std::uint8_t>(seed + 7 * i));
  return k;
}

frame_header header(std::uint32_t chunk, std::uint32_t count) {
  frame_header h;
  h.sender = 3;
  h.sequence = 0x0102030405060708;
  h.chunk = chunk;
  h.count = count;
  return h;
}

std::vector<std::byte> floats(std::size_t n, float base) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
  const auto b = std::as_bytes(std::span(v));
  return {b.begin(), b.end()};
}

TEST(FrameAuth, RoundTripInBothModes) {
  for (const frame_auth mode : modes) {
    frame_cipher sealer(mode, key_of(1), true);
    const auto payload = floats(100, 0.5f);
    const auto frame = encode_frame(header(4, 100), payload, sealer, 9);
    ASSERT_EQ(frame.size(), frame_header_size + payload.size() + frame_tag_size);
    const bool hidden = !std::equal(payload.begin(), payload.end(), frame.begin() + frame_header_size);
    EXPECT_EQ(hidden, mode == frame_auth::encrypt) << name(mode);
    const auto back = decode_frame(frame, max_frame, mode, key_of(1), 9);
    ASSERT_TRUE(back) << name(mode) << ": " << message(back.error());
    frame_header expected = header(4, 100);
    expected.auth = mode;
    EXPECT_EQ(back->header, expected);
    EXPECT_EQ(back->payload, payload);
    // The same header and payload under a CRC: only the flags and trailer differ.
    const auto plain = encode_frame(header(4, 100), payload);
    EXPECT_EQ(std::to_integer<unsigned>(frame[5]) & 0x30, mode == frame_auth::frames ? 0x10u : 0x30u);
    EXPECT_EQ(std::to_integer<unsigned>(plain[5]) & 0x30, 0u);
  }
}

TEST(FrameAuth, EverySingleBitFlipIsRefused) {
  for (const frame_auth mode : modes) {
    frame_cipher sealer(mode, key_of(2), true);
    const auto frame = encode_frame(header(1, 5), floats(5, -3.0f), sealer, 0);
    for (std::size_t bit = 0; bit < 8 * frame.size(); ++bit) {
      auto bad = frame;
      bad[bit / 8] ^= std::byte(1u << (bit % 8));
      const auto r = decode_frame(bad, max_frame, mode, key_of(2), 0);
      ASSERT_FALSE(r) << name(mode) << ": bit " << bit << " flipped and accepted";
      // Past the fields the header parser checks itself (magic, version,
      // flags, dtype, reserved, count), only the tag can tell.
      const std::size_t at = bit / 8;
      if ((at >= 8 && at < 24) || at >= frame_header_size) {
        EXPECT_EQ(r.error(), comm_errc::forged_frame) << name(mode) << ": bit " << bit;
      }
    }
  }
}

TEST(FrameAuth, WrongCounterKeyOrModeIsRefused) {
  for (const frame_auth mode : modes) {
    frame_cipher sealer(mode, key_of(3), true);
    const auto frame = encode_frame(header(0, 3), floats(3, 1.0f), sealer, 5);
    EXPECT_TRUE(decode_frame(frame, max_frame, mode, key_of(3), 5));
    EXPECT_EQ(decode_frame(frame, max_frame, mode, key_of(3), 4).error(), comm_errc::forged_frame);
    EXPECT_EQ(decode_frame(frame, max_frame, mode, key_of(3), 6).error(), comm_errc::forged_frame);
    EXPECT_EQ(decode_frame(frame, max_frame, mode, key_of(4), 5).error(), comm_errc::forged_frame);
    const frame_auth other = mode == frame_auth::frames ? frame_auth::encrypt : frame_auth::frames;
    EXPECT_EQ(decode_frame(frame, max_frame, other, key_of(3), 5).error(), comm_errc::forged_frame);
    // A tagged frame on a link without authentication is malformed there,
    EXPECT_EQ(decode_frame(frame, max_frame).error(), errc::bad_value);
    // and a CRC frame on an authenticated link is a forgery.
    const auto plain = encode_frame(header(0, 3), floats(3, 1.0f));
    EXPECT_EQ(decode_frame(plain, max_frame, mode, key_of(3), 5).error(), comm_errc::forged_frame);
  }
}

TEST(FrameAuth, TheSizeLimitCountsTheTag) {
  frame_cipher sealer(frame_auth::frames, key_of(5), true);
  const auto frame = encode_frame(header(0, 4), floats(4, 0.0f), sealer, 0);
  EXPECT_TRUE(decode_frame(frame, frame.size(), frame_auth::frames, key_of(5), 0));
  EXPECT_EQ(decode_frame(frame, frame.size() - 1, frame_auth::frames, key_of(5), 0).error(), errc::limit_exceeded);
}

// Collects what a decoder hands on.
using test::collect;

// Frames 0..2 and an ABORT (counter 3), as one link direction sends them.
std::vector<std::vector<std::byte>> messages(frame_auth mode, const frame_key& key) {
  frame_cipher sealer(mode, key, true);
  std::vector<std::vector<std::byte>> out;
  for (std::uint32_t i = 0; i < 3; ++i) out.push_back(encode_frame(header(i, 2 + i), floats(2 + i, 10.0f * i), sealer, i));
  const auto ab = seal_abort(abort_message{comm_errc::peer_lost, 2, 1, 9}, sealer, 3);
  out.emplace_back(ab.begin(), ab.end());
  return out;
}

std::vector<std::byte> join(const std::vector<std::vector<std::byte>>& parts) {
  std::vector<std::byte> s;
  for (const auto& p : parts) s.insert(s.end(), p.begin(), p.end());
  return s;
}

TEST(FrameAuth, StreamInAnySplitAndEveryPathAttackFails) {
  for (const frame_auth mode : modes) {
    const auto parts = messages(mode, key_of(6));
    const auto stream = join(parts);
    for (std::size_t step : {std::size_t{1}, std::size_t{5}, std::size_t{17}, stream.size()}) {
      collect sink;
      frame_decoder d(max_frame, mode, key_of(6));
      for (std::size_t at = 0; at < stream.size(); at += step) {
        ASSERT_TRUE(d.feed(std::span(stream).subspan(at, std::min(step, stream.size() - at)), sink)) << step;
      }
      EXPECT_TRUE(d.idle());
      EXPECT_EQ(d.counter(), 4u);
      ASSERT_EQ(sink.headers.size(), 3u);
      EXPECT_EQ(sink.payloads[2], floats(4, 20.0f));
      ASSERT_EQ(sink.aborts.size(), 1u);
      EXPECT_EQ(sink.aborts[0].culprit, 1u);
    }
    // Each attack on the stream: the first message out of place fails its
    // tag, and nothing after the last good one is handed on.
    const std::map<std::string, std::vector<std::vector<std::byte>>> attacks = {
        {"drop", {parts[0], parts[2], parts[3]}},
        {"replay", {parts[0], parts[1], parts[1], parts[2]}},
        {"reorder", {parts[0], parts[2], parts[1]}},
        {"inject", {parts[0], encode_frame(header(1, 3), floats(3, 0.0f)), parts[1]}},
        {"truncate", {parts[0], std::vector<std::byte>(parts[1].begin(), parts[1].end() - 5), parts[2]}},
        {"drop the abort's frame", {parts[0], parts[1], parts[3]}},
    };
    for (const auto& [what, bytes] : attacks) {
      collect sink;
      frame_decoder d(max_frame, mode, key_of(6));
      EXPECT_EQ(d.feed(join(bytes), sink).error(), comm_errc::forged_frame) << name(mode) << ": " << what;
      EXPECT_LE(sink.headers.size(), 2u) << what;
      EXPECT_TRUE(sink.aborts.empty()) << what;
    }
  }
}

TEST(FrameAuth, AbortsAreSealedAndOpened) {
  for (const frame_auth mode : modes) {
    frame_cipher sealer(mode, key_of(7), true);
    frame_cipher opener(mode, key_of(7), false);
    const abort_message m{comm_errc::timed_out, 4, std::nullopt, 77};
    const auto b = seal_abort(m, sealer, 12);
    const auto plain = encode_abort(m);
    EXPECT_TRUE(std::equal(plain.begin(), plain.end(), b.begin()));  // the 32 bytes, CRC kept
    EXPECT_EQ(open_abort(b, opener, 12).value(), m);
    EXPECT_EQ(open_abort(b, opener, 11).error(), comm_errc::forged_frame);
    for (std::size_t i = 0; i < b.size(); ++i) {
      auto bad = b;
      bad[i] ^= std::byte{0x40};
      EXPECT_EQ(open_abort(bad, opener, 12).error(), comm_errc::forged_frame) << i;
    }
  }
}

TEST(FrameAuth, KeysDifferByDirectionModeAndNonce) {
  std::array<std::byte, 32> ni{}, na{};
  na[0] = std::byte{1};
  const auto f = derive_frame_keys(frame_auth::frames, "s", ni, na);
  const auto e = derive_frame_keys(frame_auth::encrypt, "s", ni, na);
  EXPECT_NE(f.initiator, f.acceptor);
  EXPECT_NE(f.initiator, e.initiator);
  EXPECT_EQ(derive_frame_keys(frame_auth::frames, "s", ni, na), f);
  EXPECT_NE(derive_frame_keys(frame_auth::frames, "s", na, ni), f);  // nonces swapped
  EXPECT_NE(derive_frame_keys(frame_auth::frames, "t", ni, na), f);
}

TEST(FrameAuth, HelloCarriesTheModeAndWorldsCompareIt) {
  hello h = test::sample(2);
  h.auth = frame_auth::encrypt;
  const auto b = encode_hello(h);
  EXPECT_EQ(b[4], std::byte{protocol_version});
  EXPECT_EQ(protocol_version, 6);
  EXPECT_EQ(b[26], std::byte{2});
  EXPECT_EQ(parse_hello(b).value(), h);
  auto with = [&](std::size_t at, std::uint8_t v) {
    auto bad = b;
    bad[at] = std::byte{v};
    wire::store<std::uint32_t>(codec::crc32c(std::span<const std::byte>(bad).first(76)), bad.data() + 76,
                               wire::byte_order::little);
    return parse_hello(bad);
  };
  EXPECT_EQ(with(26, 3).error(), errc::bad_value);
  EXPECT_EQ(with(27, 1)->algorithm, algorithm::recursive_doubling);  // byte 27: the algorithm
  EXPECT_EQ(with(27, 2)->algorithm, algorithm::automatic);
  EXPECT_EQ(with(27, 3)->algorithm, algorithm::rabenseifner);
  EXPECT_EQ(with(27, 4).error(), errc::bad_value);
  EXPECT_EQ(with(5, 4)->role, role::mesh);
  EXPECT_EQ(with(5, 5).error(), errc::bad_value);
  EXPECT_EQ(with(4, 1)->version, 1);  // a version 1 peer: parsed far enough to name it
  hello other = test::sample(1);
  const std::string diff = compare_worlds(h, other);
  EXPECT_NE(diff.find("FERRY_AUTH=encrypt on rank 2 ("), std::string::npos) << diff;
  EXPECT_NE(diff.find("FERRY_AUTH=none on rank 1 ("), std::string::npos) << diff;
}

TEST(FrameAuth, FerryAuthVariable) {
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("RANK", "1", 1);
  ::setenv("FERRY_SECRET", "x", 1);
  ::unsetenv("FERRY_AUTH");
  EXPECT_EQ(config::from_env()->auth, frame_auth::none);
  for (const frame_auth mode : {frame_auth::none, frame_auth::frames, frame_auth::encrypt}) {
    ::setenv("FERRY_AUTH", std::string(name(mode)).c_str(), 1);
    EXPECT_EQ(config::from_env()->auth, mode);
  }
  ::setenv("FERRY_AUTH", "hmac", 1);
  const auto bad = config::from_env();
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), comm_errc::bad_config);
  EXPECT_NE(bad.error().what().find("FERRY_AUTH='hmac'"), std::string::npos) << bad.error().what();
  for (const char* v : {"WORLD_SIZE", "RANK", "FERRY_SECRET", "FERRY_AUTH"}) ::unsetenv(v);
  // The maximum frame must hold a chunk and its tag.
  config c;
  c.chunk_bytes = 1024;
  c.max_frame_bytes = 1024 + 32;
  EXPECT_TRUE(c.validate());
  c.auth = frame_auth::frames;
  EXPECT_EQ(c.validate().error().code(), comm_errc::bad_config);
  c.max_frame_bytes = 1024 + 44;
  EXPECT_TRUE(c.validate());
}

// --- docs/comm-protocol.md section 7 ------------------------------------------

std::map<std::string, std::vector<std::byte>> doc_vectors() {
  std::ifstream in(FERRY_PROTOCOL_DOC);
  std::stringstream all;
  all << in.rdbuf();
  const std::string text = all.str();
  const auto begin = text.find("<!-- auth test vectors begin -->");
  const auto end = text.find("<!-- auth test vectors end -->");
  std::map<std::string, std::vector<std::byte>> out;
  if (begin == std::string::npos || end == std::string::npos) return out;
  std::istringstream lines(text.substr(begin, end - begin));
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    std::string name = line.substr(0, eq);
    name.erase(name.find_last_not_of(' ') + 1);
    std::string hex;
    for (char c : line.substr(eq + 3)) {
      if (c != ' ') hex += c;
    }
    std::vector<std::byte> bytes;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2) bytes.push_back(std::byte(std::stoul(hex.substr(i, 2), nullptr, 16)));
    out[name] = bytes;
  }
  return out;
}

frame_key as_key(const std::vector<std::byte>& b) {
  frame_key k{};
  EXPECT_EQ(b.size(), k.size());
  std::copy_n(b.begin(), std::min(b.size(), k.size()), k.begin());
  return k;
}

TEST(FrameAuth, TestVectorsOfTheProtocolDocument) {
  const auto v = doc_vectors();
  ASSERT_EQ(v.size(), 12u) << "vector block not found in " << FERRY_PROTOCOL_DOC;
  const auto& secret = v.at("secret");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(secret.data()), secret.size()), "ferry test vector secret");
  std::array<std::byte, 32> ni{}, na{};
  std::copy_n(v.at("initiator_nonce").begin(), 32, ni.begin());
  std::copy_n(v.at("acceptor_nonce").begin(), 32, na.begin());
  const std::vector<float> values = {1.0f, -2.5f};
  std::vector<std::byte> le(8);
  for (std::size_t i = 0; i < 2; ++i) wire::store<float>(values[i], le.data() + 4 * i, wire::byte_order::little);
  EXPECT_EQ(v.at("payload"), le);
  for (const frame_auth mode : modes) {
    const std::string m(name(mode));
    const auto keys = derive_frame_keys(mode, "ferry test vector secret", ni, na);
    EXPECT_EQ(keys.initiator, as_key(v.at(m + ".initiator"))) << m;
    EXPECT_EQ(keys.acceptor, as_key(v.at(m + ".acceptor"))) << m;
    // The frame, sealed here in little-endian order whatever the host.
    frame_header h;
    h.order = wire::byte_order::little;
    h.sender = 1;
    h.sequence = 1;
    h.chunk = 0;
    h.count = 2;
    frame_cipher sealer(mode, keys.initiator, true);
    EXPECT_EQ(encode_frame(h, le, sealer, 0), v.at(m + ".frame")) << m;
    const auto back = decode_frame(v.at(m + ".frame"), max_frame, mode, keys.initiator, 0);
    ASSERT_TRUE(back) << m;
    EXPECT_EQ(back->payload, le);
    std::vector<float> out(2);
    ASSERT_TRUE(payload_to_f32(back->header, back->payload, out));
    EXPECT_EQ(out, values);
    // The ABORT: frames mode from the acceptor at 0, encrypt from the
    // initiator at 1. Its 32 bytes are little-endian: rebuild them so on
    // any host.
    const abort_message a{comm_errc::peer_lost, 1, 0, 1};
    const auto& expected = v.at(m + ".abort");
    ASSERT_EQ(expected.size(), sealed_abort_size);
    const bool acceptor = mode == frame_auth::frames;
    frame_cipher opener(mode, acceptor ? keys.acceptor : keys.initiator, false);
    const auto opened = open_abort(std::span<const std::byte, sealed_abort_size>(expected.data(), sealed_abort_size),
                                   opener, acceptor ? 0 : 1);
    ASSERT_TRUE(opened) << m << ": " << message(opened.error());
    EXPECT_EQ(*opened, a);
    if (wire::host_order == wire::byte_order::little) {
      frame_cipher abort_sealer(mode, acceptor ? keys.acceptor : keys.initiator, true);
      const auto sealed = seal_abort(a, abort_sealer, acceptor ? 0 : 1);
      EXPECT_TRUE(std::equal(sealed.begin(), sealed.end(), expected.begin())) << m;
    }
  }
}

}  // namespace
}  // namespace ferry::comm
