// ferry/comm/detail/plan_checks.h: INTERNAL. What every collective's plan
// (communicator.cpp's ring plans, tree_allreduce.cpp's) checks of the frames
// it receives and of its own input, and the staging its received chunks
// land in. Not part of the API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ferry/codec/dtype.h"
#include "ferry/comm/detail/link.h"
#include "ferry/comm/frame.h"

namespace ferry::comm::detail {

/// Received chunks that do not land in the user's buffer, reused across
/// collectives (grown, never shrunk), so a call does not fault fresh pages
/// in.
struct rx_staging {
  std::vector<std::byte> rx;                        ///< the ring's one channel
  std::vector<std::vector<std::byte>> per_channel;  ///< plans that receive on several channels at once
};

/// "raw", "bf16" or "f16".
const char* encoding_name(encoding e);

/// An incoming header of the `what` collective from rank `from` against
/// the dtype, encoding and element count expected: config_mismatch or
/// size_mismatch naming the sender.
void expect_header(const link& l, std::uint32_t from, const frame_header& h, codec::dtype type, encoding enc,
                   std::size_t count, const char* what);

/// A bool is a byte holding 0 or 1 (any other value in a bool is undefined
/// behaviour in C++): a peer's other bytes are refused (bad_value), naming it.
void check_bools(const link& l, std::uint32_t from, std::span<const std::byte> payload, const char* what);

/// The same for this rank's own buffer, before anything is sent (2 & 1
/// would hide it on the way): bad_argument.
void check_own_bools(const link& l, codec::dtype type, std::span<const std::byte> data, const char* what);

/// `frames` as a frame count (limit_exceeded past 2^32).
std::uint32_t frame_count(const link& l, std::size_t frames);

}  // namespace ferry::comm::detail
