// ferry/codec/kernels.h: every run-time kernel dispatcher in ferry, and the
// kernel each picks under the enabled CPU features (base/cpu.h,
// FERRY_CPU_FEATURES). `ferry --version` and `ferry.info()` print it, so a
// bug report says which code ran.
//
// The list is written out here, in the lowest module that sees every
// dispatcher (wire's byte swaps, codec's CRC32C and f16/bf16), rather than
// filled by static initialisers, which a static library drops when nothing
// else in their object file is linked.
#pragma once

#include <string_view>
#include <vector>

namespace ferry::codec {

/// A dispatcher and the kernel it runs now.
struct kernel_choice {
  std::string_view dispatcher;  ///< "byte_swap", "crc32c", "f16_bf16"
  std::string_view kernel;      ///< e.g. "sse4.2", or the portable "table"
};

/// Every dispatcher, sorted by name, with the kernel it picks now.
[[nodiscard]] std::vector<kernel_choice> kernel_choices();

}  // namespace ferry::codec
