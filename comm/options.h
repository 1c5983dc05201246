// ferry/comm/options.h: the choices a comm user makes that the protocol
// carries, without the protocol (frame.h, handshake.h) itself.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ferry::comm {

/// How frames are protected on a link (FERRY_AUTH; frame.h's
/// AUTHENTICATION says how). Both ends of every link must agree (checked at
/// the handshake).
enum class frame_auth : std::uint8_t {
  none = 0,     ///< CRC32C: catches accidents, not attacks
  frames = 1,   ///< a ChaCha20-Poly1305 tag over header and payload
  encrypt = 2,  ///< the same, with the payload encrypted
};
/// "none", "frames", "encrypt": FERRY_AUTH's values.
[[nodiscard]] constexpr std::string_view name(frame_auth a) noexcept {
  switch (a) {
    case frame_auth::none: break;
    case frame_auth::frames: return "frames";
    case frame_auth::encrypt: return "encrypt";
  }
  return "none";
}

/// Every mode, for lists of the accepted names.
inline constexpr frame_auth all_frame_auths[] = {frame_auth::none, frame_auth::frames, frame_auth::encrypt};

/// The mode name() gives `s`; nullopt for any other text.
[[nodiscard]] constexpr std::optional<frame_auth> frame_auth_from_name(std::string_view s) noexcept {
  for (const frame_auth a : all_frame_auths) {
    if (name(a) == s) return a;
  }
  return std::nullopt;
}

/// How an allreduce combines the ranks' values (the kernels and the NaN,
/// signed-zero and integer rules: comm/detail/reduce.h and
/// docs/comm-protocol.md). Every rank must pass the same op: frames do not
/// carry it, so ranks that disagree combine their values wrongly, unseen.
enum class reduce_op : std::uint8_t {
  sum = 0,
  avg = 1,      ///< the sum, divided once by the world size where it is complete
  min = 2,
  max = 3,
  product = 4,
  band = 5,     ///< bitwise and: integers and bool only
  bor = 6,      ///< bitwise or: integers and bool only
  bxor = 7,     ///< bitwise xor: integers and bool only
};

/// "sum", "avg", "min", "max", "product", "band", "bor", "bxor"
/// (torch.distributed.ReduceOp's names, lower case).
[[nodiscard]] constexpr std::string_view name(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: break;
    case reduce_op::avg: return "avg";
    case reduce_op::min: return "min";
    case reduce_op::max: return "max";
    case reduce_op::product: return "product";
    case reduce_op::band: return "band";
    case reduce_op::bor: return "bor";
    case reduce_op::bxor: return "bxor";
  }
  return "sum";
}

/// Every op, in code order.
inline constexpr reduce_op all_reduce_ops[] = {reduce_op::sum,     reduce_op::avg,  reduce_op::min,
                                               reduce_op::max,     reduce_op::product, reduce_op::band,
                                               reduce_op::bor,     reduce_op::bxor};

/// The op name() gives `s`; nullopt for any other text.
[[nodiscard]] constexpr std::optional<reduce_op> reduce_op_from_name(std::string_view s) noexcept {
  for (const reduce_op op : all_reduce_ops) {
    if (name(op) == s) return op;
  }
  return std::nullopt;
}

/// How an allreduce moves its values (FERRY_ALGORITHM; docs/comm-protocol.md
/// describes each). Every rank must use the same (checked at the handshake).
enum class algorithm : std::uint8_t {
  ring = 0,                ///< reduce-scatter and allgather around the ring: 2(p-1) steps, the least bytes
  recursive_doubling = 1,  ///< lg p exchanges of the whole buffer with partners at doubling distances
  automatic = 2,           ///< per call, by comm/cost_model.h's choose() (the default)
  rabenseifner = 3,        ///< reduce-scatter by recursive halving, allgather by recursive doubling
};
/// "ring", "recursive_doubling", "rabenseifner", "auto": FERRY_ALGORITHM's values.
[[nodiscard]] constexpr std::string_view name(algorithm a) noexcept {
  switch (a) {
    case algorithm::ring: break;
    case algorithm::recursive_doubling: return "recursive_doubling";
    case algorithm::automatic: return "auto";
    case algorithm::rabenseifner: return "rabenseifner";
  }
  return "ring";
}
inline constexpr algorithm all_algorithms[] = {algorithm::ring, algorithm::recursive_doubling,
                                               algorithm::rabenseifner, algorithm::automatic};
/// The algorithm name() gives `s`; nullopt for any other text.
[[nodiscard]] constexpr std::optional<algorithm> algorithm_from_name(std::string_view s) noexcept {
  for (const algorithm a : all_algorithms) {
    if (name(a) == s) return a;
  }
  return std::nullopt;
}

}  // namespace ferry::comm
