// ferry/checkpoint/npy.h: NumPy's .npy and .npz files, read by
// checkpoint::open() (reader.h, file_format::npy and npz) and written by
// save_npy() and save_npz(). docs/gguf-and-numpy.md restates these rules
// with what NumPy itself writes and how ferry is checked against it.
//
// MUST and MAY as in RFC 2119; the error of a broken rule in brackets. This
// is ferry's grammar, stated here: NumPy's reader evaluates the header as
// a Python literal, which accepts far more than any writer produces; ferry
// accepts what numpy.save and the other writers in use write, and says so.
//
// .NPY FILE LAYOUT (all integers little-endian)
//
//   0   6  magic          93 4E 55 4D 50 59 ("\x93NUMPY") [bad_magic]
//   6   1  major version  1, 2 or 3 [unsupported_version]
//   7   1  minor version  0 [unsupported_version]
//   8   L  header length  u16 (version 1) or u32 (versions 2, 3): H, the
//                         bytes of the header text that follows; H <=
//                         limits::max_npy_header_bytes (10,000, NumPy's
//                         own default bound) [limit_exceeded]
//   8+L H  header text    latin-1 (versions 1, 2) or UTF-8 (version 3,
//                         [bad_utf8]); its last byte MUST be '\n'
//                         [bad_npy_header]
//   8+L+H  data           product(shape) * item size bytes, exactly to the
//                         end of the file [truncated, trailing_bytes]
//
// L is 2 or 4, so data begins at D = 10 + H or 12 + H. numpy.save pads the
// header with spaces so that D is a multiple of 64 (ARRAY_ALIGN; older
// NumPy used 16); readers MUST NOT require it. ferry maps the data without
// a copy when D is a multiple of the item size and the order is the host's.
//
// HEADER GRAMMAR (bytes; ws is any of space, tab, '\r', '\n'):
//
//   header  := ws '{' ws [item (ws ',' ws item)* ws [',']] ws '}' ws
//              (the last byte, inside the trailing ws, is '\n')
//   item    := key ws ':' ws value
//   key     := string: exactly 'descr', 'fortran_order' and 'shape', each
//              once [duplicate_key], in any order; any other key, or one
//              missing [bad_npy_header]
//   string  := '\'' chars '\'' | '"' chars '"', chars without a backslash,
//              a newline or the closing quote, at most 64 bytes
//              [bad_npy_header]. No prefixes (b'', u''), no escapes.
//   descr   := string: ORDER KIND SIZE (numpy's dtype.str), ORDER one of
//              '<' (little-endian), '>' (big-endian), '|' (not
//              applicable) or '=' (the writer's native order), KIND and
//              SIZE one of
//                b1 bool   i1 i2 i4 i8   u1 u2 u4 u8   f2 f4 f8
//                c8 c16 complex (C64, C128: each part swapped alone)
//              (every other kind is
//              [unsupported_npy_dtype]; a list (structured dtype) or a
//              tuple (subarray) is [unsupported_npy_dtype]; 'O' is an
//              object array, a pickle, which ferry never loads
//              [unsupported_npy_dtype]). '|' and '=' name no order for an
//              element wider than one byte: such a file is read in
//              read_options::npy_native_order when set, else refused
//              [bad_byte_order] (NumPy takes its host's order, so the same
//              file means different numbers on x86 and s390x).
//   fortran_order := 'True' | 'False'
//   shape   := '(' ws ')' | '(' ws int ws ',' ws ')'
//              | '(' ws int (ws ',' ws int)+ ws [','] ws ')'
//              ('(3)' is an integer, not a tuple [bad_npy_header])
//   int     := '0' | [1-9][0-9]*, below 2^64 [shape_overflow]; versions 1
//              and 2 MAY follow it by 'L' (Python 2's long, which NumPy
//              still strips). At most limits::max_dims extents
//              [limit_exceeded]. product(shape) * item size MUST NOT
//              overflow 64 bits [shape_overflow].
//
// FORTRAN ORDER. fortran_order True means the data is column-major. ferry
// does not transpose: the tensor keeps the shape and gets column-major
// strides (stride 1 for the first extent), as numpy.load gives an
// F-ordered array; tensor::contiguous_copy() gives it row-major. The
// writer writes a column-major view (strides exactly column-major) with
// fortran_order True and no gather, as numpy.save does, and gathers any
// other non-contiguous view into row-major.
//
// NAMES. A .npy file holds one unnamed array: ferry names its tensor
// "arr_0", the name numpy.savez gives an unnamed array, so
// `ferry convert a.npy b.npz` gives what np.savez("b.npz", a) gives.
//
// .NPZ FILE: a zip (zip/zip.h gives every field checked) whose every
// record is called <name>.npy and holds a .npy file as above; the tensor is
// <name> (1..max_name_bytes bytes of UTF-8 [bad_name]; Python's zipfile
// writes UTF-8 names with flag bit 11, ASCII ones without). A zip is an
// .npz when it has no <P>/data.pkl record (that is a .pt file) and every
// record ends in ".npy" [not_a_checkpoint otherwise: NumPy returns other
// records as raw bytes; ferry has no place for them]. Records are stored
// (np.savez) or deflated (np.savez_compressed, method 8): a deflated record
// is inflated with zlib into exactly its declared size [bad_deflate],
// its CRC-32 always checked [crc32_mismatch]. ZIP64 as the zip reader reads
// it (numpy.savez writes a ZIP64 extra field in every local header).
// Records MAY differ in byte order: each tensor's storage_info::order says
// its own.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/error.h"
#include "ferry/checkpoint/options.h"
#include "ferry/checkpoint/tensor.h"
#include "ferry/wire/byte_order.h"

namespace ferry::checkpoint {

/// What a .npy header says, as parse_npy_header() read it.
struct npy_header {
  std::uint8_t major = 1;  ///< 1, 2 or 3 (minor is always 0)
  /// The descr's order character: '<', '>', '|' or '='.
  char order_char = '<';
  char kind = 'f';              ///< 'b', 'i', 'u', 'f' or 'c' (c: parsed, refused by npy_dtype())
  std::uint8_t item_size = 4;   ///< bytes of one element
  bool fortran_order = false;
  std::vector<std::uint64_t> shape;  ///< [] for a 0-d array (a scalar)
  std::uint64_t data_offset = 0;     ///< bytes before the data (magic to the header's '\n')
  std::uint64_t data_bytes = 0;      ///< product(shape) * item_size, checked for overflow
};

/// Parses the header at the start of `bytes` (a .npy file's first bytes, at
/// least all of its header; more is not read). Errors: bad_magic,
/// unsupported_version, truncated, limit_exceeded, bad_utf8,
/// bad_npy_header, duplicate_key, unsupported_npy_dtype, shape_overflow;
/// contexts say where ("npy header byte 41: ..."), input through quote().
[[nodiscard]] result<npy_header, error> parse_npy_header(std::span<const std::byte> bytes, const limits& lim = {});

/// The ferry dtype of a parsed header (b1 i1..i8 u1..u8 f2 f4 f8 c8 c16).
/// Errors: none for a header parse_npy_header() accepted.
[[nodiscard]] result<codec::dtype, error> npy_dtype(const npy_header& h);

/// The order the data is stored in: '<' little, '>' big; '|' and '=' with
/// one-byte elements the host's (nothing swaps), with wider elements
/// `native` when set. Errors: bad_byte_order.
[[nodiscard]] result<wire::byte_order, error> npy_order(const npy_header& h,
                                                        std::optional<wire::byte_order> native);

/// The header numpy.save writes for such an array, byte for byte (compared
/// with NumPy 1.24.2's own bytes; NumPy 2.x's header code, read but not
/// run, is the same): keys sorted, `'key': repr(value), ` each, then spaces for
/// growth (21 less the digits of the first extent, the last if
/// fortran_order; none for a 0-d array), padded with spaces and a final
/// '\n' so the data starts on a multiple of 64 (a full 64 bytes of padding
/// when the text happens to end on one, as NumPy does). Version 1.0 when
/// the header length fits in 16 bits, else 2.0; never 3.0 (ferry's headers
/// are ASCII). Errors: unsupported_npy_dtype (bf16, f8_e4m3, f8_e5m2: NumPy
/// has no such dtype), limit_exceeded (more than lim.max_dims extents).
[[nodiscard]] result<std::vector<std::byte>, error> write_npy_header(codec::dtype dtype, wire::byte_order order,
                                                                     bool fortran_order,
                                                                     std::span<const std::uint64_t> shape,
                                                                     const limits& lim = {});

/// How save_npy() and save_npz() write.
struct npy_options {
  /// Byte order of the data. '<' or '>' is always written, so the file
  /// means the same numbers on every host.
  wire::byte_order order = wire::host_order;
  /// .npz only: deflate each record (as np.savez_compressed) or store it
  /// (as np.savez). Stored records are padded to start their data on a
  /// multiple of 64 (see save_npz), so ferry maps them without a copy.
  bool compress = false;
  /// zlib level for compress (Python's zipfile default: 6 via
  /// Z_DEFAULT_COMPRESSION).
  int level = -1;
  bool sync = true;    ///< fsync on commit (write_options::sync)
  bool direct = true;  ///< around the page cache (write_options::direct)
  checkpoint::limits limits;
};

/// Writes one tensor as a .npy file, atomically (base::atomic_file). The
/// tensor's name is not written (a .npy holds no name). Errors:
/// unsupported_npy_dtype, view_out_of_bounds, shape_overflow,
/// limit_exceeded, io_error.
[[nodiscard]] result<void, error> save_npy(const std::filesystem::path& target, const tensor_ref& tensor,
                                           const npy_options& opt = {});

/// Writes `tensors` as an .npz file, atomically: one record <name>.npy per
/// tensor, in order; tensors over one storage are written once each (.npz
/// cannot share). Stored records carry a padding extra field (id 0xD935, as
/// Android's zipalign writes) so their array data starts on a multiple of
/// 64; ZIP64 fields only where a size, an offset or the record count needs
/// them; every record dated 1980-01-01 00:00 so equal inputs give equal
/// files. Errors: save_npy's, bad_name, duplicate_key.
[[nodiscard]] result<void, error> save_npz(const std::filesystem::path& target, std::span<const tensor_ref> tensors,
                                           const npy_options& opt = {});

}  // namespace ferry::checkpoint
