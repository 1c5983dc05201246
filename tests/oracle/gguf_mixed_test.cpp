// GGUF across architectures, against llama.cpp's own libggml-base.so
// (ggml_api.h, x86-64): ggml quantizes the same data into every type its
// ggml_quantize_chunk produces and writes one GGUF file with its own
// writer; ferry converts it to big-endian and back (byte-identical to
// ggml's file); then the x86-64, aarch64, armhf and s390x builds of
// gguf_node (the last three under qemu-user) dequantize both files, and
// each tensor's f32 bits must be those of ggml's to_float on x86-64.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "ferry/checkpoint/ggml_types.h"
#include "ferry/checkpoint/gguf.h"
#include "ferry/codec/crc32c.h"
#include "ferry/wire/bulk.h"
#include "../mixed_nodes.h"
#include "ggml_api.h"

namespace {

using ferry::testing::armhf_node;
using ferry::testing::aarch64_node;
using ferry::testing::native_node;
using ferry::testing::node;
using ferry::testing::run;
using ferry::testing::s390x_node;
using ferry::testing::slurp;

namespace fs = std::filesystem;
namespace gg = ferry::testing::ggml;
namespace ckpt = ferry::checkpoint;

const std::vector<node> nodes = {native_node(), aarch64_node(), armhf_node(), s390x_node()};

// The types ggml_quantize_chunk has a case for (it aborts on the others).
// IQ1/IQ2/IQ3 need an importance matrix and set up their grids first
// (about 20 s of CPU once per process).
constexpr const char* quantizable[] = {"f32",   "f16",   "bf16",  "q1_0",   "q2_0",    "q4_0",   "q4_1",
                                       "q5_0",  "q5_1",  "q8_0",  "mxfp4",  "nvfp4",   "q2_K",   "q3_K",
                                       "q4_K",  "q5_K",  "q6_K",  "tq1_0",  "tq2_0",   "iq2_xxs", "iq2_xs",
                                       "iq3_xxs", "iq3_s", "iq2_s", "iq1_s", "iq1_m",  "iq4_nl", "iq4_xs"};

TEST(GgufAcrossArchitectures, EveryTypeGgmlQuantizesDequantizesToGgmlsBitsEverywhereInBothOrders) {
  const gg::api g = gg::api::open(FERRY_GGML_DIR);
  constexpr std::int64_t per_row = 256, rows = 16;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(per_row * rows);
  for (float& v : x) v = normal(rng);
  x[1] = 0.0f;
  x[2] = -0.0f;
  x[3] = 1e-40f;  // subnormal
  x[4] = 60000.0f;  // near f16's largest
  const std::vector<float> importance(per_row, 1.0f);

  std::string templ = (fs::temp_directory_path() / "ferry-gguf-mixed.XXXXXX").string();
  ASSERT_NE(::mkdtemp(templ.data()), nullptr);
  const fs::path dir = templ;
  const fs::path le = dir / "ggml.gguf", be = dir / "big.gguf", back = dir / "back.gguf";

  // ggml quantizes and writes; the expected lines come from its to_float.
  std::string expected;
  gg::context* ctx = g.init({std::size_t{64} << 20, nullptr, false});
  ASSERT_NE(ctx, nullptr);
  gg::gguf_context* file = g.gguf_init_empty();
  g.gguf_set_val_str(file, "general.architecture", "ferry-test");
  for (const char* name : quantizable) {
    const auto type = ckpt::ggml_type_from_name(name);
    ASSERT_TRUE(type.has_value()) << name;
    const int n = static_cast<int>(*type);
    gg::tensor* t = g.new_tensor_2d(ctx, n, per_row, rows);
    const std::string tensor_name = std::string("t.") + name;
    g.set_name(t, tensor_name.c_str());
    const std::size_t bytes = g.nbytes(t);
    const float* imatrix = g.requires_imatrix(n) ? importance.data() : nullptr;
    ASSERT_EQ(g.quantize_chunk(n, x.data(), g.get_data(t), 0, rows, per_row, imatrix), bytes) << name;
    g.gguf_add_tensor(file, t);
    std::vector<float> values(static_cast<std::size_t>(per_row * rows));
    if (const gg::type_traits* tr = g.get_type_traits(n); tr->to_float != nullptr) {
      tr->to_float(g.get_data(t), values.data(), static_cast<std::int64_t>(values.size()));
    } else {  // f32 has no to_float: its values are its bytes
      std::memcpy(values.data(), g.get_data(t), bytes);
    }
    std::vector<std::byte> le_bits(values.size() * sizeof(float));
    std::memcpy(le_bits.data(), values.data(), le_bits.size());
    ferry::wire::convert_in_place(le_bits, sizeof(float), ferry::wire::host_order, ferry::wire::byte_order::little);
    char line[128];
    std::snprintf(line, sizeof line, "%s %s %08x\n", tensor_name.c_str(), name, ferry::codec::crc32c(le_bits));
    expected += line;
  }
  ASSERT_TRUE(g.gguf_write_to_file(file, le.c_str(), false));
  g.gguf_free(file);
  g.free(ctx);

  ASSERT_TRUE(ckpt::convert_gguf_order(le, be, ferry::wire::byte_order::big));
  ASSERT_TRUE(ckpt::convert_gguf_order(be, back, ferry::wire::byte_order::little));
  EXPECT_TRUE(slurp(back) == slurp(le)) << "LE -> BE -> LE is not ggml's file";
  EXPECT_FALSE(slurp(be) == slurp(le));

  for (const auto& reader : nodes) {
    for (const fs::path& p : {le, be}) {
      SCOPED_TRACE(std::string(reader.arch) + " reading " + p.filename().string());
      const auto [rc, out] = run(reader.prefix + " '" + p.string() + "'");
      ASSERT_EQ(rc, 0);
      EXPECT_EQ(out, expected);
    }
  }
  fs::remove_all(dir);
}

}  // namespace
