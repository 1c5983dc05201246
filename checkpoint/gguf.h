// ferry/checkpoint/gguf.h: GGUF, llama.cpp's model files, read by
// checkpoint::open() (reader.h, file_format::gguf), written by save_gguf()
// and converted between byte orders by convert_gguf_order().
// docs/gguf-and-numpy.md restates these rules for readers of other
// languages, with the ggml type table and how ferry is checked against
// llama.cpp.
//
// The ground truth is ggml's own reader and writer (src/gguf.cpp,
// include/gguf.h, docs/gguf.md at github.com/ggml-org/ggml d99724f2) and
// gguf-py's reader (llama.cpp gguf-py/gguf/gguf_reader.py). MUST and MAY as
// in RFC 2119; the error of a broken rule in brackets. Where ggml and this
// text differ, the difference is named.
//
// FILE LAYOUT. Every multi-byte field is in the file's byte order (ORDER
// below), little-endian unless the file is big-endian throughout; there is
// no field that says which (see BYTE ORDER).
//
//   magic       4 bytes "GGUF" (47 47 55 46) in either order; "FUGG"
//               (46 55 47 47), which gguf-py's reader takes for a
//               big-endian file (llama.cpp's gguf_convert_endian.py, read
//               at 0b6d2254, writes it for big-endian output), means
//               big-endian [bad_magic otherwise]
//   version     u32: 2 or 3 (identical layouts; 3 says big-endian files
//               exist). 1 used u32 counts and lengths: refused
//               [unsupported_version], as ggml refuses it; so is every
//               other number
//   n_tensors   u64: at most limits::max_tensors [limit_exceeded] and at
//               most what the file's remaining bytes can describe (25
//               bytes a tensor info at least) [truncated]
//   n_kv        u64: at most the remaining bytes / 14 [truncated]
//   n_kv key/value pairs:
//     key       string (below): 1..limits::max_name_bytes bytes of UTF-8
//               [bad_name], each key once [duplicate_key]
//     type      u32, a value type:
//                 0 u8   1 i8   2 u16  3 i16  4 u32  5 i32  6 f32
//                 7 bool 8 string  9 array  10 u64  11 i64  12 f64
//               [bad_gguf_value_type otherwise]
//     value     u8..f64: the scalar, little- or big-endian as ORDER;
//               bool: one byte, 0 or 1 [bad_value; ggml takes any non-zero
//               byte for true, ferry refuses, so that a file has one
//               meaning and converts byte for byte];
//               string: u64 length L, then L bytes (UTF-8 by the spec;
//               values are NOT checked, as vocabularies may hold partial
//               UTF-8 tokens; keys and tensor names are); L at most the bytes
//               that remain [truncated];
//               array: u32 element type, u64 count N, then N values of
//               that type, without their type. Arrays MAY nest (gguf-py
//               writes them; ggml refuses them), at most
//               limits::max_gguf_depth levels [depth_exceeded]. N MUST fit
//               the remaining bytes at the element's least size (1 for
//               u8/i8/bool, 8 for a string, 12 for an array)
//               [truncated]: no allocation exceeds what the input
//               justifies.
//   n_tensors tensor infos:
//     name      string: 1..limits::max_name_bytes bytes of UTF-8 [bad_name],
//               each name once [duplicate_key]. (ggml reads at most 63
//               bytes; save_gguf() writes at most 63, see below)
//     n_dims    u32: 0..4 (GGML_MAX_DIMS) [limit_exceeded]
//     ne        n_dims x u64, ne[0] the fastest-varying extent; each below
//               2^63 (ggml's int64 must not be negative) [shape_overflow]
//     type      u32, a ggml type (ggml_types.h) [unknown_ggml_type, naming
//               the number, and the type's old name if ggml removed it]
//     offset    u64: where the tensor's data starts, from the start of the
//               data section
//   padding     zero bytes up to the next multiple of ALIGN from the start
//               of the file (not read: ggml does not check them either)
//   data        the tensors' data, each padded with zeros to a multiple of
//               ALIGN, the last one too
//
// ALIGN is the metadata key `general.alignment`, which MUST then be a u32
// [bad_alignment] and a power of two from 1 to 2^30 [bad_alignment];
// absent, 32. (ggml accepts up to 2^31; ferry's bound is that of its own
// files.)
//
// TENSOR DATA. A tensor of type T and extents ne holds N = product(ne)
// elements (1 for n_dims 0) as N / block_elements(T) blocks of
// block_bytes(T) bytes (ggml_types.h). ne[0] MUST be a multiple of
// block_elements(T) [shape_size_mismatch] (ggml requires it per row, so
// a total that divides is not enough); N MUST stay below 2^63 and its byte
// count below 2^64 [shape_overflow] (the product is checked, so 2^42+1
// extents cannot wrap the byte count to something small).
//
// ONE LAYOUT. ggml (since 2025) requires what its writer and gguf-py's
// write: the tensors' data in the order of their infos, each at the offset
// where the one before ends, padded to ALIGN. ferry requires the same:
// an offset that is not a multiple of ALIGN [misaligned_tensor]; one below
// the previous tensor's padded end (an overlap) or above it (a hole)
// [bad_layout]; data reaching past the end of the file [truncated]; bytes
// after the last tensor's padded end (or, with no tensors, after the
// header's padding) [trailing_bytes]. The last tensor's padding MAY be cut
// short (the file MAY end right after its data).
//
// BYTE ORDER. The file does not say its order. Like llama.cpp and gguf-py,
// ferry reads the version field as little-endian: a value from 1 to 0xFFFF
// means little-endian; otherwise, read big-endian, a value from 1 to 0xFFFF
// means big-endian (no number is both; a version of 0x00010000 or more in
// both is [unsupported_version]). "FUGG" means big-endian.
// read_options::gguf_order overrides all of it. reader::order() reports
// the order found. A big-endian block is a little one with exactly the
// fields of ggml_types.h's swap table reversed (metadata and tensor infos
// swap field by field, strings and u8 arrays not at all).
//
// WHAT THE READER HANDS OUT. One tensor (and storage) per tensor info, in
// file order. ferry shapes list the slowest extent first (as NumPy and
// PyTorch do), so the shape is ne reversed: ne = [4096, 32000] is shape
// [32000, 4096], row-major. Unquantized types map to ferry dtypes (F32 f32,
// F16 f16, BF16 bf16, F64 f64, I8 i8, I16 i16, I32 i32, I64 i64) and get()
// gives their elements in host order. A quantized tensor is its raw blocks
// as dtype u8, its shape that of the blocks' bytes (ne reversed, with the
// last extent ne[0] / block_elements * block_bytes: what gguf-py's reader
// gives), the blocks' multi-byte fields converted to host order by get();
// gguf_header::tensors[i].type names its type, and get_dequantized() gives
// f32 values (ggml_types.h's dequantize()). The metadata, typed, is
// reader::gguf()->metadata; reader::metadata() holds it flattened to text
// (see render_gguf_value()) for tools that print it.
//
// WRITING. save_gguf() writes what ggml's gguf_write_to_file() writes for
// the same keys, values and tensors (magic "GGUF" as bytes, version 3, the
// layout above with zero padding), in either byte order. One difference:
// ggml writes n_dims as the index of the last extent above 1 (so a [4, 1]
// tensor becomes 1-d); ferry writes the extents it is given, as gguf-py
// does. convert_gguf_order() keeps every field of its input (version, n_dims,
// metadata order) and rewrites only the byte order, so converting a file
// that ggml wrote gives what ggml would write for the same content in the
// other order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ferry/base/error.h"
#include "ferry/checkpoint/ggml_types.h"
#include "ferry/checkpoint/options.h"
#include "ferry/checkpoint/reader.h"
#include "ferry/checkpoint/tensor.h"
#include "ferry/codec/dtype.h"
#include "ferry/wire/byte_order.h"

namespace ferry::checkpoint {

/// A GGUF metadata value type, numbered as in the file (ggml's enum
/// gguf_type).
enum class gguf_value_type : std::uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};
inline constexpr std::uint32_t gguf_value_type_count = 13;

/// ggml's name of a value type: "u8", "i8", ..., "f32", "bool", "str",
/// "arr", "u64", "i64", "f64".
[[nodiscard]] std::string_view name(gguf_value_type t) noexcept;

/// A metadata array: its elements, all of one type. The alternative held
/// is the element type: values.index() == the type's number.
struct gguf_array {
  using storage = std::variant<std::vector<std::uint8_t>, std::vector<std::int8_t>, std::vector<std::uint16_t>,
                               std::vector<std::int16_t>, std::vector<std::uint32_t>, std::vector<std::int32_t>,
                               std::vector<float>, std::vector<bool>, std::vector<std::string>,
                               std::vector<gguf_array>, std::vector<std::uint64_t>, std::vector<std::int64_t>,
                               std::vector<double>>;
  storage values;

  [[nodiscard]] gguf_value_type type() const noexcept { return static_cast<gguf_value_type>(values.index()); }
  [[nodiscard]] std::size_t size() const noexcept;
  friend bool operator==(const gguf_array&, const gguf_array&) = default;
};

/// One metadata value. The alternative held is the type: index() == the
/// type's number (gguf_value_type). Strings hold the file's bytes as they
/// are (not checked for UTF-8).
using gguf_value = std::variant<std::uint8_t, std::int8_t, std::uint16_t, std::int16_t, std::uint32_t, std::int32_t,
                                float, bool, std::string, gguf_array, std::uint64_t, std::int64_t, double>;

[[nodiscard]] inline gguf_value_type type_of(const gguf_value& v) noexcept {
  return static_cast<gguf_value_type>(v.index());
}

struct gguf_kv {
  std::string key;
  gguf_value value;
  friend bool operator==(const gguf_kv&, const gguf_kv&) = default;
};

/// One tensor info, as the file says it.
struct gguf_tensor {
  std::string name;
  ggml_type type = ggml_type::f32;
  std::vector<std::uint64_t> ne;  ///< n_dims extents, ne[0] fastest (GGUF's order, not ferry's)
  std::uint64_t offset = 0;       ///< from the start of the data section
  std::uint64_t nbytes = 0;       ///< its blocks' bytes (without padding)
  /// Elements: the product of ne (1 for n_dims 0).
  [[nodiscard]] std::uint64_t numel() const noexcept;
  friend bool operator==(const gguf_tensor&, const gguf_tensor&) = default;
};

/// Everything a GGUF file says before its tensor data, checked.
struct gguf_header {
  std::uint32_t version = 3;
  wire::byte_order order = wire::byte_order::little;
  bool fugg_magic = false;         ///< the magic read "FUGG" (old gguf-py big-endian files)
  std::uint32_t alignment = 32;    ///< general.alignment, or 32
  std::uint64_t header_bytes = 0;  ///< magic to the end of the last tensor info
  std::uint64_t data_offset = 0;   ///< header_bytes rounded up to the alignment
  std::vector<gguf_kv> metadata;   ///< in file order
  std::vector<gguf_tensor> tensors;  ///< in file order

  /// The value of `key`, or nullptr.
  [[nodiscard]] const gguf_value* find(std::string_view key) const noexcept;
  /// The tensor info called `name`, or nullptr.
  [[nodiscard]] const gguf_tensor* find_tensor(std::string_view name) const noexcept;
  /// Where the data section ends with every tensor's padding:
  /// data_offset + the sum of the padded sizes.
  [[nodiscard]] std::uint64_t padded_end() const noexcept;
};

/// Parses the header at the start of `bytes`, the first bytes of a file
/// of `file_size` bytes (bytes.size() <= file_size; more than the header
/// is not read). Every rule above is checked, the data's place against
/// file_size. `order` forces the byte order (read_options::gguf_order).
/// Errors: those named above; contexts say where ("gguf byte 40: key
/// 'general.name': ..."), names through quote(). When the header runs past
/// `bytes` but not past file_size: truncated, and `*needs_more` (if given)
/// is set, so a caller holding a prefix of the file can read more and call
/// again.
[[nodiscard]] result<gguf_header, error> parse_gguf_header(std::span<const std::byte> bytes, std::uint64_t file_size,
                                                           const limits& lim = {},
                                                           std::optional<wire::byte_order> order = std::nullopt,
                                                           bool* needs_more = nullptr);

/// Reads and parses the header of the GGUF file at `path` (reading as
/// much of the file as the header needs, up to lim.max_gguf_header_bytes
/// [limit_exceeded]). Errors: parse_gguf_header()'s, io_error; contexts
/// name the file.
[[nodiscard]] result<gguf_header, error> read_gguf_header(const std::filesystem::path& path,
                                                          const read_options& opt = {});

/// A value as text, for reader::metadata() and `ferry inspect`: a string
/// as its bytes; numbers in decimal (floats as the shortest text that
/// reads back to the same value: std::to_chars); bools true/false; an array
/// as JSON ([1, 2], ["a", "b"], nested as nested lists), strings in it
/// quoted with JSON escapes (bytes that are not UTF-8 as \u00XX, so the
/// text is valid JSON though such a string does not read back exactly),
/// NaN and infinities as the JSON strings "nan", "inf", "-inf". When the
/// text would pass `max_bytes`, the array is summarised instead:
/// "<array of 151936 str: over 1048576 bytes as JSON>" (the number after
/// "over" is max_bytes); a string over it, "<str of N bytes: over M bytes>".
[[nodiscard]] std::string render_gguf_value(const gguf_value& v, std::size_t max_bytes = SIZE_MAX);

/// The ferry dtype of an unquantized ggml type (F32, F16, BF16, F64, I8,
/// I16, I32, I64); nullopt for quantized ones.
[[nodiscard]] std::optional<codec::dtype> dtype_of(ggml_type t) noexcept;
/// The ggml type of a ferry dtype that GGUF can hold; nullopt for the
/// others (bool, unsigned integers but u8, fp8; u8 has none either: GGUF
/// has no unsigned tensors).
[[nodiscard]] std::optional<ggml_type> ggml_type_of(codec::dtype d) noexcept;

/// Tensor `name` of a GGUF file (reader::gguf()) dequantized to f32 (any type: quantized
/// ones through dequantize(), F16 as ggml widens it (exact, but a
/// signalling NaN comes out quiet), BF16/F32 exactly, integers and F64 to
/// the nearest float), shape ne reversed. Errors: tensor_not_found,
/// bad_value (not a GGUF reader), storage_too_large, get()'s.
[[nodiscard]] result<tensor, error> get_dequantized(const reader& r, std::string_view name);

/// A tensor to write: its blocks in host order.
struct gguf_tensor_ref {
  std::string_view name;
  ggml_type type = ggml_type::f32;
  /// GGUF's order: ne[0] fastest. 0..4 extents.
  std::vector<std::uint64_t> ne;
  /// Exactly the tensor's bytes (whole blocks), host order: fields swap
  /// to the file's order on the way out.
  std::span<const std::byte> data;
};

/// A row-major ferry tensor as a GGUF tensor (shape reversed into ne,
/// dtype mapped by ggml_type_of()); t's name and storage must outlive the
/// result. Errors: bad_value (a dtype GGUF has no type for, or a view that
/// is not row-major), view_out_of_bounds, shape_overflow, limit_exceeded
/// (more than 4 extents).
[[nodiscard]] result<gguf_tensor_ref, error> to_gguf_tensor(const tensor_ref& t);

/// How save_gguf() and convert_gguf_order() write.
struct gguf_write_options {
  wire::byte_order order = wire::byte_order::little;
  bool sync = true;    ///< fsync on commit (write_options::sync)
  bool direct = true;  ///< around the page cache (write_options::direct)
  /// Allow arrays of arrays, which gguf-py reads and ggml refuses. Off,
  /// such a value is refused [bad_value], so that every file written loads
  /// in llama.cpp: by save_gguf() and by convert_gguf_order() alike (a
  /// gguf-py file's nested arrays are kept only when this allows them;
  /// ferry convert --nested-arrays, Python's save(nested_arrays=True)).
  bool nested_arrays = false;
  checkpoint::limits limits;
};

/// Writes a GGUF file (version 3), atomically (base::atomic_file), in
/// opt.order: `metadata` in order, the tensor infos, then each tensor's
/// data at its offset, padded with zeros to the alignment
/// (general.alignment in `metadata`, a u32 power of two up to 2^30, or
/// 32); the header is padded only when there are tensors, and the file
/// ends with the last tensor's padding. Errors: bad_name (an empty or non-UTF-8 key; a tensor name of
/// more than 63 bytes, which ggml cannot read), duplicate_key (a key or a
/// tensor name twice), bad_alignment, limit_exceeded (more than 4
/// extents, more than limits.max_tensors tensors), depth_exceeded (arrays
/// nested past max_gguf_depth), shape_size_mismatch (ne[0] not a multiple
/// of the block size, or data of another size), shape_overflow, io_error.
[[nodiscard]] result<void, error> save_gguf(const std::filesystem::path& target, std::span<const gguf_kv> metadata,
                                            std::span<const gguf_tensor_ref> tensors,
                                            const gguf_write_options& opt = {});

/// The bytes of a header: magic to data_offset, padding included, as
/// save_gguf() writes it when data follows (what both writers share; tests
/// and fuzzers compare it). `version` is written as given (2 or 3), nested
/// arrays as they are. Errors: save_gguf()'s checks.
[[nodiscard]] result<std::vector<std::byte>, error> encode_gguf_header(const gguf_header& h, wire::byte_order order,
                                                                       const limits& lim = {});

/// Converts the GGUF file `in` to byte order `to` into a new file `out`,
/// replaced atomically (never in place: `in` is read until the new file
/// is committed, so `out` may be `in`). The header is parsed and checked
/// (read_options as for open()), rewritten in `to` with every field kept;
/// each tensor's blocks are swapped by swap_blocks() in pieces of at most
/// 8 MiB; padding is written as zeros, and the magic as "GGUF" (a "FUGG"
/// file gets the magic every reader knows). Converting to the order the
/// file already has copies it (nonzero padding becomes zeros). wopt.order
/// is not used: `to` is the order. `progress`, if given, is called after
/// each piece with the tensor data bytes written so far (`ferry convert`'s
/// progress bar). Errors: read_gguf_header()'s, io_error.
[[nodiscard]] result<void, error> convert_gguf_order(const std::filesystem::path& in, const std::filesystem::path& out,
                                                     wire::byte_order to, const read_options& ropt = {},
                                                     const gguf_write_options& wopt = {},
                                                     const std::function<void(std::uint64_t)>& progress = {});

}  // namespace ferry::checkpoint
