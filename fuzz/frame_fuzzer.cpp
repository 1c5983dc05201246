// The receiving side of a ring link on arbitrary bytes: the stream goes
// through frame_decoder, the decoder the communicator runs, three ways:
// whole, cut into pieces chosen by the input's first byte, and as the
// communicator reads a socket (buffers() with and without read-ahead,
// bytes spread over up to three spans, advance()). All three must report
// the same frames, ABORTs and error. Every frame decoded re-encodes to the
// bytes it came from and converts to floats when it is F32; the header's
// size check bounds every allocation before its payload is read.
//
// The same input then goes through decoders of an authenticated link
// (FERRY_AUTH=frames and encrypt, a fixed key, counters from 0), the same
// three ways: a frame or ABORT they accept re-seals, at the counter it was
// accepted at, to exactly the bytes it came from (encrypt mode: the
// decrypted payload encrypts back to the ciphertext), and so does every
// frame in every mode, at its place in the stream. The corpus holds
// sealed streams under that key (auth-frames, auth-encrypt), so the
// accepting paths are reached.
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "ferry/comm/frame.h"
#include "fuzz_check.h"

namespace frame_harness {

using namespace ferry;

constexpr std::size_t max_frame = std::size_t{1} << 16;

// The key of the authenticated runs (the corpus's auth-* streams use it).
comm::frame_key fuzz_key() {
  comm::frame_key k;
  k.fill(std::byte{0x42});
  return k;
}

// Records everything the decoder hands on, as bytes to compare.
struct recorder final : comm::frame_sink {
  recorder(comm::frame_auth m, std::span<const std::byte> in) : mode(m), input(in) {
    if (mode != comm::frame_auth::none) sealer.emplace(mode, fuzz_key(), true);
  }
  comm::frame_auth mode;
  std::span<const std::byte> input;  // the stream; messages handed on are its prefix
  std::size_t at = 0;                // where the next one starts
  std::optional<comm::frame_cipher> sealer;
  std::vector<std::byte> payload;
  std::string log;
  std::size_t frames = 0;
  std::size_t aborts = 0;

  result<std::span<std::byte>> on_header(const comm::frame_header& h) override {
    const auto size = comm::payload_size(h);
    FUZZ_CHECK(size.has_value() && *size + 32 <= max_frame);
    payload.assign(*size, std::byte{0});
    return std::span(payload);
  }
  result<void> on_frame(const comm::frame_header& h, std::span<std::byte> p) override {
    const std::uint64_t counter = frames + aborts;
    ++frames;
    FUZZ_CHECK(h.auth == mode);
    const auto again = sealer ? comm::encode_frame(h, p, *sealer, counter) : comm::encode_frame(h, p);
    // Every accepted frame re-seals to exactly its bytes.
    FUZZ_CHECK(again.size() <= input.size() - at &&
               std::equal(again.begin(), again.end(), input.begin() + static_cast<std::ptrdiff_t>(at)));
    at += again.size();
    log += "F" + std::to_string(again.size()) + ":";
    log.append(reinterpret_cast<const char*>(again.data()), again.size());  // NOLINT
    if (h.type == codec::dtype::f32) {
      std::vector<float> values(h.count);
      FUZZ_CHECK(comm::payload_to_f32(h, p, values).has_value());
    } else if (h.enc == comm::encoding::raw) {
      comm::payload_to_host(h, p);
    }
    return {};
  }
  result<void> on_abort(const comm::abort_message& a) override {
    FUZZ_CHECK(a.code);
    ++aborts;
    at += mode == comm::frame_auth::none ? comm::abort_size : comm::sealed_abort_size;
    log += "A" + std::to_string(a.code.value()) + "," + std::to_string(a.reporter) + "," +
           std::to_string(a.sequence) + ";";
    return {};
  }
};

comm::frame_decoder decoder(comm::frame_auth mode) {
  if (mode == comm::frame_auth::none) return comm::frame_decoder(max_frame);
  return comm::frame_decoder(max_frame, mode, fuzz_key());
}

// The three ways of one mode; returns the whole-stream recorder and decoder.
void run(comm::frame_auth mode, unsigned seed, std::span<const std::byte> in) {
  recorder whole(mode, in);
  comm::frame_decoder d1 = decoder(mode);
  const auto r1 = d1.feed(in, whole);

  // The same stream in pieces of 1..16 bytes, chosen by the seed.
  recorder split(mode, in);
  comm::frame_decoder d2 = decoder(mode);
  result<void> r2;
  unsigned state = seed * 2654435761u + 1;
  for (std::size_t at = 0; at < in.size() && r2;) {
    state = state * 1103515245u + 12345u;
    const std::size_t n = std::min<std::size_t>(1 + (state >> 16) % 16, in.size() - at);
    r2 = d2.feed(in.subspan(at, n), split);
    at += n;
  }
  // The same stream as a socket reader takes it (link.cpp): buffers() with
  // or without read-ahead, bytes spread over the spans, then advance().
  recorder spans(mode, in);
  comm::frame_decoder d3 = decoder(mode);
  result<void> r3;
  for (std::size_t at = 0; at < in.size() && r3;) {
    state = state * 1103515245u + 12345u;
    std::array<std::span<std::byte>, 3> bufs;
    const std::size_t k = d3.buffers(bufs, (state >> 8) & 1);
    std::size_t room = 0;
    for (std::size_t i = 0; i < k; ++i) room += bufs[i].size();
    std::size_t n = std::min({room, in.size() - at, std::size_t{1} + (state >> 16) % 64});
    const std::size_t got = n;
    for (std::size_t i = 0; i < k && n > 0; ++i) {
      const std::size_t take = std::min(n, bufs[i].size());
      std::memcpy(bufs[i].data(), in.data() + at, take);
      at += take;
      n -= take;
    }
    r3 = d3.advance(got, spans);
  }
  FUZZ_CHECK(r1.has_value() == r2.has_value() && r1.has_value() == r3.has_value());
  FUZZ_CHECK(r1.error() == r2.error() && r1.error() == r3.error());
  FUZZ_CHECK(whole.log == split.log && whole.log == spans.log);
  FUZZ_CHECK(d1.idle() == d2.idle() && d1.idle() == d3.idle());
  FUZZ_CHECK(d1.counter() == d2.counter() && d1.counter() == d3.counter());
  if (mode != comm::frame_auth::none) FUZZ_CHECK(d1.counter() == whole.frames + whole.aborts);

  // A stream of exactly one frame is that frame, re-encoded.
  if (r1 && d1.idle() && whole.frames == 1 && whole.aborts == 0) {
    if (mode == comm::frame_auth::none) {
      const auto f = comm::decode_frame(in, max_frame);
      FUZZ_CHECK(f.has_value());
      const auto again = comm::encode_frame(f->header, f->payload);
      FUZZ_CHECK(again.size() == in.size() && std::equal(again.begin(), again.end(), in.begin()));
    } else {
      const auto f = comm::decode_frame(in, max_frame, mode, fuzz_key(), 0);
      FUZZ_CHECK(f.has_value());
      comm::frame_cipher sealer(mode, fuzz_key(), true);
      const auto again = comm::encode_frame(f->header, f->payload, sealer, 0);
      FUZZ_CHECK(again.size() == in.size() && std::equal(again.begin(), again.end(), in.begin()));
    }
  }
  if (r1 && d1.idle()) FUZZ_CHECK(whole.at == in.size());
}

}  // namespace frame_harness

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace frame_harness;
  if (size == 0) return 0;
  const unsigned seed = data[0];
  const auto in = std::as_bytes(std::span(data + 1, size - 1));
  for (const auto mode : {comm::frame_auth::none, comm::frame_auth::frames, comm::frame_auth::encrypt}) {
    run(mode, seed, in);
  }
  return 0;
}
