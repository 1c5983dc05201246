// ferry/trainer/idx.h: the IDX file format of MNIST, Fashion-MNIST, EMNIST
// and KMNIST, raw or gzip'd, and a loader for their classification sets.
//
// MUST and MUST NOT are used as in RFC 2119; a decoder that finds a MUST
// broken rejects the file with the error named in brackets (trainer/error.h,
// base/error.h). The format is LeCun's (yann.lecun.com/exdb/mnist); this is
// the subset ferry accepts, written out.
//
// FILE LAYOUT (every multi-byte integer big-endian)
//
//   0      zero        2 bytes  00 00 [bad_magic]
//   2      type        u8       element type [bad_idx_type]:
//                                 0x08 u8    unsigned byte
//                                 0x09 i8    signed byte
//                                 0x0B i16   two's complement, 2 bytes
//                                 0x0C i32   two's complement, 4 bytes
//                                 0x0D f32   IEEE 754 binary32, 4 bytes
//                                 0x0E f64   IEEE 754 binary64, 8 bytes
//   3      rank        u8       R, the number of dimensions: 1 <= R
//                               [bad_idx_dimensions], R <= max_dims
//                               [limit_exceeded]
//   4      extents     R x u32  d_0 .. d_{R-1}, outermost first: each
//                               1 <= d_k [bad_idx_dimensions], d_k <=
//                               max_extent [limit_exceeded]
//   4+4R   data        P bytes  d_0 x ... x d_{R-1} elements in row-major
//                               order (the last index varies fastest), each
//                               big-endian; P = product(d_k) x element size
//
// The data MUST be exactly P bytes: fewer is [truncated], more is
// [trailing_bytes]. Every prefix of a valid file is [truncated] (bad_magic
// as soon as one of the first two bytes is not zero). 4 + 4R + P MUST NOT
// exceed max_bytes, computed without overflow [limit_exceeded].
//
// GZIP. A file whose first two bytes are 1F 8B (which no IDX file starts
// with), or that is the single byte 1F, is a gzip stream (RFC 1952) holding
// the IDX bytes, as the MNIST family is distributed. It is inflated, with
// its CRC-32 and length checked [bad_gzip], before the IDX bytes are
// decoded as above:
// - A stream that ends before its trailer is [truncated]; anything else zlib
//   rejects (bad header, bad deflate data, CRC or ISIZE mismatch) is
//   [bad_gzip].
// - Concatenated gzip members (RFC 1952 section 2.2; what `cat a.gz b.gz`,
//   pigz and bgzip produce) are accepted and their contents joined, as
//   gzip -d does. Anything after the last member that is not another member
//   (zero padding, garbage) is [trailing_bytes], where gzip only warns.
// - Inflating stops at max_bytes: a stream that would inflate to more is
//   [limit_exceeded] whatever it holds, so a gzip bomb costs at most
//   max_bytes of memory. The output grows as it is inflated; it is never
//   sized from the stream's own length field beyond what the compressed
//   bytes could produce (deflate expands at most 1032:1).
//
// FIRST ENTRIES. Asked for the first N < d_0 entries (decode_idx_file's
// `first`), the decoder checks the header as above and needs only
// 4 + 4R + N x P / d_0 bytes [truncated]; what follows is not looked at,
// and a gzip stream is inflated only that far, so its CRC-32, its length
// and anything after are not checked. N >= d_0 is the whole file.
//
// Decoded elements are in the host's byte order, converted as unsigned
// integers of their width (wire/bulk.h): floats arrive bit for bit, NaN
// payloads included, and never pass through a float register.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

#include "ferry/base/error.h"
#include "ferry/codec/dtype.h"
#include "ferry/trainer/error.h"

namespace ferry::trainer {

/// What the IDX decoder accepts. A file over a limit is refused with
/// errc::limit_exceeded before anything of its size is allocated.
struct idx_limits {
  /// Dimensions of one array. Every IDX file of the MNIST family has 1
  /// (labels) or 3 (images); 4 leaves room for a channel dimension. The
  /// format allows 255, which nothing uses: a rank above 4 says the file is
  /// not what the caller meant to read. Raise it for data that has more.
  std::size_t max_dims = 4;
  /// Largest extent of one dimension: 2^31 - 1, so every extent and every
  /// index into it fits the int that image code and int32 index tensors
  /// use. (MNIST's largest is 60,000; EMNIST ByClass's 697,932.)
  std::uint32_t max_extent = 0x7FFF'FFFF;
  /// Bytes of the decoded file, header included (after gunzip for a gzip'd
  /// file): the memory one array may cost. 1 GiB holds every dataset of the
  /// family with room to spare (Fashion-MNIST's training images are 47 MB,
  /// EMNIST ByClass's 547 MB); it also bounds what a gzip bomb can make the
  /// decoder allocate, and read_idx() refuses a file of more than twice
  /// this many bytes before reading it (no IDX file within the limit is
  /// that long, raw or gzip'd).
  std::uint64_t max_bytes = std::uint64_t{1} << 30;
};

/// One decoded IDX array.
struct idx_array {
  codec::dtype type = codec::dtype::u8;  ///< u8, i8, i16, i32, f32 or f64
  std::vector<std::uint32_t> dims;       ///< extents, outermost first; 1..max_dims of them, each >= 1
  /// The elements in row-major order, each in the host's byte order:
  /// element_count() x codec::size_of(type) bytes.
  std::vector<std::byte> data;

  /// The number of elements, the product of dims.
  [[nodiscard]] std::size_t element_count() const noexcept {
    return type_size() == 0 ? 0 : data.size() / type_size();
  }

  /// A copy of the elements as T.
  // Requires: codec::dtype_of<T> == type.
  template <class T>
  [[nodiscard]] std::vector<T> values() const {
    assert(codec::dtype_of<T> == type);
    std::vector<T> out(data.size() / sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), data.data(), out.size() * sizeof(T));
    return out;
  }

 private:
  [[nodiscard]] std::size_t type_size() const noexcept { return codec::size_of(type); }
};

/// The IDX element type of a type code (the third byte of a file).
/// Errors: bad_idx_type for codes the format does not define.
[[nodiscard]] result<codec::dtype> idx_type_from_code(std::uint8_t code) noexcept;

/// Decodes the bytes of a raw (not gzip'd) IDX file; the result owns a
/// converted copy of the data. The data is allocated only once the header
/// has been checked against the input's length, so it never exceeds the
/// input's size.
/// Errors: bad_magic, bad_idx_type, bad_idx_dimensions, limit_exceeded,
/// truncated, trailing_bytes; the context says which field.
[[nodiscard]] result<idx_array, error> decode_idx(std::span<const std::byte> bytes, const idx_limits& limits = {});

/// Decodes the content of an IDX file as it was read from disk, gzip'd or
/// not (told apart by the gzip magic): what read_idx() does after reading.
/// The data is converted in place in `file`'s buffer (or the inflated one)
/// and moved into the result, so a raw file is never copied.
///
/// With 0 < `first` < dims[0], only the first `first` entries of the
/// outermost dimension (dims[0] is then `first`): the header is checked
/// whole and those entries must be there; what follows them is neither
/// decoded nor checked, and a gzip'd file is inflated only that far (its
/// CRC-32 is not checked): ten training images of Fashion-MNIST inflate
/// 8 KB, not 47 MB. A larger `first` decodes and checks the whole file.
/// Errors: those of decode_idx(); for a gzip'd file also bad_gzip,
/// truncated, trailing_bytes and limit_exceeded of the gzip layer (the
/// context then starts with "gzip").
[[nodiscard]] result<idx_array, error> decode_idx_file(std::vector<std::byte> file, const idx_limits& limits = {},
                                                       std::size_t first = 0);

/// Reads and decodes the IDX file at `path` (its first `first` entries, as
/// decode_idx_file()), gunzipping it when it is gzip'd. Errors: io_error
/// with the OS's errno (ENOENT, EACCES, EISDIR...); limit_exceeded for a
/// file longer than 2 x max_bytes, unread; or those of decode_idx_file().
/// Every error's context starts with the path.
[[nodiscard]] result<idx_array, error> read_idx(const std::filesystem::path& path, const idx_limits& limits = {},
                                                std::size_t first = 0);

/// A classification set of the MNIST family: `count` images of rows x cols
/// u8 pixels and one u8 label each.
struct dataset {
  std::uint32_t rows = 0;
  std::uint32_t cols = 0;
  std::size_t count = 0;
  std::vector<std::uint8_t> images;  ///< count x rows x cols pixels, image after image, row-major
  std::vector<std::uint8_t> labels;  ///< count labels, each < the classes asked for
};

/// Loads the split `split` (for MNIST and Fashion-MNIST "train" or "t10k")
/// from the folder `dir`: the images from `<split>-images-idx3-ubyte` and
/// the labels from `<split>-labels-idx1-ubyte`, each either as named or
/// with `.gz` appended (the uncompressed file when both exist, as
/// torchvision leaves both after extracting).
///
/// The images MUST be u8 [bad_idx_type] of rank 3, count x rows x cols
/// [bad_idx_dimensions]; the labels u8 of rank 1 [bad_idx_type,
/// bad_idx_dimensions], as many as the images [count_mismatch], each below
/// `classes` [bad_label, context naming the sample]. A missing file is
/// io_error with ENOENT and the path "<dir>/<split>-...-ubyte[.gz]".
/// Errors are those of read_idx() otherwise, with the file's path.
/// With `first` != 0, only the first `first` samples are read (as
/// read_idx()), and the counts and labels checked are theirs.
// Requires: classes >= 1.
[[nodiscard]] result<dataset, error> load_dataset(const std::filesystem::path& dir, std::string_view split,
                                                  std::uint32_t classes = 10, const idx_limits& limits = {},
                                                  std::size_t first = 0);

}  // namespace ferry::trainer
