// The SSE2 and SSSE3 kernels of wire/bulk.h (x86-64). SSE2 is the x86-64
// baseline; this file is compiled with -mssse3 and the SSE2 kernel uses no
// instruction beyond SSE2, which its name in the dispatcher promises.
#include <immintrin.h>

#include "ferry/wire/detail/bulk_kernels.h"

namespace ferry::wire::detail {
namespace {

template <class Isa>
struct sse_base : memcpy_vector<Isa> {
  using vec = __m128i;
  static constexpr std::size_t bytes = 16;
  static constexpr bool has_stream = true;
  // Requires: p is 16-byte aligned (reverse_loop aligns it).
  static void stream(std::byte* p, vec v) noexcept {
    _mm_stream_si128(reinterpret_cast<vec*>(p), v);  // NOLINT: aligned non-temporal store
  }
  static void stream_fence() noexcept { _mm_sfence(); }
};

struct sse2 : sse_base<sse2> {
  template <std::size_t Width>
  static vec reverse(vec v) noexcept {
    if constexpr (Width == 8) v = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1));
    if constexpr (Width >= 4) {
      v = _mm_shufflelo_epi16(v, _MM_SHUFFLE(2, 3, 0, 1));
      v = _mm_shufflehi_epi16(v, _MM_SHUFFLE(2, 3, 0, 1));
    }
    return _mm_or_si128(_mm_slli_epi16(v, 8), _mm_srli_epi16(v, 8));
  }
};

struct ssse3 : sse_base<ssse3> {
  template <std::size_t Width>
  static vec reverse(vec v) noexcept {
    return _mm_shuffle_epi8(v, lane_reverse_register<ssse3, Width>());
  }
};

}  // namespace

const reverse_kernels sse2_kernels = make_kernels<sse2>("sse2");
const reverse_kernels ssse3_kernels = make_kernels<ssse3>("ssse3");

}  // namespace ferry::wire::detail
