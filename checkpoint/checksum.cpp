// The checksums of checkpoint storages (detail/checksum.h).
#include "ferry/checkpoint/detail/checksum.h"

#include <algorithm>
#include <vector>

#include "ferry/checkpoint/detail/mapped_file.h"
#include "ferry/checkpoint/error.h"
#include "ferry/checkpoint/zip/zip.h"
#include "ferry/codec/crc32c.h"

namespace ferry::checkpoint::detail {

std::uint32_t checksum_extend(checksum_kind kind, std::uint32_t crc, std::span<const std::byte> b) noexcept {
  return kind == checksum_kind::crc32c ? codec::crc32c_extend(crc, b) : zip_crc32(b, crc);
}

fetch_checksums checksums_on_fetch(const storage_info& st, fetch_checks checks, bool first_fetch) noexcept {
  // The storage's own CRC32C, every one it carries (a zip record's
  // CRC-32 too), or none.
  return {first_fetch && st.crc32c && checks != fetch_checks::none,
          first_fetch && st.crc32 && checks == fetch_checks::every_checksum};
}

result<void> check_storage(std::span<const std::byte> stored, const storage_info& st, fetch_checksums which) noexcept {
  if (which.crc32c && codec::crc32c(stored) != *st.crc32c) return errc::checksum_mismatch;
  if (which.zip_crc32 && zip_crc32(stored) != *st.crc32) return checkpoint_errc::crc32_mismatch;
  return {};
}

std::optional<stored_checksum> checksum_of(const storage_info& st) noexcept {
  if (st.crc32c) return stored_checksum{checksum_kind::crc32c, *st.crc32c, errc::checksum_mismatch};
  if (st.crc32) return stored_checksum{checksum_kind::zip_crc32, *st.crc32, checkpoint_errc::crc32_mismatch};
  return std::nullopt;
}

result<std::uint32_t, error> file_checksum(const mapped_file& file, std::uint64_t offset, std::uint64_t nbytes,
                                           checksum_kind kind, const std::function<error(error_code, int)>& fail,
                                           const std::function<void(std::uint64_t)>& progress) {
  constexpr std::uint64_t window = std::uint64_t{64} << 20;
  std::uint32_t crc = 0;
  std::vector<std::byte> buffer;
  for (std::uint64_t at = 0; at < nbytes;) {
    const auto n = static_cast<std::size_t>(std::min(window, nbytes - at));
    int map_errno = 0;
    if (const auto v = file.view(offset + at, n, map_errno, false)) {
      crc = checksum_extend(kind, crc, v.bytes);
    } else {
      buffer.resize(n);
      int sys_errno = 0;
      if (auto r = file.read(offset + at, buffer, sys_errno); !r) return fail(r.error(), sys_errno);
      crc = checksum_extend(kind, crc, buffer);
    }
    at += n;
    if (progress) progress(at);
  }
  return crc;
}

}  // namespace ferry::checkpoint::detail
