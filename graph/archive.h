// ferry/graph/archive.h: the object-graph archive. Writes and reads whole
// graphs of C++ objects, keeping shared and cyclic references exactly.
//
// USAGE
//
//   struct node {
//     static constexpr std::string_view ferry_name = "example.node";  // stable, unique
//     static constexpr std::uint32_t ferry_version = 1;                // optional
//     std::string label;
//     std::vector<std::shared_ptr<node>> children;
//     std::weak_ptr<node> parent;
//     node* buddy = nullptr;                      // must point into the archive
//     template <class Fields> void describe(Fields& f) {
//       f(1, "label", label);                     // tag (>= 1, never reused), name, member
//       f(2, "children", children);
//       f(3, "parent", parent);
//       f(4, "buddy", buddy);
//     }
//   };
//
//   auto bytes = ferry::graph::write(root);                 // result<std::vector<std::byte>>
//   auto back  = ferry::graph::read<std::shared_ptr<node>>(*bytes);   // result<shared_ptr<node>>
//
// A free function `template <class F> void describe(F&, node&)` found by ADL
// works too. A type that cannot describe itself (a library's type, a
// fixed-point number) travels as another type through a
// ferry::graph::value_codec specialisation (graph/codec.h).
// Polymorphic types are registered once, before use:
//   ferry::graph::register_type<circle, shape>();   // circle derives from shape
// and then a std::shared_ptr<shape> comes back as a circle. Types read
// through pointers must be default-constructible.
//
// ARCHIVE LAYOUT (version 2; version 1 differs only in its scalar kind
// numbers, see schema/schema.h, and is still read)
//
//   header (15 bytes)
//     magic      4 bytes  "FGA1" (46 47 41 31)
//     version    u8       2 (1 is read too)
//     order      u8       0 little, 1 big: the byte order of every fixed-width
//                         scalar in the archive (any other value: bad_byte_order)
//     flags      u8       bit 0: the archive holds raw pointers (readers then
//                         track by-value structs); other bits MUST be 0
//     body_size  u64      in `order`: the length of the body
//   body (body_size bytes)
//     the root value, then for each object id 1..N in order its value
//     (encoded by its table descriptor); the body MUST be consumed exactly
//   footer
//     schema     the schema section of ferry/schema/schema.h
//     objects    varint R, then R runs assigning ids 1..N in order:
//       count      varint >= 1: this many consecutive objects share
//       ownership  u8: 1 shared (held by std::shared_ptr or only weakly),
//                      2 unique (held by exactly one std::unique_ptr)
//       type       descriptor of their dynamic type
//                N = the sum of the counts; N MUST NOT exceed body_size
//                (every object is referenced from the body by >= 1 byte)
//     root       descriptor of the root value
//   nothing may follow (trailing_bytes)
// The footer comes last so a writer can stream the body and finish without
// moving it.
//
// Values are encoded as the descriptors in schema.h say. References:
// - shared/unique/weak: a varint object id (0: null). Ids are assigned in the
//   order objects are first met while writing (root first, then payloads in
//   id order), so object k's first reference always precedes its payload.
// - raw: a fixed u32 r: 0 null; 1..N object r; N+k the k-th struct written
//   by value (in write order; structs inside map keys and set elements are
//   not counted). Raw pointers never own.
// Maps and sets are written in increasing key order (unordered containers
// are sorted), so the same graph always gives the same bytes on every
// architecture.
//
// READING HOSTILE INPUT
//
// read() treats its input as hostile. Every failure is an error code (see
// base/error.h, graph/error.h); nothing partially built is handed back, and everything
// built before the error is freed, cycles included (each object read so far
// is reset to a default-constructed value before release). A reference to
// an object of another type than the pointer's is type_mismatch: a
// polymorphic object is accepted only through a registered base.
// Limits sit in `options`; the writer enforces depth, count and object
// limits as the reader does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <span>
#include <vector>

#include "ferry/base/file.h"
#include "ferry/graph/codec.h"
#include "ferry/graph/detail/codec.h"
#include "ferry/graph/options.h"
#include "ferry/schema/schema.h"
#include "ferry/wire/byte_order.h"
#include "ferry/graph/error.h"

namespace ferry::graph {

/// Writes the graph reachable from `root`. The writer enforces the limits
/// the reader does (depth, counts, values, objects), counted the same way,
/// so an archive written with some options reads back with the same
/// options. Errors: untracked_pointer, unregistered_type,
/// ownership_conflict, depth_exceeded, limit_exceeded (max_count,
/// max_values, max_objects), duplicate_key (two C++ types share one
/// ferry_name).
/// Memory: the writer's object list and table (about 60 bytes an object)
/// stay with the calling thread for its next write, up to 32 MiB, so
/// writing a graph again takes no page faults for them; they are freed
/// when the thread ends.
template <class T>
result<std::vector<std::byte>> write(const T& root, const options& opt = {}) {
  detail::writer_state w(opt);
  w.write_root(root);
  return w.finish();
}

/// Reads a graph into `root` in place, so raw pointers into root's own
/// members stay valid. On error `root` is left default-valued.
/// Errors: the codes of graph/error.h and schema/error.h, and base codes.
template <class T>
result<void> read_into(std::span<const std::byte> archive, T& root, const options& opt = {}) {
  detail::reader_state r(archive, opt);
  if (auto e = r.read_root(root); !e) {
    r.abandon(root);
    return e.error();
  }
  return {};
}

/// Reads a graph whose root has type T and returns it. The root is moved on
/// return, so a raw pointer to one of the root's own by-value members would
/// dangle: that is pointer_into_root (pointers into vectors, maps and
/// pointed-to objects are fine). Errors: as read_into().
template <class T>
result<T> read(std::span<const std::byte> archive, const options& opt = {}) {
  detail::reader_state r(archive, opt);
  T root = T();
  r.forbid_pointers_into(&root, sizeof(T));
  if (auto e = r.read_root(root); !e) {
    r.abandon(root);
    return e.error();
  }
  return root;
}

/// File forms: the whole archive in one file. write_file replaces the file
/// atomically (base::write_file_atomic: a temporary in the same folder,
/// fsync, rename). Errors carry the path as context: io_error with the OS's
/// errno for the file itself ("model.ferry: No such file or directory"),
/// and the codes of write(), read() and read_into() for the archive in it.
template <class T>
result<void, error> write_file(const std::filesystem::path& path, const T& root, const options& opt = {}) {
  auto bytes = write(root, opt);
  if (!bytes) return error(bytes.error(), path.string());
  return base::write_file_atomic(path, *bytes);
}

template <class T>
result<void, error> read_file_into(const std::filesystem::path& path, T& root, const options& opt = {}) {
  FERRY_TRY_ASSIGN(const auto bytes, base::read_file(path));
  if (auto r = read_into(bytes, root, opt); !r) return error(r.error(), path.string());
  return {};
}

template <class T>
result<T, error> read_file(const std::filesystem::path& path, const options& opt = {}) {
  FERRY_TRY_ASSIGN(const auto bytes, base::read_file(path));
  auto r = read<T>(bytes, opt);
  if (!r) return error(r.error(), path.string());
  return std::move(*r);
}

/// Stream forms: the archive is written whole; reading consumes the stream
/// to its end (an archive carries no length of its own).
template <class T>
result<void> write(std::ostream& out, const T& root, const options& opt = {}) {
  auto bytes = write(root, opt);
  if (!bytes) return bytes.error();
  return detail::write_stream_bytes(out, *bytes);
}

template <class T>
result<T> read(std::istream& in, const options& opt = {}) {
  auto bytes = detail::read_stream_bytes(in);
  if (!bytes) return bytes.error();
  return read<T>(*bytes, opt);
}

/// Registers Derived for polymorphic writing and reading through pointers to
/// each of Bases (direct or indirect bases, polymorphic). Call once per type,
/// before use; thread-safe.
template <class Derived, class... Bases>
void register_type() {
  detail::register_polymorphic<Derived, Bases...>();
}

}  // namespace ferry::graph
