// ferry/comm/detail/tree_allreduce.h: INTERNAL. The allreduce algorithms
// other than the ring, over the full mesh of links (link::form_mesh):
// recursive doubling and Rabenseifner's recursive halving and doubling,
// each for any world size (the fold of the ranks beyond the largest power
// of two). docs/comm-protocol.md, section 5, is their specification. Not
// part of the API.
#pragma once

#include <cstddef>
#include <span>

#include "ferry/codec/dtype.h"
#include "ferry/comm/detail/link.h"
#include "ferry/comm/detail/plan_checks.h"
#include "ferry/comm/options.h"

namespace ferry::comm::detail {

/// `data` (host-order elements of `type`) combined over the ranks of
/// `group` (ascending, this rank among them; empty: every rank) by `op`
/// with algorithm `a` (recursive_doubling or rabenseifner), in place: the
/// same bits on every rank of the group. Only the group's ranks call it.
/// Throws comm_error as link::run() does.
void tree_allreduce(link& l, rx_staging& staging, algorithm a, codec::dtype type, std::span<std::byte> data,
                    reduce_op op, std::span<const std::uint32_t> group = {});

}  // namespace ferry::comm::detail
