// ferry/wire/bulk.h: byte-order conversion of whole arrays.
//
// The bytes produced are exactly those of wire/byte_order.h applied to each
// element in turn: an element of width w (1, 2, 4 or 8 bytes) is copied
// unchanged when the two orders agree and byte-reversed when they differ.
// Element boundaries start at the first byte of the span; there is no header,
// padding or alignment requirement.
//
// Speed: the work runs on the fastest kernel the CPU offers, chosen at run
// time (x86-64: SSE2 baseline, SSSE3, AVX2 or AVX-512BW; aarch64: NEON;
// elsewhere a portable loop), so a default -O2 build with no -march is fast.
// Copying conversions of 8 MiB or more on x86 use non-temporal stores. All kernels give
// identical bytes; limit_cpu_features() (base/cpu.h) narrows the choice.
//
// Floating-point elements are moved as integers: NaN payloads, -0.0,
// subnormals and infinities are preserved bit for bit.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "ferry/wire/byte_order.h"
#include "ferry/base/error.h"

namespace ferry::wire {

/// Copies `in` to `out`, converting each `width`-byte element from order
/// `from` to order `to`.
// Requires: in.size() == out.size(), a multiple of width; width is 1, 2, 4
// or 8; in and out are the same range or do not overlap at all.
void convert(std::span<const std::byte> in, byte_order from, std::span<std::byte> out, byte_order to,
             std::size_t width) noexcept;

/// Converts each `width`-byte element of `data` from `from` to `to` in place.
// Requires: data.size() is a multiple of width; width is 1, 2, 4 or 8.
void convert_in_place(std::span<std::byte> data, std::size_t width,
                      byte_order from, byte_order to) noexcept;

/// Decodes an array of T stored in order `from`.
// Requires: in.size() == out.size() * sizeof(T).
template <scalar T>
void load_array(std::span<const std::byte> in, byte_order from, std::span<T> out) noexcept {
  convert(in, from, std::as_writable_bytes(out), host_order, sizeof(T));
}

/// Encodes an array of T in order `to`.
// Requires: out.size() == in.size() * sizeof(T).
template <scalar T>
void store_array(std::span<const T> in, std::span<std::byte> out, byte_order to) noexcept {
  convert(std::as_bytes(in), host_order, out, to, sizeof(T));
}

/// Reverses the bytes of each of `count` elements of `width` bytes.
/// The primitive behind convert(); no size checks.
// Requires: width is 1, 2, 4 or 8; [in, in + count*width) readable,
// [out, out + count*width) writable; in == out or the ranges are disjoint.
void reverse_bytes(const std::byte* in, std::byte* out, std::size_t count,
                   std::size_t width) noexcept;

/// The kernel reverse_bytes() uses now: "avx512bw", "avx2", "ssse3", "sse2",
/// "neon" or "scalar".
[[nodiscard]] std::string_view bulk_kernel_name() noexcept;

}  // namespace ferry::wire
