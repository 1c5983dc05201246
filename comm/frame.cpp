#include "ferry/comm/frame.h"

#include <algorithm>
#include <array>

#include "ferry/codec/crc32c.h"
#include "ferry/codec/half.h"
#include "ferry/wire/bulk.h"
#include "ferry/wire/cursor.h"

namespace ferry::comm {
namespace {

using wire::byte_order;

constexpr std::byte magic[4] = {std::byte{'F'}, std::byte{'D'}, std::byte{'F'}, std::byte{'1'}};
constexpr std::uint8_t version = 1;
constexpr std::uint8_t order_bit = 0x01;
constexpr std::uint8_t encoding_mask = 0x0E;
// Elements converted per step when compressing or widening, so no buffer
// larger than this is ever allocated (it lives on the stack).
constexpr std::size_t step = 2048;

// Appends the CRC of everything from `start` to the end of `out`.
void seal(std::vector<std::byte>& out, std::size_t start, byte_order o) {
  const std::uint32_t crc = codec::crc32c(std::span(out).subspan(start));
  std::array<std::byte, 4> b{};
  wire::store<std::uint32_t>(crc, b.data(), o);
  out.insert(out.end(), b.begin(), b.end());
}

}  // namespace

void encode_header(const frame_header& h, std::span<std::byte, frame_header_size> out) noexcept {
  const byte_order o = h.order;
  std::byte* p = out.data();
  std::copy(std::begin(magic), std::end(magic), p);
  const auto flags = static_cast<std::uint8_t>((o == byte_order::big ? order_bit : 0) |
                                               (static_cast<std::uint8_t>(h.enc) << 1));
  p[4] = std::byte{version};
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
  auto m = in.read_bytes(4);
  if (!m) return m.error();
  if (!std::equal(m->begin(), m->end(), std::begin(magic))) return errc::bad_magic;
  auto v = in.read<std::uint8_t>(byte_order::little);
  if (!v) return v.error();
  if (*v != version) return errc::unsupported_version;
  auto flags = in.read<std::uint8_t>(byte_order::little);
  if (!flags) return flags.error();
  frame_header h;
  h.order = (*flags & order_bit) ? byte_order::big : byte_order::little;
  const auto enc = static_cast<std::uint8_t>((*flags & encoding_mask) >> 1);
  if ((*flags & ~(order_bit | encoding_mask)) != 0 || enc > 2) return errc::bad_value;
  h.enc = static_cast<encoding>(enc);
  auto type = in.read<std::uint8_t>(h.order);
  if (!type) return type.error();
  auto dtype = codec::dtype_from_code(*type);
  if (!dtype) return dtype.error();
  h.type = *dtype;
  if (h.enc != encoding::raw && h.type != codec::dtype::f32) return errc::bad_value;
  auto reserved = in.read<std::uint8_t>(h.order);
  if (!reserved) return reserved.error();
  if (*reserved != 0) return errc::bad_value;
  auto sender = in.read<std::uint32_t>(h.order);
  auto sequence = in.read<std::uint64_t>(h.order);
  auto chunk = in.read<std::uint32_t>(h.order);
  auto count = in.read<std::uint32_t>(h.order);
  if (!count) return errc::truncated;  // the reads stop at the first short one
  h.sender = *sender;
  h.sequence = *sequence;
  h.chunk = *chunk;
  h.count = *count;
  auto payload = payload_size(h);
  if (!payload) return payload.error();
  const std::size_t fixed = frame_header_size + frame_trailer_size;
  if (max_frame_bytes < fixed || *payload > max_frame_bytes - fixed) return errc::limit_exceeded;
  return h;
}

result<frame_view> decode_frame(std::span<const std::byte> frame, std::size_t max_frame_bytes) noexcept {
  auto h = parse_header(frame, max_frame_bytes);
  if (!h) return h.error();
  const std::size_t payload = *payload_size(*h);  // checked by parse_header
  const std::size_t total = frame_header_size + payload + frame_trailer_size;
  if (frame.size() < total) return errc::truncated;
  if (frame.size() > total) return errc::trailing_bytes;
  const std::uint32_t stored = wire::load<std::uint32_t>(frame.data() + total - frame_trailer_size, h->order);
  if (codec::crc32c(frame.first(total - frame_trailer_size)) != stored) return errc::checksum_mismatch;
  return frame_view{*h, frame.subspan(frame_header_size, payload)};
}

result<void> encode_raw(const frame_header& h, std::span<const std::byte> payload, std::vector<std::byte>& out) {
  auto size = payload_size(h);
  if (!size) return size.error();
  if (*size != payload.size()) return errc::size_mismatch;
  const std::size_t start = out.size();
  {
    wire::writer w(out);
    std::array<std::byte, frame_header_size> header{};
    encode_header(h, header);
    (void)w.write_bytes(header);
    (void)w.write_bytes(payload);
  }
  seal(out, start, h.order);
  return {};
}

result<void> encode_f32(frame_header h, std::span<const float> values, std::vector<std::byte>& out) {
  if (h.type != codec::dtype::f32) return errc::bad_value;
  if (values.size() > UINT32_MAX) return errc::limit_exceeded;
  h.order = wire::host_order;  // the sender never swaps
  h.count = static_cast<std::uint32_t>(values.size());
  const std::size_t start = out.size();
  {
    wire::writer w(out);
    std::array<std::byte, frame_header_size> header{};
    encode_header(h, header);
    (void)w.write_bytes(header);
    if (h.enc == encoding::raw) {
      (void)w.write_array<float>(values, h.order);  // host order: a copy
    } else {
      for (std::size_t i = 0; i < values.size(); i += step) {
        const auto part = values.subspan(i, std::min(step, values.size() - i));
        if (h.enc == encoding::bf16) {
          std::array<bf16, step> half{};
          (void)codec::to_bf16(part, std::span(half).first(part.size()));
          (void)w.write_array<bf16>(std::span<const bf16>(half).first(part.size()), h.order);
        } else {
          std::array<f16, step> half{};
          (void)codec::to_f16(part, std::span(half).first(part.size()));
          (void)w.write_array<f16>(std::span<const f16>(half).first(part.size()), h.order);
        }
      }
    }
  }
  seal(out, start, h.order);
  return {};
}

result<void> payload_to_f32(const frame_view& f, std::span<float> out) noexcept {
  const frame_header& h = f.header;
  if (h.type != codec::dtype::f32) return errc::bad_value;
  if (out.size() != h.count) return errc::size_mismatch;
  if (h.enc == encoding::raw) {
    // Same order: a copy. Otherwise one byte swap per element, as integers.
    return wire::load_array<float>(f.payload, h.order, out);
  }
  for (std::size_t i = 0; i < out.size(); i += step) {
    const std::size_t n = std::min(step, out.size() - i);
    const auto bytes = f.payload.subspan(2 * i, 2 * n);
    if (h.enc == encoding::bf16) {
      std::array<bf16, step> half{};
      (void)wire::load_array<bf16>(bytes, h.order, std::span(half).first(n));
      (void)codec::to_float(std::span<const bf16>(half).first(n), out.subspan(i, n));
    } else {
      std::array<f16, step> half{};
      (void)wire::load_array<f16>(bytes, h.order, std::span(half).first(n));
      (void)codec::to_float(std::span<const f16>(half).first(n), out.subspan(i, n));
    }
  }
  return {};
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
  b[4] = std::byte{version};
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
  if (b[4] != std::byte{version}) return errc::unsupported_version;
  const auto flags = static_cast<std::uint8_t>(b[5]);
  if ((flags & ~order_bit) != 0) return errc::bad_value;
  const byte_order o = (flags & order_bit) ? byte_order::big : byte_order::little;
  if (wire::load<std::uint32_t>(b.data() + 28, o) != codec::crc32c(b.first(28))) return errc::checksum_mismatch;
  if (wire::load<std::uint32_t>(b.data() + 24, o) != 0) return errc::bad_value;
  abort_message m;
  const auto code = wire::load<std::uint16_t>(b.data() + 6, o);
  if (code == 0) return errc::bad_value;
  m.code = error_code::from_value(code);
  m.reporter = wire::load<std::uint32_t>(b.data() + 8, o);
  const auto culprit = wire::load<std::uint32_t>(b.data() + 12, o);
  if (culprit != no_culprit) m.culprit = culprit;
  m.sequence = wire::load<std::uint64_t>(b.data() + 16, o);
  return m;
}

}  // namespace ferry::comm
