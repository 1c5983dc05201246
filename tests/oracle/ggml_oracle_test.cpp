// ferry's GGUF code against llama.cpp's own libggml-base.so (ggml_api.h):
// the type table, every dequantizer bit for bit on random blocks (raw bit
// patterns: NaN, infinite and subnormal scales; little-endian and their
// big-endian conversion), GGUF files ferry writes read by ggml, and files
// ggml writes read by ferry and converted to big-endian and back byte for
// byte. Runs natively on x86-64 and, with the linux-arm64 build of the
// library, on aarch64 under qemu-user. Data ggml quantized, read on every
// architecture: gguf_mixed_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ferry/checkpoint/ggml_types.h"
#include "ferry/checkpoint/gguf.h"
#include "ferry/checkpoint/reader.h"
#include "ggml_api.h"
#include "../test_bytes.h"

namespace ferry::checkpoint::testing {
namespace {

namespace fs = std::filesystem;
namespace gg = ferry::testing::ggml;
using wire::byte_order;

// The library, opened once; nullptr and `why` when it cannot be.
const gg::api* ggml(std::string* why) {
  static std::string error;
  static const gg::api* lib = [] () -> const gg::api* {
    try {
      return new gg::api(gg::api::open(FERRY_GGML_DIR));  // lives as long as the process
    } catch (const std::exception& e) {
      error = e.what();
      return nullptr;
    }
  }();
  *why = error;
  return lib;
}

#define FERRY_GGML(g)           \
  std::string why_;             \
  const gg::api* g = ggml(&why_); \
  ASSERT_NE(g, nullptr) << why_

using ferry::testing::random_bytes;

std::vector<std::byte> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

// Where two float arrays first differ in their bits, or -1.
std::ptrdiff_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return static_cast<std::ptrdiff_t>(i);
  }
  return -1;
}

// ferry's dequantization of `le` (little-endian blocks) and of its
// big-endian conversion, each compared bit for bit with ggml's to_float.
void expect_dequantized_alike(const gg::api& g, ggml_type t, const std::vector<std::byte>& le) {
  const ggml_type_info& ti = info(t);
  const std::size_t n = le.size() / ti.block_bytes * ti.block_elements;
  std::vector<float> want(n), got(n);
  g.get_type_traits(static_cast<int>(t))->to_float(le.data(), want.data(), static_cast<std::int64_t>(n));
  ASSERT_TRUE(dequantize(t, le, byte_order::little, got).has_value());
  std::ptrdiff_t at = first_difference(want, got);
  EXPECT_EQ(at, -1) << ti.name << " little: element " << at << " is 0x" << std::hex
                    << std::bit_cast<std::uint32_t>(got[static_cast<std::size_t>(std::max<std::ptrdiff_t>(at, 0))])
                    << ", ggml 0x" << std::bit_cast<std::uint32_t>(want[static_cast<std::size_t>(std::max<std::ptrdiff_t>(at, 0))]);
  std::vector<std::byte> be(le.size());
  swap_blocks(t, le, byte_order::little, be, byte_order::big);
  std::fill(got.begin(), got.end(), 0.0f);
  ASSERT_TRUE(dequantize(t, be, byte_order::big, got).has_value());
  at = first_difference(want, got);
  EXPECT_EQ(at, -1) << ti.name << " big: element " << at;
}

bool has_to_float(const gg::api& g, const ggml_type_info& t) {
  return t.status == ggml_type_status::active && g.get_type_traits(static_cast<int>(t.number))->to_float != nullptr;
}

TEST(GgmlOracle, TypeTableIsGgmls) {
  FERRY_GGML(g);
  std::printf("ggml %s (commit %s)\n", g->version(), g->commit());
  for (const ggml_type_info& t : all_ggml_types()) {
    const int n = static_cast<int>(t.number);
    SCOPED_TRACE(t.name);
    if (t.status != ggml_type_status::active) {
      EXPECT_EQ(g->blck_size(n), 0);  // ggml keeps the removed numbers as empty entries
      continue;
    }
    EXPECT_STREQ(g->type_name(n), std::string(t.name).c_str());
    EXPECT_EQ(g->blck_size(n), static_cast<std::int64_t>(t.block_elements));
    EXPECT_EQ(g->type_size(n), t.block_bytes);
    const gg::type_traits* tr = g->get_type_traits(n);
    EXPECT_EQ(tr->blck_size, g->blck_size(n));  // the traits struct is laid out as declared
    EXPECT_EQ(tr->type_size, g->type_size(n));
    EXPECT_EQ(tr->is_quantized, t.quantized);
  }
}

TEST(GgmlOracle, EveryDequantizerGivesGgmlsBitsForRandomBlocks) {
  FERRY_GGML(g);
  std::size_t types = 0;
  for (const ggml_type_info& t : all_ggml_types()) {
    if (!has_to_float(*g, t)) continue;
    const std::size_t blocks = t.block_elements == 1 ? 4096 : 64;
    expect_dequantized_alike(*g, static_cast<ggml_type>(t.number), random_bytes(blocks * t.block_bytes, t.number));
    ++types;
  }
  EXPECT_GE(types, 27u);  // ggml 0.25.1: f16, bf16 and 25 quantized types have a to_float
}

class GgmlFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ferry-ggml-oracle-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

struct tensor_case {
  std::string name;
  ggml_type type;
  std::vector<std::uint64_t> ne;
  std::vector<std::byte> data;
};

std::vector<tensor_case> some_tensors() {
  const std::pair<ggml_type, std::vector<std::uint64_t>> shapes[] = {
      {ggml_type::f32, {8, 3}},   {ggml_type::f16, {64, 2}},  {ggml_type::bf16, {16}},
      {ggml_type::q4_0, {64, 3}}, {ggml_type::q5_1, {32, 5}}, {ggml_type::q6_k, {256, 1}},
      {ggml_type::iq2_xxs, {256, 2}}, {ggml_type::mxfp4, {64, 1}}, {ggml_type::i32, {7}},
  };
  std::vector<tensor_case> out;
  for (const auto& [type, ne] : shapes) {
    std::uint64_t numel = 1;
    for (const std::uint64_t d : ne) numel *= d;
    tensor_case c{std::string("blk.0.") + std::string(info(type).name), type, ne, {}};
    c.data = random_bytes(static_cast<std::size_t>(ggml_byte_size(type, numel).value()), 100 + out.size());
    out.push_back(std::move(c));
  }
  return out;
}

TEST_F(GgmlFiles, GgmlReadsWhatFerryWritesInEitherOrderAfterConversion) {
  FERRY_GGML(g);
  const std::vector<gguf_kv> md = {
      {"general.architecture", std::string("llama")},
      {"general.alignment", std::uint32_t{64}},
      {"t.u8", std::uint8_t{200}},
      {"t.i8", std::int8_t{-100}},
      {"t.u16", std::uint16_t{60000}},
      {"t.i16", std::int16_t{-30000}},
      {"t.i32", std::int32_t{-2000000000}},
      {"t.f32", 0.1f},
      {"t.bool", true},
      {"t.u64", std::uint64_t{1} << 40},
      {"t.i64", std::int64_t{-1} << 40},
      {"t.f64", -0.0},
      {"t.ints", gguf_array{std::vector<std::int32_t>{1, -2, 3}}},
      {"t.strs", gguf_array{std::vector<std::string>{"a", "", "\xe2\x96\x81the"}}},
  };
  const std::vector<tensor_case> ts = some_tensors();
  std::vector<gguf_tensor_ref> refs;
  for (const auto& t : ts) refs.push_back({t.name, t.type, t.ne, t.data});
  gguf_write_options opt;
  opt.sync = false;
  const fs::path le = dir_ / "le.gguf", be = dir_ / "be.gguf", back = dir_ / "back.gguf";
  ASSERT_TRUE(save_gguf(le, md, refs, opt));
  opt.order = byte_order::big;
  ASSERT_TRUE(save_gguf(be, md, refs, opt));
  ASSERT_TRUE(convert_gguf_order(be, back, byte_order::little));
  EXPECT_EQ(slurp(back), slurp(le)) << "big-endian file converted back differs from the one written little-endian";

  auto header = read_gguf_header(le);
  ASSERT_TRUE(header) << header.error();
  gg::gguf_context* c = g->gguf_init_from_file(le.c_str(), {true, nullptr});
  ASSERT_NE(c, nullptr) << "ggml refused ferry's file";
  EXPECT_EQ(g->gguf_get_version(c), 3u);
  EXPECT_EQ(g->gguf_get_alignment(c), 64u);
  EXPECT_EQ(g->gguf_get_data_offset(c), header->data_offset);
  ASSERT_EQ(g->gguf_get_n_kv(c), static_cast<std::int64_t>(md.size()));
  for (std::size_t i = 0; i < md.size(); ++i) {
    const auto k = static_cast<std::int64_t>(i);
    SCOPED_TRACE(md[i].key);
    EXPECT_EQ(g->gguf_get_key(c, k), md[i].key);
    EXPECT_EQ(g->gguf_get_kv_type(c, k), static_cast<int>(type_of(md[i].value)));
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::string>) {
            EXPECT_EQ(g->gguf_get_val_str(c, k), v);
          } else if constexpr (std::is_same_v<V, gguf_array>) {
            ASSERT_EQ(g->gguf_get_arr_n(c, k), v.size());
            EXPECT_EQ(g->gguf_get_arr_type(c, k), static_cast<int>(v.type()));
            if (const auto* ints = std::get_if<std::vector<std::int32_t>>(&v.values)) {
              EXPECT_EQ(std::memcmp(g->gguf_get_arr_data(c, k), ints->data(), ints->size() * 4), 0);
            } else {
              const auto& strs = std::get<std::vector<std::string>>(v.values);
              for (std::size_t j = 0; j < strs.size(); ++j) EXPECT_EQ(g->gguf_get_arr_str(c, k, j), strs[j]);
            }
          } else {
            EXPECT_EQ(std::memcmp(g->gguf_get_val_data(c, k), &v, sizeof v), 0);
          }
        },
        md[i].value);
  }
  ASSERT_EQ(g->gguf_get_n_tensors(c), static_cast<std::int64_t>(ts.size()));
  const std::vector<std::byte> file = slurp(le);
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const auto k = static_cast<std::int64_t>(i);
    SCOPED_TRACE(ts[i].name);
    EXPECT_EQ(g->gguf_get_tensor_name(c, k), ts[i].name);
    EXPECT_EQ(g->gguf_get_tensor_type(c, k), static_cast<int>(ts[i].type));
    EXPECT_EQ(g->gguf_get_tensor_size(c, k), ts[i].data.size());
    const std::size_t at = g->gguf_get_data_offset(c) + g->gguf_get_tensor_offset(c, k);
    ASSERT_LE(at + ts[i].data.size(), file.size());
    EXPECT_TRUE(std::equal(ts[i].data.begin(), ts[i].data.end(), file.begin() + static_cast<std::ptrdiff_t>(at)));
  }
  g->gguf_free(c);
}

TEST_F(GgmlFiles, FerryReadsWhatGgmlWritesAndConvertsItThereAndBackByteForByte) {
  FERRY_GGML(g);
  const std::vector<tensor_case> ts = some_tensors();
  gg::gguf_context* c = g->gguf_init_empty();
  g->gguf_set_val_str(c, "general.architecture", "llama");
  g->gguf_set_val_u8(c, "t.u8", 7);
  g->gguf_set_val_i8(c, "t.i8", -7);
  g->gguf_set_val_u16(c, "t.u16", 65535);
  g->gguf_set_val_i16(c, "t.i16", -32768);
  g->gguf_set_val_u32(c, "t.u32", 4000000000u);
  g->gguf_set_val_i32(c, "t.i32", -5);
  g->gguf_set_val_f32(c, "t.f32", std::bit_cast<float>(0x7FC00001u));  // a NaN with a payload
  g->gguf_set_val_bool(c, "t.bool", false);
  g->gguf_set_val_u64(c, "t.u64", UINT64_MAX);
  g->gguf_set_val_i64(c, "t.i64", INT64_MIN);
  g->gguf_set_val_f64(c, "t.f64", 1e-310);  // subnormal
  const float floats[] = {1.5f, -0.0f};
  g->gguf_set_arr_data(c, "t.floats", static_cast<int>(gguf_value_type::f32), floats, 2);
  const char* strs[] = {"x", "\xe2\x96\x81y"};
  g->gguf_set_arr_str(c, "t.strs", strs, 2);
  gg::context* ctx = g->init({std::size_t{1} << 20, nullptr, false});
  ASSERT_NE(ctx, nullptr);
  for (const auto& t : ts) {
    gg::tensor* x = g->new_tensor_2d(ctx, static_cast<int>(t.type), static_cast<std::int64_t>(t.ne[0]),
                                     static_cast<std::int64_t>(t.ne.size() > 1 ? t.ne[1] : 1));
    g->set_name(x, t.name.c_str());
    ASSERT_EQ(g->nbytes(x), t.data.size());
    std::memcpy(g->get_data(x), t.data.data(), t.data.size());
    g->gguf_add_tensor(c, x);
  }
  const fs::path p = dir_ / "ggml.gguf", be = dir_ / "be.gguf", back = dir_ / "back.gguf";
  ASSERT_TRUE(g->gguf_write_to_file(c, p.c_str(), false));
  g->gguf_free(c);
  g->free(ctx);

  auto r = reader::open(p);
  ASSERT_TRUE(r) << r.error();
  ASSERT_EQ(r->format(), file_format::gguf);
  const gguf_header& h = *r->gguf();
  EXPECT_EQ(h.order, byte_order::little);
  ASSERT_EQ(h.metadata.size(), 14u);
  for (const char* key : {"t.u32", "t.f32", "t.f64", "t.i64", "t.strs"}) ASSERT_NE(h.find(key), nullptr) << key;
  EXPECT_EQ(std::get<std::uint32_t>(*h.find("t.u32")), 4000000000u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(std::get<float>(*h.find("t.f32"))), 0x7FC00001u);
  EXPECT_EQ(std::get<double>(*h.find("t.f64")), 1e-310);
  EXPECT_EQ(std::get<std::int64_t>(*h.find("t.i64")), INT64_MIN);
  EXPECT_EQ(std::get<gguf_array>(*h.find("t.strs")), (gguf_array{std::vector<std::string>{"x", "\xe2\x96\x81y"}}));
  ASSERT_EQ(h.tensors.size(), ts.size());
  const std::vector<std::byte> file = slurp(p);
  for (std::size_t i = 0; i < ts.size(); ++i) {
    SCOPED_TRACE(ts[i].name);
    const gguf_tensor& t = h.tensors[i];
    EXPECT_EQ(t.name, ts[i].name);
    EXPECT_EQ(t.type, ts[i].type);
    EXPECT_EQ(t.nbytes, ts[i].data.size());
    const std::size_t at = h.data_offset + t.offset;
    EXPECT_TRUE(std::equal(ts[i].data.begin(), ts[i].data.end(), file.begin() + static_cast<std::ptrdiff_t>(at)));
    // What ferry dequantizes is what ggml's to_float gives.
    if (has_to_float(*g, info(t.type))) {
      auto d = get_dequantized(*r, t.name);
      ASSERT_TRUE(d) << d.error();
      std::vector<float> want(t.numel()), got(t.numel());
      g->get_type_traits(static_cast<int>(t.type))->to_float(ts[i].data.data(), want.data(), static_cast<std::int64_t>(want.size()));
      std::memcpy(got.data(), d->storage_bytes().data(), got.size() * sizeof(float));
      EXPECT_EQ(first_difference(want, got), -1);
    }
  }
  ASSERT_TRUE(convert_gguf_order(p, be, byte_order::big));
  auto rb = reader::open(be);
  ASSERT_TRUE(rb) << rb.error();
  EXPECT_EQ(rb->gguf()->order, byte_order::big);
  // The same header, bit for bit (a NaN value compares unequal to itself).
  EXPECT_EQ(encode_gguf_header(*rb->gguf(), byte_order::little).value(), encode_gguf_header(h, byte_order::little).value());
  ASSERT_TRUE(convert_gguf_order(be, back, byte_order::little));
  EXPECT_EQ(slurp(back), file) << "ggml's file converted to big-endian and back differs";
#ifdef FERRY_CLI
  // The same through the tool, as a user runs it.
  const fs::path cli_be = dir_ / "cli-be.gguf", cli_back = dir_ / "cli-back.gguf";
  const std::string cli = FERRY_CLI;
  ASSERT_EQ(std::system((cli + " convert '" + p.string() + "' '" + cli_be.string() + "' --order big >/dev/null").c_str()), 0);
  ASSERT_EQ(std::system((cli + " convert '" + cli_be.string() + "' '" + cli_back.string() + "' --order little >/dev/null").c_str()), 0);
  EXPECT_EQ(slurp(cli_be), slurp(be));
  EXPECT_EQ(slurp(cli_back), file) << "ferry convert LE -> BE -> LE is not ggml's file";
#endif
}

}  // namespace
}  // namespace ferry::checkpoint::testing
