#include "ferry/base/arch.h"

namespace ferry::base {

std::string_view host_arch() noexcept {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__i386__)
  return "i386";
#elif defined(__aarch64__)
  return "aarch64";
#elif defined(__arm__) && defined(__ARM_PCS_VFP)
  return "armhf";
#elif defined(__arm__)
  return "armel";
#elif defined(__s390x__)
  return "s390x";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return "ppc64";
#elif defined(__powerpc64__)
  return "ppc64le";
#elif defined(__riscv) && __riscv_xlen == 64
  return "riscv64";
#else
  return "unknown";
#endif
}

}  // namespace ferry::base
