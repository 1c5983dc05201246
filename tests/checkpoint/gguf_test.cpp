// GGUF (checkpoint/gguf.h): files written in both byte orders read back
// typed and bit for bit; the header bytes are ggml's layout, field by field;
// little -> big -> little conversion is byte-identical; every rule of the
// layout has its own error, including the published crash shapes (an
// extent of 2^42+1 wrapping the byte size, n_dims 9, a huge string length,
// alignment 3, overlapping tensors, data past the end, duplicates, type 99);
// every prefix and every single-byte corruption of a file is refused or
// read, never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "ferry/checkpoint/gguf/internal.h"
#include "ferry/checkpoint/gguf.h"
#include "helpers.h"
#include "../test_bytes.h"

namespace ferry::checkpoint::testing {
namespace {

using wire::byte_order;
constexpr byte_order other_order = wire::host_order == byte_order::little ? byte_order::big : byte_order::little;

// GGUF bytes put together field by field, as a hostile writer would.
class gguf_bytes {
 public:
  explicit gguf_bytes(byte_order order = byte_order::little) : order_(order) {}

  gguf_bytes& raw(std::string_view s) {
    const auto b = std::as_bytes(std::span(s));
    bytes.insert(bytes.end(), b.begin(), b.end());
    return *this;
  }
  template <wire::scalar T>
  gguf_bytes& put(T v) {
    std::byte b[sizeof(T)];
    wire::store<T>(v, b, order_);
    bytes.insert(bytes.end(), b, b + sizeof(T));
    return *this;
  }
  gguf_bytes& str(std::string_view s) { return put<std::uint64_t>(s.size()).raw(s); }
  gguf_bytes& header(std::uint64_t n_tensors, std::uint64_t n_kv, std::uint32_t version = 3) {
    return raw("GGUF").put<std::uint32_t>(version).put<std::uint64_t>(n_tensors).put<std::uint64_t>(n_kv);
  }
  gguf_bytes& kv_u32(std::string_view key, std::uint32_t v) { return str(key).put<std::uint32_t>(4).put<std::uint32_t>(v); }
  gguf_bytes& tensor(std::string_view name, std::vector<std::uint64_t> ne, std::uint32_t type, std::uint64_t offset) {
    str(name).put<std::uint32_t>(static_cast<std::uint32_t>(ne.size()));
    for (const auto e : ne) put<std::uint64_t>(e);
    return put<std::uint32_t>(type).put<std::uint64_t>(offset);
  }
  gguf_bytes& zeros(std::size_t n) {
    bytes.resize(bytes.size() + n);
    return *this;
  }
  gguf_bytes& pad(std::size_t align = 32) { return zeros((align - bytes.size() % align) % align); }

  std::vector<std::byte> bytes;

 private:
  byte_order order_;
};

result<gguf_header, error> parse(const std::vector<std::byte>& b, const limits& lim = {}) {
  return parse_gguf_header(b, b.size(), lim);
}

// The error of parsing `b`, which must fail with `code`.
std::string refused(const std::vector<std::byte>& b, error_code code, const limits& lim = {}) {
  auto r = parse(b, lim);
  EXPECT_FALSE(r.has_value());
  if (r) return {};
  EXPECT_EQ(r.error().code(), code) << r.error().what();
  return r.error().what();
}

using ferry::testing::random_bytes;

// One metadata value of every type, nested arrays too.
std::vector<gguf_kv> every_value() {
  gguf_array nested;
  nested.values = std::vector<gguf_array>{gguf_array{std::vector<std::int32_t>{1, -2}},
                                          gguf_array{std::vector<std::int32_t>{}}};
  return {
      {"general.architecture", std::string("llama")},
      {"general.alignment", std::uint32_t{64}},
      {"t.u8", std::uint8_t{200}},
      {"t.i8", std::int8_t{-100}},
      {"t.u16", std::uint16_t{0xBEEF}},
      {"t.i16", std::int16_t{-12345}},
      {"t.u32", std::uint32_t{0xDEADBEEF}},
      {"t.i32", std::int32_t{-123456789}},
      {"t.f32", 1.5f},
      {"t.bool", true},
      {"t.u64", std::uint64_t{0x0123456789ABCDEF}},
      {"t.i64", std::int64_t{-0x0123456789ABCDEF}},
      {"t.f64", -2.25},
      {"t.strings", gguf_array{std::vector<std::string>{"a", "", "\xe2\x96\x81the", std::string("\xff\x00", 2)}}},
      {"t.floats", gguf_array{std::vector<float>{0.5f, -1.0f}}},
      {"t.bools", gguf_array{std::vector<bool>{true, false, true}}},
      {"t.u64s", gguf_array{std::vector<std::uint64_t>{1, UINT64_MAX}}},
      {"t.nested", nested},
  };
}

struct tensor_data {
  std::string name;
  ggml_type type;
  std::vector<std::uint64_t> ne;
  std::vector<std::byte> data;  // host order
};

std::vector<tensor_data> some_tensors() {
  std::vector<tensor_data> out;
  std::uint64_t seed = 1;
  const auto add = [&](std::string name, ggml_type t, std::vector<std::uint64_t> ne) {
    std::uint64_t n = 1;
    for (const auto e : ne) n *= e;
    const auto bytes = *ggml_byte_size(t, n);
    out.push_back({std::move(name), t, std::move(ne), random_bytes(static_cast<std::size_t>(bytes), ++seed)});
  };
  add("tok_embd.weight", ggml_type::f32, {4, 3});
  add("norm.weight", ggml_type::f16, {5});
  add("b.bf16", ggml_type::bf16, {2, 2, 2});
  add("i.i8", ggml_type::i8, {7});
  add("i.i16", ggml_type::i16, {3});
  add("i.i32", ggml_type::i32, {1, 3});
  add("i.i64", ggml_type::i64, {2});
  add("d.f64", ggml_type::f64, {3});
  add("scalar", ggml_type::f32, {});
  add("empty", ggml_type::f32, {0, 4});
  add("q.q8_0", ggml_type::q8_0, {64, 2});
  add("q.q4_k", ggml_type::q4_k, {256, 1, 2});
  add("q.iq2_xxs", ggml_type::iq2_xxs, {256});
  add("q.q5_0", ggml_type::q5_0, {32, 3});
  return out;
}

std::vector<gguf_tensor_ref> refs_of(const std::vector<tensor_data>& ts) {
  std::vector<gguf_tensor_ref> out;
  for (const auto& t : ts) out.push_back({t.name, t.type, t.ne, t.data});
  return out;
}

class Gguf : public scratch_dir {
 protected:
  fs::path save(byte_order order, const std::string& name, const std::vector<gguf_kv>& md = every_value()) {
    gguf_write_options opt;
    opt.order = order;
    opt.sync = false;
    opt.nested_arrays = true;  // every_value() holds one, as gguf-py writes them
    const auto p = dir_ / name;
    const auto refs = refs_of(tensors_);
    auto r = save_gguf(p, md, refs, opt);
    EXPECT_TRUE(r) << r.error();
    return p;
  }
  std::vector<tensor_data> tensors_ = some_tensors();
};

TEST_F(Gguf, NestedArraysOnlyWhenAsked) {
  // ggml cannot read an array of arrays: save_gguf() writes one only when told.
  gguf_write_options opt;
  opt.sync = false;
  const auto refs = refs_of(tensors_);
  auto r = save_gguf(dir_ / "n.gguf", every_value(), refs, opt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::bad_value) << r.error();
  EXPECT_NE(r.error().what().find("t.nested"), std::string::npos) << r.error();
  EXPECT_FALSE(fs::exists(dir_ / "n.gguf"));
}

TEST_F(Gguf, RoundTripsInBothOrders) {
  for (const auto order : {byte_order::little, byte_order::big}) {
    SCOPED_TRACE(order == byte_order::little ? "little" : "big");
    const auto p = save(order, "m.gguf");
    auto r = open(p);
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->format(), file_format::gguf);
    EXPECT_EQ(format_name(r->format()), "gguf");
    EXPECT_EQ(r->order(), order);
    EXPECT_EQ(r->alignment(), 64u);
    const gguf_header* h = r->gguf();
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(h->version, 3u);
    EXPECT_EQ(h->metadata, every_value());
    EXPECT_EQ(h->data_offset % 64, 0u);
    ASSERT_EQ(r->tensors().size(), tensors_.size());
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const auto& want = tensors_[i];
      SCOPED_TRACE(want.name);
      EXPECT_EQ(h->tensors[i].type, want.type);
      EXPECT_EQ(h->tensors[i].ne, want.ne);
      const tensor_info& ti = r->tensors()[i];
      EXPECT_EQ(ti.name, want.name);
      std::vector<std::uint64_t> shape(want.ne.rbegin(), want.ne.rend());  // slowest first
      if (const auto d = dtype_of(want.type)) {
        EXPECT_EQ(ti.dtype, *d);
      } else {
        EXPECT_EQ(ti.dtype, codec::dtype::u8);
        shape.back() = shape.back() / info(want.type).block_elements * info(want.type).block_bytes;
      }
      EXPECT_EQ(ti.shape, shape);
      auto t = r->get(ti);
      ASSERT_TRUE(t) << t.error();
      ASSERT_EQ(t->bytes().size(), want.data.size());
      EXPECT_TRUE(std::equal(want.data.begin(), want.data.end(), t->bytes().begin()));  // host order, bit for bit
      std::vector<std::byte> into(want.data.size());
      ASSERT_TRUE(r->read_into(ti, into));
      EXPECT_EQ(into, want.data);
      // Dequantized: what dequantize() gives for the host-order blocks.
      auto f = get_dequantized(*r, want.name);
      ASSERT_TRUE(f) << f.error();
      std::vector<float> expect(static_cast<std::size_t>(h->tensors[i].numel()));
      ASSERT_TRUE(dequantize(want.type, want.data, wire::host_order, expect));
      ASSERT_EQ(f->bytes().size(), expect.size() * 4);
      if (!expect.empty()) {
        EXPECT_EQ(std::memcmp(f->bytes().data(), expect.data(), f->bytes().size()), 0);
      }
      EXPECT_EQ(std::vector<std::uint64_t>(f->shape().begin(), f->shape().end()),
                std::vector<std::uint64_t>(want.ne.rbegin(), want.ne.rend()));
    }
    // The header alone, without a reader.
    auto alone = read_gguf_header(p);
    ASSERT_TRUE(alone) << alone.error();
    EXPECT_EQ(alone->tensors, h->tensors);
    EXPECT_EQ(alone->data_offset, h->data_offset);
    // Flattened for tools.
    EXPECT_EQ(r->metadata().at("general.architecture"), "llama");
    EXPECT_EQ(r->metadata().at("t.i8"), "-100");
    EXPECT_EQ(r->metadata().at("t.f32"), "1.5");
    EXPECT_EQ(r->metadata().at("t.bool"), "true");
    EXPECT_EQ(r->metadata().at("t.strings"), "[\"a\", \"\", \"\xe2\x96\x81the\", \"\\u00ff\\u0000\"]");
    EXPECT_EQ(r->metadata().at("t.nested"), "[[1, -2], []]");
    EXPECT_EQ(r->metadata().at("t.bools"), "[true, false, true]");
  }
}

TEST_F(Gguf, HeaderIsGgmlsLayoutFieldByField) {
  for (const auto order : {byte_order::little, byte_order::big}) {
    // One key, one f32 tensor [2]: built by hand as ggml writes it.
    gguf_bytes want(order);
    want.header(1, 1).str("general.name").put<std::uint32_t>(8).str("tiny");
    want.tensor("w", {2}, 0, 0).pad();
    want.put<float>(1.0f).put<float>(-2.0f).pad();
    const float values[] = {1.0f, -2.0f};
    const std::vector<gguf_kv> md{{"general.name", std::string("tiny")}};
    const gguf_tensor_ref t{"w", ggml_type::f32, {2}, std::as_bytes(std::span(values))};
    gguf_write_options opt;
    opt.order = order;
    opt.sync = false;
    ASSERT_TRUE(save_gguf(dir_ / "t.gguf", md, std::span(&t, 1), opt));
    EXPECT_EQ(slurp(dir_ / "t.gguf"), want.bytes);
  }
}

TEST_F(Gguf, ConversionLittleBigLittleIsByteIdentical) {
  const auto le = save(byte_order::little, "le.gguf");
  const auto be = save(byte_order::big, "be.gguf");
  gguf_write_options w;
  w.sync = false;
  w.nested_arrays = true;  // every_value() holds one, as gguf-py writes them
  ASSERT_TRUE(convert_gguf_order(le, dir_ / "le2be.gguf", byte_order::big, {}, w));
  gguf_write_options plain = w;
  plain.nested_arrays = false;  // refused unless asked for, as by save_gguf()
  const auto refused = convert_gguf_order(le, dir_ / "refused.gguf", byte_order::big, {}, plain);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), errc::bad_value);
  EXPECT_NE(refused.error().what().find("'t.nested': an array of arrays"), std::string::npos) << refused.error();
  EXPECT_EQ(slurp(dir_ / "le2be.gguf"), slurp(be));
  ASSERT_TRUE(convert_gguf_order(dir_ / "le2be.gguf", dir_ / "back.gguf", byte_order::little, {}, w));
  EXPECT_EQ(slurp(dir_ / "back.gguf"), slurp(le));
  // Onto itself: a new file replaces the old one.
  ASSERT_TRUE(convert_gguf_order(dir_ / "back.gguf", dir_ / "back.gguf", byte_order::big, {}, w));
  EXPECT_EQ(slurp(dir_ / "back.gguf"), slurp(be));
  // To the order it has: a copy.
  ASSERT_TRUE(convert_gguf_order(le, dir_ / "same.gguf", byte_order::little, {}, w));
  EXPECT_EQ(slurp(dir_ / "same.gguf"), slurp(le));
}

TEST_F(Gguf, ByteOrderDetectionAndOverride) {
  const auto be = save(byte_order::big, "be.gguf");
  read_options opt;
  opt.gguf_order = byte_order::little;  // forced wrong: the version reads 0x03000000
  auto r = open(be, opt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::unsupported_version) << r.error().what();
  opt.gguf_order = byte_order::big;
  ASSERT_TRUE(open(be, opt));
  // gguf-py's old big-endian magic.
  auto bytes = slurp(be);
  std::memcpy(bytes.data(), "FUGG", 4);
  spit(dir_ / "fugg.gguf", bytes);
  auto f = open(dir_ / "fugg.gguf");
  ASSERT_TRUE(f) << f.error();
  EXPECT_EQ(f->order(), byte_order::big);
  EXPECT_TRUE(f->gguf()->fugg_magic);
  // Converted, it gets the magic every reader knows.
  gguf_write_options w;
  w.sync = false;
  w.nested_arrays = true;
  ASSERT_TRUE(convert_gguf_order(dir_ / "fugg.gguf", dir_ / "fixed.gguf", byte_order::big, {}, w));
  EXPECT_EQ(slurp(dir_ / "fixed.gguf"), slurp(be));
  // Neither order gives a version.
  auto v = gguf_bytes().header(0, 0).bytes;
  wire::store<std::uint32_t>(0x00030003, v.data() + 4, byte_order::little);
  refused(v, errc::unsupported_version);
}

TEST(GgufParse, Versions) {
  refused(gguf_bytes().raw("GGUX").put<std::uint32_t>(3).bytes, errc::bad_magic);
  refused(gguf_bytes().header(0, 0, 1).bytes, errc::unsupported_version);
  refused(gguf_bytes().header(0, 0, 4).bytes, errc::unsupported_version);
  refused(gguf_bytes().header(0, 0, 0).bytes, errc::unsupported_version);
  EXPECT_TRUE(parse(gguf_bytes().header(0, 0, 2).pad().bytes));
  EXPECT_TRUE(parse(gguf_bytes(byte_order::big).header(0, 0, 3).bytes));  // no tensors: padding may be absent
  refused(gguf_bytes().raw("GG").bytes, errc::truncated);
}

TEST(GgufParse, ShapesAndTypes) {
  const auto one = [](std::vector<std::uint64_t> ne, std::uint32_t type) {
    return gguf_bytes().header(1, 0).tensor("t", std::move(ne), type, 0).pad().bytes;
  };
  // llama.cpp PR #18674's shape: the product wraps 2^64.
  EXPECT_NE(refused(one({(std::uint64_t{1} << 42) + 1, std::uint64_t{1} << 22}, 0), checkpoint_errc::shape_overflow)
                .find("'t'"),
            std::string::npos);
  refused(one({std::uint64_t{1} << 62}, 0), checkpoint_errc::shape_overflow);  // 2^64 bytes of f32
  refused(one({std::uint64_t{1} << 63}, 0), checkpoint_errc::shape_overflow);  // negative in ggml
  // Empty, but the non-zero extents' bytes pass 2^63: the one shape rule
  // (tensor.h), as NumPy's "array is too big" (this passed inspect before).
  constexpr std::uint64_t big = (std::uint64_t{1} << 63) - 1;
  refused(one({0, big, big, 16}, 0), checkpoint_errc::shape_overflow);
  refused(one({0, std::uint64_t{1} << 61}, 0), checkpoint_errc::shape_overflow);  // 2^63 bytes of f32
  EXPECT_TRUE(parse(one({0, std::uint64_t{1} << 60}, 0)));  // 2^62 bytes: empty, and fits
  refused(one({1, 2, 3, 4, 5, 6, 7, 8, 9}, 0), errc::limit_exceeded);          // n_dims 9 (gguf-tools #25)
  refused(one({1, 1, 1, 1, 1}, 0), errc::limit_exceeded);
  EXPECT_NE(refused(one({4}, 99), checkpoint_errc::unknown_ggml_type).find("type 99"), std::string::npos);
  EXPECT_NE(refused(one({32}, 4), checkpoint_errc::unknown_ggml_type).find("q4_2"), std::string::npos);
  refused(one({31}, 8), checkpoint_errc::shape_size_mismatch);  // q8_0 rows of 31
  refused(one({16, 2}, 8), checkpoint_errc::shape_size_mismatch);  // 32 elements, but rows of 16
  refused(gguf_bytes().header(1, 0).tensor("", {1}, 0, 0).bytes, checkpoint_errc::bad_name);
  refused(gguf_bytes().header(1, 0).tensor("\xff", {1}, 0, 0).bytes, checkpoint_errc::bad_name);
  auto ok = gguf_bytes().header(1, 0).tensor("t", {}, 0, 0).pad().put<float>(1.0f).bytes;  // n_dims 0
  auto h = parse(ok);
  ASSERT_TRUE(h) << h.error();
  EXPECT_EQ(h->tensors[0].nbytes, 4u);
}

TEST(GgufParse, Metadata) {
  const auto kv = [](std::string_view key, std::uint32_t type, auto value) {
    return gguf_bytes().header(0, 1).str(key).put<std::uint32_t>(type).put(value).bytes;
  };
  refused(kv("k", 13, std::uint8_t{0}), checkpoint_errc::bad_gguf_value_type);
  refused(kv("k", 7, std::uint8_t{2}), errc::bad_value);  // bool 2
  auto empty_key = kv("", 0, std::uint8_t{0});
  empty_key.resize(empty_key.size() + 8);  // a valid pair takes 14 bytes at least: room for the count check
  refused(empty_key, checkpoint_errc::bad_name);
  refused(gguf_bytes().header(0, 2).str("k").put<std::uint32_t>(0).put<std::uint8_t>(1).str("k").put<std::uint32_t>(0)
              .put<std::uint8_t>(2).bytes,
          errc::duplicate_key);
  // A huge string length: refused before anything is allocated.
  refused(gguf_bytes().header(0, 1).put<std::uint64_t>(std::uint64_t{1} << 62).raw("k").bytes, errc::truncated);
  refused(gguf_bytes().header(0, 1).str("k").put<std::uint32_t>(8).put<std::uint64_t>(UINT64_MAX).bytes,
          errc::truncated);
  // A huge array count, of bytes and of strings.
  refused(gguf_bytes().header(0, 1).str("k").put<std::uint32_t>(9).put<std::uint32_t>(0).put<std::uint64_t>(1000).bytes,
          errc::truncated);
  refused(gguf_bytes().header(0, 1).str("k").put<std::uint32_t>(9).put<std::uint32_t>(8).put<std::uint64_t>(
              std::uint64_t{1} << 61).zeros(64).bytes,
          errc::truncated);
  refused(gguf_bytes().header(0, 1).str("k").put<std::uint32_t>(9).put<std::uint32_t>(13).put<std::uint64_t>(0).bytes,
          checkpoint_errc::bad_gguf_value_type);
  // Counts the file cannot hold.
  refused(gguf_bytes().header(0, UINT64_MAX).bytes, errc::truncated);
  refused(gguf_bytes().header(UINT64_MAX, 0).bytes, errc::limit_exceeded);
  refused(gguf_bytes().header(1000, 0).zeros(100).bytes, errc::truncated);
  // Nesting: 16 levels read, 17 refused.
  const auto nested = [](int levels) {
    gguf_bytes b;
    b.header(0, 1).str("k").put<std::uint32_t>(9);
    for (int i = 1; i < levels; ++i) b.put<std::uint32_t>(9).put<std::uint64_t>(1);
    b.put<std::uint32_t>(0).put<std::uint64_t>(0);
    return b.pad().bytes;
  };
  EXPECT_TRUE(parse(nested(16)));
  refused(nested(17), errc::depth_exceeded);
  limits lim;
  lim.max_gguf_depth = 2;
  refused(nested(3), errc::depth_exceeded, lim);
}

TEST(GgufParse, Alignment) {
  const auto with = [](std::uint32_t a) {
    return gguf_bytes().header(0, 1).kv_u32("general.alignment", a).bytes;
  };
  refused(with(3), checkpoint_errc::bad_alignment);
  refused(with(0), checkpoint_errc::bad_alignment);
  refused(with(std::uint32_t{1} << 31), checkpoint_errc::bad_alignment);
  EXPECT_TRUE(parse(with(1)));
  EXPECT_TRUE(parse(gguf_bytes().header(0, 1).kv_u32("general.alignment", std::uint32_t{1} << 30).bytes));
  refused(gguf_bytes().header(0, 1).str("general.alignment").put<std::uint32_t>(10).put<std::uint64_t>(32).bytes,
          checkpoint_errc::bad_alignment);  // a u64
}

TEST(GgufParse, Layout) {
  // Two f32 [8] tensors: 32 bytes each, at 0 and 32.
  const auto two = [](std::uint64_t second, std::size_t data) {
    return gguf_bytes().header(2, 0).tensor("a", {8}, 0, 0).tensor("b", {8}, 0, second).pad().zeros(data).bytes;
  };
  EXPECT_TRUE(parse(two(32, 64)));
  EXPECT_NE(refused(two(0, 64), checkpoint_errc::bad_layout).find("overlaps"), std::string::npos);
  EXPECT_NE(refused(two(64, 96), checkpoint_errc::bad_layout).find("hole"), std::string::npos);
  refused(two(33, 96), checkpoint_errc::misaligned_tensor);
  refused(two(32, 63), errc::truncated);                       // data past the end
  refused(two(32, 65), errc::trailing_bytes);
  refused(two(UINT64_MAX - 31, 64), checkpoint_errc::bad_layout);  // an offset near 2^64
  // The last tensor's padding may be cut: f32 [3] is 12 bytes, padded to 32.
  const auto cut = gguf_bytes().header(1, 0).tensor("a", {3}, 0, 0).pad().zeros(12).bytes;
  EXPECT_TRUE(parse(cut));
  refused(gguf_bytes().header(2, 0).tensor("a", {8}, 0, 0).tensor("a", {8}, 0, 32).pad().zeros(64).bytes,
          errc::duplicate_key);
  // The first tensor must start the data section.
  refused(gguf_bytes().header(1, 0).tensor("a", {8}, 0, 32).pad().zeros(64).bytes, checkpoint_errc::bad_layout);
}

TEST_F(Gguf, EveryPrefixAndEveryByteFlipIsRefusedOrRead) {
  const auto bytes = slurp(save(byte_order::big, "m.gguf"));
  const auto h = parse(bytes);
  ASSERT_TRUE(h) << h.error();
  // Prefixes as whole files: refused; as a prefix of the file: needs more.
  for (std::size_t n = 0; n < h->header_bytes; ++n) {
    const std::span<const std::byte> prefix(bytes.data(), n);
    EXPECT_FALSE(parse_gguf_header(prefix, n)) << n;
    bool more = false;
    auto r = parse_gguf_header(prefix, bytes.size(), {}, std::nullopt, &more);
    ASSERT_FALSE(r) << n;
    if (r.error().code() == errc::truncated && n >= 24) {
      EXPECT_TRUE(more) << n << ": " << r.error().what();
    }
  }
  // Every byte of the header flipped: read or refused, never a crash.
  auto copy = bytes;
  for (std::size_t i = 0; i < h->header_bytes; ++i) {
    copy[i] ^= std::byte{0x5A};
    (void)parse(copy);
    copy[i] ^= std::byte{0x5A};
  }
}

TEST_F(Gguf, HeaderLimitIsEnforcedWhileReading) {
  std::vector<gguf_kv> md{{"big", std::string(3u << 20, 'x')}};  // a 3 MiB string: the read grows past 1 MiB
  const auto p = save(byte_order::little, "m.gguf", md);
  auto r = open(p);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->gguf()->find("big")->index(), 8u);
  read_options opt;
  opt.lim.max_gguf_header_bytes = 2u << 20;
  auto small = open(p, opt);
  ASSERT_FALSE(small);
  EXPECT_EQ(small.error().code(), errc::limit_exceeded) << small.error().what();
  // The flattened text is bounded too.
  opt = {};
  opt.lim.max_metadata_bytes = 1000;
  auto bounded = open(p, opt);
  ASSERT_TRUE(bounded) << bounded.error();
  EXPECT_LT(bounded->metadata().at("big").size(), 100u);
}

TEST_F(Gguf, WriterRefusesWhatGgmlCannotRead) {
  const float v[2] = {1, 2};
  gguf_write_options opt;
  opt.sync = false;
  const auto err = [&](std::vector<gguf_kv> md, std::vector<gguf_tensor_ref> ts) {
    auto r = save_gguf(dir_ / "w.gguf", md, ts, opt);
    return r ? error_code() : r.error().code();
  };
  const auto data = std::as_bytes(std::span(v));
  EXPECT_EQ(err({}, {{std::string(64, 'n'), ggml_type::f32, {2}, data}}), checkpoint_errc::bad_name);
  EXPECT_EQ(err({}, {{std::string(63, 'n'), ggml_type::f32, {2}, data}}), error_code());
  EXPECT_EQ(err({}, {{"a", ggml_type::f32, {3}, data}}), checkpoint_errc::shape_size_mismatch);
  EXPECT_EQ(err({}, {{"a", ggml_type::f32, {2}, data}, {"a", ggml_type::f32, {2}, data}}), errc::duplicate_key);
  EXPECT_EQ(err({}, {{"a", ggml_type::f32, {1, 1, 1, 1, 2}, data}}), errc::limit_exceeded);
  EXPECT_EQ(err({{"general.alignment", std::uint32_t{48}}}, {}), checkpoint_errc::bad_alignment);
  EXPECT_EQ(err({{"k", std::uint8_t{1}}, {"k", std::uint8_t{2}}}, {}), errc::duplicate_key);
  EXPECT_EQ(err({{"", std::uint8_t{1}}}, {}), checkpoint_errc::bad_name);
}

TEST_F(Gguf, FerryTensorsConvert) {
  const std::vector<std::uint64_t> shape{2, 3};
  std::vector<float> v{1, 2, 3, 4, 5, 6};
  tensor_ref t;
  t.name = "w";
  t.dtype = codec::dtype::f32;
  t.shape = shape;
  t.storage = std::as_bytes(std::span(v));
  auto g = to_gguf_tensor(t);
  ASSERT_TRUE(g) << g.error();
  EXPECT_EQ(g->ne, (std::vector<std::uint64_t>{3, 2}));
  gguf_write_options opt;
  opt.order = other_order;
  opt.sync = false;
  ASSERT_TRUE(save_gguf(dir_ / "f.gguf", {}, std::span(&*g, 1), opt));
  auto r = open(dir_ / "f.gguf");
  ASSERT_TRUE(r) << r.error();
  auto back = r->get("w");
  ASSERT_TRUE(back) << back.error();
  EXPECT_EQ(back->shape()[0], 2u);
  EXPECT_EQ(std::memcmp(back->bytes().data(), v.data(), 24), 0);
  t.dtype = codec::dtype::u16;
  EXPECT_EQ(to_gguf_tensor(t).error().code(), errc::bad_value);
  // ggml has no complex and no fnuz float8 type: one line naming the
  // tensor and the dtype, never a tensor written as something else.
  for (const codec::dtype d : {codec::dtype::c32, codec::dtype::c64, codec::dtype::c128, codec::dtype::f8_e4m3fnuz,
                               codec::dtype::f8_e5m2fnuz}) {
    t.dtype = d;
    const auto refused = to_gguf_tensor(t);
    ASSERT_FALSE(refused) << codec::name(d);
    EXPECT_EQ(refused.error().code(), errc::bad_value);
    EXPECT_NE(refused.error().what().find("tensor 'w': dtype " + std::string(codec::name(d)) + " has no GGUF tensor type"),
              std::string::npos)
        << refused.error().what();
  }
}

}  // namespace
}  // namespace ferry::checkpoint::testing

namespace ferry::checkpoint {
namespace {

// A file whose only tensor is empty: the header is padded (ferry's reader
// wants every tensor's offset inside the file), so it reads back; with no
// tensors at all it is not, and a 2^30 alignment costs nothing.
TEST(GgufPadding, EmptyTensorsReadBackAndNoTensorsPadNothing) {
  const auto dir = std::filesystem::temp_directory_path() / ("ferry-gguf-pad-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  gguf_write_options opt;
  opt.sync = false;
  const gguf_tensor_ref empty{"e", ggml_type::f32, {4, 0}, {}};
  ASSERT_TRUE(save_gguf(dir / "e.gguf", {}, std::span(&empty, 1), opt));
  auto r = open(dir / "e.gguf");
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->tensors()[0].nbytes(), 0u);
  EXPECT_EQ(std::filesystem::file_size(dir / "e.gguf") % 32, 0u);
  const std::vector<gguf_kv> aligned{{"general.alignment", std::uint32_t{1} << 30}};
  ASSERT_TRUE(save_gguf(dir / "none.gguf", aligned, {}, opt));
  EXPECT_LT(std::filesystem::file_size(dir / "none.gguf"), 100u);
  auto none = open(dir / "none.gguf");
  ASSERT_TRUE(none) << none.error();
  EXPECT_EQ(none->alignment(), std::uint32_t{1} << 30);
  std::filesystem::remove_all(dir);
}

// An empty view's other strides must not wrap either (check_view).
TEST(ShapeRule, EmptyViewsAndTheNonZeroProduct) {
  const std::vector<std::uint64_t> shape{0, 3}, wrapping{1, std::uint64_t{1} << 63}, fine{3, 1};
  EXPECT_EQ(check_view(codec::dtype::f32, shape, wrapping, 0, 0, 8).error(), checkpoint_errc::shape_overflow);
  EXPECT_TRUE(check_view(codec::dtype::f32, shape, fine, 0, 0, 8));
  constexpr std::uint64_t big = (std::uint64_t{1} << 63) - 1;
  EXPECT_EQ(shape_bytes(std::vector<std::uint64_t>{0, big, big}, 1).error(), checkpoint_errc::shape_overflow);
  EXPECT_EQ(shape_bytes(std::vector<std::uint64_t>{0, big}, 1).value(), 0u);
  EXPECT_EQ(shape_bytes(std::vector<std::uint64_t>{big}, 1).value(), big);
  EXPECT_EQ(shape_bytes(std::vector<std::uint64_t>{big}, 2).error(), checkpoint_errc::shape_overflow);
  EXPECT_EQ(shape_bytes(std::vector<std::uint64_t>{64, 3}, 18, 32).value(), 108u);  // q8_0 blocks
  EXPECT_EQ(shape_bytes({}, 4).value(), 4u);  // a 0-d tensor
}

}  // namespace
}  // namespace ferry::checkpoint
