// ferry/comm/handshake.h: what two ranks say when a connection opens.
//
// Every connection between ranks starts with this exchange, before any
// frame: HELLO both ways, then each side proves it holds the shared secret
// with an HMAC-SHA256 over both HELLOs (OpenSSL's libcrypto), then each
// side checks the other's world configuration. A side that refuses says why
// with a REJECT before it closes. All fields are little-endian, whatever
// the hosts; frames (frame.h) are what travels in the sender's order.
//
// HELLO (80 bytes; offsets 0..11 and 28..43 keep their meaning in every
// version, so a mismatch can be reported with both sides named)
//   offset size field
//   0      4    magic        "FDH1" (46 44 48 31)
//   4      1    version      protocol version, 4 (1 had no frame authentication,
//                            2 other error codes, 3 no algorithm and no mesh)
//   5      1    role         1 join (to rank 0's rendezvous), 2 ring (to the
//                            next rank's ring listener), 3 reply (the acceptor),
//                            4 mesh (to a higher rank's ring listener, for
//                            algorithms other than the ring)
//   6      1    byte order   the sender host's native order (0 little, 1 big)
//   7      1    word size    the sender's pointer size in bytes (4 or 8)
//   8      4    rank         u32
//   12     4    world size   u32, at least 1, rank < world size
//   16     4    chunk bytes  u32, payload bytes per frame in collectives
//   20     4    max frame    u32, largest frame this rank accepts, bytes
//   24     2    listen port  u16, role 1 only: the joiner's ring listener
//   26     1    auth         frame authentication (FERRY_AUTH): 0 none, 1 frames,
//                            2 encrypt; both sides MUST say the same
//   27     1    algorithm    allreduce algorithm (FERRY_ALGORITHM): 0 ring,
//                            1 recursive_doubling, 2 auto, 3 rabenseifner; both
//                            sides MUST say the same
//   28     16   arch         ASCII architecture name, NUL-padded ("x86_64")
//   44     32   nonce        32 random bytes (the challenge)
//   76     4    crc          u32 CRC32C of bytes [0, 76)
//
// AUTH (36 bytes)
//   0      4    magic        "FDA1"
//   4      32   proof        HMAC-SHA256(secret, label || initiator's HELLO ||
//                            acceptor's HELLO), label the ASCII bytes
//                            "ferry-dist-1 initiator" or "ferry-dist-1 acceptor"
//                            for the side that sends it
//
// REJECT (8 + n bytes)
//   0      4    magic        "FDR1"
//   4      2    code         u16 ferry::comm_errc (auth_failed, version_mismatch,
//                            config_mismatch, protocol_error)
//   6      2    n            u16 text length, at most 1024
//   8      n    text         UTF-8, the refusing side's explanation
//
// TABLE (8 + 20 * world size + 4 bytes): rank 0's answer to a joiner
//   0      4    magic        "FDT1"
//   4      4    count        u32, equal to the world size
//   then per rank: 1 byte family (0 none, 4 IPv4, 6 IPv6), 1 byte order
//                  (entry 0: the ring order, 0 rank or 1 node, config.h;
//                  other entries MUST be 0), u16 port, 16 bytes address
//                  (IPv4 in the first 4); entry 0 is rank 0's own address
//                  with port 0, entry r its ring listener
//   end    4    crc          u32 CRC32C of everything before it
//
// The TABLE codec and the exchange over a socket are internal
// (comm/detail/rendezvous.h); this header is the messages alone.
//
// Order on a connection: the initiator sends HELLO; the acceptor answers
// HELLO (role 3) or REJECT; the initiator sends AUTH; the acceptor answers
// AUTH or REJECT. After that both compare configurations (world size,
// chunk bytes, max frame, auth) and both fail, naming both sides, if they
// differ.
//
// FRAME KEYS (auth frames or encrypt): each side then derives one 32-byte
// key per direction of the connection with HKDF-SHA256 (RFC 5869):
//   IKM  = the shared secret's bytes
//   salt = initiator's nonce || acceptor's nonce (64 bytes)
//   info = "ferry-comm-2 " mode " " sender, ASCII, mode "frames" or
//          "encrypt", sender "initiator" or "acceptor": the side that
//          sends with that key
// Fresh nonces make fresh keys for every connection, so nothing recorded
// from another connection or another world authenticates on this one.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/wire/byte_order.h"
#include "ferry/comm/error.h"
#include "ferry/comm/frame.h"
#include "ferry/comm/peer.h"  // hello, role, protocol_version, describe()

namespace ferry::comm {

inline constexpr std::size_t hello_size = 80;
inline constexpr std::size_t auth_size = 36;
inline constexpr std::size_t max_reject_text = 1024;

std::array<std::byte, hello_size> encode_hello(const hello& h);

/// Parses a HELLO. A version other than protocol_version parses only the
/// fields every version keeps (version, role, order, word size, rank,
/// arch) so the caller can report the mismatch. Errors: bad_magic, checksum_mismatch, bad_value
/// (role, byte order, word size, arch, auth, reserved), config_mismatch
/// (rank not below world size, world size 0).
result<hello> parse_hello(std::span<const std::byte, hello_size> bytes) noexcept;

/// Describes how two HELLOs' world configurations differ, naming both
/// sides; empty when they agree.
std::string compare_worlds(const hello& mine, const hello& theirs);

/// The AUTH proof of one side.
std::array<std::byte, 32> auth_proof(std::string_view secret, bool initiator,
                                     std::span<const std::byte, hello_size> initiator_hello,
                                     std::span<const std::byte, hello_size> acceptor_hello);

/// The two keys of one connection (FRAME KEYS above).
struct frame_keys {
  frame_key initiator{};  ///< the initiator sends with it, the acceptor receives
  frame_key acceptor{};   ///< the acceptor sends with it, the initiator receives
  friend bool operator==(const frame_keys&, const frame_keys&) = default;
};

/// HKDF-SHA256 of FRAME KEYS. Requires: mode != none. Throws comm_error
/// (auth_failed) only if OpenSSL fails.
frame_keys derive_frame_keys(frame_auth mode, std::string_view secret, std::span<const std::byte, 32> initiator_nonce,
                             std::span<const std::byte, 32> acceptor_nonce);

std::vector<std::byte> encode_reject(error_code code, std::string_view text);
/// Parses a REJECT body (the bytes after its 4-byte magic: code, length,
/// text). Errors: truncated, bad_value (length over max_reject_text).
struct reject {
  error_code code = comm_errc::protocol_error;
  std::string text;
};
result<reject> parse_reject(std::span<const std::byte> body) noexcept;

}  // namespace ferry::comm
