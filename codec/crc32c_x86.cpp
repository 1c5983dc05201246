// The SSE4.2 path of codec/crc32c.h, compiled with -msse4.2 and called only
// when the CPU reports SSE4.2.
#include <nmmintrin.h>

#include "ferry/codec/detail/crc32c_kernels.h"

namespace ferry::codec::detail {
namespace {

struct sse42 {
  static std::uint32_t step64(std::uint32_t r, std::uint64_t w) noexcept {
    return static_cast<std::uint32_t>(_mm_crc32_u64(r, w));
  }
  static std::uint32_t step8(std::uint32_t r, std::uint8_t b) noexcept { return _mm_crc32_u8(r, b); }
};

}  // namespace

std::uint32_t crc32c_sse42(std::uint32_t reg, const std::byte* p, std::size_t n) noexcept {
  return crc32c_three_streams<sse42>(reg, p, n);
}

}  // namespace ferry::codec::detail
