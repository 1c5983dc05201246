#include "ferry/comm/detail/kernels.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ferry/codec/half.h"
#include "ferry/wire/bulk.h"

namespace ferry::comm::detail {
namespace {

// Asks for the cache line `elements` floats past `p` (which may lie past
// the buffer's end: a prefetch never faults, and integer arithmetic keeps
// the pointer arithmetic defined). rw = 1: about to be written.
template <int Rw = 0>
void prefetch(const float* p, std::size_t elements) noexcept {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) + elements * sizeof(float)), Rw);
}

}  // namespace

void add(float* out, const float* a, const float* __restrict b, std::size_t n) noexcept {
  using v4 = float __attribute__((vector_size(16)));
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch(a, i + 512);  // `a` is the user's buffer, from memory
    v4 x[4];
    v4 y[4];
    std::memcpy(x, a + i, sizeof x);
    std::memcpy(y, b + i, sizeof y);
    for (int k = 0; k < 4; ++k) x[k] += y[k];
    std::memcpy(out + i, x, sizeof x);
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

namespace {

// ---------------------------------------------------------------- bf16
//
// Four lanes at a time (16-byte vectors: SSE2, NEON, z/Architecture). The rounding is codec::to_bf16's, lane-wise:
// NaN -> (bits >> 16) | 0x0040, else (bits + 0x7FFF + lsb) >> 16.

using vf = float __attribute__((vector_size(16)));
using vu = std::uint32_t __attribute__((vector_size(16)));
using vh = std::uint16_t __attribute__((vector_size(8)));
constexpr std::size_t compress_lanes = 4;

template <class To, class From>
To bits(From v) noexcept {
  static_assert(sizeof(To) == sizeof(From));
  To t;
  std::memcpy(&t, &v, sizeof t);
  return t;
}

// The lanes of elements [i, i + compress_lanes), the steps chosen at compile time
// so that the loop has no branch.
template <bool Received, bool Swap, bool Divide, bool Feedback, bool Back>
[[gnu::always_inline]] inline void bf16_lanes(const compress_step& s, std::size_t i) noexcept {
  vf x;
  std::memcpy(&x, s.a + i, sizeof x);
  if constexpr (Received) {
    vh h;
    std::memcpy(&h, s.received + 2 * i, sizeof h);
    if constexpr (Swap) h = static_cast<vh>((h << 8) | (h >> 8));
    x += bits<vf>(__builtin_convertvector(h, vu) << 16);
  }
  if constexpr (Divide) x = x / s.divisor;
  if constexpr (Feedback) {
    vf r;
    std::memcpy(&r, s.residual + i, sizeof r);
    x += r;
  }
  const vu u = bits<vu>(x);
  const vu is_nan = reinterpret_cast<vu>((u & 0x7FFF'FFFFu) > 0x7F80'0000u);
  const vu rounded = (u + (0x7FFFu + ((u >> 16) & 1u))) >> 16;
  const vu h = (((u >> 16) | 0x0040u) & is_nan) | (rounded & ~is_nan);
  const vh out = __builtin_convertvector(h, vh);
  std::memcpy(s.out + 2 * i, &out, sizeof out);
  const vf w = bits<vf>(h << 16);
  if constexpr (Feedback) {
    const vf d = x - w;
    const vu keep = reinterpret_cast<vu>((d - d) == 0.0f);  // inf - inf and NaN - NaN are NaN
    const vu r = bits<vu>(d) & keep;
    std::memcpy(s.residual + i, &r, sizeof r);
  }
  if constexpr (Back) std::memcpy(s.back + i, &w, sizeof w);
}

template <bool Received, bool Swap, bool Divide, bool Feedback, bool Back>
void bf16_loop(const compress_step& step) noexcept {
  // A local copy: the stores through std::byte* may alias `step`, not it,
  // so its pointers stay in registers.
  const compress_step s = step;
  std::size_t i = 0;
  // The long chain of each lane group leaves few loads in flight, and `a`
  // and the residual come from memory (the user's buffer, not a chunk just
  // received): fetch them a little ahead, a cache line per 16 elements.
  constexpr std::size_t ahead = 512;  // elements: 2 KiB
  for (; i + compress_lanes <= s.n; i += compress_lanes) {
    if (i % 16 == 0) {
      prefetch(s.a, i + ahead);
      if constexpr (Feedback) prefetch<1>(s.residual, i + ahead);
    }
    bf16_lanes<Received, Swap, Divide, Feedback, Back>(s, i);
  }
  if (i == s.n) return;
  // The last few elements: the same lanes on a zero-padded copy.
  const std::size_t k = s.n - i;
  std::array<float, compress_lanes> a{}, residual{}, back{};
  std::array<std::byte, 2 * compress_lanes> received{}, out{};
  std::memcpy(a.data(), s.a + i, k * sizeof(float));
  compress_step t = s;
  t.a = a.data();
  t.out = out.data();
  t.received = received.data();
  t.residual = residual.data();
  t.back = back.data();
  if constexpr (Received) std::memcpy(received.data(), s.received + 2 * i, 2 * k);
  if constexpr (Feedback) std::memcpy(residual.data(), s.residual + i, k * sizeof(float));
  bf16_lanes<Received, Swap, Divide, Feedback, Back>(t, 0);
  std::memcpy(s.out + 2 * i, out.data(), 2 * k);
  if constexpr (Feedback) std::memcpy(s.residual + i, residual.data(), k * sizeof(float));
  if constexpr (Back) std::memcpy(s.back + i, back.data(), k * sizeof(float));
}

// Picks the instance of bf16_loop for the steps that `s` asks for.
template <bool... Chosen>
void compress_bf16(const compress_step& s) noexcept {
  constexpr std::size_t k = sizeof...(Chosen);
  if constexpr (k == 5) {
    bf16_loop<Chosen...>(s);
  } else {
    const bool flags[] = {s.received != nullptr, s.received != nullptr && s.received_order != wire::host_order,
                          s.divisor != 0.0f, s.residual != nullptr, s.back != nullptr};
    if (flags[k]) {
      compress_bf16<Chosen..., true>(s);
    } else {
      compress_bf16<Chosen..., false>(s);
    }
  }
}

// ----------------------------------------------------------------- f16
//
// f16's rounding (subnormals, overflow) is codec's bulk kernel (F16C where
// the CPU has it); the pass is still single: each block of `step` elements
// goes through every operation while it sits in L1.

void compress_f16(const compress_step& s) noexcept {
  constexpr std::size_t step = 512;
  std::array<float, step> x, w;
  std::array<f16, step> h;
  for (std::size_t i = 0; i < s.n; i += step) {
    const std::size_t k = std::min(step, s.n - i);
    const auto xs = std::span(x).first(k);
    const auto ws = std::span(w).first(k);
    const auto hs = std::span(h).first(k);
    for (std::size_t j = 0; j < step; j += 16) {  // the next block, from memory meanwhile
      prefetch(s.a, i + step + j);
      if (s.residual != nullptr) prefetch<1>(s.residual, i + step + j);
    }
    std::memcpy(x.data(), s.a + i, k * sizeof(float));
    if (s.received != nullptr) {
      wire::load_array<f16>(std::span(s.received + 2 * i, 2 * k), s.received_order, hs);
      codec::to_float(std::span<const f16>(hs), ws);
      add(x.data(), x.data(), w.data(), k);
    }
    if (s.divisor != 0.0f) {
      for (float& v : xs) v /= s.divisor;
    }
    if (s.residual != nullptr) add(x.data(), x.data(), s.residual + i, k);
    codec::to_f16(std::span<const float>(xs), hs);
    std::memcpy(s.out + 2 * i, h.data(), 2 * k);
    if (s.residual == nullptr && s.back == nullptr) continue;
    codec::to_float(std::span<const f16>(hs), ws);
    if (s.residual != nullptr) {
      for (std::size_t j = 0; j < k; ++j) {
        const float d = x[j] - w[j];
        s.residual[i + j] = std::isfinite(d) ? d : 0.0f;
      }
    }
    if (s.back != nullptr) std::memcpy(s.back + i, w.data(), k * sizeof(float));
  }
}

template <bool Swap>
void widen_bf16(const std::byte* in, float* out, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + compress_lanes <= n; i += compress_lanes) {
    if (i % 16 == 0) prefetch<1>(out, i + 512);  // the user's buffer, from memory
    vh h;
    std::memcpy(&h, in + 2 * i, sizeof h);
    if constexpr (Swap) h = static_cast<vh>((h << 8) | (h >> 8));
    const vu w = __builtin_convertvector(h, vu) << 16;
    std::memcpy(out + i, &w, sizeof w);
  }
  for (; i < n; ++i) {
    std::uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    if constexpr (Swap) h = static_cast<std::uint16_t>((h << 8) | (h >> 8));
    const std::uint32_t w = std::uint32_t{h} << 16;
    std::memcpy(out + i, &w, 4);
  }
}

}  // namespace

void widen(encoding enc, wire::byte_order order, const std::byte* in, float* out, std::size_t n) noexcept {
  assert(enc == encoding::bf16 || enc == encoding::f16);
  if (enc == encoding::f16) {
    decode_f32_payload(enc, order, std::span(in, 2 * n), std::span(out, n));
  } else if (order == wire::host_order) {
    widen_bf16<false>(in, out, n);
  } else {
    widen_bf16<true>(in, out, n);
  }
}

void compress(const compress_step& s) noexcept {
  assert(s.enc == encoding::bf16 || s.enc == encoding::f16);
  if (s.enc == encoding::bf16) {
    compress_bf16<>(s);
  } else {
    compress_f16(s);
  }
}

}  // namespace ferry::comm::detail
