#include "ferry/comm/frame.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <climits>
#include <cstring>

#include "ferry/codec/crc32c.h"
#include "ferry/codec/half.h"
#include "ferry/wire/bulk.h"
#include "ferry/wire/cursor.h"

namespace ferry::comm {
namespace {

using wire::byte_order;

constexpr std::byte magic[4] = {std::byte{'F'}, std::byte{'D'}, std::byte{'F'}, std::byte{'1'}};
constexpr std::uint8_t frame_version = 1;
constexpr std::uint8_t order_bit = 0x01;
constexpr std::uint8_t encoding_mask = 0x0E;
constexpr std::uint8_t tag_bit = 0x10;        // the trailer is a tag
constexpr std::uint8_t encrypted_bit = 0x20;  // the payload is ciphertext
constexpr std::uint8_t p2p_bit = frame_message_flag;
// Elements converted per step when compressing or widening, so no buffer
// larger than this is ever allocated (it lives on the stack).
constexpr std::size_t step = 2048;

std::uint8_t auth_bits(frame_auth a) {
  switch (a) {
    case frame_auth::none: break;
    case frame_auth::frames: return tag_bit;
    case frame_auth::encrypt: return tag_bit | encrypted_bit;
  }
  return 0;
}

[[noreturn]] void openssl_failed() {
  throw comm_error(comm_errc::auth_failed, std::nullopt, "OpenSSL's ChaCha20-Poly1305 failed");
}

}  // namespace

void encode_header(const frame_header& h, std::span<std::byte, frame_header_size> out) noexcept {
  const byte_order o = h.order;
  std::byte* p = out.data();
  std::copy(std::begin(magic), std::end(magic), p);
  const auto flags = static_cast<std::uint8_t>((o == byte_order::big ? order_bit : 0) |
                                               (static_cast<std::uint8_t>(h.enc) << 1) | auth_bits(h.auth) |
                                               (h.p2p ? p2p_bit : 0));
  p[4] = std::byte{frame_version};
  p[5] = std::byte{flags};
  p[6] = std::byte{codec::code(h.type)};
  p[7] = std::byte{0};
  wire::store<std::uint32_t>(h.sender, p + 8, o);
  wire::store<std::uint64_t>(h.sequence, p + 12, o);
  wire::store<std::uint32_t>(h.chunk, p + 20, o);
  wire::store<std::uint32_t>(h.count, p + 24, o);
}

std::size_t wire_element_size(const frame_header& h) noexcept {
  return h.enc == encoding::raw ? codec::size_of(h.type) : 2;
}

result<std::size_t> payload_size(const frame_header& h) noexcept {
  const std::size_t size = wire_element_size(h);
  if (h.count > SIZE_MAX / size) return errc::limit_exceeded;
  return std::size_t{h.count} * size;
}

result<frame_header> parse_header(std::span<const std::byte> bytes, std::size_t max_frame_bytes) noexcept {
  wire::reader in(bytes);
  FERRY_TRY_ASSIGN(const auto m, in.read_bytes(4));
  if (!std::equal(m.begin(), m.end(), std::begin(magic))) return errc::bad_magic;
  FERRY_TRY_ASSIGN(const auto v, in.read<std::uint8_t>(byte_order::little));
  if (v != frame_version) return errc::unsupported_version;
  FERRY_TRY_ASSIGN(const auto flags, in.read<std::uint8_t>(byte_order::little));
  frame_header h;
  h.order = (flags & order_bit) ? byte_order::big : byte_order::little;
  const auto enc = static_cast<std::uint8_t>((flags & encoding_mask) >> 1);
  if ((flags & ~(order_bit | encoding_mask | tag_bit | encrypted_bit | p2p_bit)) != 0 || enc > 2) {
    return errc::bad_value;
  }
  h.p2p = (flags & p2p_bit) != 0;
  if ((flags & encrypted_bit) != 0 && (flags & tag_bit) == 0) return errc::bad_value;
  h.enc = static_cast<encoding>(enc);
  h.auth = (flags & encrypted_bit) ? frame_auth::encrypt : (flags & tag_bit) ? frame_auth::frames : frame_auth::none;
  FERRY_TRY_ASSIGN(const auto type, in.read<std::uint8_t>(h.order));
  FERRY_TRY_ASSIGN(const auto dtype, codec::dtype_from_code(type));
  h.type = dtype;
  if (h.enc != encoding::raw && h.type != codec::dtype::f32) return errc::bad_value;
  FERRY_TRY_ASSIGN(const auto reserved, in.read<std::uint8_t>(h.order));
  if (reserved != 0) return errc::bad_value;
  auto sender = in.read<std::uint32_t>(h.order);
  auto sequence = in.read<std::uint64_t>(h.order);
  auto chunk = in.read<std::uint32_t>(h.order);
  auto count = in.read<std::uint32_t>(h.order);
  if (!count) return errc::truncated;  // the reads stop at the first short one
  h.sender = *sender;
  h.sequence = *sequence;
  h.chunk = *chunk;
  h.count = *count;
  FERRY_TRY_ASSIGN(const auto payload, payload_size(h));
  const std::size_t fixed = frame_header_size + trailer_size(h.auth);
  if (max_frame_bytes < fixed || payload > max_frame_bytes - fixed) return errc::limit_exceeded;
  return h;
}

frame_envelope seal(const frame_header& h, std::span<const std::byte> payload) noexcept {
  assert(payload_size(h) && *payload_size(h) == payload.size());
  assert(h.auth == frame_auth::none);
  frame_envelope e;
  encode_header(h, e.header);
  const std::uint32_t crc = codec::crc32c_extend(codec::crc32c(e.header), payload);
  wire::store<std::uint32_t>(crc, e.trailer.data(), h.order);
  return e;
}

// ------------------------------------------------------------- the AEAD

void frame_cipher::ctx_free::operator()(evp_cipher_ctx_st* c) const noexcept { EVP_CIPHER_CTX_free(c); }

frame_cipher::frame_cipher(frame_auth mode, const frame_key& key, bool sealing)
    : ctx_(EVP_CIPHER_CTX_new()), mode_(mode), sealing_(sealing) {
  assert(mode != frame_auth::none);
  // The key now, the nonce per message (start()).
  if (!ctx_ || EVP_CipherInit_ex(ctx_.get(), EVP_chacha20_poly1305(), nullptr,
                                 reinterpret_cast<const unsigned char*>(key.data()), nullptr, sealing ? 1 : 0) != 1) {
    openssl_failed();
  }
}

frame_cipher::frame_cipher(frame_cipher&&) noexcept = default;
frame_cipher& frame_cipher::operator=(frame_cipher&&) noexcept = default;
frame_cipher::~frame_cipher() = default;

namespace {

// OpenSSL counts in int: large spans go in pieces.
constexpr std::size_t max_piece = std::size_t{1} << 30;

bool aad_update(EVP_CIPHER_CTX* ctx, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const std::size_t n = std::min(bytes.size(), max_piece);
    int len = 0;
    if (EVP_CipherUpdate(ctx, nullptr, &len, reinterpret_cast<const unsigned char*>(bytes.data()),
                         static_cast<int>(n)) != 1) {
      return false;
    }
    bytes = bytes.subspan(n);
  }
  return true;
}

bool crypt_update(EVP_CIPHER_CTX* ctx, std::span<const std::byte> in, std::byte* out) {
  while (!in.empty()) {
    const std::size_t n = std::min(in.size(), max_piece);
    int len = 0;
    if (EVP_CipherUpdate(ctx, reinterpret_cast<unsigned char*>(out), &len,
                         reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(n)) != 1 ||
        len != static_cast<int>(n)) {
      return false;
    }
    in = in.subspan(n);
    out += n;
  }
  return true;
}

}  // namespace

bool frame_cipher::start(std::uint64_t counter, std::span<const std::byte> aad) noexcept {
  // RFC 8439's 96-bit nonce: 4 zero bytes, then the counter little-endian.
  std::array<unsigned char, 12> nonce{};
  for (std::size_t i = 0; i < 8; ++i) nonce[4 + i] = static_cast<unsigned char>(counter >> (8 * i));
  if (EVP_CipherInit_ex(ctx_.get(), nullptr, nullptr, nullptr, nonce.data(), -1) != 1) return false;
  return aad_update(ctx_.get(), aad);
}

bool frame_cipher::seal(std::uint64_t counter, std::span<const std::byte> aad, std::span<const std::byte> payload,
                        std::span<std::byte> ciphertext, std::span<std::byte, frame_tag_size> tag) noexcept {
  assert(sealing_);
  if (!start(counter, aad)) return false;
  if (mode_ == frame_auth::encrypt) {
    assert(ciphertext.size() == payload.size());
    if (!crypt_update(ctx_.get(), payload, ciphertext.data())) return false;
  } else if (!aad_update(ctx_.get(), payload)) {
    return false;
  }
  unsigned char none[16];
  int len = 0;
  return EVP_CipherFinal_ex(ctx_.get(), none, &len) == 1 &&
         EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_AEAD_GET_TAG, static_cast<int>(frame_tag_size), tag.data()) == 1;
}

bool frame_cipher::begin(std::uint64_t counter, std::span<const std::byte> aad) noexcept {
  assert(!sealing_);
  return start(counter, aad);
}

bool frame_cipher::update(std::span<std::byte> piece) noexcept {
  return mode_ == frame_auth::encrypt ? crypt_update(ctx_.get(), piece, piece.data()) : aad_update(ctx_.get(), piece);
}

bool frame_cipher::end(std::span<const std::byte, frame_tag_size> tag) noexcept {
  std::array<std::byte, frame_tag_size> expected{};
  std::copy(tag.begin(), tag.end(), expected.begin());
  unsigned char none[16];
  int len = 0;
  // The final step compares the tags in constant time.
  return EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_AEAD_SET_TAG, static_cast<int>(frame_tag_size), expected.data()) ==
             1 &&
         EVP_CipherFinal_ex(ctx_.get(), none, &len) == 1;
}

sealed_envelope seal(frame_header h, std::span<const std::byte> payload, frame_cipher& c, std::uint64_t counter,
                     std::span<std::byte> ciphertext) {
  assert(payload_size(h) && *payload_size(h) == payload.size());
  h.auth = c.mode();
  sealed_envelope e;
  encode_header(h, e.header);
  if (!c.seal(counter, e.header, payload, ciphertext, e.tag)) openssl_failed();
  return e;
}

void encode_f32_payload(encoding enc, std::span<const float> values, std::span<std::byte> out) noexcept {
  assert(out.size() == values.size() * (enc == encoding::raw ? 4 : 2));
  if (enc == encoding::raw) {
    if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
    return;
  }
  // 16-bit patterns are converted into an aligned staging array, then
  // stored as bytes (out need not be aligned for f16/bf16).
  for (std::size_t i = 0; i < values.size(); i += step) {
    const auto part = values.subspan(i, std::min(step, values.size() - i));
    const auto dst = out.subspan(2 * i, 2 * part.size());
    if (enc == encoding::bf16) {
      std::array<bf16, step> half;
      codec::to_bf16(part, std::span(half).first(part.size()));
      std::memcpy(dst.data(), half.data(), dst.size());
    } else {
      std::array<f16, step> half;
      codec::to_f16(part, std::span(half).first(part.size()));
      std::memcpy(dst.data(), half.data(), dst.size());
    }
  }
}

std::vector<std::byte> encode_frame(const frame_header& h, std::span<const std::byte> payload) {
  const frame_envelope e = seal(h, payload);
  std::vector<std::byte> out;
  out.reserve(frame_header_size + payload.size() + frame_trailer_size);
  out.insert(out.end(), e.header.begin(), e.header.end());
  out.insert(out.end(), payload.begin(), payload.end());
  out.insert(out.end(), e.trailer.begin(), e.trailer.end());
  return out;
}

std::vector<std::byte> encode_frame(const frame_header& h, std::span<const std::byte> payload, frame_cipher& c,
                                    std::uint64_t counter) {
  std::vector<std::byte> out(frame_header_size + payload.size() + frame_tag_size);
  const auto body = std::span(out).subspan(frame_header_size, payload.size());
  const sealed_envelope e = seal(h, payload, c, counter, c.mode() == frame_auth::encrypt ? body : std::span<std::byte>());
  std::copy(e.header.begin(), e.header.end(), out.begin());
  if (c.mode() != frame_auth::encrypt && !payload.empty()) std::memcpy(body.data(), payload.data(), payload.size());
  std::copy(e.tag.begin(), e.tag.end(), out.end() - frame_tag_size);
  return out;
}

void decode_f32_payload(encoding enc, wire::byte_order order, std::span<const std::byte> payload,
                        std::span<float> out) noexcept {
  assert(payload.size() == out.size() * (enc == encoding::raw ? 4 : 2));
  if (enc == encoding::raw) {
    // Same order: a copy. Otherwise one byte swap per element, as integers.
    wire::load_array<float>(payload, order, out);
    return;
  }
  for (std::size_t i = 0; i < out.size(); i += step) {
    const std::size_t n = std::min(step, out.size() - i);
    const auto bytes = payload.subspan(2 * i, 2 * n);
    if (enc == encoding::bf16) {
      std::array<bf16, step> half;
      wire::load_array<bf16>(bytes, order, std::span(half).first(n));
      codec::to_float(std::span<const bf16>(half).first(n), out.subspan(i, n));
    } else {
      std::array<f16, step> half;
      wire::load_array<f16>(bytes, order, std::span(half).first(n));
      codec::to_float(std::span<const f16>(half).first(n), out.subspan(i, n));
    }
  }
}

result<void> payload_to_f32(const frame_header& h, std::span<const std::byte> payload, std::span<float> out) noexcept {
  if (h.type != codec::dtype::f32) return errc::bad_value;
  assert(out.size() == h.count);
  decode_f32_payload(h.enc, h.order, payload, out);
  return {};
}

void payload_to_host(const frame_header& h, std::span<std::byte> payload) noexcept {
  assert(h.enc == encoding::raw);
  wire::convert_in_place(payload, codec::order_width(h.type), h.order, wire::host_order);
}

// ------------------------------------------------------------- decoder

frame_decoder::frame_decoder(std::size_t max_frame_bytes, frame_auth mode, const frame_key& key, std::uint64_t counter)
    : max_frame_bytes_(max_frame_bytes), mode_(mode), cipher_(std::in_place, mode, key, false), counter_(counter) {}

std::size_t frame_decoder::header_need() const noexcept {
  if (head_got_ >= 4 && is_abort(head_)) return cipher_ ? sealed_abort_size : abort_size;
  return frame_header_size;
}

std::size_t frame_decoder::buffers(std::span<std::span<std::byte>, 3> out, bool read_ahead) noexcept {
  std::size_t k = 0;
  switch (part_) {
    case part::header:
      out[k++] = std::span(head_).subspan(head_got_, header_need() - head_got_);
      return k;
    case part::payload:
      out[k++] = payload_.subspan(payload_got_);
      [[fallthrough]];
    case part::trailer:
      out[k++] = std::span(trailer_).first(trailer_size(mode_)).subspan(trailer_got_);
      if (read_ahead) out[k++] = std::span(head_).first(frame_header_size);
      return k;
  }
  return k;
}

result<void> frame_decoder::advance(std::size_t n, frame_sink& sink) {
  if (error_) return error_;
  for (;;) {
    switch (part_) {
      case part::header: {
        const std::size_t take = std::min(n, header_need() - head_got_);
        head_got_ += take;
        n -= take;
        if (head_got_ < header_need()) {
          assert(n == 0);
          return {};
        }
        if (is_abort(head_)) {
          const auto a = cipher_ ? open_abort(head_, *cipher_, counter_) : parse_abort(std::span(head_).first<abort_size>());
          if (!a) return fail(a.error());
          if (cipher_) ++counter_;
          head_got_ = 0;
          if (auto s = sink.on_abort(*a); !s) return fail(s.error());
          break;
        }
        const auto h = parse_header(std::span(head_).first(frame_header_size), max_frame_bytes_);
        if (!h) return fail(h.error());
        if (h->auth != mode_) return fail(cipher_ ? error_code(comm_errc::forged_frame) : error_code(errc::bad_value));
        header_ = *h;
        if (cipher_) {
          if (!cipher_->begin(counter_, std::span(head_).first(frame_header_size))) return fail(comm_errc::forged_frame);
        } else {
          header_crc_ = codec::crc32c(std::span(head_).first(frame_header_size));
        }
        head_got_ = 0;
        auto dst = sink.on_header(header_);
        if (!dst) return fail(dst.error());
        assert(dst->size() == *payload_size(header_));
        payload_ = *dst;
        payload_got_ = 0;
        trailer_got_ = 0;
        part_ = payload_.empty() ? part::trailer : part::payload;
        break;
      }
      case part::payload: {
        const std::size_t take = std::min(n, payload_.size() - payload_got_);
        // Authenticated (and decrypted) as it lands, while in cache.
        if (cipher_ && take > 0 && !cipher_->update(payload_.subspan(payload_got_, take))) {
          return fail(comm_errc::forged_frame);
        }
        payload_got_ += take;
        n -= take;
        if (payload_got_ < payload_.size()) return {};
        part_ = part::trailer;
        break;
      }
      case part::trailer: {
        const std::size_t need = trailer_size(mode_);
        const std::size_t take = std::min(n, need - trailer_got_);
        trailer_got_ += take;
        n -= take;
        if (trailer_got_ < need) return {};
        if (cipher_) {
          if (!cipher_->end(trailer_)) return fail(comm_errc::forged_frame);
          ++counter_;
        } else {
          const std::uint32_t stored = wire::load<std::uint32_t>(trailer_.data(), header_.order);
          if (codec::crc32c_extend(header_crc_, payload_) != stored) return fail(errc::checksum_mismatch);
        }
        part_ = part::header;
        if (auto s = sink.on_frame(header_, payload_); !s) return fail(s.error());
        if (n == 0) return {};
        break;
      }
    }
  }
}

result<void> frame_decoder::feed(std::span<const std::byte> bytes, frame_sink& sink) {
  if (error_) return error_;
  while (!bytes.empty()) {
    std::array<std::span<std::byte>, 3> bufs;
    buffers(bufs, false);
    const std::size_t n = std::min(bufs[0].size(), bytes.size());
    if (n > 0) std::memcpy(bufs[0].data(), bytes.data(), n);
    bytes = bytes.subspan(n);
    FERRY_TRY(advance(n, sink));
  }
  return {};
}

namespace {

result<decoded_frame> decode_one(std::span<const std::byte> frame, frame_decoder& d) {
  struct one_frame final : frame_sink {
    std::size_t available = 0;
    decoded_frame out;
    bool done = false;
    result<std::span<std::byte>> on_header(const frame_header& h) override {
      if (done) return errc::trailing_bytes;
      const std::size_t size = *payload_size(h);  // parse_header checked it
      if (size > available) return errc::truncated;  // before allocating
      out.header = h;
      out.payload.resize(size);
      return std::span(out.payload);
    }
    result<void> on_frame(const frame_header&, std::span<std::byte>) override {
      done = true;
      return {};
    }
    result<void> on_abort(const abort_message&) override { return errc::bad_magic; }  // not a frame
  } sink;
  if (frame.size() >= frame_header_size) sink.available = frame.size() - frame_header_size;
  if (auto s = d.feed(frame, sink); !s) return sink.done ? errc::trailing_bytes : s.error();
  if (!sink.done) return errc::truncated;
  if (!d.idle()) return errc::trailing_bytes;
  return std::move(sink.out);
}

}  // namespace

result<decoded_frame> decode_frame(std::span<const std::byte> frame, std::size_t max_frame_bytes) {
  frame_decoder d(max_frame_bytes);
  return decode_one(frame, d);
}

result<decoded_frame> decode_frame(std::span<const std::byte> frame, std::size_t max_frame_bytes, frame_auth mode,
                                   const frame_key& key, std::uint64_t counter) {
  frame_decoder d(max_frame_bytes, mode, key, counter);
  return decode_one(frame, d);
}

namespace {
constexpr std::byte abort_magic[4] = {std::byte{'F'}, std::byte{'D'}, std::byte{'X'}, std::byte{'1'}};
constexpr std::uint32_t no_culprit = 0xFFFFFFFF;
}  // namespace

bool is_abort(std::span<const std::byte> bytes) noexcept {
  return bytes.size() >= 4 && std::equal(std::begin(abort_magic), std::end(abort_magic), bytes.begin());
}

std::array<std::byte, abort_size> encode_abort(const abort_message& m) noexcept {
  const byte_order o = wire::host_order;
  std::array<std::byte, abort_size> b{};
  std::copy(std::begin(abort_magic), std::end(abort_magic), b.begin());
  b[4] = std::byte{frame_version};
  b[5] = std::byte{o == byte_order::big ? order_bit : std::uint8_t{0}};
  wire::store<std::uint16_t>(m.code.value(), b.data() + 6, o);
  wire::store<std::uint32_t>(m.reporter, b.data() + 8, o);
  wire::store<std::uint32_t>(m.culprit.value_or(no_culprit), b.data() + 12, o);
  wire::store<std::uint64_t>(m.sequence, b.data() + 16, o);
  wire::store<std::uint32_t>(codec::crc32c(std::span<const std::byte>(b).first(28)), b.data() + 28, o);
  return b;
}

result<abort_message> parse_abort(std::span<const std::byte, abort_size> b) noexcept {
  if (!is_abort(b)) return errc::bad_magic;
  wire::reader in(b);
  std::uint8_t ver = 0, flags = 0;
  FERRY_TRY(in.skip(4));
  FERRY_TRY(in.read_le(ver, flags));
  if (ver != frame_version) return errc::unsupported_version;
  if ((flags & ~order_bit) != 0) return errc::bad_value;
  const byte_order o = (flags & order_bit) ? byte_order::big : byte_order::little;
  std::uint16_t code = 0;
  std::uint32_t reporter = 0, culprit = 0, reserved = 0, crc = 0;
  std::uint64_t sequence = 0;
  FERRY_TRY(in.read_fields(o, code, reporter, culprit, sequence, reserved, crc));
  if (crc != codec::crc32c(b.first(28))) return errc::checksum_mismatch;
  if (reserved != 0) return errc::bad_value;
  if (code == 0) return errc::bad_value;
  abort_message m;
  m.code = error_code::from_value(code);
  m.reporter = reporter;
  if (culprit != no_culprit) m.culprit = culprit;
  m.sequence = sequence;
  return m;
}

std::array<std::byte, sealed_abort_size> seal_abort(const abort_message& m, frame_cipher& c, std::uint64_t counter) {
  std::array<std::byte, sealed_abort_size> b{};
  const auto plain = encode_abort(m);
  std::copy(plain.begin(), plain.end(), b.begin());
  if (!c.seal(counter, plain, {}, {}, std::span(b).last<frame_tag_size>())) openssl_failed();
  return b;
}

result<abort_message> open_abort(std::span<const std::byte, sealed_abort_size> b, frame_cipher& c,
                                 std::uint64_t counter) noexcept {
  if (!c.begin(counter, b.first<abort_size>()) || !c.end(b.last<frame_tag_size>())) return comm_errc::forged_frame;
  return parse_abort(b.first<abort_size>());
}

}  // namespace ferry::comm
