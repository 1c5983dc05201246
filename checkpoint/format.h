// ferry/checkpoint/format.h: the .ferry checkpoint file format, version 1.
//
// A checkpoint holds tensors, the storages they view, and string metadata.
// docs/checkpoint-format.md repeats this layout for people writing another
// decoder. MUST, MUST NOT and MAY are used as in RFC 2119; a reader that
// finds a MUST broken rejects the file with the error named in brackets
// (checkpoint/error.h, base/error.h).
//
// FILE LAYOUT
//
//   header     64 bytes at offset 0
//   storages   raw tensor data, each starting on an `alignment` boundary
//   manifest   a graph archive (graph/archive.h) naming tensors and storages
//   trailer    48 bytes, the last bytes of the file
//
// Every multi-byte integer of the header, the trailer and the storages is in
// the file's byte order `order`; the manifest is a graph archive, which
// records its own order (writers use the file's).
//
// HEADER (64 bytes)
//   0   magic       8 bytes  89 46 45 52 52 59 0D 0A ("\x89FERRY\r\n": the
//                            high byte and CR LF catch 7-bit and text-mode
//                            transfers); a file without it is not taken for
//                            a .ferry file [not_a_checkpoint]
//   8   version     u8       1 [unsupported_version]
//   9   order       u8       0 little-endian, 1 big-endian [bad_byte_order]
//   10  flags       u8       0; 1 (set_index_flag) in a set's index, whose
//                            manifest is another archive (set.h); other
//                            values [bad_value]
//   11  reserved    u8       MUST be 0 [bad_value]
//   12  alignment   u32      A, a power of two with 64 <= A <= 2^30
//                            [bad_alignment]
//   16  reserved    48 bytes MUST be 0 [bad_value]
//
// STORAGES
//   Storage i occupies [offset_i, offset_i + nbytes_i), as the manifest
//   records. The storages MUST be listed in file order and packed: offset_0 =
//   align_up(64, A) and offset_i = align_up(offset_{i-1} + nbytes_{i-1}, A)
//   [bad_layout]. The bytes between storages, and between the last storage
//   and the manifest, MUST be zero [bad_padding, checked by verify()].
//   A storage holds elements of one width (its dtype's), each in `order`.
//   A storage of 0 bytes takes no space (its offset is still aligned).
//
// MANIFEST
//   Starts at align_up(end of the last storage, A) (align_up(64, A) when
//   there is none) and runs to the trailer [bad_layout]. It is a graph
//   archive whose root is `manifest` below (type names and field tags are
//   part of the format). Tensors refer to storages by shared reference, so
//   tensors over one storage (tied weights, a view and its base) share it by
//   ordinary reference tracing.
//
//   ferry.checkpoint.manifest
//     1 storages  vector<shared storage>   in file order
//     2 tensors   vector<tensor>           in the order they were added
//     3 metadata  map<string, string>      sorted by key (graph maps are)
//   ferry.checkpoint.storage
//     1 offset    u64   absolute file offset of the first byte
//     2 nbytes    u64   length; a multiple of the dtype's size [shape_size_mismatch]
//     3 crc32c    u32   CRC32C (Castagnoli) of the stored bytes as they are
//                       in the file [checksum_mismatch, when fetched or verified]
//     4 dtype     u8    element type, a codec::dtype code: 1 bool, 2 u8,
//                       3 i8, 4 u16, 5 i16, 6 u32, 7 i32, 8 u64, 9 i64,
//                       10 f16, 11 bf16, 12 f32, 13 f64, 14 f8_e4m3,
//                       15 f8_e5m2, 16 f8_e4m3fnuz, 17 f8_e5m2fnuz,
//                       18 c32, 19 c64, 20 c128 [codec unknown_dtype].
//                       Its codec::order_width is the unit swapped when
//                       orders differ (its size; half of it for complex).
//   ferry.checkpoint.tensor
//     1 name      string  1..max_name_bytes bytes of valid UTF-8; unique in
//                         the file [bad_name, duplicate_key]
//     2 dtype     u8      a dtype code as above, of the same size as its
//                         storage's [element_size_mismatch]
//     3 shape     vector<u64>  0 to max_dims extents; [] is a 0-d tensor
//     4 strides   vector<u64>  in elements, one per extent [bad_value]
//     5 offset    u64          first element, in elements from the
//                              storage's start
//     6 storage   shared storage  one listed in `storages`
//                              [bad_storage_reference]
//   A tensor with an extent of 0 has no elements and reads no bytes.
//   Otherwise its last element, offset + sum((shape[k]-1) * strides[k]),
//   MUST lie inside the storage [view_out_of_bounds]; the arithmetic MUST
//   NOT overflow 64 bits [shape_overflow].
//   Names, metadata keys and metadata values are valid UTF-8 [bad_name,
//   bad_metadata].
//
// TRAILER (48 bytes, integers in `order`)
//   0   manifest_offset  u64  where the manifest starts
//   8   manifest_size    u64  its length: manifest_offset + manifest_size
//                             = file_size - 48 [bad_layout]
//   16  file_size        u64  length of the whole file [truncated when
//                             larger than the file, trailing_bytes when
//                             smaller]
//   24  manifest_crc32c  u32  CRC32C of the manifest bytes [checksum_mismatch]
//   28  alignment        u32  equal to the header's [header_mismatch]
//   32  version, order, flags, reserved: 4 bytes equal to the header's
//                             [header_mismatch]
//   36  trailer_crc32c   u32  CRC32C of trailer bytes 0..35 [checksum_mismatch]
//   40  end magic        8 bytes 46 45 52 52 59 45 4E 44 ("FERRYEND")
//                             [truncated]
//
// A file cut anywhere loses its end magic (or, when cut inside a payload
// that happens to end in one, disagrees with file_size): a reader detects
// truncation from the last 48 bytes, before reading any tensor [truncated].
// Nothing may follow the trailer.
//
// Writers write the storages first, one at a time, then the manifest and
// the trailer, so a model larger than memory is written in one pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/graph/archive.h"

namespace ferry::checkpoint {

inline constexpr std::uint8_t format_version = 1;
inline constexpr std::size_t header_size = 64;
inline constexpr std::size_t trailer_size = 48;
inline constexpr std::uint32_t min_alignment = 64;
inline constexpr std::uint32_t max_alignment = std::uint32_t{1} << 30;
inline constexpr unsigned char file_magic[8] = {0x89, 'F', 'E', 'R', 'R', 'Y', '\r', '\n'};
inline constexpr unsigned char end_magic[8] = {'F', 'E', 'R', 'R', 'Y', 'E', 'N', 'D'};

/// The manifest's records, as the graph archive stores them (see above).
struct storage_record {
  static constexpr std::string_view ferry_name = "ferry.checkpoint.storage";
  std::uint64_t offset = 0;
  std::uint64_t nbytes = 0;
  std::uint32_t crc32c = 0;
  std::uint8_t dtype = 0;
  template <class F>
  void describe(F& f) {
    f(1, "offset", offset);
    f(2, "nbytes", nbytes);
    f(3, "crc32c", crc32c);
    f(4, "dtype", dtype);
  }
};

struct tensor_record {
  static constexpr std::string_view ferry_name = "ferry.checkpoint.tensor";
  std::string name;
  std::uint8_t dtype = 0;
  std::vector<std::uint64_t> shape;
  std::vector<std::uint64_t> strides;
  std::uint64_t offset = 0;
  std::shared_ptr<storage_record> storage;
  template <class F>
  void describe(F& f) {
    f(1, "name", name);
    f(2, "dtype", dtype);
    f(3, "shape", shape);
    f(4, "strides", strides);
    f(5, "offset", offset);
    f(6, "storage", storage);
  }
};

struct manifest {
  static constexpr std::string_view ferry_name = "ferry.checkpoint.manifest";
  std::vector<std::shared_ptr<storage_record>> storages;
  std::vector<tensor_record> tensors;
  std::map<std::string, std::string> metadata;
  template <class F>
  void describe(F& f) {
    f(1, "storages", storages);
    f(2, "tensors", tensors);
    f(3, "metadata", metadata);
  }
};

/// align_up(x, a) for a power of two a; false when it would overflow.
[[nodiscard]] constexpr bool align_up(std::uint64_t x, std::uint64_t a, std::uint64_t& out) noexcept {
  if (x > UINT64_MAX - (a - 1)) return false;
  out = (x + a - 1) & ~(a - 1);
  return true;
}

}  // namespace ferry::checkpoint
