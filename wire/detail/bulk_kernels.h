// ferry/wire/detail/bulk_kernels.h: INTERNAL. The per-ISA byte-reversal
// kernels behind wire/bulk.h, and the loop they share. Not part of the API.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <cstring>

#include "ferry/wire/byte_order.h"

namespace ferry::wire::detail {

using reverse_fn = void (*)(const std::byte* in, std::byte* out, std::size_t count);

struct reverse_kernels {
  reverse_fn r16;
  reverse_fn r32;
  reverse_fn r64;
  const char* name;
};

extern const reverse_kernels scalar_kernels;
#if defined(__x86_64__)
extern const reverse_kernels sse2_kernels;
extern const reverse_kernels ssse3_kernels;
extern const reverse_kernels avx2_kernels;
extern const reverse_kernels avx512_kernels;
#elif defined(__aarch64__)
extern const reverse_kernels neon_kernels;
#endif

/// Copies of at least this many bytes use non-temporal stores where the ISA
/// has them, saving the read-for-ownership of a destination that would not
/// stay in cache anyway (memcpy's `rep movsb` gets the same effect). A
/// fixed size rather than one derived from the reported L3: virtual machines
/// report the whole socket's L3 (hundreds of MiB) to each guest.
inline constexpr std::size_t streaming_threshold = std::size_t{8} << 20;

/// Reverses `width`-byte elements one at a time: the portable path and the
/// tail of every vector loop. Templated on the caller's Isa only so that each
/// ISA's translation unit gets its own internal-linkage copy (see below).
template <class Isa, std::size_t Width>
inline void reverse_scalar(const std::byte* in, std::byte* out, std::size_t count) noexcept {
  using U = std::conditional_t<Width == 2, std::uint16_t,
                               std::conditional_t<Width == 4, std::uint32_t, std::uint64_t>>;
  for (std::size_t i = 0; i < count; ++i) {
    U u;
    std::memcpy(&u, in + i * Width, Width);
    u = byteswap(u);
    std::memcpy(out + i * Width, &u, Width);
  }
}

/// Unaligned register load and store through memcpy: a CRTP base for each
/// ISA's `Isa` (which defines `vec`). Instantiated with an Isa from an
/// unnamed namespace, so, like reverse_loop, it has internal linkage.
template <class Isa>
struct memcpy_vector {
  static auto load(const std::byte* p) noexcept {
    typename Isa::vec v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  template <class Vec>
  static void store(std::byte* p, const Vec& v) noexcept {
    std::memcpy(p, &v, sizeof v);
  }
};

/// Reverses whole groups of four registers from byte i on, storing with
/// Isa::stream (Stream) or Isa::store; returns where it stopped.
template <class Isa, std::size_t Width, bool Stream>
inline std::size_t reverse_blocks(const std::byte* in, std::byte* out, std::size_t i, std::size_t n) noexcept {
  constexpr std::size_t V = Isa::bytes;
  // Written out by hand: at -O2 GCC does not unroll a loop over a register
  // array, and the array would live on the stack.
  auto put = [](std::byte* p, const auto& v) {
    if constexpr (Stream) {
      Isa::stream(p, Isa::template reverse<Width>(v));
    } else {
      Isa::store(p, Isa::template reverse<Width>(v));
    }
  };
  for (; i + 4 * V <= n; i += 4 * V) {
    // All loads before any store, so in place is safe.
    const auto a = Isa::load(in + i), b = Isa::load(in + i + V);
    const auto c = Isa::load(in + i + 2 * V), d = Isa::load(in + i + 3 * V);
    put(out + i, a);
    put(out + i + V, b);
    put(out + i + 2 * V, c);
    put(out + i + 3 * V, d);
  }
  return i;
}

/// The vector loop shared by every ISA. `Isa` supplies:
///   vec, bytes              the register type and its size
///   load(p), store(p, v)    unaligned, through memcpy (see memcpy_vector)
///   reverse<Width>(v)       byte-reverse each Width-byte lane
///   has_stream, stream(p,v) non-temporal store to a `bytes`-aligned p, and
///   stream_fence()          the fence that orders those stores
/// Each ISA's translation unit instantiates it with an Isa from an unnamed
/// namespace, so the instantiation has internal linkage and its ISA-specific
/// code can never be merged into a caller built for the baseline.
template <class Isa, std::size_t Width>
inline void reverse_loop(const std::byte* in, std::byte* out, std::size_t count) noexcept {
  constexpr std::size_t V = Isa::bytes;
  const std::size_t n = count * Width;
  std::size_t i = 0;

  // Align the destination to the register size with a scalar head, so no
  // store splits a cache line (64-byte stores to 16-byte aligned vector
  // storage would otherwise split every one). The address is only inspected
  // for alignment, never dereferenced as such.
  const auto addr = reinterpret_cast<std::uintptr_t>(out);  // NOLINT
  const bool aligned = n >= 4 * V && addr % Width == 0;
  if (aligned) {
    i = (V - addr % V) % V;
    reverse_scalar<Isa, Width>(in, out, i / Width);
  }
  if constexpr (Isa::has_stream) {
    if (aligned && in != out && n >= streaming_threshold) {
      i = reverse_blocks<Isa, Width, true>(in, out, i, n);
      Isa::stream_fence();
    }
  }
  i = reverse_blocks<Isa, Width, false>(in, out, i, n);
  for (; i + V <= n; i += V) Isa::store(out + i, Isa::template reverse<Width>(Isa::load(in + i)));
  reverse_scalar<Isa, Width>(in + i, out + i, (n - i) / Width);
}

/// The pshufb/tbl-style index vector that reverses each Width-byte element
/// of an N-byte register made of 16-byte lanes.
template <std::size_t Width, std::size_t N>
constexpr std::array<std::uint8_t, N> lane_reverse_mask() noexcept {
  std::array<std::uint8_t, N> m{};
  for (std::size_t i = 0; i < N; ++i) {
    const std::size_t j = i % 16;
    m[i] = static_cast<std::uint8_t>(j - j % Width + (Width - 1 - j % Width));
  }
  return m;
}

/// lane_reverse_mask as an Isa::vec register, for pshufb-style shuffles.
template <class Isa, std::size_t Width>
inline auto lane_reverse_register() noexcept {
  static constexpr auto mask = lane_reverse_mask<Width, Isa::bytes>();
  typename Isa::vec m;
  std::memcpy(&m, mask.data(), sizeof m);
  return m;
}

template <class Isa>
inline constexpr reverse_kernels make_kernels(const char* name) noexcept {
  return {&reverse_loop<Isa, 2>, &reverse_loop<Isa, 4>, &reverse_loop<Isa, 8>, name};
}

}  // namespace ferry::wire::detail
