// The NEON kernels of wire/bulk.h (aarch64, where Advanced SIMD is baseline).
#include <arm_neon.h>

#include "ferry/wire/detail/bulk_kernels.h"

namespace ferry::wire::detail {
namespace {

struct neon : memcpy_vector<neon> {
  using vec = uint8x16_t;
  static constexpr std::size_t bytes = 16;
  static constexpr bool has_stream = false;
  static void stream(std::byte*, vec) noexcept {}
  static void stream_fence() noexcept {}
  template <std::size_t Width>
  static vec reverse(vec v) noexcept {
    if constexpr (Width == 2) return vrev16q_u8(v);
    if constexpr (Width == 4) return vrev32q_u8(v);
    if constexpr (Width == 8) return vrev64q_u8(v);
  }
};

}  // namespace

const reverse_kernels neon_kernels = make_kernels<neon>("neon");

}  // namespace ferry::wire::detail
