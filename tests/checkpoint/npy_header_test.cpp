// The .npy header (checkpoint/npy.h): the grammar, rule by rule, each
// refusal with its own error; write_npy_header byte-identical to what
// Debian's NumPy 1.24.2 writes (tests/data/npy/headers.golden).
#include <gtest/gtest.h>

#include <fstream>

#include "ferry/checkpoint/zip/zip.h"

#include "npy_helpers.h"

namespace ferry::checkpoint::testing {
namespace {

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
      {dict("|u1", "(9223372036854775807,)"), 1, {9223372036854775807u}, false},  // 2^63 - 1 bytes: the most
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

TEST(NpyHeader, ComplexIsC64AndC128) {
  for (const auto& [descr, type] : {std::pair{"<c8", codec::dtype::c64}, {">c16", codec::dtype::c128}}) {
    auto h = parse_text(dict(descr, "(2,)"));
    ASSERT_TRUE(h) << h.error();
    EXPECT_EQ(h->kind, 'c');
    auto t = npy_dtype(*h);
    ASSERT_TRUE(t) << t.error();
    EXPECT_EQ(*t, type);
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
      {dict("|u1", "(9223372036854775808,)"), checkpoint_errc::shape_overflow},  // 2^63 bytes: NumPy's "too big"
      {dict("<f2", "(0, 4611686018427387904)"), checkpoint_errc::shape_overflow},  // empty, but 2^63 bytes without the 0
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

}  // namespace
}  // namespace ferry::checkpoint::testing
