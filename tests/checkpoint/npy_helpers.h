// What the .npy/.npz tests share (npy_header_test.cpp, npy_files_test.cpp,
// npz_hostile_test.cpp): NumPy's files in tests/data/npy and headers built
// from dict text.
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/checkpoint/npy.h"
#include "helpers.h"

namespace ferry::checkpoint::testing {

using codec::dtype;
using wire::byte_order;

inline const fs::path npy_dir = fs::path(FERRY_TEST_DATA_DIR) / "npy";

inline std::vector<std::byte> bytes_of(std::string_view s) {
  const auto b = std::as_bytes(std::span(s));
  return {b.begin(), b.end()};
}

// A .npy header around dict text `text` (without the final '\n', which is
// added after `pad` spaces), in version `major`.
inline std::vector<std::byte> npy_head(std::string_view text, int major = 1, std::size_t pad = 0, bool newline = true) {
  std::string body(text);
  body.append(pad, ' ');
  if (newline) body += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const std::uint32_t n = static_cast<std::uint32_t>(body.size());
  out += static_cast<char>(n & 0xFF);
  out += static_cast<char>((n >> 8) & 0xFF);
  if (major > 1) {
    out += static_cast<char>((n >> 16) & 0xFF);
    out += static_cast<char>((n >> 24) & 0xFF);
  }
  return bytes_of(out + body);
}

inline std::string dict(std::string_view descr, std::string_view shape, std::string_view fortran = "False") {
  return "{'descr': '" + std::string(descr) + "', 'fortran_order': " + std::string(fortran) + ", 'shape': " +
         std::string(shape) + ", }";
}

inline result<npy_header, error> parse_text(std::string_view text, int major = 1, const limits& lim = {}) {
  return parse_npy_header(npy_head(text, major), lim);
}

// A descr's ferry dtype and byte order ('<f4': f32, little).
inline std::pair<dtype, byte_order> dtype_of_descr(std::string_view d) {
  static const std::pair<const char*, dtype> kinds[] = {
      {"b1", dtype::boolean}, {"u1", dtype::u8},   {"i1", dtype::i8},   {"u2", dtype::u16},
      {"i2", dtype::i16},     {"u4", dtype::u32},  {"i4", dtype::i32},  {"u8", dtype::u64},
      {"i8", dtype::i64},     {"f2", dtype::f16},  {"f4", dtype::f32},  {"f8", dtype::f64},
  };
  for (const auto& [k, t] : kinds) {
    if (d.substr(1) == k) return {t, d[0] == '>' ? byte_order::big : byte_order::little};
  }
  ADD_FAILURE() << "descr " << d;
  return {dtype::u8, byte_order::little};
}

// A shape as headers.golden lists it: "3,4", or "-" for ().
inline std::vector<std::uint64_t> shape_of(std::string_view s) {
  std::vector<std::uint64_t> out;
  if (s == "-") return out;
  std::stringstream in{std::string(s)};
  std::string part;
  while (std::getline(in, part, ',')) out.push_back(std::stoull(part));
  return out;
}

}  // namespace ferry::checkpoint::testing
