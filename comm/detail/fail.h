// Throwing comm/'s errors (INTERNAL to comm/): the two forms its parts
// use, and a rank's name as their sentences give it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ferry/comm/error.h"

namespace ferry::comm::detail {

/// "rank <r>".
inline std::string rank_name(std::uint32_t r) { return "rank " + std::to_string(r); }

/// Throws comm_error(code, culprit, what).
[[noreturn]] inline void fail(error_code code, std::optional<std::uint32_t> culprit, const std::string& what) {
  throw comm_error(code, culprit, what);
}

/// Throws comm_error(code, what) with no rank at fault.
[[noreturn]] inline void fail(error_code code, const std::string& what) { throw comm_error(code, std::nullopt, what); }

}  // namespace ferry::comm::detail
