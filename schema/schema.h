// ferry/schema/schema.h: type descriptors and the schema section of a
// graph archive (graph/archive.h), which make an archive self-describing.
//
// DESCRIPTORS
//
// A descriptor is a byte string naming the encoding of one value. It starts
// with a kind byte; some kinds carry parameters (varints, then nested
// descriptors). A descriptor MUST be canonical (no trailing bytes) and MUST
// NOT nest deeper than the reader's max_depth.
//
// The scalar kinds (0x01..0x0F) are the element codes of codec/dtype.h, so
// a graph archive and a tensor checkpoint name a scalar type the same way.
//
//   kind  name      parameters              value encoding
//   0x01  bool      -                       u8, 0 or 1 (other values: bad_value)
//   0x02  u8        -                       1 byte
//   0x03  i8        -                       1 byte, two's complement
//   0x04  u16       -                       2 bytes in the archive's byte order
//   0x05  i16       -                       2 bytes
//   0x06  u32       -                       4 bytes
//   0x07  i32       -                       4 bytes
//   0x08  u64       -                       8 bytes
//   0x09  i64       -                       8 bytes
//   0x0A  f16       -                       2 bytes, IEEE 754 binary16 pattern
//   0x0B  bf16      -                       2 bytes, bfloat16 pattern
//   0x0C  f32       -                       4 bytes, IEEE 754 binary32 pattern
//   0x0D  f64       -                       8 bytes, IEEE 754 binary64 pattern
//   0x0E  f8_e4m3   -                       1 byte, OCP FP8 E4M3 pattern
//   0x0F  f8_e5m2   -                       1 byte, OCP FP8 E5M2 pattern
//   0x10  string    -                       varint length, then that many bytes
//   0x11  sequence  elem                    varint count, then count elems
//   0x12  array     varint n, elem          n elems (no count on the wire)
//   0x13  map       key, value              varint count, then count (key, value)
//                                           pairs, keys strictly increasing in
//                                           the writer's order, no duplicates
//   0x14  set       key                     varint count, then count keys
//   0x15  optional  elem                    u8 0 (absent) or 1 then elem
//   0x16  variant   varint n, n alts        varint index < n, then that alt
//   0x17  tuple     varint n, n elems       the n elems in order
//   0x18  struct    varint type index       the fields of schema type
//                                           `index`, in schema order
//   0x19  shared    pointee                 varint object id (0: null)
//   0x1A  unique    pointee                 varint object id (0: null)
//   0x1B  weak      pointee                 varint object id (0: null/expired)
//   0x1C  raw       pointee                 u32 reference in the archive's
//                                           byte order (0: null); see graph/
//
// Descriptor version 1 (graph archive format 1) numbered f32 0x0A and f64
// 0x0B and had no 16- or 8-bit floats. decode() and read_descriptor() of
// version 1 accept exactly that grammar; upgrade_descriptor() rewrites a
// version-1 descriptor into this one.
//
// C++ types map to descriptors as follows: bool; integers by width and
// signedness (char as u8, so `char` reads the same on signed- and
// unsigned-char targets); float; double; ferry::f16, bf16, f8_e4m3 and
// f8_e5m2 (the patterns of base/float16.h); enums as their underlying type;
// std::string; std::vector/std::deque/std::list as sequence; std::array as
// array; std::map/std::unordered_map as map; std::set/std::unordered_set as
// set; std::optional; std::variant; std::pair/std::tuple as tuple; user
// structs as struct; std::shared_ptr, std::unique_ptr, std::weak_ptr and raw
// pointers as shared, unique, weak and raw.
//
// SCHEMA SECTION
//
//   type_count   varint
//   type_count times:
//     name       varint length + UTF-8 bytes (1..max_name_bytes), the stable
//                type name, e.g. "example.node"; unique within the schema
//     version    varint, the writer's type version (informational)
//     flags      u8: bit 0 = abstract (no fields, never an object's type);
//                other bits MUST be 0
//     field_count varint
//     field_count times:
//       tag      varint >= 1, unique within the type
//       name     varint length + bytes (1..max_name_bytes), unique within the type
//       type     a descriptor
//
// Struct indices in descriptors MUST be below type_count. Descriptors inside
// the schema may refer to any type, including their own (through pointers
// or containers), so a hostile schema can describe an infinitely nested
// value: every walk over values is bounded by max_depth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/codec/dtype.h"
#include "ferry/wire/byte_order.h"
#include "ferry/wire/cursor.h"
#include "ferry/schema/error.h"

namespace ferry::schema {

enum class kind : std::uint8_t {
  boolean = 0x01,
  u8 = 0x02,
  i8 = 0x03,
  u16 = 0x04,
  i16 = 0x05,
  u32 = 0x06,
  i32 = 0x07,
  u64 = 0x08,
  i64 = 0x09,
  f16 = 0x0A,
  bf16 = 0x0B,
  f32 = 0x0C,
  f64 = 0x0D,
  f8_e4m3 = 0x0E,
  f8_e5m2 = 0x0F,
  string = 0x10,
  sequence = 0x11,
  array = 0x12,
  map = 0x13,
  set = 0x14,
  optional = 0x15,
  variant = 0x16,
  tuple = 0x17,
  structure = 0x18,
  shared = 0x19,
  unique = 0x1A,
  weak = 0x1B,
  raw = 0x1C,
};

/// The current descriptor version, and the first one.
inline constexpr std::uint8_t descriptor_version = 2;
inline constexpr std::uint8_t descriptor_version_1 = 1;

/// The dtype of a scalar kind (the codes are equal), or nothing for the
/// other kinds.
[[nodiscard]] std::optional<codec::dtype> scalar_dtype(kind k) noexcept;

/// Fixed encoded size of a scalar kind (bool, integers, floats), else 0.
[[nodiscard]] std::size_t scalar_size(kind k) noexcept;

/// A descriptor: the bytes of the grammar above.
using descriptor = std::vector<std::byte>;

struct field_def {
  std::uint32_t tag = 0;
  std::string name;
  descriptor type;
  friend bool operator==(const field_def&, const field_def&) = default;
};

struct type_def {
  std::string name;
  std::uint32_t version = 1;
  bool abstract = false;
  std::vector<field_def> fields;
  friend bool operator==(const type_def&, const type_def&) = default;
};

/// Decoding limits, each with the reason it exists. The defaults are safe
/// for untrusted input; raise them only for trusted data that needs it.
struct limits {
  /// Nesting of descriptors and of values (a struct in a vector in a struct
  /// counts 3). Bounds the recursion a hostile archive can cause.
  std::size_t max_depth = 64;
  /// Types in one schema. Each costs a name and a field table in memory.
  std::size_t max_types = 4096;
  /// Fields of one type.
  std::size_t max_fields = 1024;
  /// Bytes of a type or field name.
  std::size_t max_name_bytes = 256;
  /// Elements of one container, bytes of one string, and elements of a
  /// fixed-size array descriptor.
  std::size_t max_count = std::size_t{1} << 26;
  /// Values visited in one archive (every scalar, string, element and
  /// field counts one). Containers of empty structs consume no input, so
  /// without this bound nested counts could multiply into years of work.
  std::size_t max_values = std::size_t{1} << 28;
  /// Alternatives of a variant and elements of a tuple descriptor.
  std::size_t max_alternatives = 256;
};

/// The schema section in memory.
struct schema {
  std::vector<type_def> types;

  /// Index of the type with this name, or -1.
  [[nodiscard]] std::ptrdiff_t find(std::string_view name) const noexcept;
  friend bool operator==(const schema&, const schema&) = default;
};

/// Appends the schema section to `out`.
void encode(const schema& s, wire::vector_writer& out);

/// Decodes a schema section and validates it: names, flags, tag and name
/// uniqueness, descriptor syntax (of descriptor version `version`) and
/// struct indices. Field descriptors come back in the current version.
/// Errors: truncated, varint errors, limit_exceeded, bad_descriptor,
/// bad_type_index, depth_exceeded, duplicate_field, bad_value.
result<schema> decode(wire::reader& in, const limits& lim, std::uint8_t version = descriptor_version);

/// Validates one descriptor of version `version` at the front of `in`
/// against a schema with `type_count` types and returns its bytes (a view
/// into the input, still in that version: see upgrade_descriptor()).
/// Errors: truncated, varint errors, bad_descriptor, bad_type_index,
/// depth_exceeded.
result<std::span<const std::byte>> read_descriptor(wire::reader& in, std::size_t type_count, std::size_t max_depth,
                                                   std::uint8_t version = descriptor_version);

/// A version-1 descriptor in the current version: f32 and f64 renumbered,
/// everything else as it was.
// Requires: v1 passed read_descriptor(..., descriptor_version_1), which
// bounds its depth; unvalidated bytes are a caller bug.
[[nodiscard]] descriptor upgrade_descriptor(std::span<const std::byte> v1);

/// Callbacks of walk_value(): what a generic consumer (the dump tool, a
/// skip) sees of a value. Every callback may be left empty.
struct value_visitor {
  std::function<void(kind, std::span<const std::byte> bytes, wire::byte_order)> scalar;
  std::function<void(std::string_view)> string;
  /// Containers and structs: begin(kind, count or type index), end(kind).
  /// Each map entry is reported as a tuple of 2.
  std::function<void(kind, std::uint64_t)> begin;
  std::function<void(kind)> end;
  std::function<void(const field_def&)> field;
  /// optional (1 or 0) and variant index, before the element; a variant's
  /// alternative is followed by end(variant).
  std::function<void(kind, std::uint64_t)> tag;
  /// shared, unique, weak, raw: the object id or raw reference.
  std::function<void(kind, std::uint64_t)> reference;
};

/// The descriptor as text: "u32", "sequence<f32>", "shared<struct<a.b>>".
std::string to_string(std::span<const std::byte> desc, const schema& s);

/// Walks one value of descriptor `desc` at the front of `in`, checking every
/// bound, and calls `v`. Used to skip fields a reader does not know and to
/// print archives without their C++ types.
/// Errors: truncated, varint errors, bad_value, bad_descriptor,
/// depth_exceeded, limit_exceeded (a string or count above max_count).
/// `values` counts visited values across calls (for limits::max_values).
result<void> walk_value(wire::reader& in, std::span<const std::byte> desc, const schema& s,
                        wire::byte_order order, const value_visitor& v, const limits& lim,
                        std::size_t& values, std::size_t depth = 0);

}  // namespace ferry::schema
