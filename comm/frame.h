// ferry/comm/frame.h: the frame of ferry's gradient wire protocol.
//
// A frame carries one chunk of one collective from one rank. Every field has
// a fixed width (no size_t, no long, no struct dumps), so ranks that disagree
// on word size or byte order still agree on the bytes.
//
// LAYOUT (version 1)
//
//   offset size field
//   0      4    magic      "FDF1" (46 44 46 31)
//   4      1    version    1
//   5      1    flags      bit 0: byte order of every multi-byte field below and
//                          of the payload (0 little, 1 big): the sender's native
//                          order ("receiver makes right");
//                          bits 1-3: payload encoding, 0 raw (elements of
//                          `dtype`), 1 bf16, 2 f16 (both: dtype MUST be F32, each
//                          element sent as 2 bytes); other values MUST NOT appear;
//                          bits 4-7 MUST be 0
//   6      1    dtype      element type code of codec/dtype.h
//   7      1    reserved   MUST be 0
//   8      4    sender     u32, the sending rank
//   12     8    sequence   u64, the collective's sequence number on this link
//   20     4    chunk      u32, the chunk's index within the collective
//   24     4    count      u32, elements in the payload
//   28     n    payload    count elements; n = count * (2 if compressed else
//                          size_of(dtype))
//   28+n   4    crc        u32 CRC32C (codec/crc32c.h) of bytes [0, 28+n)
//
// A frame is exactly 32 + n bytes. A decoder MUST check the header's size
// against its negotiated maximum before allocating or reading the payload,
// and MUST check the CRC before using any payload byte.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "ferry/codec/dtype.h"
#include "ferry/wire/byte_order.h"
#include "ferry/comm/error.h"

namespace ferry::comm {

/// How a payload's elements travel.
enum class encoding : std::uint8_t {
  raw = 0,   ///< elements of the frame's dtype
  bf16 = 1,  ///< F32 values rounded to bf16 (codec/half.h)
  f16 = 2,   ///< F32 values rounded to f16
};

inline constexpr std::size_t frame_header_size = 28;
inline constexpr std::size_t frame_trailer_size = 4;

struct frame_header {
  wire::byte_order order = wire::host_order;
  encoding enc = encoding::raw;
  codec::dtype type = codec::dtype::f32;
  std::uint32_t sender = 0;
  std::uint64_t sequence = 0;
  std::uint32_t chunk = 0;
  std::uint32_t count = 0;
  friend bool operator==(const frame_header&, const frame_header&) = default;
};

/// Writes the 28-byte header of `h` (in h.order), for senders that gather
/// header, payload and CRC straight from their buffers.
void encode_header(const frame_header& h, std::span<std::byte, frame_header_size> out) noexcept;

/// Bytes per element on the wire (2 when compressed).
[[nodiscard]] std::size_t wire_element_size(const frame_header& h) noexcept;

/// Payload bytes of a frame with this header, or limit_exceeded if that
/// overflows size_t (possible with 32-bit size_t).
[[nodiscard]] result<std::size_t> payload_size(const frame_header& h) noexcept;

/// Parses and validates the fixed header. Errors: truncated, bad_magic,
/// unsupported_version, bad_value (flags, reserved, or a compressed
/// encoding with a dtype other than F32), unknown_dtype; limit_exceeded if
/// the whole frame would exceed `max_frame_bytes` (checked before anything
/// is allocated).
result<frame_header> parse_header(std::span<const std::byte> bytes, std::size_t max_frame_bytes) noexcept;

/// A validated frame: its header and a view of its payload.
struct frame_view {
  frame_header header;
  std::span<const std::byte> payload;
};

/// Validates a whole frame (header, exact length, CRC). Errors: those of
/// parse_header, truncated, trailing_bytes, checksum_mismatch.
result<frame_view> decode_frame(std::span<const std::byte> frame, std::size_t max_frame_bytes) noexcept;

/// Encodes `values` (host floats) as a frame in the host's byte order (the
/// sender never swaps), compressing when `h.enc` says so; `h.type` must be
/// F32 and `h.count` is set from values.size(). Appends to `out`.
/// Errors: bad_value (dtype), limit_exceeded (more than 2^32-1 values).
result<void> encode_f32(frame_header h, std::span<const float> values, std::vector<std::byte>& out);

/// Encodes a raw payload already in `h.order` (h.count elements of h.type).
/// Errors: size_mismatch if the payload's size does not match the header.
result<void> encode_raw(const frame_header& h, std::span<const std::byte> payload, std::vector<std::byte>& out);

/// The payload of an F32 frame as host floats: copied when the sender's
/// order is the host's, byte-swapped when it is not, widened when
/// compressed. Bit-exact for raw frames (NaN payloads included).
/// Errors: bad_value (not F32), size_mismatch (out.size() != count).
result<void> payload_to_f32(const frame_view& f, std::span<float> out) noexcept;

/// ABORT, the message a rank sends both neighbours when a collective fails
/// there, so that every rank fails naming the same culprit. It may stand
/// wherever a frame may, on either direction of a link.
///
///   offset size field
///   0      4    magic      "FDX1" (46 44 58 31)
///   4      1    version    1
///   5      1    flags      bit 0: byte order of the fields below; bits 1-7: 0
///   6      2    code       u16 ferry error code of the failure (base/error.h)
///   8      4    reporter   u32, the rank that detected it
///   12     4    culprit    u32, the rank at fault, 0xFFFFFFFF if unknown
///   16     8    sequence   u64, the collective that failed
///   24     4    reserved   0
///   28     4    crc        u32 CRC32C of bytes [0, 28)
struct abort_message {
  error_code code = comm_errc::aborted;
  std::uint32_t reporter = 0;
  std::optional<std::uint32_t> culprit;
  std::uint64_t sequence = 0;
  friend bool operator==(const abort_message&, const abort_message&) = default;
};
inline constexpr std::size_t abort_size = 32;

/// True if `bytes` start with ABORT's magic.
[[nodiscard]] bool is_abort(std::span<const std::byte> bytes) noexcept;
/// Encodes in the host's byte order.
[[nodiscard]] std::array<std::byte, abort_size> encode_abort(const abort_message& m) noexcept;
/// Errors: bad_magic, unsupported_version, bad_value (flags, reserved,
/// code 0), checksum_mismatch.
result<abort_message> parse_abort(std::span<const std::byte, abort_size> bytes) noexcept;

}  // namespace ferry::comm
