// ferry/base/error.h: the library's one error enum and its result type.
//
// Every decoder in ferry reports input errors as values of `ferry::errc`,
// never by throwing. The numeric values are part of ferry's stable interface:
// they are never renumbered or reused, new failures get new values at the end
// of their block, so a value logged today means the same thing next year.
// Bugs (broken preconditions of the caller) are assertions, not errors.
//
// `result<T>` carries either a T or an errc; it has the shape of C++23
// std::expected<T, errc> (has_value, operator*, value, error), written out
// here because clang 14, which builds ferry's fuzzers, cannot see libstdc++'s
// <expected>.
#pragma once

#include <cassert>
#include <cstdint>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

namespace ferry {

enum class errc : std::uint16_t {
  ok = 0,

  // 1..99: byte-level decoding (wire/).
  truncated = 1,        ///< The input ends before the value it announces.
  no_space = 2,         ///< A fixed-size output buffer is too small.
  varint_overlong = 3,  ///< A varint has a redundant trailing 0x00 byte.
  varint_overflow = 4,  ///< A varint's value does not fit the requested type.
  out_of_range = 5,     ///< A position or length lies outside the buffer.
  limit_exceeded = 6,   ///< A length exceeds a documented decoder limit.
  size_mismatch = 7,    ///< Buffer sizes do not match the element count.

  // 100..199: numeric codecs (codec/).
  unknown_dtype = 100,  ///< A dtype code or name ferry does not know.

  // 200..299: graph archives and their schemas (graph/, schema/).
  bad_magic = 200,            ///< The input does not start with the expected magic bytes.
  unsupported_version = 201,  ///< The archive's format version is not one this reader knows.
  bad_byte_order = 202,       ///< The byte-order field is neither little (0) nor big (1).
  bad_descriptor = 203,       ///< A type descriptor has an unknown kind or a malformed body.
  bad_type_index = 204,       ///< A descriptor names a schema type that does not exist.
  unknown_type = 205,         ///< A polymorphic type name no registered C++ type has.
  bad_reference = 206,        ///< An object reference outside the archive's object table.
  type_mismatch = 207,        ///< A reference or value whose type differs from what the reader expects.
  depth_exceeded = 208,       ///< Nesting deeper than the configured limit.
  field_type_mismatch = 209,  ///< A field with the reader's tag and name but another type.
  field_renamed = 210,        ///< A field whose tag and name pair up differently than in the reader.
  bad_value = 211,            ///< A bool, optional flag or variant index out of its range.
  duplicate_key = 212,        ///< A map or set holds the same key twice.
  ownership_conflict = 213,   ///< An object owned twice, or owned by the wrong kind of pointer.
  untracked_pointer = 214,    ///< Writing: a raw or weak pointer to an object the archive does not hold.
  unregistered_type = 215,    ///< Writing: a polymorphic object whose dynamic type is not registered.
  trailing_bytes = 216,       ///< Bytes remain after the archive's last object.
  duplicate_field = 217,      ///< A schema type lists the same tag or field name twice.
  io_error = 218,             ///< Reading or writing a file or stream failed.
  pointer_into_root = 219,    ///< read(): a raw pointer targets the returned root itself (use read_into).

  // 300..399: the gradient wire protocol (comm/).
  checksum_mismatch = 300,    ///< A frame's CRC32C does not match its bytes.
  auth_failed = 301,          ///< A peer could not prove it holds the shared secret.
  version_mismatch = 302,     ///< A peer speaks another protocol version.
  config_mismatch = 303,      ///< A peer's world configuration differs from this rank's.
  peer_lost = 304,            ///< A peer's connection closed or reset.
  timed_out = 305,            ///< A blocking operation made no progress within its timeout.
  sequence_mismatch = 306,    ///< A frame from another collective, chunk or sender than expected.
  connect_failed = 307,       ///< An address could not be resolved, bound or reached.
  bad_config = 308,           ///< Invalid settings (environment variables, secret, sizes).
  aborted = 309,              ///< The communicator failed earlier; no further collective can run.
  protocol_error = 310,       ///< A peer sent a message the protocol does not allow at that point.
};

/// A short, stable English description of `e`, for logs and error messages.
std::string_view message(errc e) noexcept;

/// The enumerator's name ("truncated", ...), for tests and tools.
std::string_view name(errc e) noexcept;

/// Either a T or an errc other than errc::ok. [[nodiscard]] because an
/// ignored result is an ignored error.
template <class T>
class [[nodiscard]] result {
 public:
  using value_type = T;

  // Requires: e != errc::ok.
  constexpr result(errc e) noexcept : error_(e) { assert(e != errc::ok); }  // NOLINT: implicit by design
  constexpr result(const T& v) : error_(errc::ok) { std::construct_at(&value_, v); }  // NOLINT
  constexpr result(T&& v) : error_(errc::ok) { std::construct_at(&value_, std::move(v)); }  // NOLINT

  constexpr result(const result& o) : error_(o.error_) {
    if (o.has_value()) std::construct_at(&value_, o.value_);
  }
  constexpr result(result&& o) noexcept(std::is_nothrow_move_constructible_v<T>) : error_(o.error_) {
    if (o.has_value()) std::construct_at(&value_, std::move(o.value_));
  }
  constexpr result& operator=(result o) noexcept(std::is_nothrow_move_constructible_v<T>) {
    destroy();
    error_ = o.error_;
    if (o.has_value()) std::construct_at(&value_, std::move(o.value_));
    return *this;
  }
  constexpr ~result() { destroy(); }

  [[nodiscard]] constexpr bool has_value() const noexcept { return error_ == errc::ok; }
  constexpr explicit operator bool() const noexcept { return has_value(); }

  // Requires: has_value().
  constexpr T& operator*() & noexcept { assert(has_value()); return value_; }
  constexpr const T& operator*() const& noexcept { assert(has_value()); return value_; }
  constexpr T&& operator*() && noexcept { assert(has_value()); return std::move(value_); }
  constexpr T* operator->() noexcept { assert(has_value()); return &value_; }
  constexpr const T* operator->() const noexcept { assert(has_value()); return &value_; }
  constexpr T& value() & noexcept { return **this; }
  constexpr const T& value() const& noexcept { return **this; }
  constexpr T&& value() && noexcept { return std::move(**this); }
  constexpr T value_or(T fallback) const { return has_value() ? value_ : fallback; }

  /// errc::ok when a value is held.
  [[nodiscard]] constexpr errc error() const noexcept { return error_; }

 private:
  constexpr void destroy() noexcept {
    if constexpr (!std::is_trivially_destructible_v<T>) {
      if (has_value()) std::destroy_at(&value_);
    }
  }

  union {
    T value_;
  };
  errc error_;
};

/// result<void>: success or an error, nothing else.
template <>
class [[nodiscard]] result<void> {
 public:
  constexpr result() noexcept = default;
  constexpr result(errc e) noexcept : error_(e) {}  // NOLINT: implicit by design
  [[nodiscard]] constexpr bool has_value() const noexcept { return error_ == errc::ok; }
  constexpr explicit operator bool() const noexcept { return has_value(); }
  [[nodiscard]] constexpr errc error() const noexcept { return error_; }

 private:
  errc error_ = errc::ok;
};

}  // namespace ferry
