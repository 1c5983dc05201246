// ferry/base/arch.h: the name of the architecture ferry was built for.
//
// The name travels in the comm HELLO (comm/handshake.h) so a mismatch names
// both machines, and the trainer records it beside state that only the same
// architecture can restore (the CPU generator's bytes).
#pragma once

#include <string_view>

namespace ferry::base {

/// This machine's architecture name: "x86_64", "i386", "aarch64", "armhf",
/// "armel", "s390x", "ppc64", "ppc64le", "riscv64", or "unknown". At most
/// 16 ASCII characters (the HELLO's arch field).
[[nodiscard]] std::string_view host_arch() noexcept;

}  // namespace ferry::base
