// NumPy .npy and .npz (checkpoint/npy.h): the header grammar, rule by rule,
// each refusal with its own error; write_npy_header byte-identical to what
// Debian's NumPy 1.24.2 writes (tests/data/npy/headers.golden); the files
// NumPy wrote (tests/data/npy, make_npy_files.py golden) read to the values
// NumPy read, in both byte orders, Fortran order as column-major strides,
// host-order data mapped without a copy; .npz stored, deflated, ZIP64 and
// empty; a deflate bomb, a short stream and a bad CRC-32 refused; ferry's
// own files read back; every prefix and byte flip refused or read.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "ferry/checkpoint/detail/zip.h"
#include "ferry/checkpoint/npy.h"
#include "ferry/wire/bulk.h"
#include "helpers.h"

namespace ferry::checkpoint::testing {
namespace {

using codec::dtype;
using wire::byte_order;

const fs::path npy_dir = fs::path(FERRY_TEST_DATA_DIR) / "npy";

std::vector<std::byte> bytes_of(std::string_view s) {
  const auto b = std::as_bytes(std::span(s));
  return {b.begin(), b.end()};
}

// A .npy header around dict text `text` (without the final '\n', which is
// added after `pad` spaces), in version `major`.
std::vector<std::byte> npy_head(std::string_view text, int major = 1, std::size_t pad = 0, bool newline = true) {
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

std::string dict(std::string_view descr, std::string_view shape, std::string_view fortran = "False") {
  return "{'descr': '" + std::string(descr) + "', 'fortran_order': " + std::string(fortran) + ", 'shape': " +
         std::string(shape) + ", }";
}

result<npy_header, error> parse_text(std::string_view text, int major = 1, const limits& lim = {}) {
  return parse_npy_header(npy_head(text, major), lim);
}

// ---------------------------------------------------------------------------
// The header grammar.

struct accepted_case {
  std::string text;
  int major;
  std::vector<std::uint64_t> shape;
  bool fortran;
};

TEST(NpyHeader, EveryAcceptedShapeOfTheDict) {
  const std::vector<accepted_case> cases = {
      {dict("<f4", "(3, 4)"), 1, {3, 4}, false},
      // key order, quotes, spacing, trailing commas
      {"{\"shape\": (3, 4), \"descr\": \"<f4\", \"fortran_order\": False}", 1, {3, 4}, false},
      {"{'fortran_order':True,'shape':(3,4,),'descr':'<f4',}", 1, {3, 4}, true},
      {" \t\r\n{ 'shape' : ( 3 ,\n 4 ) , 'fortran_order' : False , 'descr' : \"<f4\" } ", 1, {3, 4}, false},
      {"{'descr': '<f4', 'shape': (3, 4), 'fortran_order': False}", 1, {3, 4}, false},
      // (n,), (), ( ), zero extents
      {dict("<f4", "(3,)"), 1, {3}, false},
      {dict("<f4", "( 3 , )"), 1, {3}, false},
      {dict("<f4", "()"), 1, {}, false},
      {dict("<f4", "( )"), 1, {}, false},
      {dict("<f4", "(0, 3)"), 1, {0, 3}, false},
      {dict("|u1", "(18446744073709551615,)"), 1, {18446744073709551615u}, false},
      // Python 2's L, in versions 1 and 2
      {dict("<f4", "(3L, 4L)"), 1, {3, 4}, false},
      {dict("<f4", "(3L,)"), 2, {3}, false},
      // versions 2.0 and 3.0 (UTF-8 text)
      {dict("<f4", "(3, 4)"), 2, {3, 4}, false},
      {dict("<f4", "(3, 4)"), 3, {3, 4}, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    for (const std::size_t pad : {0, 1, 50}) {
      auto h = parse_npy_header(npy_head(c.text, c.major, pad));
      ASSERT_TRUE(h) << h.error();
      EXPECT_EQ(h->major, c.major);
      EXPECT_EQ(h->shape, c.shape);
      EXPECT_EQ(h->fortran_order, c.fortran);
      EXPECT_EQ(h->data_offset, (c.major == 1 ? 10u : 12u) + c.text.size() + pad + 1);
    }
  }
}

TEST(NpyHeader, EveryDescrFerryHolds) {
  const std::pair<const char*, dtype> cases[] = {
      {"|b1", dtype::boolean}, {"|u1", dtype::u8},   {"|i1", dtype::i8},   {"<u2", dtype::u16}, {">i2", dtype::i16},
      {"<u4", dtype::u32},     {">i4", dtype::i32},  {">u8", dtype::u64},  {"<i8", dtype::i64}, {">f2", dtype::f16},
      {"<f4", dtype::f32},     {">f8", dtype::f64},  {"<b1", dtype::boolean}, {"=u1", dtype::u8},
  };
  for (const auto& [descr, want] : cases) {
    auto h = parse_text(dict(descr, "(2,)"));
    ASSERT_TRUE(h) << descr << ": " << h.error();
    auto t = npy_dtype(*h);
    ASSERT_TRUE(t) << descr;
    EXPECT_EQ(*t, want) << descr;
    EXPECT_EQ(h->data_bytes, 2 * codec::size_of(want)) << descr;
    auto o = npy_order(*h, std::nullopt);
    ASSERT_TRUE(o) << descr;
    if (descr[0] == '<') { EXPECT_EQ(*o, byte_order::little); }
    if (descr[0] == '>') { EXPECT_EQ(*o, byte_order::big); }
    if (descr[0] == '|' || descr[0] == '=') { EXPECT_EQ(*o, wire::host_order); }  // one byte: nothing swaps
  }
}

TEST(NpyHeader, ComplexParsesButHasNoFerryDtype) {
  for (const char* descr : {"<c8", ">c16"}) {
    auto h = parse_text(dict(descr, "(2,)"));
    ASSERT_TRUE(h) << h.error();
    EXPECT_EQ(h->kind, 'c');
    auto t = npy_dtype(*h);
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error().code(), checkpoint_errc::unsupported_npy_dtype);
  }
}

TEST(NpyHeader, NativeOrderOfWideElementsOnlyWithTheOption) {
  for (const char* descr : {"=f4", "|f4", "=i8", "|u2"}) {
    auto h = parse_text(dict(descr, "(2,)"));
    ASSERT_TRUE(h) << descr << ": " << h.error();
    auto o = npy_order(*h, std::nullopt);
    ASSERT_FALSE(o) << descr;
    EXPECT_EQ(o.error().code(), errc::bad_byte_order);
    for (const byte_order want : {byte_order::little, byte_order::big}) {
      auto with = npy_order(*h, want);
      ASSERT_TRUE(with);
      EXPECT_EQ(*with, want);
    }
  }
}

struct refused_case {
  std::string text;
  error_code code;
  int major = 1;
};

TEST(NpyHeader, EveryRefusalHasItsCode) {
  std::string many = "(";
  for (int k = 0; k < 65; ++k) many += "1, ";
  many += ")";
  std::string long_key(65, 'k');
  const std::vector<refused_case> cases = {
      // dtypes ferry never holds
      {dict("|O", "(2,)"), checkpoint_errc::unsupported_npy_dtype},
      {dict("<O8", "(2,)"), checkpoint_errc::unsupported_npy_dtype},
      {"{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (2,), }",
       checkpoint_errc::unsupported_npy_dtype},
      {"{'descr': ('<f4', (2,)), 'fortran_order': False, 'shape': (2,), }", checkpoint_errc::unsupported_npy_dtype},
      {dict("<U4", "(2,)"), checkpoint_errc::unsupported_npy_dtype},
      {dict("<M8[ns]", "(2,)"), checkpoint_errc::unsupported_npy_dtype},
      {dict("|V2", "(2,)"), checkpoint_errc::unsupported_npy_dtype},
      {dict("<f3", "(2,)"), checkpoint_errc::unsupported_npy_dtype},
      {dict("<f04", "(2,)"), checkpoint_errc::unsupported_npy_dtype},
      {dict("<b2", "(2,)"), checkpoint_errc::unsupported_npy_dtype},
      {dict("f4", "(2,)"), checkpoint_errc::unsupported_npy_dtype},
      {dict("!f4", "(2,)"), checkpoint_errc::unsupported_npy_dtype},
      // shapes
      {dict("<f4", "(3)"), checkpoint_errc::bad_npy_header},
      {dict("<f4", "3"), checkpoint_errc::bad_npy_header},
      {dict("<f4", "[3]"), checkpoint_errc::bad_npy_header},
      {dict("<f4", "(,)"), checkpoint_errc::bad_npy_header},
      {dict("<f4", "(3,,)"), checkpoint_errc::bad_npy_header},
      {dict("<f4", "(3 4)"), checkpoint_errc::bad_npy_header},
      {dict("<f4", "(-3,)"), checkpoint_errc::bad_npy_header},
      {dict("<f4", "(03,)"), checkpoint_errc::bad_npy_header},
      {dict("<f4", "(0x3,)"), checkpoint_errc::bad_npy_header},
      {dict("<f4", "(3L,)"), checkpoint_errc::bad_npy_header, 3},  // no L in version 3
      {dict("<f4", "(3LL,)"), checkpoint_errc::bad_npy_header},
      {dict("<f4", "(18446744073709551616,)"), checkpoint_errc::shape_overflow},
      {dict("<f4", "(4294967296, 4294967296)"), checkpoint_errc::shape_overflow},
      {dict("<f8", "(2305843009213693952,)"), checkpoint_errc::shape_overflow},  // 2^61 * 8 bytes
      {dict("<f4", "(0, 4294967296, 4294967296)"), checkpoint_errc::shape_overflow},  // the strides would wrap
      {dict("<f4", many), errc::limit_exceeded},
      // fortran_order
      {dict("<f4", "(2,)", "true"), checkpoint_errc::bad_npy_header},
      {dict("<f4", "(2,)", "0"), checkpoint_errc::bad_npy_header},
      {dict("<f4", "(2,)", "'False'"), checkpoint_errc::bad_npy_header},
      // keys
      {"{'descr': '<f4', 'shape': (2,), }", checkpoint_errc::bad_npy_header},
      {"{'fortran_order': False, 'shape': (2,), }", checkpoint_errc::bad_npy_header},
      {"{'descr': '<f4', 'fortran_order': False, }", checkpoint_errc::bad_npy_header},
      {"{}", checkpoint_errc::bad_npy_header},
      {dict("<f4", "(2,)") + "x", checkpoint_errc::bad_npy_header},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1, }", checkpoint_errc::bad_npy_header},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", errc::duplicate_key},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (2,), }", errc::duplicate_key},
      {"{'" + long_key + "': 1, 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
       checkpoint_errc::bad_npy_header},
      // strings: no escapes, no prefixes, no unclosed quotes, no bare keys
      {"{'de\\x73cr': '<f4', 'fortran_order': False, 'shape': (2,), }", checkpoint_errc::bad_npy_header},
      {"{b'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", checkpoint_errc::bad_npy_header},
      {"{'descr\": '<f4', 'fortran_order': False, 'shape': (2,), }", checkpoint_errc::bad_npy_header},
      {"{descr: '<f4', 'fortran_order': False, 'shape': (2,), }", checkpoint_errc::bad_npy_header},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (2,), }", checkpoint_errc::bad_npy_header},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (2,), }", checkpoint_errc::bad_npy_header},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), ", checkpoint_errc::bad_npy_header},
      {"'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", checkpoint_errc::bad_npy_header},
      {"", checkpoint_errc::bad_npy_header},
  };
  for (const auto& c : cases) {
    auto h = parse_text(c.text, c.major);
    ASSERT_FALSE(h) << c.text;
    EXPECT_EQ(h.error().code(), c.code) << c.text << ": " << h.error();
  }
}

TEST(NpyHeader, ErrorsSayWhereInTheFile) {
  const std::string text = "{'descr': '<f4', 'bogus': 1, 'fortran_order': False, 'shape': (2,), }";
  auto h = parse_text(text);
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().code(), checkpoint_errc::bad_npy_header);
  // After the key's closing quote, counted from the file's first byte.
  const std::size_t at = 10 + text.find("'bogus'") + 7;
  EXPECT_NE(h.error().what().find("npy header byte " + std::to_string(at)), std::string::npos) << h.error();
  EXPECT_NE(h.error().what().find("bogus"), std::string::npos) << h.error();
}

TEST(NpyHeader, RefusalsOfTheFraming) {
  const auto good = npy_head(dict("<f4", "(2,)"));
  const auto code_of = [](const std::vector<std::byte>& b, const limits& lim = {}) {
    auto h = parse_npy_header(b, lim);
    EXPECT_FALSE(h);
    return h ? error_code{} : h.error().code();
  };
  // magic
  auto b = good;
  b[0] = std::byte{0x92};
  EXPECT_EQ(code_of(b), errc::bad_magic);
  b = good;
  b[5] = std::byte{'y'};
  EXPECT_EQ(code_of(b), errc::bad_magic);
  // versions: 1.0, 2.0, 3.0 only
  for (const auto& [major, minor] : {std::pair{0, 0}, {4, 0}, {1, 1}, {2, 1}, {255, 0}}) {
    b = good;
    b[6] = static_cast<std::byte>(major);
    b[7] = static_cast<std::byte>(minor);
    EXPECT_EQ(code_of(b), errc::unsupported_version) << major << "." << minor;
  }
  // every prefix of the header is truncated
  for (std::size_t n = 0; n + 1 < good.size(); ++n) {
    auto h = parse_npy_header(std::span(good).first(n));
    ASSERT_FALSE(h) << n;
    EXPECT_EQ(h.error().code(), errc::truncated) << n;
  }
  // no '\n' at the end of the header text
  EXPECT_EQ(code_of(npy_head(dict("<f4", "(2,)"), 1, 3, false)), checkpoint_errc::bad_npy_header);
  EXPECT_EQ(code_of(npy_head("", 1, 0, false)), checkpoint_errc::bad_npy_header);
  // header length over the limit, in each version's length field
  const std::string fits = dict("<f4", "(2,)");
  for (const int major : {1, 2, 3}) {
    const auto at_limit = npy_head(fits, major, 10'000 - fits.size() - 1);
    EXPECT_TRUE(parse_npy_header(at_limit)) << major;
    EXPECT_EQ(code_of(npy_head(fits, major, 10'000 - fits.size())), errc::limit_exceeded) << major;
    limits lim;
    lim.max_npy_header_bytes = 100;
    EXPECT_EQ(code_of(at_limit, lim), errc::limit_exceeded) << major;
  }
  // a header length beyond the file, and a huge one
  b = npy_head(fits, 2);
  b[8] = std::byte{0xFF};
  b[9] = std::byte{0xFF};
  b[10] = std::byte{0xFF};
  b[11] = std::byte{0xFF};
  EXPECT_EQ(code_of(b), errc::limit_exceeded);
  limits unlimited;
  unlimited.max_npy_header_bytes = UINT64_MAX;
  EXPECT_EQ(code_of(b, unlimited), errc::truncated);
  // version 3 text is UTF-8
  EXPECT_EQ(code_of(npy_head("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), '\xff': 1}", 3)),
            checkpoint_errc::bad_utf8);
  // dims over a lowered limit
  limits three;
  three.max_dims = 3;
  EXPECT_TRUE(parse_npy_header(npy_head(dict("<f4", "(1, 2, 3)")), three));
  EXPECT_EQ(code_of(npy_head(dict("<f4", "(1, 2, 3, 4)")), three), errc::limit_exceeded);
}

TEST(NpyHeader, SixtyFourDimsAccepted) {
  std::string shape = "(";
  for (int k = 0; k < 64; ++k) shape += "1, ";
  shape += ")";
  auto h = parse_text(dict("<f4", shape));
  ASSERT_TRUE(h) << h.error();
  EXPECT_EQ(h->shape.size(), 64u);
}

// ---------------------------------------------------------------------------
// write_npy_header against NumPy's bytes.

std::vector<std::byte> from_hex(std::string_view hex) {
  std::vector<std::byte> out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<std::byte>(std::stoul(std::string(hex.substr(2 * i, 2)), nullptr, 16));
  }
  return out;
}

std::pair<dtype, byte_order> dtype_of_descr(std::string_view d) {
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

std::vector<std::uint64_t> shape_of(std::string_view s) {
  std::vector<std::uint64_t> out;
  if (s == "-") return out;
  std::stringstream in{std::string(s)};
  std::string part;
  while (std::getline(in, part, ',')) out.push_back(std::stoull(part));
  return out;
}

TEST(NpyWriteHeader, ByteIdenticalToNumpy) {
  std::ifstream in(npy_dir / "headers.golden");
  ASSERT_TRUE(in) << "tests/data/npy/headers.golden";
  std::string descr, fortran, shape_text, want;
  std::size_t lines = 0;
  while (in >> descr >> fortran >> shape_text >> want) {
    ++lines;
    SCOPED_TRACE(descr + " " + fortran + " " + shape_text);
    const auto [t, order] = dtype_of_descr(descr);
    std::vector<std::uint64_t> shape;
    limits lim;
    if (const auto x = shape_text.find('x'); x != std::string::npos) {  // N extents of E
      shape.assign(std::stoull(shape_text.substr(0, x)), std::stoull(shape_text.substr(x + 1)));
      lim.max_dims = shape.size();
      lim.max_npy_header_bytes = 1 << 20;
    } else {
      shape = shape_of(shape_text);
    }
    auto got = write_npy_header(t, order, fortran == "True", shape, lim);
    ASSERT_TRUE(got) << got.error();
    if (const auto colon = want.find(':'); colon != std::string::npos) {  // LENGTH:CRC32
      EXPECT_EQ(got->size(), std::stoull(want.substr(0, colon)));
      EXPECT_EQ(detail::zip_crc32(*got), std::stoul(want.substr(colon + 1), nullptr, 16));
      EXPECT_EQ((*got)[6], got->size() > 65535 + 10 ? std::byte{2} : std::byte{1});
    } else {
      EXPECT_EQ(*got, from_hex(want));
    }
    EXPECT_EQ(got->size() % 64, 0u);
    // And it parses back to what it says (products aside: 2^64 - 1 extents).
    auto back = parse_npy_header(*got, lim);
    if (back) {
      EXPECT_EQ(back->shape, shape);
      EXPECT_EQ(back->fortran_order, fortran == "True");
      EXPECT_EQ(back->data_offset, got->size());
    } else {
      EXPECT_EQ(back.error().code(), checkpoint_errc::shape_overflow) << back.error();
    }
  }
  EXPECT_GT(lines, 100u);
}

TEST(NpyWriteHeader, Refusals) {
  const std::uint64_t shape[] = {2};
  for (const dtype t : {dtype::bf16, dtype::f8_e4m3, dtype::f8_e5m2}) {
    auto h = write_npy_header(t, byte_order::little, false, shape);
    ASSERT_FALSE(h);
    EXPECT_EQ(h.error().code(), checkpoint_errc::unsupported_npy_dtype);
  }
  const std::vector<std::uint64_t> many(65, 1);
  auto h = write_npy_header(dtype::f32, byte_order::little, false, many);
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().code(), errc::limit_exceeded);
}

// ---------------------------------------------------------------------------
// The files NumPy wrote.

struct expected_array {
  std::string name, descr;
  bool fortran = false;
  std::vector<std::uint64_t> shape;
  std::uint32_t crc = 0;
};

std::vector<expected_array> read_expected_npy(const fs::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in) << p;
  std::vector<expected_array> out;
  std::string name, descr, fortran, shape, crc;
  while (in >> name >> descr >> fortran >> shape >> crc) {
    out.push_back({name, descr, fortran == "True", shape_of(shape), static_cast<std::uint32_t>(std::stoul(crc, nullptr, 16))});
  }
  return out;
}

// zlib's CRC-32 of `t`'s elements, row-major, as little-endian bytes.
std::uint32_t le_crc(const tensor& t) {
  auto rows = t.contiguous_copy();
  const std::size_t width = codec::size_of(t.dtype());
  std::vector<std::byte> le(rows.size());
  if (!rows.empty()) wire::convert(rows, wire::host_order, le, byte_order::little, width);
  return detail::zip_crc32(le);
}

std::vector<std::uint64_t> column_major(std::span<const std::uint64_t> shape) {
  std::vector<std::uint64_t> s(shape.size());
  std::uint64_t step = 1;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    s[k] = step;
    step *= shape[k] == 0 ? 1 : shape[k];
  }
  return s;
}

// Checks that `r` holds what `want` lists, in order, bit for bit.
void expect_as_numpy_read(const reader& r, const std::vector<expected_array>& want) {
  ASSERT_EQ(r.tensors().size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const auto& w = want[i];
    SCOPED_TRACE(w.name);
    const tensor_info& info = r.tensors()[i];
    EXPECT_EQ(info.name, w.name);
    EXPECT_EQ(info.dtype, dtype_of_descr(w.descr).first);
    EXPECT_EQ(info.shape, w.shape);
    EXPECT_EQ(info.strides, w.fortran ? column_major(w.shape) : contiguous_strides(w.shape));
    const storage_info& st = r.storages()[info.storage];
    if (codec::size_of(info.dtype) > 1) {
      EXPECT_EQ(st.order.value_or(r.order()), w.descr[0] == '>' ? byte_order::big : byte_order::little);
    }
    auto t = r.get(info);
    ASSERT_TRUE(t) << t.error();
    EXPECT_EQ(le_crc(*t), w.crc);
  }
}

// Whether tensor `t` of `r` is a mapping of the file (its address lies at
// the storage's offset within a page, which a copy's almost never does).
bool mapped(const reader& r, const tensor& t) {
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const auto addr = reinterpret_cast<std::uintptr_t>(t.storage_bytes().data());  // an address, not a read
  return addr % page == r.storages()[t.info().storage].offset % page;
}

TEST(NpyFiles, EveryNumpyFileReadsAsNumpyReadIt) {
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(npy_dir)) {
    const fs::path p = entry.path();
    if (p.extension() != ".expected") continue;
    const fs::path file = p.parent_path() / p.stem();
    SCOPED_TRACE(file.filename().string());
    auto r = reader::open(file);
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->format(), file.extension() == ".npy" ? file_format::npy : file_format::npz);
    expect_as_numpy_read(*r, read_expected_npy(p));
    EXPECT_TRUE(r->verify()) << r->verify().error();
    read_options every;
    every.checks = fetch_checks::every_checksum;
    auto again = reader::open(file, every);
    ASSERT_TRUE(again) << again.error();
    auto all = again->get_all();
    EXPECT_TRUE(all) << all.error();
    ++files;
  }
  EXPECT_GE(files, 25u);
}

TEST(NpyFiles, BigAndLittleReadToTheSameValues) {
  for (const char* kind : {"i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", "f4_fortran"}) {
    SCOPED_TRACE(kind);
    auto le = reader::open(npy_dir / (std::string(kind) + "_le.npy"));
    auto be = reader::open(npy_dir / (std::string(kind) + "_be.npy"));
    ASSERT_TRUE(le && be);
    EXPECT_EQ(le->order(), byte_order::little);
    EXPECT_EQ(be->order(), byte_order::big);
    auto a = le->get("arr_0");
    auto b = be->get("arr_0");
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->contiguous_copy(), b->contiguous_copy());
    EXPECT_EQ(a->info().strides, b->info().strides);
  }
}

TEST(NpyFiles, FortranOrderIsColumnMajorStrides) {
  auto r = reader::open(npy_dir / "f4_fortran_le.npy");
  ASSERT_TRUE(r) << r.error();
  auto t = r->get("arr_0");
  ASSERT_TRUE(t) << t.error();
  EXPECT_EQ(std::vector<std::uint64_t>(t->shape().begin(), t->shape().end()), (std::vector<std::uint64_t>{2, 3, 4}));
  EXPECT_EQ(std::vector<std::uint64_t>(t->strides().begin(), t->strides().end()), (std::vector<std::uint64_t>{1, 2, 6}));
  EXPECT_FALSE(t->info().is_contiguous());
  // Element (1, 2, 3) lies at 1 + 2*2 + 3*6 = 23 in the file's order.
  float file_value = 0, row_value = 0;
  std::memcpy(&file_value, t->storage_bytes().data() + 23 * 4, 4);
  const auto rows = t->contiguous_copy();
  std::memcpy(&row_value, rows.data() + (1 * 12 + 2 * 4 + 3) * 4, 4);
  EXPECT_EQ(std::memcmp(&file_value, &row_value, 4), 0);
}

TEST(NpyFiles, HostOrderArraysLoadWithoutACopy) {
  const char* name = wire::host_order == byte_order::little ? "f8_le.npy" : "f8_be.npy";
  auto r = reader::open(npy_dir / name);
  ASSERT_TRUE(r) << r.error();
  auto t = r->get("arr_0");
  ASSERT_TRUE(t) << t.error();
  EXPECT_EQ(r->storages()[0].offset, 128u);  // numpy.save aligns the data to 64
  EXPECT_TRUE(mapped(*r, *t));
  // The other order is a converted copy.
  auto other = reader::open(npy_dir / (wire::host_order == byte_order::little ? "f8_be.npy" : "f8_le.npy"));
  ASSERT_TRUE(other);
  auto u = other->get("arr_0");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->contiguous_copy(), t->contiguous_copy());
}

TEST(NpyFiles, ComplexArraysAreRefusedByName) {
  for (const char* name : {"c8_le.npy", "c16_be.npy"}) {
    auto r = reader::open(npy_dir / name);
    ASSERT_FALSE(r) << name;
    EXPECT_EQ(r.error().code(), checkpoint_errc::unsupported_npy_dtype) << r.error();
  }
}

TEST(NpyFiles, EmptyNpzHasNoTensors) {
  const auto bytes = slurp(npy_dir / "empty.npz");
  ASSERT_EQ(bytes.size(), 22u);
  auto r = reader::open(npy_dir / "empty.npz");
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->format(), file_format::npz);
  EXPECT_TRUE(r->tensors().empty());
  EXPECT_TRUE(r->verify());
}

TEST(NpyFiles, DeflatedOutputFarLargerThanItsInput) {
  auto r = reader::open(npy_dir / "deflated_steps.npz");
  ASSERT_TRUE(r) << r.error();
  auto t = r->get("steps");
  ASSERT_TRUE(t) << t.error();
  ASSERT_EQ(t->bytes().size(), 512u * 1024 * 4);
  float v = 0;
  std::memcpy(&v, t->bytes().data() + (8192 * 5 + 17) * 4, 4);
  EXPECT_EQ(v, 5.0f);
}

// ---------------------------------------------------------------------------
// Files cut, grown and edited.

class NpyHostile : public bytes_files {};

TEST_F(NpyHostile, DataMustCoverTheFileExactly) {
  const auto good = slurp(npy_dir / "f4_le.npy");
  auto cut = good;
  cut.pop_back();
  refused(cut, errc::truncated);
  auto grown = good;
  grown.push_back(std::byte{0});
  refused(grown, errc::trailing_bytes);
  // The header alone of a non-empty array.
  refused(std::vector<std::byte>(good.begin(), good.begin() + 128), errc::truncated);
}

TEST_F(NpyHostile, NativeOrderFileNeedsTheOption) {
  auto b = npy_head(dict("=f4", "(2,)"));
  const float v[2] = {1.5f, -2.0f};
  std::vector<std::byte> data(8);
  wire::convert(std::as_bytes(std::span(v)), wire::host_order, data, byte_order::big, 4);
  b.insert(b.end(), data.begin(), data.end());
  refused(b, errc::bad_byte_order);
  read_options opt;
  opt.npy_native_order = byte_order::big;
  auto r = open_bytes(b, opt);
  ASSERT_TRUE(r) << r.error();
  auto t = r->get("arr_0");
  ASSERT_TRUE(t);
  EXPECT_EQ(std::memcmp(t->bytes().data(), v, 8), 0);
}

TEST_F(NpyHostile, EveryPrefixAndByteFlipIsReadOrRefused) {
  for (const char* name : {"f4_fortran_be.npy", "stored.npz", "deflated.npz"}) {
    SCOPED_TRACE(name);
    const auto good = slurp(npy_dir / name);
    for (std::size_t n = 0; n < good.size(); n += (name[0] == 'f' ? 1 : 7)) {
      auto r = open_bytes(std::vector<std::byte>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)));
      ASSERT_FALSE(r) << n;
    }
    for (std::size_t at = 0; at < good.size(); at += (name[0] == 'f' ? 1 : 3)) {
      auto b = good;
      b[at] ^= std::byte{0x41};
      auto r = open_bytes(b);
      if (!r) continue;
      auto all = r->get_all();  // a flipped deflate stream or data: refused or read, never a crash
      (void)r->verify();
    }
  }
}

// ---------------------------------------------------------------------------
// .npz records built by hand.

std::vector<std::byte> raw_deflate(std::span<const std::byte> in) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::vector<std::byte> out(deflateBound(&z, in.size()) + 64);
  z.next_in = const_cast<Bytef*>(reinterpret_cast<const Bytef*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A .npy file of `n` bytes of u1 data, all `fill`.
std::vector<std::byte> u1_npy(std::uint64_t n, std::byte fill = std::byte{7}) {
  const std::uint64_t shape[] = {n};
  auto b = *write_npy_header(dtype::u8, byte_order::little, false, shape);
  b.resize(b.size() + n, fill);
  return b;
}

// A zip written field by field: records stored or deflated, sizes and CRC
// as given (to lie), ZIP64 everywhere when asked.
struct zip_builder {
  struct record {
    std::string name;
    std::vector<std::byte> stored;  // what lies in the file
    std::uint16_t method;
    std::uint32_t crc;
    std::uint64_t size;  // declared uncompressed size
    std::uint64_t offset = 0;
  };
  std::vector<record> records;
  bool zip64 = false;

  // `content` the record's real bytes; `declared` the size to claim (default: the real one).
  zip_builder& add(std::string name, std::span<const std::byte> content, bool deflate,
                   std::optional<std::uint64_t> declared = {}, std::optional<std::uint32_t> crc = {}) {
    record r{std::move(name), {}, static_cast<std::uint16_t>(deflate ? 8 : 0),
             crc.value_or(detail::zip_crc32(content)), declared.value_or(content.size())};
    r.stored = deflate ? raw_deflate(content) : std::vector<std::byte>(content.begin(), content.end());
    records.push_back(std::move(r));
    return *this;
  }

  std::vector<std::byte> bytes() {
    std::vector<std::byte> out;
    const auto u16 = [&](std::uint64_t v) { for (int k = 0; k < 2; ++k) out.push_back(static_cast<std::byte>(v >> (8 * k))); };
    const auto u32 = [&](std::uint64_t v) { for (int k = 0; k < 4; ++k) out.push_back(static_cast<std::byte>(v >> (8 * k))); };
    const auto u64 = [&](std::uint64_t v) { for (int k = 0; k < 8; ++k) out.push_back(static_cast<std::byte>(v >> (8 * k))); };
    const auto name = [&](const std::string& n) { for (const char c : n) out.push_back(static_cast<std::byte>(c)); };
    const std::uint64_t sat = 0xFFFFFFFF;
    for (auto& r : records) {
      r.offset = out.size();
      u32(0x04034b50);
      u16(zip64 ? 45 : 20);
      u16(0);
      u16(r.method);
      u16(0);
      u16(0x21);
      u32(r.crc);
      u32(zip64 ? sat : r.stored.size());
      u32(zip64 ? sat : r.size);
      u16(r.name.size());
      u16(zip64 ? 20 : 0);
      name(r.name);
      if (zip64) {
        u16(1);
        u16(16);
        u64(r.size);
        u64(r.stored.size());
      }
      out.insert(out.end(), r.stored.begin(), r.stored.end());
    }
    const std::uint64_t dir_offset = out.size();
    for (const auto& r : records) {
      u32(0x02014b50);
      u16(zip64 ? 45 : 20);
      u16(zip64 ? 45 : 20);
      u16(0);
      u16(r.method);
      u16(0);
      u16(0x21);
      u32(r.crc);
      u32(zip64 ? sat : r.stored.size());
      u32(zip64 ? sat : r.size);
      u16(r.name.size());
      u16(zip64 ? 28 : 0);
      u16(0);
      u16(0);
      u16(0);
      u32(0);
      u32(zip64 ? sat : r.offset);
      name(r.name);
      if (zip64) {
        u16(1);
        u16(24);
        u64(r.size);
        u64(r.stored.size());
        u64(r.offset);
      }
    }
    const std::uint64_t dir_size = out.size() - dir_offset;
    if (zip64) {
      const std::uint64_t at = out.size();
      u32(0x06064b50);
      u64(44);
      u16(45);
      u16(45);
      u32(0);
      u32(0);
      u64(records.size());
      u64(records.size());
      u64(dir_size);
      u64(dir_offset);
      u32(0x07064b50);
      u32(0);
      u64(at);
      u32(1);
    }
    u32(0x06054b50);
    u16(0);
    u16(0);
    u16(zip64 ? 0xFFFF : records.size());
    u16(zip64 ? 0xFFFF : records.size());
    u32(zip64 ? sat : dir_size);
    u32(zip64 ? sat : dir_offset);
    u16(0);
    return out;
  }
};

TEST_F(NpyHostile, StoredAndDeflatedRecordsBuiltByHand) {
  const auto a = u1_npy(1000, std::byte{3});
  const auto b = u1_npy(5, std::byte{9});
  for (const bool zip64 : {false, true}) {
    SCOPED_TRACE(zip64 ? "ZIP64" : "plain");
    zip_builder z;
    z.zip64 = zip64;
    z.add("a.npy", a, false).add("b.npy", b, true);
    auto r = open_bytes(z.bytes());
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->format(), file_format::npz);
    auto ta = r->get("a");
    auto tb = r->get("b");
    ASSERT_TRUE(ta && tb);
    EXPECT_EQ(ta->bytes().size(), 1000u);
    EXPECT_EQ(ta->bytes()[999], std::byte{3});
    EXPECT_EQ(tb->bytes().size(), 5u);
    EXPECT_EQ(tb->bytes()[4], std::byte{9});
    EXPECT_TRUE(r->verify()) << r->verify().error();
  }
}

TEST_F(NpyHostile, DeflateBombRefused) {
  // The stream inflates to 1 MiB; the record declares its header and 1024
  // bytes (a .npy header saying (1024,)): what comes out past the declared
  // size is refused, never written anywhere.
  auto small = u1_npy(1024);
  auto big = u1_npy(1024);
  big.resize(small.size() + (1 << 20), std::byte{7});
  zip_builder z;
  z.add("x.npy", big, true, small.size(), detail::zip_crc32(small));
  auto r = open_bytes(z.bytes());
  ASSERT_TRUE(r) << r.error();  // the header inflates fine
  auto t = r->get("x");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code(), checkpoint_errc::bad_deflate) << t.error();
  auto v = r->verify();
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code(), checkpoint_errc::bad_deflate) << v.error();
}

TEST_F(NpyHostile, DeclaredSizeBeyondDeflatesRatioRefusedAtOpen) {
  // A few hundred compressed bytes declaring 1 GiB (a .npy header saying so):
  // refused before anything is allocated.
  const std::uint64_t huge = std::uint64_t{1} << 30;
  auto head = u1_npy(huge - 128, std::byte{0});
  head.resize(128);
  zip_builder z;
  z.add("x.npy", head, true, huge);
  refused(z.bytes(), checkpoint_errc::bad_deflate);
}

TEST_F(NpyHostile, StreamShorterThanDeclaredRefused) {
  const auto full = u1_npy(4096);
  const auto shorter = std::span(full).first(full.size() - 100);
  zip_builder z;
  z.add("x.npy", shorter, true, full.size(), detail::zip_crc32(full));
  auto r = open_bytes(z.bytes());
  ASSERT_TRUE(r) << r.error();
  auto t = r->get("x");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code(), checkpoint_errc::bad_deflate) << t.error();
}

TEST_F(NpyHostile, BytesAfterTheStreamRefused) {
  const auto content = u1_npy(4096);
  zip_builder z;
  z.add("x.npy", content, true);
  z.records[0].stored.push_back(std::byte{0});  // one byte more than the stream
  auto r = open_bytes(z.bytes());
  ASSERT_TRUE(r) << r.error();
  auto t = r->get("x");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code(), checkpoint_errc::bad_deflate) << t.error();
}

TEST_F(NpyHostile, CrcMismatchRefused) {
  const auto content = u1_npy(4096);
  const std::uint32_t wrong = detail::zip_crc32(content) ^ 1;
  {  // deflated: the CRC-32 is always checked (every byte is read anyway)
    zip_builder z;
    z.add("x.npy", content, true, {}, wrong);
    auto r = open_bytes(z.bytes());
    ASSERT_TRUE(r) << r.error();
    auto t = r->get("x");
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error().code(), checkpoint_errc::crc32_mismatch) << t.error();
  }
  {  // stored: by verify(), and on fetch with every_checksum
    zip_builder z;
    z.add("x.npy", content, false, {}, wrong);
    const auto bytes = z.bytes();
    auto r = open_bytes(bytes);
    ASSERT_TRUE(r) << r.error();
    EXPECT_TRUE(r->get("x"));
    auto v = r->verify();
    ASSERT_FALSE(v);
    EXPECT_EQ(v.error().code(), checkpoint_errc::crc32_mismatch);
    read_options every;
    every.checks = fetch_checks::every_checksum;
    auto again = open_bytes(bytes, every);
    ASSERT_TRUE(again);
    auto t = again->get("x");
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error().code(), checkpoint_errc::crc32_mismatch);
  }
}

TEST_F(NpyHostile, RecordsThatAreNotNpy) {
  const auto content = u1_npy(16);
  {  // a record with another name: not an .npz (nor a .pt)
    zip_builder z;
    z.add("a.npy", content, false).add("readme.txt", content, false);
    auto r = open_bytes(z.bytes());
    ASSERT_FALSE(r);
  }
  {  // a name that is only ".npy"
    zip_builder z;
    z.add(".npy", content, false);
    refused(z.bytes(), checkpoint_errc::bad_name);
  }
  {  // a record whose bytes are not a .npy
    zip_builder z;
    const auto junk = bytes_of("not a numpy file at all");
    z.add("a.npy", junk, false);
    refused(z.bytes(), errc::bad_magic);
  }
  {  // a record with trailing bytes after its array
    auto more = content;
    more.push_back(std::byte{1});
    zip_builder z;
    z.add("a.npy", more, true);
    refused(z.bytes(), errc::trailing_bytes);
  }
}

// ---------------------------------------------------------------------------
// What ferry writes, read back.

class NpyWrite : public scratch_dir {};

TEST_F(NpyWrite, EveryDtypeBothOrdersReadsBack) {
  const std::uint64_t shape[] = {3, 5};
  for (const dtype t : {dtype::boolean, dtype::u8, dtype::i8, dtype::u16, dtype::i16, dtype::u32, dtype::i32,
                        dtype::u64, dtype::i64, dtype::f16, dtype::f32, dtype::f64}) {
    const std::size_t w = codec::size_of(t);
    std::vector<std::byte> data(15 * w);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(t == dtype::boolean ? i % 2 : i * 37 + 11);
    const tensor_ref ref{"x", t, shape, {}, 0, data};
    for (const byte_order order : {byte_order::little, byte_order::big}) {
      SCOPED_TRACE(std::string(codec::name(t)) + (order == byte_order::big ? " big" : " little"));
      npy_options opt;
      opt.order = order;
      opt.sync = false;
      const fs::path p = dir_ / "x.npy";
      auto saved = save_npy(p, ref, opt);
      ASSERT_TRUE(saved) << saved.error();
      const auto file = slurp(p);
      const auto header = write_npy_header(t, order, false, shape);
      ASSERT_TRUE(header);
      ASSERT_GE(file.size(), header->size());
      EXPECT_TRUE(std::equal(header->begin(), header->end(), file.begin()));
      auto r = reader::open(p);
      ASSERT_TRUE(r) << r.error();
      auto got = r->get("arr_0");
      ASSERT_TRUE(got) << got.error();
      EXPECT_EQ(got->contiguous_copy(), data);
      if (order == wire::host_order) { EXPECT_TRUE(mapped(*r, *got)); }
    }
  }
}

TEST_F(NpyWrite, ColumnMajorViewsWriteFortranOrderOthersGather) {
  const std::uint64_t shape[] = {2, 3, 4};
  std::vector<float> v(24);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  const std::uint64_t f_strides[] = {1, 2, 6};
  const tensor_ref f{"f", dtype::f32, shape, f_strides, 0, std::as_bytes(std::span(v))};
  const std::uint64_t odd_strides[] = {1, 8, 2};  // neither C nor F
  const tensor_ref odd{"g", dtype::f32, shape, odd_strides, 0, std::as_bytes(std::span(v))};
  npy_options opt;
  opt.sync = false;
  for (const auto& [ref, fortran] : {std::pair{f, true}, std::pair{odd, false}}) {
    SCOPED_TRACE(ref.name);
    const fs::path p = dir_ / "v.npy";
    ASSERT_TRUE(save_npy(p, ref, opt));
    auto h = parse_npy_header(slurp(p));
    ASSERT_TRUE(h) << h.error();
    EXPECT_EQ(h->fortran_order, fortran);
    auto r = reader::open(p);
    ASSERT_TRUE(r) << r.error();
    auto t = r->get("arr_0");
    ASSERT_TRUE(t);
    EXPECT_EQ(t->contiguous_copy(), gather(ref));
  }
}

TEST_F(NpyWrite, NpzStoredIsAlignedAndMappedDeflatedReadsBack) {
  std::vector<double> a(100);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(i) / 3;
  std::vector<std::int16_t> b(7, -3);
  const std::uint64_t sa[] = {10, 10};
  const std::uint64_t sb[] = {7};
  const tensor_ref refs[] = {{"layer.weight", dtype::f64, sa, {}, 0, std::as_bytes(std::span(a))},
                             {"steps", dtype::i16, sb, {}, 0, std::as_bytes(std::span(b))}};
  for (const bool compress : {false, true}) {
    for (const byte_order order : {byte_order::little, byte_order::big}) {
      SCOPED_TRACE(std::string(compress ? "deflated " : "stored ") + (order == byte_order::big ? "big" : "little"));
      npy_options opt;
      opt.compress = compress;
      opt.order = order;
      opt.sync = false;
      const fs::path p = dir_ / "w.npz";
      auto saved = save_npz(p, refs, opt);
      ASSERT_TRUE(saved) << saved.error();
      auto r = reader::open(p);
      ASSERT_TRUE(r) << r.error();
      EXPECT_EQ(r->format(), file_format::npz);
      ASSERT_EQ(r->tensors().size(), 2u);
      for (const auto& ref : refs) {
        auto t = r->get(ref.name);
        ASSERT_TRUE(t) << t.error();
        EXPECT_EQ(t->contiguous_copy(), gather(ref));
        if (!compress) {
          EXPECT_EQ(r->storages()[t->info().storage].offset % 64, 0u);
          if (order == wire::host_order) { EXPECT_TRUE(mapped(*r, *t)); }
        }
      }
      EXPECT_TRUE(r->verify()) << r->verify().error();
    }
  }
}

TEST_F(NpyWrite, NpzRefusesBadNamesAndDuplicates) {
  std::vector<float> v(4);
  const std::uint64_t s[] = {4};
  npy_options opt;
  opt.sync = false;
  const tensor_ref same[] = {{"a", dtype::f32, s, {}, 0, std::as_bytes(std::span(v))},
                             {"a", dtype::f32, s, {}, 0, std::as_bytes(std::span(v))}};
  auto r = save_npz(dir_ / "d.npz", same, opt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::duplicate_key);
  const tensor_ref empty_name[] = {{"", dtype::f32, s, {}, 0, std::as_bytes(std::span(v))}};
  r = save_npz(dir_ / "e.npz", empty_name, opt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), checkpoint_errc::bad_name);
  const tensor_ref bf16[] = {{"b", dtype::bf16, s, {}, 0, std::as_bytes(std::span(v)).first(8)}};
  r = save_npz(dir_ / "f.npz", bf16, opt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), checkpoint_errc::unsupported_npy_dtype);
  EXPECT_FALSE(fs::exists(dir_ / "f.npz"));
}

TEST_F(NpyWrite, EmptyNpzIsTheEndRecordAlone) {
  npy_options opt;
  opt.sync = false;
  ASSERT_TRUE(save_npz(dir_ / "none.npz", {}, opt));
  EXPECT_EQ(slurp(dir_ / "none.npz"), slurp(npy_dir / "empty.npz"));  // what np.savez() of nothing writes
  auto r = reader::open(dir_ / "none.npz");
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(r->tensors().empty());
}

}  // namespace
}  // namespace ferry::checkpoint::testing
