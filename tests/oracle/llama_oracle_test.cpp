// A model ferry writes, run by llama.cpp itself: a tiny llama-shaped model
// with random weights is saved as safetensors, converted by ferry to GGUF
// (typed llama.* metadata, a small SentencePiece vocabulary; three
// matrices quantized by ggml to Q4_0, Q8_0 and Q4_K and written by ferry as
// blocks), then to big-endian and back; libllama (the npm package's libllama.v0.5.0.so,
// dlopen'd) loads both little-endian files and evaluates the same tokens,
// and the logits must be identical, bit for bit. x86-64 only: the oracle
// runs where the package's CPU backends run natively.
//
// libllama's parameter structs change between releases (the package's
// llama_model_params is not the newest header's), so they are never
// declared: the default-params functions return them into an oversized
// opaque buffer and the load functions get that buffer back by value. On
// x86-64 a struct this large goes through a hidden pointer when returned
// and is copied to the stack when passed, where the callee reads its own
// prefix of it: the same bytes, whatever the real size (checked below to
// be far smaller than the buffer).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "ferry/checkpoint/ggml_types.h"
#include "ferry/checkpoint/gguf.h"
#include "ferry/checkpoint/reader.h"
#include "ferry/checkpoint/safetensors.h"
#include "ferry/codec/half.h"

namespace ferry::checkpoint::testing {
namespace {

namespace fs = std::filesystem;
using codec::dtype;
using wire::byte_order;

// ---------------------------------------------------------------------------
// libllama's ABI (llama.h), only what is needed.
struct llama_model;
struct llama_context;
struct llama_vocab;
using llama_token = std::int32_t;
struct llama_batch {  // stable since 2023
  std::int32_t n_tokens;
  llama_token* token;
  float* embd;
  std::int32_t* pos;
  std::int32_t* n_seq_id;
  std::int32_t** seq_id;
  std::int8_t* logits;
};
struct opaque_params {
  alignas(16) unsigned char bytes[1024];
};

struct llama_api {
  void* lib = nullptr;
  void (*backend_load_all_from_path)(const char*) = nullptr;  // libggml
  void (*log_set)(void (*)(int, const char*, void*), void*) = nullptr;
  void (*backend_init)() = nullptr;
  opaque_params (*model_default_params)() = nullptr;
  opaque_params (*context_default_params)() = nullptr;
  llama_model* (*model_load_from_file)(const char*, opaque_params) = nullptr;
  llama_context* (*init_from_model)(llama_model*, opaque_params) = nullptr;
  llama_batch (*batch_get_one)(llama_token*, std::int32_t) = nullptr;
  std::int32_t (*decode)(llama_context*, llama_batch) = nullptr;
  float* (*get_logits_ith)(llama_context*, std::int32_t) = nullptr;
  const llama_vocab* (*model_get_vocab)(const llama_model*) = nullptr;
  std::int32_t (*vocab_n_tokens)(const llama_vocab*) = nullptr;
  void (*free)(llama_context*) = nullptr;
  void (*model_free)(llama_model*) = nullptr;
  std::size_t (*quantize_chunk)(int, const float*, void*, std::int64_t, std::int64_t, std::int64_t,
                                const float*) = nullptr;  // libggml-base

  template <class F>
  void bind(F& fn, const char* name) {
    void* p = dlsym(lib, name);  // the library and its dependencies (libggml)
    if (p == nullptr) throw std::runtime_error(std::string("libllama has no ") + name);
    fn = reinterpret_cast<F>(p);  // dlsym's answer is the function's address
  }

  explicit llama_api(const std::string& dir) {
    const std::string path = dir + "/libllama.v0.5.0.so";
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) throw std::runtime_error(std::string(dlerror()) + " (scripts/install-deps oracle fetches it)");
    bind(backend_load_all_from_path, "ggml_backend_load_all_from_path");
    bind(log_set, "llama_log_set");
    bind(backend_init, "llama_backend_init");
    bind(model_default_params, "llama_model_default_params");
    bind(context_default_params, "llama_context_default_params");
    bind(model_load_from_file, "llama_model_load_from_file");
    bind(init_from_model, "llama_init_from_model");
    bind(batch_get_one, "llama_batch_get_one");
    bind(decode, "llama_decode");
    bind(get_logits_ith, "llama_get_logits_ith");
    bind(model_get_vocab, "llama_model_get_vocab");
    bind(vocab_n_tokens, "llama_vocab_n_tokens");
    bind(free, "llama_free");
    bind(model_free, "llama_model_free");
    bind(quantize_chunk, "ggml_quantize_chunk");
    log_set([](int, const char*, void*) {}, nullptr);  // quiet; failures show as null results
    backend_load_all_from_path(dir.c_str());          // the CPU backend variants
    backend_init();
  }

  // The bytes default-params function `name` writes: where a canary
  // ends. Called as the x86-64 ABI calls it, with the result's address as
  // the hidden first argument, so that address is the canary buffer.
  std::size_t written(const char* name) const {
    void* (*fn)(void*) = nullptr;
    fn = reinterpret_cast<decltype(fn)>(dlsym(lib, name));  // dlsym's answer is the function's address
    alignas(16) unsigned char buf[sizeof(opaque_params)];
    std::memset(buf, 0xA5, sizeof buf);
    fn(buf);
    std::size_t n = sizeof buf;
    while (n > 0 && buf[n - 1] == 0xA5) --n;
    return n;
  }
};

// ---------------------------------------------------------------------------
// The model: llama's tensors and hyperparameters, small.
constexpr std::uint32_t n_vocab = 40, n_embd = 256, n_head = 4, n_head_kv = 2, n_ff = 512, n_layer = 2, n_ctx = 64;

struct model_tensor {
  std::string name;
  dtype type;
  std::vector<std::uint64_t> shape;  // ferry's order: GGUF's ne reversed
  std::vector<std::byte> data;
};

std::vector<model_tensor> random_model() {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.2f);
  std::vector<model_tensor> out;
  const auto add = [&](std::string name, std::vector<std::uint64_t> shape, dtype type, bool ones) {
    std::uint64_t n = 1;
    for (const auto d : shape) n *= d;
    std::vector<std::byte> data(static_cast<std::size_t>(n) * codec::size_of(type));
    for (std::uint64_t i = 0; i < n; ++i) {
      const float v = ones ? 1.0f + normal(rng) * 0.1f : normal(rng);
      if (type == dtype::f32) {
        std::memcpy(data.data() + i * 4, &v, 4);
      } else {
        const auto h = codec::to_f16(v).bits;
        std::memcpy(data.data() + i * 2, &h, 2);
      }
    }
    out.push_back({std::move(name), type, std::move(shape), std::move(data)});
  };
  const std::uint64_t head = n_embd / n_head, kv = head * n_head_kv;
  add("token_embd.weight", {n_vocab, n_embd}, dtype::f16, false);
  for (std::uint32_t l = 0; l < n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", {n_embd}, dtype::f32, true);
    add(b + "attn_q.weight", {n_embd, n_embd}, l == 0 ? dtype::f32 : dtype::f16, false);  // quantized below
    add(b + "attn_k.weight", {kv, n_embd}, dtype::f16, false);
    add(b + "attn_v.weight", {kv, n_embd}, dtype::f16, false);
    add(b + "attn_output.weight", {n_embd, n_embd}, dtype::f16, false);
    add(b + "ffn_norm.weight", {n_embd}, dtype::f32, true);
    add(b + "ffn_gate.weight", {n_ff, n_embd}, l == 0 ? dtype::f32 : dtype::f16, false);
    add(b + "ffn_up.weight", {n_ff, n_embd}, l == 0 ? dtype::f32 : dtype::f16, false);
    add(b + "ffn_down.weight", {n_embd, n_ff}, dtype::f32, false);
  }
  add("output_norm.weight", {n_embd}, dtype::f32, true);
  add("output.weight", {n_vocab, n_embd}, dtype::f16, false);
  return out;
}

// Tensors ferry writes quantized (ggml quantizes them, as llama-quantize
// would): so llama runs blocks that ferry wrote, swapped and swapped back.
const std::pair<const char*, ggml_type> quantized_tensors[] = {
    {"blk.0.attn_q.weight", ggml_type::q4_0},
    {"blk.0.ffn_gate.weight", ggml_type::q8_0},
    {"blk.0.ffn_up.weight", ggml_type::q4_k},
};

// llama's metadata, typed as llama.cpp reads it, and a SentencePiece
// vocabulary: <unk>, <s>, </s>, the newline byte, then plain pieces.
std::vector<gguf_kv> llama_metadata() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "<0x0A>"};
  std::vector<std::int32_t> types = {2, 3, 3, 6};  // unknown, control, control, byte
  while (tokens.size() < n_vocab) {
    tokens.push_back("\xe2\x96\x81w" + std::to_string(tokens.size()));
    types.push_back(1);
  }
  return {
      {"general.architecture", std::string("llama")},
      {"general.name", std::string("ferry tiny llama")},
      {"llama.context_length", n_ctx},
      {"llama.embedding_length", n_embd},
      {"llama.block_count", n_layer},
      {"llama.feed_forward_length", n_ff},
      {"llama.attention.head_count", n_head},
      {"llama.attention.head_count_kv", n_head_kv},
      {"llama.rope.dimension_count", n_embd / n_head},
      {"llama.attention.layer_norm_rms_epsilon", 1e-5f},
      {"tokenizer.ggml.model", std::string("llama")},
      {"tokenizer.ggml.tokens", gguf_array{tokens}},
      {"tokenizer.ggml.scores", gguf_array{std::vector<float>(n_vocab, 0.0f)}},
      {"tokenizer.ggml.token_type", gguf_array{types}},
      {"tokenizer.ggml.bos_token_id", std::uint32_t{1}},
      {"tokenizer.ggml.eos_token_id", std::uint32_t{2}},
      {"tokenizer.ggml.unknown_token_id", std::uint32_t{0}},
  };
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The logits of the last of `tokens`, evaluated by libllama from `file`.
std::vector<float> logits(const llama_api& l, const fs::path& file, std::vector<llama_token> tokens) {
  llama_model* model = l.model_load_from_file(file.c_str(), l.model_default_params());
  if (model == nullptr) return {};
  llama_context* ctx = l.init_from_model(model, l.context_default_params());
  std::vector<float> out;
  if (ctx != nullptr && l.decode(ctx, l.batch_get_one(tokens.data(), static_cast<std::int32_t>(tokens.size()))) == 0) {
    const float* p = l.get_logits_ith(ctx, -1);
    const auto n = static_cast<std::size_t>(l.vocab_n_tokens(l.model_get_vocab(model)));
    if (p != nullptr) out.assign(p, p + n);
  }
  if (ctx != nullptr) l.free(ctx);
  l.model_free(model);
  return out;
}

TEST(LlamaOracle, ATinyModelFerryWritesRunsInLlamaAndAnEndianRoundTripKeepsItsLogits) {
  const llama_api l(FERRY_GGML_DIR);
  // The opaque buffer holds the real structs with room to spare.
  ASSERT_LT(l.written("llama_model_default_params"), sizeof(opaque_params) / 2);
  ASSERT_LT(l.written("llama_context_default_params"), sizeof(opaque_params) / 2);

  std::string templ = (fs::temp_directory_path() / "ferry-llama.XXXXXX").string();
  ASSERT_NE(::mkdtemp(templ.data()), nullptr);
  const fs::path dir = templ;
  const fs::path st = dir / "tiny.safetensors", le = dir / "tiny.gguf", be = dir / "tiny-be.gguf",
                 back = dir / "tiny-back.gguf";

  // safetensors, as a user's model would come; then ferry's GGUF of it.
  const std::vector<model_tensor> model = random_model();
  std::vector<tensor_ref> refs;
  for (const auto& t : model) refs.push_back({t.name, t.type, t.shape, {}, 0, t.data});
  safetensors_options so;
  so.sync = false;
  ASSERT_TRUE(save_safetensors(st, refs, {}, so));
  auto r = reader::open(st);
  ASSERT_TRUE(r) << r.error();
  auto all = r->get_all();
  ASSERT_TRUE(all) << all.error();
  std::vector<gguf_tensor_ref> tensors;
  std::vector<std::vector<std::byte>> blocks;  // the quantized tensors' bytes
  blocks.reserve(std::size(quantized_tensors));
  for (const tensor& t : *all) {
    auto g = to_gguf_tensor(t.ref());
    ASSERT_TRUE(g) << g.error();
    for (const auto& [name, type] : quantized_tensors) {
      if (t.name() != name) continue;
      ASSERT_EQ(t.dtype(), dtype::f32);
      const auto row = static_cast<std::int64_t>(g->ne[0]), rows = static_cast<std::int64_t>(g->ne[1]);
      blocks.emplace_back(static_cast<std::size_t>(ggml_byte_size(type, g->ne[0] * g->ne[1]).value()));
      ASSERT_EQ(l.quantize_chunk(static_cast<int>(type), reinterpret_cast<const float*>(t.bytes().data()),
                                 blocks.back().data(), 0, rows, row, nullptr),
                blocks.back().size());
      g->type = type;
      g->data = blocks.back();
    }
    tensors.push_back(*g);
  }
  gguf_write_options opt;
  opt.sync = false;
  ASSERT_TRUE(save_gguf(le, llama_metadata(), tensors, opt));
  ASSERT_TRUE(convert_gguf_order(le, be, byte_order::big));
  ASSERT_TRUE(convert_gguf_order(be, back, byte_order::little));
  ASSERT_TRUE(slurp(back) == slurp(le)) << "LE -> BE -> LE changed the file";

  const std::vector<llama_token> prompt = {1, 7, 12, 3, 30};
  const std::vector<float> first = logits(l, le, prompt);
  ASSERT_EQ(first.size(), n_vocab) << "libllama did not load or run ferry's file";
  bool varied = false;
  for (const float v : first) {
    ASSERT_TRUE(std::isfinite(v));
    varied = varied || v != first[0];
  }
  EXPECT_TRUE(varied);
  const std::vector<float> again = logits(l, back, prompt);
  ASSERT_EQ(again.size(), first.size());
  for (std::size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(again[i]), std::bit_cast<std::uint32_t>(first[i])) << "logit " << i;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ferry::checkpoint::testing
