// ferry/codec/crc32c.h: CRC-32C (Castagnoli), the checksum of ferry's
// checkpoint and gradient frames.
//
// Parameters (the "CRC-32/ISCSI" of the CRC catalogue, RFC 3720 appendix B.4):
//   polynomial 0x1EDC6F41 (reflected 0x82F63B78), initial value 0xFFFFFFFF,
//   input and output reflected, final XOR 0xFFFFFFFF.
//   Check value: crc32c("123456789") == 0xE3069283.
// When a format stores a CRC32C it stores this 32-bit value as an unsigned
// integer in the byte order the format states.
//
// Paths, chosen at run time (base/cpu.h): SSE4.2 `crc32` on x86-64, the ARMv8
// CRC32C instructions on aarch64, both running three independent streams to
// hide the instruction's latency; elsewhere a portable slicing-by-8 table.
// All paths return the same value for the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace ferry::codec {

/// The CRC-32C of `data`.
[[nodiscard]] std::uint32_t crc32c(std::span<const std::byte> data) noexcept;

/// Continues a CRC over more bytes:
/// crc32c(a ++ b) == crc32c_extend(crc32c(a), b); crc32c_extend(0, x) == crc32c(x).
[[nodiscard]] std::uint32_t crc32c_extend(std::uint32_t crc, std::span<const std::byte> data) noexcept;

/// The CRC of a concatenation from the CRCs of its parts:
/// crc32c(a ++ b) == crc32c_combine(crc32c(a), crc32c(b), b.size()).
/// O(log length); lets independent pieces be checksummed in parallel.
[[nodiscard]] std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b,
                                           std::uint64_t length_b) noexcept;

/// The path crc32c() uses now: "sse4.2", "armv8-crc" or "table".
[[nodiscard]] std::string_view crc32c_kernel_name() noexcept;

}  // namespace ferry::codec
