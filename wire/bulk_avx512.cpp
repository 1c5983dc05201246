// The AVX-512BW kernels of wire/bulk.h (x86-64), compiled with -mavx512bw
// and called only when the CPU and OS support AVX-512BW. 64-byte registers
// let a byte swap keep pace with memcpy's `rep movsb` on CPUs that have them.
#include <immintrin.h>

#include "ferry/wire/detail/bulk_kernels.h"

namespace ferry::wire::detail {
namespace {

struct avx512 : memcpy_vector<avx512> {
  using vec = __m512i;
  static constexpr std::size_t bytes = 64;
  static constexpr bool has_stream = true;
  // Requires: p is 64-byte aligned (reverse_loop aligns it).
  static void stream(std::byte* p, vec v) noexcept {
    _mm512_stream_si512(reinterpret_cast<vec*>(p), v);  // NOLINT: aligned non-temporal store
  }
  static void stream_fence() noexcept { _mm_sfence(); }
  template <std::size_t Width>
  static vec reverse(vec v) noexcept {
    return _mm512_shuffle_epi8(v, lane_reverse_register<avx512, Width>());
  }
};

}  // namespace

const reverse_kernels avx512_kernels = make_kernels<avx512>("avx512bw");

}  // namespace ferry::wire::detail
