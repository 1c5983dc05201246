// ferry/checkpoint/zip/zip.h: INTERNAL. The zip container of PyTorch
// .pt files and NumPy .npz files, read for its records by offset (.pt
// records are stored, .npz ones stored or deflated: inflated by numpy/npz.cpp)
// and written in one sequential pass (save_pt, save_npz).
// Not part of the API (pytorch.h states the rules; docs/checkpoint-format.md
// repeats them).
//
// WHAT IS READ (PKWARE APPNOTE 6.3; all integers little-endian)
//
//   end of central directory (EOCD), 22 bytes + comment, at the very end:
//     0 signature 50 4B 05 06   4 disk u16   6 directory disk u16
//     8 entries on disk u16    10 entries u16   12 directory size u32
//    16 directory offset u32   20 comment length u16, then the comment
//   Exactly one EOCD MUST end the file: its comment reaches EOF exactly
//   [trailing_bytes if a signature is found but ends before EOF, truncated
//   if none is found (a file cut short), zip_malformed if two qualify].
//   ZIP64 locator, 20 bytes right before the EOCD (when present):
//     0 signature 50 4B 06 07   4 disk u32 (0)   8 ZIP64 EOCD offset u64
//    16 total disks u32 (1)
//   ZIP64 EOCD, 56 bytes, ending where the locator starts:
//     0 signature 50 4B 06 06   4 size of the rest u64 (44)
//    12 versions u16 u16   16 disk u32   20 directory disk u32
//    24 entries on disk u64   32 entries u64   40 directory size u64
//    48 directory offset u64
//   Fields of the EOCD that are not saturated (0xFFFF, 0xFFFFFFFF) MUST
//   equal the ZIP64 ones; every disk number MUST be 0 [zip_malformed].
//   The central directory MUST end where the ZIP64 EOCD (else the EOCD)
//   starts and hold exactly `entries` headers [zip_malformed], at most
//   limits::max_zip_entries [limit_exceeded]:
//     0 signature 50 4B 01 02   4 versions u16 u16   8 flags u16
//    10 method u16   12 time, date   16 CRC-32 u32   20 compressed size u32
//    24 size u32   28 name length u16   30 extra length u16
//    32 comment length u16   34 disk u16   36 attributes u16 u32
//    42 local header offset u32, then name, extra fields, comment.
//   Extra fields (id u16, length u16, data) MUST tile the extra area; the
//   ZIP64 field (id 1) holds, in this order, the size, the compressed size,
//   the offset and the disk, each only where the header's field is
//   saturated [zip_malformed].
//   Local header at its offset: signature 50 4B 03 04, 26 more bytes as
//   the central header's 4..30 (without the comment length), name, extra.
//   Its name, method and flags MUST equal the central header's; its CRC
//   and sizes MUST too unless flag bit 3 is set (then they live in a data
//   descriptor after the data, which is not read) or they are saturated
//   (ZIP64) [zip_malformed].
//
// RECORDS: method 0 (stored), compressed size = size, or where the caller
// allows it (.npz) method 8 (deflated); no encryption
// (flag bits 0 and 6) [unsupported_zip_feature]. Each record's span, local
// header to the end of its data, lies before the central directory and
// overlaps no other [zip_malformed]. Names are unique [zip_malformed].
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/base/error.h"
#include "ferry/base/file.h"
#include "ferry/checkpoint/options.h"
#include "ferry/wire/byte_order.h"

namespace ferry::checkpoint::detail {

/// One stored record of a zip.
struct zip_record {
  std::string name;
  std::uint64_t data_offset = 0;  ///< absolute offset of the first data byte
  std::uint64_t size = 0;
  std::uint32_t crc32 = 0;        ///< as the central directory records it
  std::uint16_t method = 0;       ///< 0 stored, 8 deflated (.npz only)
  std::uint64_t compressed_size = 0;  ///< bytes at data_offset (= size when stored)
};

/// A zip_malformed error with `what` as its context.
[[nodiscard]] error zip_malformed(std::string what);

/// Reads `out.size()` bytes at `offset` of the archive (a file or memory).
/// Errors: truncated (past the end), io_error (with the errno).
using zip_read_at = std::function<result<void, error>(std::uint64_t offset, std::span<std::byte> out)>;

/// A central directory entry, as read.
struct zip_entry {
  zip_record record;
  std::uint64_t header_offset = 0;
  std::uint16_t flags = 0;
  std::uint16_t method = 0;
  std::uint64_t compressed_size = 0;
};

struct zip_directory {
  std::vector<zip_entry> entries;  ///< in directory order
  std::uint64_t offset = 0;        ///< where the central directory starts
};

/// The central directory of an archive of `size` bytes, its end records
/// checked; methods, flags and local headers not yet (a zip that is not a
/// checkpoint is told apart first). Errors: zip_malformed, trailing_bytes,
/// truncated, limit_exceeded, io_error; contexts say which structure
/// ("central directory entry 3").
[[nodiscard]] result<zip_directory, error> read_zip_directory(std::uint64_t size, const zip_read_at& read,
                                                              const limits& lim);

/// Records found by name, for archives of up to limits::max_zip_entries
/// records: one sort of their names' hashes, no node per record, so a
/// million records are indexed in tens of milliseconds and memory.
class record_index {
 public:
  record_index() = default;
  explicit record_index(std::span<const zip_record> records);
  /// The position of the record called `name` in `records` (those the
  /// index was built from), or npos.
  [[nodiscard]] std::size_t find(std::span<const zip_record> records, std::string_view name) const noexcept;
  /// The position of a record whose name a record before it has, or npos.
  [[nodiscard]] std::size_t duplicate(std::span<const zip_record> records) const noexcept;

  static constexpr std::size_t npos = SIZE_MAX;

 private:
  std::vector<std::pair<std::uint64_t, std::uint32_t>> sorted_;  // (hash of the name, position), ascending
};

/// The records of an archive, checked, with their index.
struct zip_records {
  std::vector<zip_record> records;  ///< in directory order
  record_index index;
};

/// Checks the record rules above for every entry (stored, unencrypted,
/// local header agreeing, names unique, spans disjoint and before the
/// directory) and returns the records in directory order, moved out of
/// `dir`'s entries. Errors: unsupported_zip_feature, zip_malformed,
/// truncated, io_error; contexts name the record. Time and memory grow
/// with the number of records, never with its square.
/// `allow_deflate`: method 8 is accepted too (.npz; never for .pt).
[[nodiscard]] result<zip_records, error> check_zip_records(zip_directory&& dir, const zip_read_at& read,
                                                           bool allow_deflate = false);

/// zlib's CRC-32 of `bytes`, continued from `crc` (0 to start): what a
/// zip record's CRC field holds.
[[nodiscard]] std::uint32_t zip_crc32(std::span<const std::byte> bytes, std::uint32_t crc = 0) noexcept;

/// A record as a sequential writer (save_npz, save_pt) wrote it: its
/// local header at `offset`, then its data.
struct zip_written {
  std::string name;
  std::uint16_t method = 0;  ///< 0 stored, 8 deflated
  std::uint32_t crc = 0;
  std::uint64_t size = 0, compressed = 0, offset = 0;
};

/// The local header of `r`, to be written at r.offset. A stored record's
/// header carries a padding extra field (id 0xD935, as Android's zipalign
/// writes) so that its data starts on a multiple of 64, where a reader can
/// map it; ZIP64 fields only where a size needs them; dated 1980-01-01
/// 00:00, so equal inputs give equal files.
[[nodiscard]] std::vector<std::byte> zip_local_header(const zip_written& r);

/// Hands a stored record's bytes, in order, to the sink it is given.
using zip_sink = std::function<result<void, error>(std::span<const std::byte>)>;
using zip_emit = std::function<result<void, error>(const zip_sink&)>;

/// Hands `data` (host order) to `sink` in byte order `order`, converted a
/// MiB at a time (the piece stays in cache between the swap and the
/// write), or whole when nothing needs converting. `width`: the unit of
/// byte order (codec::order_width).
[[nodiscard]] result<void, error> emit_in_order(std::span<const std::byte> data, std::size_t width,
                                                wire::byte_order order, const zip_sink& sink);

/// Appends the stored record `name` of `size` bytes to `out`: its local
/// header, then the bytes `emit` hands over. `emit` is called twice, so
/// that the CRC-32 goes in the header before the bytes (no data
/// descriptor, which some readers mishandle for stored records). Returns
/// the record, for the directory.
[[nodiscard]] result<zip_written, error> write_stored_record(base::atomic_file& out, std::string name,
                                                             std::uint64_t size, const zip_emit& emit);

/// The central directory of `records`, written at `dir_offset` after
/// them, then the ZIP64 end record and locator (where a size, an offset or
/// the record count needs them) and the end record.
[[nodiscard]] std::vector<std::byte> zip_central_directory(std::span<const zip_written> records,
                                                           std::uint64_t dir_offset);

/// "record 'name'": how errors name a zip record.
[[nodiscard]] std::string record_what(std::string_view name);

/// Whether a file of `size` bytes whose first bytes are `head` starts as a
/// zip: a local header, or the end record of a zip of no records.
[[nodiscard]] bool zip_head(std::span<const std::byte> head, std::uint64_t size) noexcept;

/// A zip_read_at over bytes in memory (the fuzzers' and tests' entry).
[[nodiscard]] zip_read_at memory_reader(std::span<const std::byte> bytes);

}  // namespace ferry::checkpoint::detail
