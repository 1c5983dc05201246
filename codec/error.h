// ferry/codec/error.h: the error codes of numeric codecs (codec/).
//
// Numbers are stable (see ferry/base/error.h); new codes take the next
// free number of the 100..199 block. Failures shared by every format
// (truncated, bad_magic, checksum_mismatch, ...) are ferry::errc.
#pragma once

#include <cstdint>

#include "ferry/base/error.h"

namespace ferry {

#define FERRY_CODEC_ERRORS(X)             \
  X(unknown_dtype, 100, "unknown dtype")
FERRY_DEFINE_ERRORS(codec_errc, FERRY_CODEC_ERRORS);

}  // namespace ferry
