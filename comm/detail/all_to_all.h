// ferry/comm/detail/all_to_all.h: INTERNAL. The all-to-all exchange
// (communicator.h's all_to_all): every rank sends each other rank its
// piece directly, on the connection between them (the ring's for
// neighbours, the mesh's for the others), all pieces at once. Piece
// frames are numbered per connection from 0; a piece of k elements takes
// max(1, ceil(k / grain)) frames of at most grain = chunk_bytes / element
// size elements (an empty piece one empty frame, so that sizes that
// disagree fail at once). docs/comm-protocol.md, section 5. Not part of
// the API.
#pragma once

#include <cstddef>
#include <span>

#include "ferry/codec/dtype.h"
#include "ferry/comm/detail/link.h"

namespace ferry::comm::detail {

/// `in` holds one piece per rank in rank order (send_counts[r] elements of
/// `type` for rank r, host order); `out` receives rank r's piece for this
/// rank at the sum of recv_counts[0..r), in host order. Throws comm_error
/// (size_mismatch for counts that do not fit the buffers; the link's
/// errors).
void all_to_all(link& l, codec::dtype type, std::span<const std::byte> in, std::span<const std::size_t> send_counts,
                std::span<std::byte> out, std::span<const std::size_t> recv_counts);

}  // namespace ferry::comm::detail
