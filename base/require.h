// ferry/base/require.h: input checks that say what and where, in one line.
//
//   FERRY_REQUIRE(n <= in.remaining(), errc::truncated, "extent ", k, " is ", n);
//
// checks a condition on *input* (in the manner of Cap'n Proto's
// KJ_REQUIRE) and, when it is false, returns from the enclosing function a
// ferry::error with `code` and a context made of the values joined in
// order, with nothing between them: strings as they are, integers in
// decimal, names from the input through ferry::quote() by the caller
// (quote(name)), so a context built here reads exactly as one built by hand.
// The values are evaluated only when the condition fails: a check on the
// fast path costs a compare and a branch, never a string.
//
// The enclosing function returns result<T, error> (or error). Broken
// preconditions of a caller are bugs, not input: assert them instead.
//
// context(values...) and make_error(code, values...) are the same joining
// for code that builds an error without a condition.
#pragma once

#include <charconv>
#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#include "ferry/base/error.h"

namespace ferry {
namespace detail {

inline void append_context(std::string& out, std::string_view s) { out += s; }
inline void append_context(std::string& out, const char* s) { out += s; }
inline void append_context(std::string& out, const std::string& s) { out += s; }
inline void append_context(std::string& out, char c) { out += c; }
// Integers in decimal (unsigned char and signed char too, as numbers: a
// byte from the input is never printed as a raw character).
template <std::integral I>
  requires(!std::same_as<I, bool> && !std::same_as<I, char>)
void append_context(std::string& out, I v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}
template <error_enum E>
void append_context(std::string& out, E e) {
  out += name(e);
}

}  // namespace detail

/// The values joined as FERRY_REQUIRE joins them.
template <class... V>
[[nodiscard]] std::string context(const V&... values) {
  std::string out;
  (detail::append_context(out, values), ...);
  return out;
}

/// An error with `code` and the values joined as its context.
template <class... V>
[[nodiscard]] error make_error(error_code code, const V&... values) {
  return error(code, context(values...));
}

}  // namespace ferry

/// FERRY_REQUIRE(cond, code, values...): if `cond` is false, returns
/// ferry::make_error(code, values...) from the enclosing function.
#define FERRY_REQUIRE(cond, code, ...)                                    \
  do {                                                                    \
    if (!(cond)) [[unlikely]] {                                           \
      return ::ferry::make_error((code)__VA_OPT__(, ) __VA_ARGS__);       \
    }                                                                     \
  } while (false)
