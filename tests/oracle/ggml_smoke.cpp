// DRAFT (issue 27): a smoke test of llama.cpp's own libraries as shipped in
// the npm package @node-llama-cpp/linux-x64 (scripts/install-deps npm).
// Not built by CMake yet; build and run by hand:
//   nice -n 19 g++ -std=c++20 -O1 -Wall -Wextra tests/oracle/ggml_smoke.cpp -o build/ggml_smoke -ldl
//   build/ggml_smoke build/npm/linux-x64-3.22.1/bins/linux-x64 build/ggml_smoke.gguf
// What it does, against libggml-base.so through dlopen (no ggml header: the
// few declarations it needs are written out below, checked against the
// library's own answers at run time where it can):
//   1. ggml_version/ggml_commit, and the type table: for every type id
//      below GGML_TYPE_COUNT (read from the size of the library's
//      type_traits symbol) ggml_type_name, ggml_blck_size, ggml_type_size and
//      the traits (is_quantized, to_float, from_float_ref);
//   2. for every type, in a child process (ggml aborts on a type
//      ggml_quantize_chunk has no case for): 256 random floats quantized with
//      ggml_quantize_chunk (an imatrix of ones where
//      ggml_quantize_requires_imatrix says so), or with the traits'
//      from_float_ref where quantize_chunk has no case; then to_float back,
//      and the RMS error;
//   3. a GGUF file written with ggml's writer (gguf_init_empty,
//      gguf_set_val_u32/str, ggml_init + ggml_new_tensor_1d for every type
//      that quantized, gguf_add_tensor, gguf_write_to_file), read back with
//      gguf_init_from_file, and each tensor's bytes in the file compared with
//      the quantized bytes;
//   4. with a third argument naming libllama: the sizes that
//      llama_model_default_params and llama_context_default_params write
//      (measured with a canary buffer), the figures a hand-written
//      declaration of those structs would have to match.
#include <dlfcn.h>
#include <elf.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <algorithm>
#include <string>
#include <vector>

namespace {

// ggml's ABI, as its headers declare it (ggml.h, gguf.h); enums are int.
struct ggml_context;
struct ggml_tensor;
struct gguf_context;
using to_float_fn = void (*)(const void* x, float* y, int64_t k);
using from_float_fn = void (*)(const float* x, void* y, int64_t k);
struct type_traits {  // struct ggml_type_traits
  const char* type_name;
  int64_t blck_size;
  int64_t blck_size_interleave;
  size_t type_size;
  bool is_quantized;
  to_float_fn to_float;
  from_float_fn from_float_ref;
};
struct init_params {  // struct ggml_init_params
  size_t mem_size;
  void* mem_buffer;
  bool no_alloc;
};
struct gguf_params {  // struct gguf_init_params
  bool no_alloc;
  ggml_context** ctx;
};

struct ggml_api {
  const char* (*version)();
  const char* (*commit)();
  const char* (*type_name)(int);
  int64_t (*blck_size)(int);
  size_t (*type_size)(int);
  const type_traits* (*get_type_traits)(int);
  bool (*requires_imatrix)(int);
  size_t (*quantize_chunk)(int, const float*, void*, int64_t, int64_t, int64_t, const float*);
  ggml_context* (*init)(init_params);
  void (*free)(ggml_context*);
  ggml_tensor* (*new_tensor_1d)(ggml_context*, int, int64_t);
  ggml_tensor* (*set_name)(ggml_tensor*, const char*);
  void* (*get_data)(const ggml_tensor*);
  size_t (*nbytes)(const ggml_tensor*);
  gguf_context* (*gguf_init_empty)();
  gguf_context* (*gguf_init_from_file)(const char*, gguf_params);
  void (*gguf_free)(gguf_context*);
  void (*gguf_set_val_u32)(gguf_context*, const char*, uint32_t);
  void (*gguf_set_val_str)(gguf_context*, const char*, const char*);
  void (*gguf_add_tensor)(gguf_context*, const ggml_tensor*);
  bool (*gguf_write_to_file)(const gguf_context*, const char*, bool);
  uint32_t (*gguf_get_version)(const gguf_context*);
  size_t (*gguf_get_alignment)(const gguf_context*);
  size_t (*gguf_get_data_offset)(const gguf_context*);
  int64_t (*gguf_get_n_kv)(const gguf_context*);
  int64_t (*gguf_find_key)(const gguf_context*, const char*);
  uint32_t (*gguf_get_val_u32)(const gguf_context*, int64_t);
  int64_t (*gguf_get_n_tensors)(const gguf_context*);
  const char* (*gguf_get_tensor_name)(const gguf_context*, int64_t);
  int (*gguf_get_tensor_type)(const gguf_context*, int64_t);
  size_t (*gguf_get_tensor_offset)(const gguf_context*, int64_t);
  size_t (*gguf_get_tensor_size)(const gguf_context*, int64_t);
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "ggml_smoke: %s\n", what.c_str());
  std::exit(1);
}

template <class F>
void bind(void* lib, F& fn, const char* name) {
  void* p = dlsym(lib, name);
  if (p == nullptr) die(std::string("no symbol ") + name);
  fn = reinterpret_cast<F>(p);
}

ggml_api load_ggml(void* lib) {
  ggml_api g{};
  bind(lib, g.version, "ggml_version");
  bind(lib, g.commit, "ggml_commit");
  bind(lib, g.type_name, "ggml_type_name");
  bind(lib, g.blck_size, "ggml_blck_size");
  bind(lib, g.type_size, "ggml_type_size");
  bind(lib, g.get_type_traits, "ggml_get_type_traits");
  bind(lib, g.requires_imatrix, "ggml_quantize_requires_imatrix");
  bind(lib, g.quantize_chunk, "ggml_quantize_chunk");
  bind(lib, g.init, "ggml_init");
  bind(lib, g.free, "ggml_free");
  bind(lib, g.new_tensor_1d, "ggml_new_tensor_1d");
  bind(lib, g.set_name, "ggml_set_name");
  bind(lib, g.get_data, "ggml_get_data");
  bind(lib, g.nbytes, "ggml_nbytes");
  bind(lib, g.gguf_init_empty, "gguf_init_empty");
  bind(lib, g.gguf_init_from_file, "gguf_init_from_file");
  bind(lib, g.gguf_free, "gguf_free");
  bind(lib, g.gguf_set_val_u32, "gguf_set_val_u32");
  bind(lib, g.gguf_set_val_str, "gguf_set_val_str");
  bind(lib, g.gguf_add_tensor, "gguf_add_tensor");
  bind(lib, g.gguf_write_to_file, "gguf_write_to_file");
  bind(lib, g.gguf_get_version, "gguf_get_version");
  bind(lib, g.gguf_get_alignment, "gguf_get_alignment");
  bind(lib, g.gguf_get_data_offset, "gguf_get_data_offset");
  bind(lib, g.gguf_get_n_kv, "gguf_get_n_kv");
  bind(lib, g.gguf_find_key, "gguf_find_key");
  bind(lib, g.gguf_get_val_u32, "gguf_get_val_u32");
  bind(lib, g.gguf_get_n_tensors, "gguf_get_n_tensors");
  bind(lib, g.gguf_get_tensor_name, "gguf_get_tensor_name");
  bind(lib, g.gguf_get_tensor_type, "gguf_get_tensor_type");
  bind(lib, g.gguf_get_tensor_offset, "gguf_get_tensor_offset");
  bind(lib, g.gguf_get_tensor_size, "gguf_get_tensor_size");
  return g;
}

constexpr int64_t n_values = 256;

// The types ggml_quantize_chunk has a case for; it aborts on any other.
bool chunk_has_case(const std::string& name) {
  static const char* const known[] = {"f32",   "f16",   "bf16",   "q1_0",    "q2_0",   "q4_0",   "q4_1",
                                      "q5_0",  "q5_1",  "q8_0",   "mxfp4",   "nvfp4",  "q2_K",   "q3_K",
                                      "q4_K",  "q5_K",  "q6_K",   "tq1_0",   "tq2_0",  "iq2_xxs", "iq2_xs",
                                      "iq3_xxs", "iq3_s", "iq2_s", "iq1_s",  "iq1_m",  "iq4_nl", "iq4_xs"};
  for (const char* k : known) {
    if (name == k) return true;
  }
  return false;
}

struct quantized {
  int type = 0;
  std::string how;
  std::vector<unsigned char> bytes;
  double rms = 0;
  double seconds = 0;
};

// Quantizes in a child (an abort in ggml ends only the child) and sends the
// bytes back through a pipe.
bool quantize(const ggml_api& g, int type, const std::vector<float>& src, quantized& out) {
  const type_traits* tr = g.get_type_traits(type);
  const std::string name = tr->type_name ? tr->type_name : "";
  const size_t size = static_cast<size_t>(n_values / tr->blck_size) * tr->type_size;
  const bool by_chunk = chunk_has_case(name);
  if (!by_chunk && tr->from_float_ref == nullptr) return false;
  out.how = by_chunk ? "quantize_chunk" : "from_float_ref";
  const auto start = std::chrono::steady_clock::now();
  int fd[2];
  if (pipe(fd) != 0) die("pipe");
  const pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    std::vector<unsigned char> dst(size);
    if (by_chunk) {
      const std::vector<float> imatrix(n_values, 1.0f);
      const float* im = g.requires_imatrix(type) ? imatrix.data() : nullptr;
      const size_t n = g.quantize_chunk(type, src.data(), dst.data(), 0, 1, n_values, im);
      if (n != size) _exit(3);
    } else {
      tr->from_float_ref(src.data(), dst.data(), n_values);
    }
    const ssize_t w = write(fd[1], dst.data(), dst.size());
    _exit(w == static_cast<ssize_t>(dst.size()) ? 0 : 4);
  }
  close(fd[1]);
  out.bytes.resize(size);
  size_t got = 0;
  while (got < size) {
    const ssize_t r = read(fd[0], out.bytes.data() + got, size - got);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got != size) {
    out.how += WIFSIGNALED(status) ? " (child killed by signal " + std::to_string(WTERMSIG(status)) + ")"
                                   : " (child status " + std::to_string(WEXITSTATUS(status)) + ")";
    return false;
  }
  out.type = type;
  if (tr->to_float != nullptr) {
    std::vector<float> back(n_values);
    tr->to_float(out.bytes.data(), back.data(), n_values);
    double sum = 0;
    for (int64_t i = 0; i < n_values; ++i) sum += (back[i] - src[i]) * (back[i] - src[i]);
    out.rms = std::sqrt(sum / n_values);
  } else {
    out.rms = NAN;  // f32 has no to_float: it is already f32
  }
  return true;
}

std::vector<unsigned char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The size of a symbol in a 64-bit ELF file's .symtab (0 if absent).
size_t local_symbol_size(const std::string& path, const char* name) {
  const std::vector<unsigned char> f = read_file(path);
  Elf64_Ehdr eh;
  if (f.size() < sizeof eh) return 0;
  std::memcpy(&eh, f.data(), sizeof eh);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) return 0;
  auto section = [&](size_t i) {
    Elf64_Shdr sh{};
    const size_t at = eh.e_shoff + i * eh.e_shentsize;
    if (at + sizeof sh <= f.size()) std::memcpy(&sh, f.data() + at, sizeof sh);
    return sh;
  };
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    const Elf64_Shdr sh = section(i);
    if (sh.sh_type != SHT_SYMTAB || sh.sh_link >= eh.e_shnum) continue;
    const Elf64_Shdr str = section(sh.sh_link);
    for (size_t at = sh.sh_offset; at + sizeof(Elf64_Sym) <= sh.sh_offset + sh.sh_size && at + sizeof(Elf64_Sym) <= f.size();
         at += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      std::memcpy(&sym, f.data() + at, sizeof sym);
      const size_t n = str.sh_offset + sym.st_name;
      if (n < f.size() && std::strncmp(reinterpret_cast<const char*>(f.data() + n), name, f.size() - n) == 0) {
        return sym.st_size;
      }
    }
  }
  return 0;
}

int write_gguf(const ggml_api& g, const std::vector<quantized>& q, const std::string& path) {
  size_t mem = 1 << 20;
  for (const auto& x : q) mem += x.bytes.size() + 1024;
  ggml_context* ctx = g.init(init_params{mem, nullptr, false});
  if (ctx == nullptr) die("ggml_init failed");
  gguf_context* gg = g.gguf_init_empty();
  g.gguf_set_val_str(gg, "general.architecture", "ferry-smoke");
  g.gguf_set_val_u32(gg, "ferry.answer", 42);
  std::vector<std::string> names;
  for (const auto& x : q) {
    ggml_tensor* t = g.new_tensor_1d(ctx, x.type, n_values);
    if (g.nbytes(t) != x.bytes.size()) die("ggml_nbytes disagrees for " + std::string(g.type_name(x.type)));
    names.push_back(std::string("t.") + g.type_name(x.type));
    g.set_name(t, names.back().c_str());
    std::memcpy(g.get_data(t), x.bytes.data(), x.bytes.size());
    g.gguf_add_tensor(gg, t);
  }
  if (!g.gguf_write_to_file(gg, path.c_str(), false)) die("gguf_write_to_file failed");
  g.gguf_free(gg);
  g.free(ctx);

  gguf_context* rd = g.gguf_init_from_file(path.c_str(), gguf_params{true, nullptr});
  if (rd == nullptr) die("gguf_init_from_file refused " + path);
  const std::vector<unsigned char> file = read_file(path);
  const size_t data = g.gguf_get_data_offset(rd);
  std::printf("gguf: %s: %zu bytes, version %u, alignment %zu, %lld keys, %lld tensors, data at %zu, ferry.answer=%u\n",
              path.c_str(), file.size(), g.gguf_get_version(rd), g.gguf_get_alignment(rd),
              static_cast<long long>(g.gguf_get_n_kv(rd)), static_cast<long long>(g.gguf_get_n_tensors(rd)), data,
              g.gguf_get_val_u32(rd, g.gguf_find_key(rd, "ferry.answer")));
  int bad = 0;
  if (g.gguf_get_n_tensors(rd) != static_cast<int64_t>(q.size())) bad++;
  for (size_t i = 0; i < q.size(); ++i) {
    const auto id = static_cast<int64_t>(i);
    const size_t off = data + g.gguf_get_tensor_offset(rd, id);
    const size_t size = g.gguf_get_tensor_size(rd, id);
    const bool same = names[i] == g.gguf_get_tensor_name(rd, id) && g.gguf_get_tensor_type(rd, id) == q[i].type &&
                      size == q[i].bytes.size() && off + size <= file.size() &&
                      std::memcmp(file.data() + off, q[i].bytes.data(), size) == 0;
    if (!same) {
      std::printf("gguf: tensor %zu (%s) differs\n", i, names[i].c_str());
      bad++;
    }
  }
  g.gguf_free(rd);
  std::printf("gguf: %zu tensors read back, %d mismatches\n", q.size(), bad);
  return bad;
}

// llama_*_default_params return their struct by value, which the x86-64
// System V ABI does through a hidden pointer passed where a first argument
// would go (%rdi). Called as taking that pointer, to a buffer of canary
// bytes, each leaves the bytes past its struct untouched: their count tells
// the struct's size (up to trailing padding). x86-64 only: aarch64 passes
// the pointer in x8 instead.
size_t written_size(void* lib, const char* name) {
#if defined(__x86_64__)
  using fn = void* (*)(void*);
  void* p = dlsym(lib, name);
  if (p == nullptr) die(std::string("no symbol ") + name);
  alignas(16) unsigned char buf[1024];
  size_t last = 0;
  for (unsigned char canary : {0xA5, 0x5A}) {
    std::memset(buf, canary, sizeof buf);
    reinterpret_cast<fn>(p)(buf);
    for (size_t i = 0; i < sizeof buf; ++i) {
      if (buf[i] != canary) last = std::max(last, i + 1);
    }
  }
  return last;
#else
  (void)lib;
  (void)name;
  return 0;
#endif
}

// Dequantizes every tensor of a GGUF file with ggml's to_float and writes
// the f32 values, one tensor after another, to out: run on two machines, the
// outputs show whether ggml's dequantization gives the same bits on both.
int dequantize_file(const ggml_api& g, int count, const std::string& path, const std::string& out_path) {
  gguf_context* rd = g.gguf_init_from_file(path.c_str(), gguf_params{true, nullptr});
  if (rd == nullptr) die("gguf_init_from_file refused " + path);
  const std::vector<unsigned char> file = read_file(path);
  std::FILE* out = std::fopen(out_path.c_str(), "wb");
  if (out == nullptr) die("cannot write " + out_path);
  const size_t data = g.gguf_get_data_offset(rd);
  int n = 0;
  for (int64_t i = 0; i < g.gguf_get_n_tensors(rd); ++i) {
    const int type = g.gguf_get_tensor_type(rd, i);
    if (type < 0 || type >= count) continue;
    const type_traits* tr = g.get_type_traits(type);
    const size_t size = g.gguf_get_tensor_size(rd, i);
    const size_t off = data + g.gguf_get_tensor_offset(rd, i);
    if (off + size > file.size() || tr->blck_size == 0) continue;
    const auto k = static_cast<int64_t>(size / tr->type_size) * tr->blck_size;
    std::vector<float> y(static_cast<size_t>(k));
    if (tr->to_float != nullptr) {
      tr->to_float(file.data() + off, y.data(), k);
    } else if (type == 0) {
      std::memcpy(y.data(), file.data() + off, size);
    } else {
      continue;
    }
    std::fwrite(y.data(), sizeof(float), y.size(), out);
    n++;
  }
  std::fclose(out);
  g.gguf_free(rd);
  std::printf("dequantized %d tensors of %s into %s\n", n, path.c_str(), out_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: ggml_smoke BINS_DIR OUT.gguf [libllama.so]\n"
                 "       ggml_smoke BINS_DIR --dequantize IN.gguf OUT.f32\n");
    return 2;
  }
  const std::string dir = argv[1];
  void* lib = dlopen((dir + "/libggml-base.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) die(dlerror());
  const ggml_api g = load_ggml(lib);
  std::printf("ggml %s (commit %s)\n", g.version(), g.commit());

  // This build's ggml_type_name does not check its argument (it indexes the
  // table, whatever the id), so GGML_TYPE_COUNT comes from the size of the
  // library's own (local, unstripped) type_traits table.
  const size_t table = local_symbol_size(dir + "/libggml-base.so", "type_traits");
  if (table == 0 || table % sizeof(type_traits) != 0) die("type_traits has size " + std::to_string(table));
  const int count = static_cast<int>(table / sizeof(type_traits));
  std::printf("type count (type_traits is %zu bytes, %zu a type): %d\n", table, sizeof(type_traits), count);
  if (std::strcmp(argv[2], "--dequantize") == 0) {
    if (argc != 5) die("--dequantize takes IN.gguf OUT.f32");
    return dequantize_file(g, count, argv[3], argv[4]);
  }

  std::mt19937 rng(27);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> src(n_values);
  for (auto& v : src) v = dist(rng);

  std::vector<quantized> done;
  int failures = 0;
  std::printf("%3s %-8s %5s %5s %5s %-3s %-3s %-3s %s\n", "id", "name", "blck", "bytes", "quant", "to", "frm", "imx",
              "256 floats");
  for (int t = 0; t < count; ++t) {
    const type_traits* tr = g.get_type_traits(t);
    if (tr->blck_size == 0) {
      std::printf("%3d %-8s (removed)\n", t, tr->type_name ? tr->type_name : "(null)");
      continue;
    }
    if (tr->blck_size != g.blck_size(t) || tr->type_size != g.type_size(t)) {
      std::printf("%3d traits disagree with ggml_blck_size/ggml_type_size: the struct layout is wrong\n", t);
      return 1;
    }
    quantized q;
    std::string result = "not producible";
    if (n_values % tr->blck_size != 0) {
      result = "256 is not a whole number of blocks";
    } else if (quantize(g, t, src, q)) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "%s: %zu bytes, rms error %.5f, %.2f s", q.how.c_str(), q.bytes.size(), q.rms,
                    q.seconds);
      result = buf;
      done.push_back(q);
    } else if (!q.how.empty()) {
      result = "FAILED " + q.how;
      failures++;
    }
    std::printf("%3d %-8s %5lld %5zu %5s %-3s %-3s %-3s %s\n", t, tr->type_name, static_cast<long long>(tr->blck_size),
                tr->type_size, tr->is_quantized ? "yes" : "no", tr->to_float ? "yes" : "-",
                tr->from_float_ref ? "yes" : "-", g.requires_imatrix(t) ? "yes" : "-", result.c_str());
  }
  // Q4_0 on values in [-1, 1]: 4 bits over a range of 2 leave an error of
  // about 2/16/sqrt(12) = 0.036; ten times that is a broken round trip.
  for (const auto& q : done) {
    if (std::strcmp(g.type_name(q.type), "q4_0") == 0 && !(q.rms < 0.36)) {
      std::printf("q4_0 round trip error %.5f is too large\n", q.rms);
      failures++;
    }
  }
  std::printf("%zu types quantized, %d failures\n", done.size(), failures);
  failures += write_gguf(g, done, argv[2]);

  if (argc > 3) {
    void* llama = dlopen(argv[3], RTLD_NOW | RTLD_LOCAL);
    if (llama == nullptr) die(dlerror());
    std::printf("llama_model_default_params writes %zu bytes, llama_context_default_params %zu bytes\n",
                written_size(llama, "llama_model_default_params"),
                written_size(llama, "llama_context_default_params"));
  }
  return failures == 0 ? 0 : 1;
}
