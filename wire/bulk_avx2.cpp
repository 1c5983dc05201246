// The AVX2 kernels of wire/bulk.h (x86-64), compiled with -mavx2 and called
// only when the CPU reports AVX2.
#include <immintrin.h>

#include "ferry/wire/detail/bulk_kernels.h"

namespace ferry::wire::detail {
namespace {

struct avx2 : memcpy_vector<avx2> {
  using vec = __m256i;
  static constexpr std::size_t bytes = 32;
  static constexpr bool has_stream = true;
  // Requires: p is 32-byte aligned (reverse_loop aligns it).
  static void stream(std::byte* p, vec v) noexcept {
    _mm256_stream_si256(reinterpret_cast<vec*>(p), v);  // NOLINT: aligned non-temporal store
  }
  static void stream_fence() noexcept { _mm_sfence(); }
  template <std::size_t Width>
  static vec reverse(vec v) noexcept {
    return _mm256_shuffle_epi8(v, lane_reverse_register<avx2, Width>());
  }
};

}  // namespace

const reverse_kernels avx2_kernels = make_kernels<avx2>("avx2");

}  // namespace ferry::wire::detail
