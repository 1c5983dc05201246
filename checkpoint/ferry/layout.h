// ferry/checkpoint/ferry/layout.h: INTERNAL. The header and trailer codecs
// of format.h and the graph options of the manifest, shared by the writer,
// the reader and the tests. Not part of the API.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "ferry/checkpoint/format.h"
#include "ferry/checkpoint/options.h"
#include "ferry/graph/options.h"
#include "ferry/wire/byte_order.h"

namespace ferry::checkpoint::detail {

struct header_fields {
  wire::byte_order order = wire::byte_order::little;
  std::uint32_t alignment = 64;
  std::uint8_t flags = 0;  ///< 0 a file, set_index_flag a set's index (set.h)
};

struct trailer_fields {
  std::uint64_t manifest_offset = 0;
  std::uint64_t manifest_size = 0;
  std::uint64_t file_size = 0;
  std::uint32_t manifest_crc = 0;
  header_fields header;
};

std::array<std::byte, header_size> encode_header(const header_fields& h) noexcept;
std::array<std::byte, trailer_size> encode_trailer(const trailer_fields& t) noexcept;
/// Errors: bad_magic, unsupported_version, bad_byte_order, bad_value,
/// bad_alignment.
result<header_fields> decode_header(std::span<const std::byte, header_size> in) noexcept;
/// Errors: truncated (no end magic), checksum_mismatch, and those of
/// decode_header for the copied fields.
result<trailer_fields> decode_trailer(std::span<const std::byte, trailer_size> in) noexcept;

/// Whether `a` is an alignment the format allows (a power of two, 64..2^30).
[[nodiscard]] bool valid_alignment(std::uint32_t a) noexcept;

/// The graph archive options a manifest is written and read with.
graph::options manifest_options(const limits& lim, wire::byte_order order) noexcept;

}  // namespace ferry::checkpoint::detail
