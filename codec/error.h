// ferry/codec/error.h: the error codes of numeric codecs (codec/).
//
// Numbers are stable (see ferry/base/error.h); new codes take the next
// free number of the 100..199 block. Failures shared by every format
// (truncated, bad_magic, checksum_mismatch, ...) are ferry::errc.
#pragma once

#include <cstdint>

#include "ferry/base/error.h"

namespace ferry {

enum class codec_errc : std::uint16_t {
  unknown_dtype = 100, ///< A dtype code or name ferry does not know.
};
FERRY_ERROR_ENUM(codec_errc);

namespace detail {
inline constexpr error_info codec_errc_table[] = {
    {100, "unknown_dtype", "unknown dtype"},
};
[[maybe_unused]] inline const bool codec_errc_registered = register_errors(codec_errc_table);
}  // namespace detail

}  // namespace ferry
