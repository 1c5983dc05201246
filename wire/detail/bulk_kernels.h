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

/// The vector loop shared by every ISA. `Isa` supplies:
///   vec, bytes              the register type and its size
///   load(p), store(p, v)    unaligned, through memcpy
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

  if constexpr (Isa::has_stream) {
    // The address is only inspected for alignment, never dereferenced as such.
    const auto addr = reinterpret_cast<std::uintptr_t>(out);  // NOLINT
    if (in != out && n >= streaming_threshold && addr % Width == 0) {
      const std::size_t head = ((V - addr % V) % V);
      reverse_scalar<Isa, Width>(in, out, head / Width);
      for (i = head; i + 4 * V <= n; i += 4 * V) {
        const auto a = Isa::load(in + i), b = Isa::load(in + i + V);
        const auto c = Isa::load(in + i + 2 * V), d = Isa::load(in + i + 3 * V);
        Isa::stream(out + i, Isa::template reverse<Width>(a));
        Isa::stream(out + i + V, Isa::template reverse<Width>(b));
        Isa::stream(out + i + 2 * V, Isa::template reverse<Width>(c));
        Isa::stream(out + i + 3 * V, Isa::template reverse<Width>(d));
      }
      Isa::stream_fence();
    }
  }
  for (; i + 4 * V <= n; i += 4 * V) {
    const auto a = Isa::load(in + i), b = Isa::load(in + i + V);
    const auto c = Isa::load(in + i + 2 * V), d = Isa::load(in + i + 3 * V);
    Isa::store(out + i, Isa::template reverse<Width>(a));
    Isa::store(out + i + V, Isa::template reverse<Width>(b));
    Isa::store(out + i + 2 * V, Isa::template reverse<Width>(c));
    Isa::store(out + i + 3 * V, Isa::template reverse<Width>(d));
  }
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

template <class Isa>
inline constexpr reverse_kernels make_kernels(const char* name) noexcept {
  return {&reverse_loop<Isa, 2>, &reverse_loop<Isa, 4>, &reverse_loop<Isa, 8>, name};
}

}  // namespace ferry::wire::detail
