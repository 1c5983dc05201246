// ferry/base/random_id.h: random names no other writer picks.
#pragma once

#include <string>

namespace ferry::base {

/// 16 lowercase hex digits: 64 bits from the system's random device (the
/// steady clock where there is none). Names, not secrets: a temporary
/// file's suffix (file.h), a checkpoint save's id (checkpoint/set.h).
[[nodiscard]] std::string random_hex_id();

}  // namespace ferry::base
