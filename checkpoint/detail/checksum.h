// ferry/checkpoint/detail/checksum.h: INTERNAL. The two checksums a
// checkpoint's storages carry, which of them a fetch checks, and the
// checksum of a range of a file computed without mapping it whole. Not
// part of the API.
//
//   CRC32C       a storage's own (storage_info::crc32c), checked on first
//                fetch and by verify(); a mismatch is errc::checksum_mismatch.
//   zip CRC-32   a zip record's (zlib's polynomial), checked by verify(),
//                and on fetch only with fetch_checks::every_checksum; a
//                mismatch is checkpoint_errc::crc32_mismatch.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "ferry/base/error.h"
#include "ferry/checkpoint/options.h"
#include "ferry/checkpoint/reader.h"

namespace ferry::checkpoint::detail {

class mapped_file;

enum class checksum_kind : std::uint8_t { crc32c, zip_crc32 };

/// The checksum of a ++ b from that of a (0 for none) and the bytes b.
[[nodiscard]] std::uint32_t checksum_extend(checksum_kind kind, std::uint32_t crc, std::span<const std::byte> b) noexcept;

/// The checksums of storage `st` that a fetch checks under `checks` (both
/// false when `first_fetch` is false: a storage is checked once).
struct fetch_checksums {
  bool crc32c = false;
  bool zip_crc32 = false;
  /// Whether the bytes will all be read (for the CRC): the mapping need not
  /// be faulted in first.
  [[nodiscard]] bool any() const noexcept { return crc32c || zip_crc32; }
};
[[nodiscard]] fetch_checksums checksums_on_fetch(const storage_info& st, fetch_checks checks, bool first_fetch) noexcept;

/// Checks `stored` (storage `st`'s bytes as stored, before any swap)
/// against the checksums `which`. Errors: checksum_mismatch (CRC32C),
/// crc32_mismatch (zip CRC-32).
[[nodiscard]] result<void> check_storage(std::span<const std::byte> stored, const storage_info& st,
                                         fetch_checksums which) noexcept;

/// The checksum verify() checks storage `st` against: its CRC32C, else its
/// zip CRC-32, else none (a format without checksums, a zip record saved
/// without CRC-32).
struct stored_checksum {
  checksum_kind kind;
  std::uint32_t value;
  error_code mismatch;  ///< the error when the bytes disagree
};
[[nodiscard]] std::optional<stored_checksum> checksum_of(const storage_info& st) noexcept;

/// The checksum of [offset, offset + nbytes) of `file` as stored, 64 MiB at
/// a time through the file's windows (mapped_file::view(); read where they
/// cannot be mapped): needs no address space for a whole storage (a 32-bit host
/// checks storages larger than it could map) and converts nothing. A read
/// error is fail(code, errno); `progress`, if set, is told the bytes done.
[[nodiscard]] result<std::uint32_t, error> file_checksum(const mapped_file& file, std::uint64_t offset,
                                                         std::uint64_t nbytes, checksum_kind kind,
                                                         const std::function<error(error_code, int)>& fail,
                                                         const std::function<void(std::uint64_t)>& progress);

}  // namespace ferry::checkpoint::detail
