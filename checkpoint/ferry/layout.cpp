#include "ferry/checkpoint/ferry/layout.h"

#include <algorithm>
#include <bit>

#include "ferry/checkpoint/error.h"
#include "ferry/checkpoint/set.h"
#include "ferry/codec/crc32c.h"
#include "ferry/wire/cursor.h"

namespace ferry::checkpoint::detail {
namespace {

constexpr std::uint8_t byte_of(wire::byte_order o) noexcept { return static_cast<std::uint8_t>(o); }

// version, order, flags, reserved: the four single bytes header and trailer
// share, read from `in`. Fills h's order and flags.
result<void> decode_flags(wire::reader& in, header_fields& h) noexcept {
  std::uint8_t version = 0, order = 0, flags = 0, reserved = 0;
  FERRY_TRY(in.read_le(version, order, flags, reserved));
  if (version != format_version) return errc::unsupported_version;
  if (order > 1) return errc::bad_byte_order;
  if ((flags != 0 && flags != set_index_flag) || reserved != 0) return errc::bad_value;
  h.order = static_cast<wire::byte_order>(order);
  h.flags = flags;
  return {};
}

void encode_flags(std::byte* p, const header_fields& h) noexcept {
  p[0] = std::byte{format_version};
  p[1] = std::byte{byte_of(h.order)};
  p[2] = std::byte{h.flags};
  p[3] = std::byte{0};
}

}  // namespace

bool valid_alignment(std::uint32_t a) noexcept {
  return std::has_single_bit(a) && a >= min_alignment && a <= max_alignment;
}

std::array<std::byte, header_size> encode_header(const header_fields& h) noexcept {
  std::array<std::byte, header_size> out{};
  std::memcpy(out.data(), file_magic, sizeof file_magic);
  encode_flags(out.data() + 8, h);
  wire::store(h.alignment, out.data() + 12, h.order);
  return out;
}

result<header_fields> decode_header(std::span<const std::byte, header_size> bytes) noexcept {
  wire::reader in(bytes);
  FERRY_TRY_ASSIGN(const auto magic, in.read_bytes(sizeof file_magic));
  if (std::memcmp(magic.data(), file_magic, sizeof file_magic) != 0) return errc::bad_magic;
  header_fields h;
  FERRY_TRY(decode_flags(in, h));
  FERRY_TRY_ASSIGN(h.alignment, in.read<std::uint32_t>(h.order));
  if (!valid_alignment(h.alignment)) return checkpoint_errc::bad_alignment;
  for (const std::byte b : in.rest()) {
    if (b != std::byte{0}) return errc::bad_value;
  }
  return h;
}

std::array<std::byte, trailer_size> encode_trailer(const trailer_fields& t) noexcept {
  std::array<std::byte, trailer_size> out{};
  const auto o = t.header.order;
  wire::store(t.manifest_offset, out.data() + 0, o);
  wire::store(t.manifest_size, out.data() + 8, o);
  wire::store(t.file_size, out.data() + 16, o);
  wire::store(t.manifest_crc, out.data() + 24, o);
  wire::store(t.header.alignment, out.data() + 28, o);
  encode_flags(out.data() + 32, t.header);
  wire::store(codec::crc32c(std::span(out).first(36)), out.data() + 36, o);
  std::memcpy(out.data() + 40, end_magic, sizeof end_magic);
  return out;
}

result<trailer_fields> decode_trailer(std::span<const std::byte, trailer_size> bytes) noexcept {
  wire::reader in(bytes);
  FERRY_TRY_ASSIGN(const auto magic, in.bytes_at(40, sizeof end_magic));
  if (std::memcmp(magic.data(), end_magic, sizeof end_magic) != 0) return errc::truncated;
  // The order byte is read before the CRC: a flipped order byte then fails
  // the CRC like any other bit instead of being trusted.
  FERRY_TRY_ASSIGN(const auto order_byte, in.read_le_at<std::uint8_t>(33));
  const auto o = order_byte == 1 ? wire::byte_order::big : wire::byte_order::little;
  FERRY_TRY_ASSIGN(const auto crc, in.read_at<std::uint32_t>(36, o));
  if (crc != codec::crc32c(bytes.first(36))) return errc::checksum_mismatch;
  trailer_fields t;
  FERRY_TRY_ASSIGN(auto flags, in.sub_at(32, 4));
  FERRY_TRY(decode_flags(flags, t.header));
  FERRY_TRY(in.read_fields(t.header.order, t.manifest_offset, t.manifest_size, t.file_size, t.manifest_crc,
                           t.header.alignment));
  if (!valid_alignment(t.header.alignment)) return checkpoint_errc::bad_alignment;
  return t;
}

graph::options manifest_options(const limits& lim, wire::byte_order order) noexcept {
  graph::options g;
  g.order = order;
  // A name is a string and a shape a container: both stay under max_count,
  // and the archive holds one object per storage.
  g.limits.max_count = std::max<std::size_t>(g.limits.max_count, std::max(lim.max_tensors, lim.max_name_bytes));
  g.limits.max_depth = 8;
  g.max_objects = std::max<std::size_t>(lim.max_tensors, 1);
  return g;
}

}  // namespace ferry::checkpoint::detail
