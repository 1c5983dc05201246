// The ARMv8 CRC32C path of codec/crc32c.h, compiled with -march=armv8-a+crc
// and called only when the kernel reports the instructions: HWCAP_CRC32 on
// aarch64, HWCAP2_CRC32 on 32-bit ARM (AArch32 state of an ARMv8 core, where
// __crc32cd is two 32-bit steps).
#include <arm_acle.h>

#include "ferry/codec/detail/crc32c_kernels.h"

namespace ferry::codec::detail {
namespace {

struct armv8 {
  static std::uint32_t step64(std::uint32_t r, std::uint64_t w) noexcept { return __crc32cd(r, w); }
  static std::uint32_t step8(std::uint32_t r, std::uint8_t b) noexcept { return __crc32cb(r, b); }
};

}  // namespace

std::uint32_t crc32c_armv8(std::uint32_t reg, const std::byte* p, std::size_t n) noexcept {
  return crc32c_three_streams<armv8>(reg, p, n);
}

}  // namespace ferry::codec::detail
