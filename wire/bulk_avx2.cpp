// The AVX2 kernels of wire/bulk.h (x86-64), compiled with -mavx2 and called
// only when the CPU reports AVX2.
#include <immintrin.h>

#include "ferry/wire/detail/bulk_kernels.h"

namespace ferry::wire::detail {
namespace {

struct avx2 {
  using vec = __m256i;
  static constexpr std::size_t bytes = 32;
  static constexpr bool has_stream = true;
  static vec load(const std::byte* p) noexcept {
    vec v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(std::byte* p, vec v) noexcept { std::memcpy(p, &v, sizeof v); }
  // Requires: p is 32-byte aligned (reverse_loop aligns it).
  static void stream(std::byte* p, vec v) noexcept {
    _mm256_stream_si256(reinterpret_cast<vec*>(p), v);  // NOLINT: aligned non-temporal store
  }
  static void stream_fence() noexcept { _mm_sfence(); }
  template <std::size_t Width>
  static vec reverse(vec v) noexcept {
    static constexpr auto mask = lane_reverse_mask<Width, 32>();
    vec m;
    std::memcpy(&m, mask.data(), sizeof m);
    return _mm256_shuffle_epi8(v, m);
  }
};

}  // namespace

const reverse_kernels avx2_kernels = make_kernels<avx2>("avx2");

}  // namespace ferry::wire::detail
