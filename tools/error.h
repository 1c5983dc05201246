// tools/error.h: the error codes of the `ferry` command-line tool's
// own inputs (tools/), which no library module reads.
//
// Numbers are stable (see ferry/base/error.h); new codes take the next free
// number of the 600..699 block. Failures every format shares are
// ferry::errc (io_error, ...).
#pragma once

#include "ferry/base/error.h"

namespace ferry {

#define FERRY_TOOLS_ERRORS(X)                                                                                      \
  X(bad_metrics, 600, "not a ferry-train metrics record (JSON lines of kind step or epoch)")                       \
  X(quantized_tensor, 601, "quantized GGUF tensor: dequantize it with --cast f32, or write .gguf")                 \
  X(npy_holds_one_array, 602, "a .npy file holds exactly one array (write .npz for several)")
FERRY_DEFINE_ERRORS(tools_errc, FERRY_TOOLS_ERRORS);

}  // namespace ferry
