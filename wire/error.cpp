#include "ferry/wire/error.h"

namespace ferry {

std::string_view message(errc e) noexcept {
  switch (e) {
    case errc::ok: return "no error";
    case errc::truncated: return "input ends before the value it announces";
    case errc::no_space: return "output buffer is too small";
    case errc::varint_overlong: return "varint has a redundant trailing zero byte";
    case errc::varint_overflow: return "varint value does not fit the target type";
    case errc::out_of_range: return "position or length lies outside the buffer";
    case errc::limit_exceeded: return "length exceeds the decoder's limit";
    case errc::size_mismatch: return "buffer sizes do not match the element count";
    case errc::unknown_dtype: return "unknown dtype";
  }
  return "unknown error";
}

std::string_view name(errc e) noexcept {
  switch (e) {
    case errc::ok: return "ok";
    case errc::truncated: return "truncated";
    case errc::no_space: return "no_space";
    case errc::varint_overlong: return "varint_overlong";
    case errc::varint_overflow: return "varint_overflow";
    case errc::out_of_range: return "out_of_range";
    case errc::limit_exceeded: return "limit_exceeded";
    case errc::size_mismatch: return "size_mismatch";
    case errc::unknown_dtype: return "unknown_dtype";
  }
  return "unknown";
}

}  // namespace ferry
