// `ferry` on GGUF and NumPy files, as a user runs it: byte-order conversion
// (LE -> BE -> LE byte-identical), inspect naming the order and the ggml
// types, diff of an LE file and its BE conversion, quantized tensors refused
// without --cast and dequantized with it, unquantized round trips between
// GGUF, safetensors, .ferry and .npy/.npz.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "ferry/checkpoint/gguf.h"
#include "ferry/checkpoint/npy.h"
#include "ferry/checkpoint/safetensors.h"

namespace ferry::checkpoint::testing {
namespace {

// Deterministic bytes (splitmix64): any pattern is a valid ggml block.
std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  for (auto& b : out) {
    seed += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    b = static_cast<std::byte>(z ^ (z >> 31));
  }
  return out;
}

std::vector<std::byte> float_bytes(std::initializer_list<float> v) {
  std::vector<std::byte> out(v.size() * 4);
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

// A small llama-shaped GGUF: typed metadata (a 20-string vocabulary), plain
// tensors with finite values, and quantized ones of random blocks.
struct gguf_sample {
  struct one {
    std::string name;
    ggml_type type;
    std::vector<std::uint64_t> ne;
    std::vector<std::byte> data;  // host order
  };
  std::vector<gguf_kv> metadata;
  std::vector<one> tensors;

  gguf_sample() {
    std::vector<std::string> tokens;
    for (int i = 0; i < 20; ++i) tokens.push_back("t" + std::to_string(i));
    metadata = {{"general.architecture", std::string("llama")},
                {"llama.context_length", std::uint32_t{128}},
                {"tokenizer.ggml.tokens", gguf_array{tokens}}};
    tensors.push_back({"token_embd.weight", ggml_type::f32, {3, 2}, float_bytes({1, -2, 3.5f, 0, 1e-3f, -7})});
    const std::int32_t ints[] = {1, -2, 300000, 4};
    tensors.push_back({"pos", ggml_type::i32, {4}, std::vector<std::byte>(4 * 4)});
    std::memcpy(tensors.back().data.data(), ints, sizeof ints);
    const auto quant = [&](std::string name, ggml_type t, std::vector<std::uint64_t> ne, std::uint64_t seed) {
      std::uint64_t n = 1;
      for (const auto e : ne) n *= e;
      tensors.push_back({std::move(name), t, std::move(ne), random_bytes(static_cast<std::size_t>(*ggml_byte_size(t, n)), seed)});
    };
    quant("blk.0.attn_q.weight", ggml_type::q8_0, {64, 2}, 1);
    quant("blk.0.ffn_up.weight", ggml_type::q4_k, {256, 2}, 2);
    quant("blk.0.ffn_down.weight", ggml_type::q5_0, {32, 3}, 3);
  }

  void save(const fs::path& p, wire::byte_order order) const {
    std::vector<gguf_tensor_ref> refs;
    for (const auto& t : tensors) refs.push_back({t.name, t.type, t.ne, t.data});
    gguf_write_options opt;
    opt.order = order;
    opt.sync = false;
    ASSERT_TRUE(save_gguf(p, metadata, refs, opt));
  }
};

class CliGguf : public Cli {
 protected:
  void SetUp() override {
    Cli::SetUp();
    sample_.save(dir_ / "le.gguf", wire::byte_order::little);
    sample_.save(dir_ / "be.gguf", wire::byte_order::big);
  }
  gguf_sample sample_;
};

// The byte-order conversion: LE -> BE gives what the writer gives in big
// order, BE -> LE the original bytes, onto itself too; a progress bar on a
// terminal.
TEST_F(CliGguf, ConvertLittleBigLittleIsByteIdentical) {
  auto r = run("convert " + path("le.gguf") + " " + path("le2be.gguf") + " --order big");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(slurp(dir_ / "le2be.gguf") == slurp(dir_ / "be.gguf"));
  r = run("convert " + path("le2be.gguf") + " " + path("back.gguf") + " --order little");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(slurp(dir_ / "back.gguf") == slurp(dir_ / "le.gguf"));
  r = run("convert " + path("back.gguf") + " " + path("back.gguf") + " --order big");  // a new file replaces it
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(slurp(dir_ / "back.gguf") == slurp(dir_ / "be.gguf"));

  r = shell("script -qec \"'" + std::string(FERRY_CLI) + "' convert " + path("le.gguf") + " " + path("tty.gguf") +
            " --order big\" /dev/null");
  EXPECT_NE(r.out.find("convert ["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("100%"), std::string::npos) << r.out;
}

TEST_F(CliGguf, InspectNamesTheOrderTypesAndMetadata) {
  auto r = run("inspect " + path("be.gguf"));
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* text : {"gguf, big-endian, alignment 32, ", "\nGGUF version 3, 3 metadata keys, tensor data from byte ",
                           "  TYPE  SHAPE", " q8_0 ", " q4_K ", "[2, 64]", "  general.architecture: str = llama\n",
                           "  llama.context_length: u32 = 128\n",
                           "  tokenizer.ggml.tokens: arr[str,20] = [\"t0\", \"t1\", \"t2\", \"t3\", \"t4\", \"t5\", "
                           "\"t6\", \"t7\", ...]\n"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << " in " << r.out;
  }
  r = run("inspect --json " + path("le.gguf"));
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format"], "gguf");
  EXPECT_EQ(j["byte_order"], "little");
  EXPECT_EQ(j["gguf"]["version"], 3);
  EXPECT_EQ(j["gguf"]["metadata"][1]["type"], "u32");
  EXPECT_EQ(j["gguf"]["metadata"][1]["value"], 128);
  EXPECT_EQ(j["gguf"]["metadata"][2]["element_type"], "str");
  EXPECT_EQ(j["gguf"]["metadata"][2]["value"].size(), 20u);
  EXPECT_EQ(j["tensors"][3]["ggml_type"], "q4_K");
  EXPECT_EQ(j["tensors"][3]["ne"], nlohmann::json::array({256, 2}));

  r = run("verify " + path("be.gguf"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("(GGUF has no checksums: structure checked)"), std::string::npos) << r.out;
}

// diff compares numbers: an LE file and its BE conversion are identical,
// quantized tensors by their host-order blocks.
TEST_F(CliGguf, DiffOfLittleAndBigIsIdentical) {
  auto r = run("diff " + path("le.gguf") + " " + path("be.gguf"));
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("5 of 5 tensors bit-identical; the checkpoints are identical"), std::string::npos) << r.out;
  r = run("diff --json " + path("le.gguf") + " " + path("be.gguf"));
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["identical"], true);
  EXPECT_FALSE(j["tensors"][0].contains("compared"));
  EXPECT_EQ(j["tensors"][2]["compared"], "blocks");
}

TEST_F(CliGguf, QuantizedTensorWithoutCastIsOneLine) {
  for (const char* out : {"m.safetensors", "m.ferry", "m.npz"}) {
    const auto r = run("convert " + path("le.gguf") + " " + path(out));
    EXPECT_EQ(r.status, 1) << out;
    expect_one_error_line(r, path("le.gguf") + ": tensor 'blk.0.attn_q.weight' is q8_0: quantized GGUF tensor: "
                                               "dequantize it with --cast f32, or write .gguf");
    EXPECT_FALSE(fs::exists(dir_ / out));
  }
}

// --cast f32: every quantized tensor is what dequantize() gives for its
// blocks; plain ones keep their values; diff agrees (dequantized values).
TEST_F(CliGguf, CastF32ToSafetensorsMatchesDequantize) {
  auto r = run("convert " + path("be.gguf") + " " + path("m.safetensors") + " --cast f32");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto st = open(dir_ / "m.safetensors").value();
  ASSERT_EQ(st.tensors().size(), sample_.tensors.size());
  for (const auto& want : sample_.tensors) {
    SCOPED_TRACE(want.name);
    const auto got = st.get(want.name).value();
    EXPECT_EQ(std::vector<std::uint64_t>(got.shape().begin(), got.shape().end()),
              std::vector<std::uint64_t>(want.ne.rbegin(), want.ne.rend()));
    if (want.type == ggml_type::i32) {
      EXPECT_EQ(got.dtype(), codec::dtype::i32);  // not floating: not cast
      continue;
    }
    EXPECT_EQ(got.dtype(), codec::dtype::f32);
    std::vector<float> expect(got.bytes().size() / 4);
    ASSERT_TRUE(dequantize(want.type, want.data, wire::host_order, expect));
    EXPECT_EQ(std::memcmp(got.bytes().data(), expect.data(), got.bytes().size()), 0);
  }
  EXPECT_EQ(st.metadata().at("general.architecture"), "llama");
  r = run("diff --json " + path("le.gguf") + " " + path("m.safetensors"));
  const auto j = nlohmann::json::parse(r.out);
  for (const auto& row : j["tensors"]) EXPECT_EQ(row["status"], "identical") << row.dump();
  EXPECT_EQ(j["tensors"][4]["compared"], "dequantized");

  // Into .gguf, --cast dequantizes too: every tensor f32 but the integers.
  r = run("convert " + path("le.gguf") + " " + path("f32.gguf") + " --cast f32 --order big");
  ASSERT_EQ(r.status, 0) << r.err;
  r = run("inspect --json " + path("f32.gguf"));
  EXPECT_EQ(nlohmann::json::parse(r.out)["tensors"][2]["ggml_type"], "f32") << r.out;
  r = run("diff " + path("m.safetensors") + " " + path("f32.gguf"));  // metadata: the same text both ways
  EXPECT_EQ(r.status, 0) << r.out;
}

// Unquantized tensors both ways between safetensors, GGUF (either order),
// .ferry and NumPy, checked by diff.
TEST_F(Cli, UnquantizedConvertsBetweenGgufSafetensorsFerryAndNumpy) {
  const std::uint64_t s23[] = {2, 3}, s4[] = {4};
  const auto w = float_bytes({1, 2, 3, 4, 5, 6});
  const auto b = float_bytes({-1, 0.5f, 1e30f, -0.0f});
  const tensor_ref refs[] = {{"w", codec::dtype::f32, s23, {}, 0, w}, {"b", codec::dtype::f32, s4, {}, 0, b}};
  ASSERT_TRUE(save_safetensors(dir_ / "a.safetensors", refs, {{"general.alignment", "64"}, {"note", "x"}}));
  for (const char* step : {"a.safetensors a.gguf --order big", "a.gguf b.safetensors", "a.gguf c.ferry --order big",
                           "c.ferry d.gguf", "a.gguf e.npz --order big --compress", "e.npz f.gguf"}) {
    const std::string args = step;
    const auto space = args.find(' ');
    auto r = run("convert " + path(args.substr(0, space).c_str()) + " " + dir_.string() + "/" + args.substr(space + 1));
    ASSERT_EQ(r.status, 0) << step << ": " << r.err;
  }
  const auto a = open(dir_ / "a.gguf").value();
  EXPECT_EQ(a.alignment(), 64u);  // general.alignment from the text metadata, as a u32
  for (const char* other : {"a.gguf", "b.safetensors", "c.ferry", "d.gguf"}) {
    const auto r = run("diff " + path("a.safetensors") + " " + path(other));
    EXPECT_EQ(r.status, 0) << other << ": " << r.out << r.err;
  }
  auto r = run("diff " + path("a.gguf") + " " + path("e.npz"));  // .npz keeps no metadata
  EXPECT_NE(r.out.find("2 of 2 tensors bit-identical"), std::string::npos) << r.out;
  EXPECT_EQ(run("diff " + path("e.npz") + " " + path("f.gguf")).status, 0);  // deflated records read back
  r = run("convert " + path("a.safetensors") + " " + path("a.gguf") + " --shard-size 1MB");
  EXPECT_EQ(r.status, 2);
}

TEST_F(Cli, NpyRoundTripsInspectVerifyAndDiff) {
  const std::uint64_t shape[] = {2, 3};
  const auto v = float_bytes({1, 2, 3, 4, 5, 6});
  const tensor_ref one[] = {{"arr_0", codec::dtype::f32, shape, {}, 0, v}};
  ASSERT_TRUE(save_safetensors(dir_ / "one.safetensors", one, {}));
  auto r = run("convert " + path("one.safetensors") + " " + path("x.npy") + " --order big");
  ASSERT_EQ(r.status, 0) << r.err;
  r = run("inspect " + path("x.npy"));
  EXPECT_NE(r.out.find("npy, big-endian"), std::string::npos) << r.out;
  EXPECT_EQ(run("verify " + path("x.npy")).status, 0);
  r = run("convert " + path("x.npy") + " " + path("y.safetensors"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(run("diff " + path("one.safetensors") + " " + path("y.safetensors")).status, 0);
  r = run("diff " + path("x.npy") + " " + path("one.safetensors"));
  EXPECT_EQ(r.status, 0) << r.out;

  // Fortran order: shown with its strides, gathered into row-major GGUF.
  const std::uint64_t column_major[] = {1, 2};
  npy_options no;
  no.sync = false;
  ASSERT_TRUE(save_npy(dir_ / "f.npy", tensor_ref{"arr_0", codec::dtype::f32, shape, column_major, 0, v}, no));
  r = run("inspect " + path("f.npy"));
  EXPECT_NE(r.out.find("[2, 3] strides [1, 2]"), std::string::npos) << r.out;
  r = run("convert " + path("f.npy") + " " + path("f.gguf"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(run("diff " + path("f.npy") + " " + path("f.gguf")).status, 0);

  // Two tensors do not fit a .npy (two storages: safetensors refuses shared ones).
  const auto w = v;
  const tensor_ref two[] = {one[0], {"arr_1", codec::dtype::f32, shape, {}, 0, w}};
  auto saved = save_safetensors(dir_ / "two.safetensors", two, {});
  ASSERT_TRUE(saved) << saved.error();
  r = run("convert " + path("two.safetensors") + " " + path("two.npy"));
  EXPECT_EQ(r.status, 1);
  expect_one_error_line(r, path("two.npy") + ": " + path("two.safetensors") +
                               " has 2 tensors: a .npy file holds exactly one array (write .npz for several)");
}

}  // namespace
}  // namespace ferry::checkpoint::testing
