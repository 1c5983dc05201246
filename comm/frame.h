// ferry/comm/frame.h: the frame of ferry's gradient wire protocol.
//
// A frame carries one chunk of one collective from one rank. Every field has
// a fixed width (no size_t, no long, no struct dumps), so ranks that disagree
// on word size or byte order still agree on the bytes.
//
// LAYOUT (version 1; protocol version 2 adds flag bits 4 and 5, version 5
// flag bit 6)
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
//                          bit 4: the trailer is a 16-byte tag, not a CRC;
//                          bit 5: the payload is encrypted (only with bit 4);
//                          bits 4-5 MUST be exactly what the link negotiated
//                          (frame_auth: none 00, frames 01, encrypt 11);
//                          bit 6: a point-to-point message's frame (POINT
//                          TO POINT below), not a collective's;
//                          bit 7 MUST be 0
//   6      1    dtype      element type code of codec/dtype.h
//   7      1    reserved   MUST be 0
//   8      4    sender     u32, the sending rank
//   12     8    sequence   u64, the collective's sequence number on this link
//                          (bit 6: the message's number on this connection
//                          in this direction, from 0)
//   20     4    chunk      u32, the chunk's index within the collective (or
//                          the message)
//   24     4    count      u32, elements in the payload
//   28     n    payload    count elements; n = count * (2 if compressed else
//                          size_of(dtype)); ciphertext of as many bytes when
//                          bit 5 is set
//   28+n   4    crc        u32 CRC32C (codec/crc32c.h) of bytes [0, 28+n),
//                          when bit 4 is clear; or
//   28+n   16   tag        the Poly1305 tag of ChaCha20-Poly1305 (RFC 8439),
//                          when bit 4 is set (see AUTHENTICATION below)
//
// A frame is exactly 32 + n bytes (44 + n with a tag). A decoder MUST check
// the header's size against its negotiated maximum before allocating or
// reading the payload, and MUST check the CRC or the tag before using any
// payload byte.
//
// AUTHENTICATION (FERRY_AUTH=frames or encrypt, negotiated in the HELLO)
//
// Each direction of a connection has its own 32-byte key (handshake.h
// derives them) and its own message counter: 0 for the first frame or
// ABORT sent in that direction, then +1 for every frame and ABORT. The
// counter is not on the wire. The AEAD is ChaCha20-Poly1305 with
//   nonce = 00 00 00 00 || u64 little-endian counter      (12 bytes)
//   frames:  AAD = header || payload, plaintext empty     (payload in clear)
//   encrypt: AAD = header, plaintext = payload            (ciphertext sent)
// and its 16-byte tag replaces the CRC. An ABORT is its 32 bytes (CRC kept)
// followed by the tag of AAD = those 32 bytes, empty plaintext, at the
// next counter. A receiver that counts every message it accepts therefore
// refuses any frame or ABORT altered, injected, replayed, reordered or
// dropped (the one after a dropped one) on the path: forged_frame (a header
// altered into a malformed one, or one that does not fit the collective, is
// refused before the tag with the decoder's or the collective's error).
// POINT TO POINT (bit 6; communicator.h's send and recv)
//
// A message from one rank to another travels on the connection between
// them as frame 0, its envelope: dtype U64, count 3, payload the tag (i64
// as two's complement), the number of elements and the elements' dtype
// code, each a u64 in the frame's byte order; then frames 1..k, the
// elements (dtype their type, raw encoding), each of chunk_bytes / element
// size elements except the last: k = ceil(elements / that), 0 for an
// empty message. Messages on one connection in one direction do not
// interleave; they may come between a collective's frames.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "ferry/codec/dtype.h"
#include "ferry/wire/byte_order.h"
#include "ferry/comm/error.h"
#include "ferry/comm/options.h"  // frame_auth

struct evp_cipher_ctx_st;  // OpenSSL's EVP_CIPHER_CTX, used in frame.cpp only

namespace ferry::comm {

/// How a payload's elements travel.
enum class encoding : std::uint8_t {
  raw = 0,   ///< elements of the frame's dtype
  bf16 = 1,  ///< F32 values rounded to bf16 (codec/half.h)
  f16 = 2,   ///< F32 values rounded to f16
};

inline constexpr std::size_t frame_header_size = 28;
/// Flag bit 6 (byte 5 of the header): a point-to-point message's frame.
inline constexpr std::uint8_t frame_message_flag = 0x40;
inline constexpr std::size_t frame_trailer_size = 4;  ///< the CRC (frame_auth::none)
inline constexpr std::size_t frame_tag_size = 16;     ///< the tag (frames, encrypt)
inline constexpr std::size_t frame_key_size = 32;
using frame_key = std::array<std::byte, frame_key_size>;

/// Trailer bytes of a frame under `a`: 4 (CRC) or 16 (tag).
[[nodiscard]] constexpr std::size_t trailer_size(frame_auth a) noexcept {
  return a == frame_auth::none ? frame_trailer_size : frame_tag_size;
}

struct frame_header {
  wire::byte_order order = wire::host_order;
  encoding enc = encoding::raw;
  frame_auth auth = frame_auth::none;  ///< flag bits 4-5
  codec::dtype type = codec::dtype::f32;
  std::uint32_t sender = 0;
  std::uint64_t sequence = 0;
  std::uint32_t chunk = 0;
  std::uint32_t count = 0;
  bool p2p = false;  ///< flag bit 6: a point-to-point message's frame
  friend bool operator==(const frame_header&, const frame_header&) = default;
};

/// Writes the 28-byte header of `h` (in h.order).
void encode_header(const frame_header& h, std::span<std::byte, frame_header_size> out) noexcept;

/// Bytes per element on the wire (2 when compressed).
[[nodiscard]] std::size_t wire_element_size(const frame_header& h) noexcept;

/// Payload bytes of a frame with this header, or limit_exceeded if that
/// overflows size_t (possible with 32-bit size_t).
[[nodiscard]] result<std::size_t> payload_size(const frame_header& h) noexcept;

/// Parses and validates the fixed header. Errors: truncated, bad_magic,
/// unsupported_version, bad_value (flags, reserved, or a compressed
/// encoding with a dtype other than F32), unknown_dtype; limit_exceeded if
/// the whole frame (with its CRC or tag) would exceed `max_frame_bytes`
/// (checked before anything is allocated). Whether h.auth is the one the
/// link negotiated is the caller's check (frame_decoder makes it).
result<frame_header> parse_header(std::span<const std::byte> bytes, std::size_t max_frame_bytes) noexcept;

// ---------------------------------------------------------------- sending
//
// A sender never copies a payload into a frame: it writes the header and
// the CRC trailer with seal() and gathers header, payload and trailer
// straight from their buffers (sendmsg), in the host's byte order.

/// The bytes around a payload.
struct frame_envelope {
  std::array<std::byte, frame_header_size> header{};
  std::array<std::byte, frame_trailer_size> trailer{};
};

/// The header of `h` and the CRC32C of header and payload, both in h.order.
/// Requires: h.auth == none, payload.size() == payload_size(h) and the
/// payload's elements in h.order.
[[nodiscard]] frame_envelope seal(const frame_header& h, std::span<const std::byte> payload) noexcept;

/// One direction of an authenticated link: ChaCha20-Poly1305 under that
/// direction's key, in one reusable OpenSSL context (each message re-keys
/// only the nonce). Sealing or opening, fixed at construction. The message
/// counter is the caller's: whoever sends or receives counts.
class frame_cipher {
 public:
  /// Requires: mode != none. Throws comm_error (auth_failed) if OpenSSL
  /// cannot set up the cipher.
  frame_cipher(frame_auth mode, const frame_key& key, bool sealing);
  frame_cipher(frame_cipher&&) noexcept;
  frame_cipher& operator=(frame_cipher&&) noexcept;
  ~frame_cipher();

  [[nodiscard]] frame_auth mode() const noexcept { return mode_; }

  /// Seals one message at `counter`: frames mode authenticates `aad` and
  /// `payload` (ciphertext unused, may be empty); encrypt mode
  /// authenticates `aad`, encrypts `payload` into `ciphertext` (same size,
  /// may be the same bytes) and authenticates that. Requires: sealing.
  /// False only if OpenSSL fails.
  [[nodiscard]] bool seal(std::uint64_t counter, std::span<const std::byte> aad, std::span<const std::byte> payload,
                          std::span<std::byte> ciphertext, std::span<std::byte, frame_tag_size> tag) noexcept;

  /// Opens one message in steps, as its bytes arrive: begin() with the
  /// counter and the header (the AAD), update() with each piece of payload
  /// in order (encrypt mode decrypts it in place), end() with the tag:
  /// true if it verifies. Requires: not sealing. Until end() returns true
  /// the bytes are unauthenticated (and in encrypt mode possibly garbage).
  [[nodiscard]] bool begin(std::uint64_t counter, std::span<const std::byte> aad) noexcept;
  [[nodiscard]] bool update(std::span<std::byte> piece) noexcept;
  [[nodiscard]] bool end(std::span<const std::byte, frame_tag_size> tag) noexcept;

 private:
  struct ctx_free {
    void operator()(evp_cipher_ctx_st* c) const noexcept;
  };
  [[nodiscard]] bool start(std::uint64_t counter, std::span<const std::byte> aad) noexcept;
  std::unique_ptr<evp_cipher_ctx_st, ctx_free> ctx_;
  frame_auth mode_;
  bool sealing_;
};

/// The bytes around the payload of an authenticated frame.
struct sealed_envelope {
  std::array<std::byte, frame_header_size> header{};
  std::array<std::byte, frame_tag_size> tag{};
};

/// The header of `h` (its auth set to c.mode()) and its tag at `counter`;
/// encrypt mode writes the payload's ciphertext into `ciphertext` (same
/// size as the payload, may alias it; unused in frames mode). Requires
/// what seal() requires, and a sealing cipher. Throws comm_error
/// (auth_failed) only if OpenSSL fails.
[[nodiscard]] sealed_envelope seal(frame_header h, std::span<const std::byte> payload, frame_cipher& c,
                                   std::uint64_t counter, std::span<std::byte> ciphertext);

/// Host floats as the payload of an F32 frame of encoding `enc`, in the
/// host's byte order: a copy (raw), or rounded to nearest even (bf16, f16;
/// NaN stays NaN). Requires: out.size() == values.size() * (raw ? 4 : 2).
void encode_f32_payload(encoding enc, std::span<const float> values, std::span<std::byte> out) noexcept;

/// A whole frame in one buffer (header, payload, trailer), for callers that
/// keep frames in memory or files. Requires what seal() requires.
[[nodiscard]] std::vector<std::byte> encode_frame(const frame_header& h, std::span<const std::byte> payload);
/// The same, authenticated (and encrypted) by `c` at `counter`.
[[nodiscard]] std::vector<std::byte> encode_frame(const frame_header& h, std::span<const std::byte> payload,
                                                  frame_cipher& c, std::uint64_t counter);

// -------------------------------------------------------------- receiving

/// 16-bit or raw f32 payload elements in `order` as host floats: widened
/// (bf16, f16) or copied and byte-swapped if `order` is not the host's
/// (raw). Bit-exact for raw (NaN payloads included). Requires:
/// payload.size() == out.size() * (raw ? 4 : 2).
void decode_f32_payload(encoding enc, wire::byte_order order, std::span<const std::byte> payload,
                        std::span<float> out) noexcept;

/// The payload of an F32 frame as host floats: copied when the sender's
/// order is the host's, byte-swapped when it is not, widened when
/// compressed. Bit-exact for raw frames (NaN payloads included).
/// Requires: out.size() == h.count and payload.size() == payload_size(h).
/// Errors: bad_value (the frame's dtype is not F32).
result<void> payload_to_f32(const frame_header& h, std::span<const std::byte> payload, std::span<float> out) noexcept;

/// Converts a raw payload's elements from the sender's order to the host's
/// in place (nothing to do when they agree). Requires: h.enc == raw and
/// payload.size() == payload_size(h).
void payload_to_host(const frame_header& h, std::span<std::byte> payload) noexcept;

struct abort_message;

/// What a frame_decoder hands on. The decoder is exception-neutral: a sink
/// may also throw, and the decoder is then unusable.
class frame_sink {
 public:
  virtual ~frame_sink() = default;
  /// A header arrived and passed parse_header(). Returns where its payload
  /// goes: exactly payload_size(h) bytes, which the decoder fills and
  /// checks before on_frame(); or an error to refuse the frame.
  virtual result<std::span<std::byte>> on_header(const frame_header& h) = 0;
  /// The payload is in place (decrypted) and the frame's CRC or tag is right.
  virtual result<void> on_frame(const frame_header& h, std::span<std::byte> payload) = 0;
  /// An ABORT arrived where a frame may start, and parsed.
  virtual result<void> on_abort(const abort_message& a) = 0;
};

/// The receiving side of a link: takes bytes as they arrive, in any split,
/// and hands complete, checked frames to a frame_sink. Header, then
/// payload (straight into the buffer the sink chose), then the CRC or tag
/// check, before the sink sees any payload byte. An ABORT may stand wherever
/// a frame may start. The size check happens on the 28 header bytes alone,
/// so no hostile frame makes anything allocate.
///
/// In an authenticated mode the decoder counts the messages it accepts
/// (the implicit counter of frame.h's AUTHENTICATION), authenticates each
/// payload piece as it lands (hot in cache; encrypt mode decrypts it in
/// place) and checks the tag before on_frame() or on_abort().
///
/// Two ways to feed it: feed() copies bytes a caller already has; a socket
/// reader asks buffers() where the next bytes go, reads into them (readv),
/// and reports the count to advance(), so payloads land in place.
class frame_decoder {
 public:
  explicit frame_decoder(std::size_t max_frame_bytes) noexcept : max_frame_bytes_(max_frame_bytes) {}
  /// An authenticated link's receiving end: frames and ABORTs opened with
  /// `key`, the first at message counter `counter`. Requires: mode != none.
  frame_decoder(std::size_t max_frame_bytes, frame_auth mode, const frame_key& key, std::uint64_t counter = 0);

  /// Where the next bytes go, in order, at most 3 spans: the rest of the
  /// part being received (header, payload or CRC/tag), a payload's CRC or
  /// tag after it, and, with `read_ahead`, the next frame's first 28 bytes. Without
  /// read_ahead nothing past the current frame is asked for. Returns how
  /// many spans were set.
  std::size_t buffers(std::span<std::span<std::byte>, 3> out, bool read_ahead) noexcept;

  /// `n` bytes were written, in order, into the spans of the last
  /// buffers() call. Completed parts go to the sink. Errors: those of
  /// parse_header() and parse_abort(), checksum_mismatch, forged_frame (a
  /// tag that does not verify, or a header whose bits 4-5 are not the
  /// negotiated mode; bad_value for tagged frames on a link without
  /// authentication), or the sink's; after one, every call returns it
  /// again.
  result<void> advance(std::size_t n, frame_sink& sink);

  /// Copies `bytes` in (any split of a stream of frames).
  result<void> feed(std::span<const std::byte> bytes, frame_sink& sink);

  /// True when no frame or ABORT is partly received.
  [[nodiscard]] bool idle() const noexcept { return part_ == part::header && head_got_ == 0; }
  /// The message counter of the next frame or ABORT (authenticated modes;
  /// it counts the messages accepted).
  [[nodiscard]] std::uint64_t counter() const noexcept { return counter_; }

 private:
  enum class part : std::uint8_t { header, payload, trailer };
  [[nodiscard]] std::size_t header_need() const noexcept;
  result<void> fail(error_code e) noexcept {
    error_ = e;
    return e;
  }

  std::size_t max_frame_bytes_;
  frame_auth mode_ = frame_auth::none;
  std::optional<frame_cipher> cipher_;  // set in the authenticated modes
  std::uint64_t counter_ = 0;
  part part_ = part::header;
  error_code error_;
  std::array<std::byte, 32 + frame_tag_size> head_{};  // a header, or a whole ABORT and its tag
  std::size_t head_got_ = 0;
  frame_header header_;
  std::uint32_t header_crc_ = 0;
  std::span<std::byte> payload_;
  std::size_t payload_got_ = 0;
  std::array<std::byte, frame_tag_size> trailer_{};  // the CRC or the tag
  std::size_t trailer_got_ = 0;
};

/// A frame decoded from a buffer, its payload copied out (still in the
/// sender's byte order).
struct decoded_frame {
  frame_header header;
  std::vector<std::byte> payload;
};

/// Decodes a buffer that holds exactly one frame, through frame_decoder
/// (allocating no more than the buffer holds). Errors: those of the
/// decoder, truncated, trailing_bytes, bad_magic (an ABORT, not a frame).
result<decoded_frame> decode_frame(std::span<const std::byte> frame, std::size_t max_frame_bytes);
/// The same for an authenticated frame at message counter `counter`
/// (payload decrypted in encrypt mode). Requires: mode != none.
result<decoded_frame> decode_frame(std::span<const std::byte> frame, std::size_t max_frame_bytes, frame_auth mode,
                                   const frame_key& key, std::uint64_t counter);

/// ABORT, the message a rank sends both neighbours when a collective fails
/// there, so that every rank fails naming the same culprit. It may stand
/// wherever a frame may, on either direction of a link. On an
/// authenticated link its 32 bytes are followed by a 16-byte tag
/// (AUTHENTICATION above).
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

inline constexpr std::size_t sealed_abort_size = abort_size + frame_tag_size;
/// An ABORT in the host's byte order and its tag at `counter`. Throws
/// comm_error (auth_failed) only if OpenSSL fails.
[[nodiscard]] std::array<std::byte, sealed_abort_size> seal_abort(const abort_message& m, frame_cipher& c,
                                                                  std::uint64_t counter);
/// Checks the tag of a sealed ABORT at `counter` (forged_frame if wrong),
/// then parses it.
result<abort_message> open_abort(std::span<const std::byte, sealed_abort_size> bytes, frame_cipher& c,
                                 std::uint64_t counter) noexcept;

}  // namespace ferry::comm
