// ferry/base/error.h: how ferry reports errors.
//
// ERROR CODES
//
// An error code is a stable number, and its block says which module
// raised it. The numbers are part of ferry's interface: never reused, so a
// value logged (or sent in an ABORT message) means the same thing next
// year. (They were renumbered once, before 1.0, into these blocks:
// docs/errors.md lists every code and the old numbers.) Each module
// declares its own codes beside its code, in one block:
//
//   1..99     base/ and wire/     ferry::errc (this header)
//   100..199  codec/              ferry::codec_errc (codec/error.h)
//   200..249  schema/             ferry::schema_errc (schema/error.h)
//   250..299  graph/              ferry::graph_errc (graph/error.h)
//   300..399  comm/ and the torch backend (python/distributed/)
//                                 ferry::comm_errc (comm/error.h)
//   400..499  checkpoint/         ferry::checkpoint_errc (checkpoint/error.h)
//   500..599  trainer/            ferry::trainer_errc (trainer/error.h)
//   600..699  tools/ (the CLI)    ferry::tools_errc (tools/error.h)
//
// Failures every format shares (bad magic, a checksum, trailing bytes,
// I/O) are base codes, ferry::errc. Module enums live in namespace ferry
// under distinct names, so code in any namespace writes `errc::truncated`
// and `graph_errc::type_mismatch` without one hiding the other. A module
// declares its enum, names and messages from one list with
// FERRY_DEFINE_ERRORS, which registers them; a new code takes the next free
// number of its module's block, and a new row in docs/errors.md (a test
// checks both).
//
// `error_code` holds any of them (two bytes); name() and message() find the
// text of every registered code.
//
// RESULTS AND CONTEXT
//
// Decoders return `result<T>`: a T or an error_code, the shape of C++23
// std::expected<T, error_code> (written out because clang 14, which builds
// ferry's fuzzers, cannot see libstdc++'s <expected>). They never throw.
// Where a person needs to know *what and where* (a file and what the OS
// said, a tensor, a rank), functions return `result<T, error>`: the code
// plus a short context, and the OS's errno where there is one. Application
// layers that prefer exceptions throw `ferry::exception`, which carries the
// same `error`.
//
// Bugs (broken preconditions of the caller, such as mismatched buffer sizes)
// are assertions, not errors.
#pragma once

#include <cassert>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace ferry {

/// Marks an enum as a ferry error enum (convertible to error_code).
template <class E>
struct is_error_enum : std::false_type {};
template <class E>
concept error_enum = is_error_enum<E>::value;

#define FERRY_ERROR_ENUM(E) \
  template <>               \
  struct is_error_enum<E> : std::true_type {}

/// FERRY_DEFINE_ERRORS(E, LIST): declares `enum class E` and registers its
/// names and messages, from one list, so the two can never disagree. LIST
/// is a macro taking X and expanding to X(name, number, "message") once per
/// code (see FERRY_BASE_ERRORS below). Use it at namespace ferry scope.
#define FERRY_DEFINE_ERRORS(E, LIST)                                                          \
  enum class E : std::uint16_t { LIST(FERRY_ERROR_ENUMERATOR_) };                             \
  FERRY_ERROR_ENUM(E);                                                                        \
  namespace detail {                                                                          \
  inline constexpr error_info E##_table[] = {LIST(FERRY_ERROR_INFO_)};                        \
  [[maybe_unused]] inline const bool E##_registered = register_errors(E##_table);             \
  }                                                                                           \
  static_assert(true)
#define FERRY_ERROR_ENUMERATOR_(name, value, text) name = value,
#define FERRY_ERROR_INFO_(name, value, text) {value, #name, text},

/// The name and text of one code, as a module registers them.
struct error_info {
  std::uint16_t value;
  std::string_view name;     ///< the enumerator ("truncated")
  std::string_view message;  ///< a short English description
};

/// Makes a module's codes known to name() and message(). Each module's
/// error header calls it through an inline variable, so every program that
/// can see a code can print it. Returns true. A value registered twice is
/// a bug (two modules claiming one number): asserted.
bool register_errors(std::span<const error_info> table) noexcept;

/// The base codes (1..99): byte-level decoding, and failures every format
/// shares.
#define FERRY_BASE_ERRORS(X)                                            \
  X(ok, 0, "no error")                                                  \
  X(truncated, 1, "input ends before the value it announces")           \
  X(no_space, 2, "output buffer is too small")                          \
  X(varint_overlong, 3, "varint has a redundant trailing zero byte")    \
  X(varint_overflow, 4, "varint value does not fit the target type")    \
  X(out_of_range, 5, "position or length lies outside the buffer")      \
  X(limit_exceeded, 6, "length exceeds the decoder's limit")            \
  X(size_mismatch, 7, "sizes that must agree do not")                   \
  X(bad_magic, 8, "input does not start with the expected magic bytes") \
  X(unsupported_version, 9, "unsupported format version")               \
  X(bad_byte_order, 10, "byte-order field is neither little nor big")   \
  X(depth_exceeded, 11, "nesting deeper than the configured limit")     \
  X(bad_value, 12, "flag, tag or enumerated field out of range")        \
  X(duplicate_key, 13, "a key appears twice")                           \
  X(trailing_bytes, 14, "bytes remain after the end")                   \
  X(io_error, 15, "file or stream I/O failed")                          \
  X(checksum_mismatch, 16, "CRC32C does not match the bytes it covers")
FERRY_DEFINE_ERRORS(errc, FERRY_BASE_ERRORS);


/// Any ferry error code: a stable number, 0 for "no error".
class error_code {
 public:
  constexpr error_code() noexcept = default;
  template <error_enum E>
  constexpr error_code(E e) noexcept : value_(static_cast<std::uint16_t>(e)) {}  // NOLINT: implicit by design
  /// The code with this number (for numbers read from a wire or a log).
  [[nodiscard]] static constexpr error_code from_value(std::uint16_t v) noexcept {
    error_code c;
    c.value_ = v;
    return c;
  }
  [[nodiscard]] constexpr std::uint16_t value() const noexcept { return value_; }
  /// True for an error, false for errc::ok (as std::error_code).
  constexpr explicit operator bool() const noexcept { return value_ != 0; }
  friend constexpr bool operator==(error_code, error_code) = default;

 private:
  std::uint16_t value_ = 0;
};

/// A short, stable English description of `e`, for logs and error messages
/// ("unknown error" for a number no module registered).
std::string_view message(error_code e) noexcept;

/// The enumerator's name ("truncated", ...), for tests and tools, or
/// "unknown".
std::string_view name(error_code e) noexcept;

/// Prints the name, so test failures say which code they saw.
std::ostream& operator<<(std::ostream& os, error_code e);

/// `text`, taken from input (a tensor name, a record name, a global), as
/// it goes into an error's context: in single quotes, one printable line.
/// Control characters (C0, DEL and Unicode's C1), bytes that are not
/// UTF-8 and Unicode's direction overrides are escaped (\n, \r, \t, \0,
/// \x1b, \u202e...), and so are ' and \ (\' and \\: the quoted text
/// ends at its closing quote); a text longer than `max_bytes` keeps its first
/// `max_bytes` bytes, then "...' (N bytes)". Every decoder puts names
/// from its input into contexts through quote(), so a hostile name can
/// neither forge a second line nor drive the terminal.
[[nodiscard]] std::string quote(std::string_view text, std::size_t max_bytes = 200);

/// `text` with the characters quote() escapes escaped, unquoted and uncut;
/// text that needs no escape comes back as it is.
[[nodiscard]] std::string printable(std::string text);

/// An error code with the context a person needs: what failed and where
/// (a file name, a tensor, a field, a rank), and the operating system's
/// errno when the OS said why. The context is one printable line
/// (printable() on the way in, and at most max_context_bytes bytes), so
/// what() is one line whatever the input held.
class error {
 public:
  /// Bytes of context kept: more is cut, ending "...".
  static constexpr std::size_t max_context_bytes = 4096;

  error() = default;
  error(error_code code, std::string context = {}, int sys_errno = 0)  // NOLINT: implicit by design
      : code_(code), sys_errno_(sys_errno), context_(clean(std::move(context))) {}
  template <error_enum E>
  error(E code, std::string context = {}, int sys_errno = 0)  // NOLINT: implicit by design
      : error(error_code(code), std::move(context), sys_errno) {}

  /// io_error with the OS's reason: "path: No such file or directory".
  [[nodiscard]] static error from_errno(int sys_errno, std::string context) {
    return error(errc::io_error, std::move(context), sys_errno);
  }

  [[nodiscard]] error_code code() const noexcept { return code_; }
  [[nodiscard]] const std::string& context() const noexcept { return context_; }
  /// The errno the OS reported, or 0.
  [[nodiscard]] int sys_errno() const noexcept { return sys_errno_; }
  /// One line for people: "context: reason", where the reason is the OS's
  /// (strerror) when there is an errno and the code's message otherwise.
  [[nodiscard]] std::string what() const;
  /// The same error with more context in front: "outer: inner context".
  [[nodiscard]] error wrap(std::string_view outer) const&;

  friend bool operator==(const error& a, error_code b) noexcept { return a.code_ == b; }

 private:
  static std::string clean(std::string context);

  error_code code_;
  int sys_errno_ = 0;
  std::string context_;
};

std::ostream& operator<<(std::ostream& os, const error& e);

/// The exception of ferry's throwing layers (result::value() on an error,
/// the communicator, tools): what() is error().what().
class exception : public std::runtime_error {
 public:
  explicit exception(ferry::error e) : std::runtime_error(e.what()), error_(std::move(e)) {}
  [[nodiscard]] const ferry::error& error() const noexcept { return error_; }
  [[nodiscard]] error_code code() const noexcept { return error_.code(); }

 private:
  ferry::error error_;
};

namespace detail {
[[noreturn]] void throw_error(const error& e);
[[noreturn]] void throw_error(error_code e);
}  // namespace detail

/// Either a T or an error E (error_code, or error with context) that is
/// not "ok". [[nodiscard]] because an ignored result is an ignored error.
template <class T, class E = error_code>
class [[nodiscard]] result {
 public:
  using value_type = T;
  using error_type = E;

  // Requires: e is an error, not errc::ok.
  constexpr result(const E& e) : error_(e) { assert(static_cast<bool>(error_code_of(e))); }  // NOLINT
  constexpr result(E&& e) noexcept : error_(std::move(e)) { assert(static_cast<bool>(error_code_of(error_))); }  // NOLINT
  template <class X>
    requires(!std::is_same_v<std::remove_cvref_t<X>, E> && !std::is_same_v<std::remove_cvref_t<X>, result> &&
             !std::is_convertible_v<X, T> && std::is_convertible_v<X, E>)
  constexpr result(X&& e) : result(E(std::forward<X>(e))) {}  // NOLINT: implicit by design
  constexpr result(const T& v) : has_(true) { std::construct_at(&value_, v); }  // NOLINT
  constexpr result(T&& v) : has_(true) { std::construct_at(&value_, std::move(v)); }  // NOLINT

  constexpr result(const result& o) : error_(o.error_), has_(o.has_) {
    if (o.has_) std::construct_at(&value_, o.value_);
  }
  constexpr result(result&& o) noexcept(std::is_nothrow_move_constructible_v<T>)
      : error_(std::move(o.error_)), has_(o.has_) {
    if (o.has_) std::construct_at(&value_, std::move(o.value_));
  }
  constexpr result& operator=(result o) noexcept(std::is_nothrow_move_constructible_v<T>) {
    destroy();
    has_ = false;  // until the new value exists, should its move throw
    error_ = std::move(o.error_);
    has_ = o.has_;
    if (o.has_) std::construct_at(&value_, std::move(o.value_));
    return *this;
  }
  constexpr ~result() { destroy(); }

  [[nodiscard]] constexpr bool has_value() const noexcept { return has_; }
  constexpr explicit operator bool() const noexcept { return has_; }

  // Requires: has_value().
  constexpr T& operator*() & noexcept { assert(has_); return value_; }
  constexpr const T& operator*() const& noexcept { assert(has_); return value_; }
  constexpr T&& operator*() && noexcept { assert(has_); return std::move(value_); }
  constexpr T* operator->() noexcept { assert(has_); return &value_; }
  constexpr const T* operator->() const noexcept { assert(has_); return &value_; }

  /// The value; throws ferry::exception carrying the error if there is
  /// none (as std::expected::value() throws bad_expected_access).
  constexpr T& value() & { check(); return value_; }
  constexpr const T& value() const& { check(); return value_; }
  constexpr T&& value() && { check(); return std::move(value_); }
  constexpr T value_or(T fallback) const { return has_ ? value_ : fallback; }

  /// The error; a default E (errc::ok) when a value is held.
  [[nodiscard]] constexpr const E& error() const& noexcept { return error_; }
  [[nodiscard]] constexpr E&& error() && noexcept { return std::move(error_); }

 private:
  static constexpr error_code error_code_of(const E& e) noexcept {
    if constexpr (std::is_same_v<E, error_code>) {
      return e;
    } else {
      return e.code();
    }
  }
  constexpr void check() const {
    if (!has_) detail::throw_error(error_);
  }
  constexpr void destroy() noexcept {
    if constexpr (!std::is_trivially_destructible_v<T>) {
      if (has_) std::destroy_at(&value_);
    }
  }

  union {
    T value_;
  };
  E error_{};
  bool has_ = false;
};

/// result<void>: success or an error, nothing else.
template <class E>
class [[nodiscard]] result<void, E> {
 public:
  using value_type = void;
  using error_type = E;

  constexpr result() noexcept = default;
  // Requires: e is an error, not errc::ok (a success is result<void>{}).
  constexpr result(const E& e) : error_(e) { assert(failed()); }  // NOLINT: implicit by design
  constexpr result(E&& e) noexcept : error_(std::move(e)) { assert(failed()); }  // NOLINT
  template <class X>
    requires(!std::is_same_v<std::remove_cvref_t<X>, E> && !std::is_same_v<std::remove_cvref_t<X>, result> &&
             std::is_convertible_v<X, E>)
  constexpr result(X&& e) : error_(E(std::forward<X>(e))) { assert(failed()); }  // NOLINT: implicit by design

  [[nodiscard]] constexpr bool has_value() const noexcept { return !failed(); }
  constexpr explicit operator bool() const noexcept { return !failed(); }
  /// Throws ferry::exception if this holds an error.
  constexpr void value() const {
    if (failed()) detail::throw_error(error_);
  }
  [[nodiscard]] constexpr const E& error() const& noexcept { return error_; }
  [[nodiscard]] constexpr E&& error() && noexcept { return std::move(error_); }

 private:
  [[nodiscard]] constexpr bool failed() const noexcept {
    if constexpr (std::is_same_v<E, error_code>) {
      return static_cast<bool>(error_);
    } else {
      return static_cast<bool>(error_.code());
    }
  }
  E error_{};
};

/// FERRY_TRY(expr): evaluates a result; if it holds an error, returns that
/// error from the enclosing function (whose result type must accept it).
#define FERRY_TRY(...)                                                      \
  if (auto ferry_try_result_ = (__VA_ARGS__); !ferry_try_result_) {         \
    return std::move(ferry_try_result_).error();                            \
  } else                                                                    \
    (void)0

/// FERRY_TRY_ASSIGN(lhs, expr): evaluates a result; on error returns it
/// from the enclosing function, else moves the value into `lhs`, which may
/// be a declaration: FERRY_TRY_ASSIGN(auto n, in.read_varint());
#define FERRY_TRY_ASSIGN(lhs, ...) \
  FERRY_TRY_ASSIGN_IMPL_(FERRY_TRY_CONCAT_(ferry_try_value_, __LINE__), lhs, __VA_ARGS__)
#define FERRY_TRY_CONCAT_(a, b) FERRY_TRY_CONCAT2_(a, b)
#define FERRY_TRY_CONCAT2_(a, b) a##b
#define FERRY_TRY_ASSIGN_IMPL_(tmp, lhs, ...)  \
  auto tmp = (__VA_ARGS__);                    \
  if (!tmp) return std::move(tmp).error();     \
  lhs = std::move(*tmp)

}  // namespace ferry
