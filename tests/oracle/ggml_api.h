// llama.cpp's own libggml-base.so, opened with dlopen, as the oracle of
// ferry's GGUF code (tests/oracle/ggml_oracle_test.cpp). The library comes
// prebuilt in the npm package @node-llama-cpp/linux-x64 (or linux-arm64),
// which `scripts/install-deps oracle` fetches, checks against a pinned
// SHA-512 and unpacks into build/npm/; CMake names its folder in
// FERRY_GGML_DIR.
//
// No ggml header is used: the few declarations below are ggml's ABI as its
// headers (ggml.h, gguf.h) declare it, enums passed as int. The struct
// layouts are checked at run time where the library can answer
// (ggml_get_type_traits against ggml_blck_size/ggml_type_size).
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace ferry::testing::ggml {

struct context;
struct tensor;
struct gguf_context;

using to_float_fn = void (*)(const void* x, float* y, std::int64_t k);
using from_float_fn = void (*)(const float* x, void* y, std::int64_t k);

struct type_traits {  // struct ggml_type_traits
  const char* type_name;
  std::int64_t blck_size;
  std::int64_t blck_size_interleave;
  std::size_t type_size;
  bool is_quantized;
  to_float_fn to_float;
  from_float_fn from_float_ref;
};

struct init_params {  // struct ggml_init_params
  std::size_t mem_size;
  void* mem_buffer;
  bool no_alloc;
};

struct gguf_init_params {  // struct gguf_init_params
  bool no_alloc;
  context** ctx;
};

// gguf_type's numbers are GGUF's value type numbers (ferry's gguf_value_type).

/// The functions the oracle calls, bound from one dlopen'd library.
struct api {
  void* lib = nullptr;
  const char* (*version)() = nullptr;
  const char* (*commit)() = nullptr;
  const char* (*type_name)(int) = nullptr;
  std::int64_t (*blck_size)(int) = nullptr;
  std::size_t (*type_size)(int) = nullptr;
  const type_traits* (*get_type_traits)(int) = nullptr;
  bool (*requires_imatrix)(int) = nullptr;
  std::size_t (*quantize_chunk)(int, const float*, void*, std::int64_t, std::int64_t, std::int64_t,
                                const float*) = nullptr;
  context* (*init)(init_params) = nullptr;
  void (*free)(context*) = nullptr;
  tensor* (*new_tensor_2d)(context*, int, std::int64_t, std::int64_t) = nullptr;
  tensor* (*set_name)(tensor*, const char*) = nullptr;
  void* (*get_data)(const tensor*) = nullptr;
  std::size_t (*nbytes)(const tensor*) = nullptr;

  gguf_context* (*gguf_init_empty)() = nullptr;
  gguf_context* (*gguf_init_from_file)(const char*, gguf_init_params) = nullptr;
  void (*gguf_free)(gguf_context*) = nullptr;
  std::uint32_t (*gguf_get_version)(const gguf_context*) = nullptr;
  std::size_t (*gguf_get_alignment)(const gguf_context*) = nullptr;
  std::size_t (*gguf_get_data_offset)(const gguf_context*) = nullptr;
  std::int64_t (*gguf_get_n_kv)(const gguf_context*) = nullptr;
  const char* (*gguf_get_key)(const gguf_context*, std::int64_t) = nullptr;
  int (*gguf_get_kv_type)(const gguf_context*, std::int64_t) = nullptr;
  int (*gguf_get_arr_type)(const gguf_context*, std::int64_t) = nullptr;
  std::size_t (*gguf_get_arr_n)(const gguf_context*, std::int64_t) = nullptr;
  const void* (*gguf_get_arr_data)(const gguf_context*, std::int64_t) = nullptr;
  const char* (*gguf_get_arr_str)(const gguf_context*, std::int64_t, std::size_t) = nullptr;
  const void* (*gguf_get_val_data)(const gguf_context*, std::int64_t) = nullptr;
  const char* (*gguf_get_val_str)(const gguf_context*, std::int64_t) = nullptr;
  std::int64_t (*gguf_get_n_tensors)(const gguf_context*) = nullptr;
  const char* (*gguf_get_tensor_name)(const gguf_context*, std::int64_t) = nullptr;
  int (*gguf_get_tensor_type)(const gguf_context*, std::int64_t) = nullptr;
  std::size_t (*gguf_get_tensor_offset)(const gguf_context*, std::int64_t) = nullptr;
  std::size_t (*gguf_get_tensor_size)(const gguf_context*, std::int64_t) = nullptr;
  void (*gguf_set_val_u8)(gguf_context*, const char*, std::uint8_t) = nullptr;
  void (*gguf_set_val_i8)(gguf_context*, const char*, std::int8_t) = nullptr;
  void (*gguf_set_val_u16)(gguf_context*, const char*, std::uint16_t) = nullptr;
  void (*gguf_set_val_i16)(gguf_context*, const char*, std::int16_t) = nullptr;
  void (*gguf_set_val_u32)(gguf_context*, const char*, std::uint32_t) = nullptr;
  void (*gguf_set_val_i32)(gguf_context*, const char*, std::int32_t) = nullptr;
  void (*gguf_set_val_f32)(gguf_context*, const char*, float) = nullptr;
  void (*gguf_set_val_u64)(gguf_context*, const char*, std::uint64_t) = nullptr;
  void (*gguf_set_val_i64)(gguf_context*, const char*, std::int64_t) = nullptr;
  void (*gguf_set_val_f64)(gguf_context*, const char*, double) = nullptr;
  void (*gguf_set_val_bool)(gguf_context*, const char*, bool) = nullptr;
  void (*gguf_set_val_str)(gguf_context*, const char*, const char*) = nullptr;
  void (*gguf_set_arr_data)(gguf_context*, const char*, int, const void*, std::size_t) = nullptr;
  void (*gguf_set_arr_str)(gguf_context*, const char*, const char**, std::size_t) = nullptr;
  void (*gguf_add_tensor)(gguf_context*, const tensor*) = nullptr;
  bool (*gguf_write_to_file)(const gguf_context*, const char*, bool) = nullptr;

  /// Opens `dir`/libggml-base.so and binds every function; throws
  /// std::runtime_error naming what is missing.
  static api open(const std::string& dir) {
    api g;
    const std::string path = dir + "/libggml-base.so";
    g.lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (g.lib == nullptr) {
      throw std::runtime_error(std::string(dlerror()) + " (scripts/install-deps oracle fetches it)");
    }
    g.bind(g.version, "ggml_version");
    g.bind(g.commit, "ggml_commit");
    g.bind(g.type_name, "ggml_type_name");
    g.bind(g.blck_size, "ggml_blck_size");
    g.bind(g.type_size, "ggml_type_size");
    g.bind(g.get_type_traits, "ggml_get_type_traits");
    g.bind(g.requires_imatrix, "ggml_quantize_requires_imatrix");
    g.bind(g.quantize_chunk, "ggml_quantize_chunk");
    g.bind(g.init, "ggml_init");
    g.bind(g.free, "ggml_free");
    g.bind(g.new_tensor_2d, "ggml_new_tensor_2d");
    g.bind(g.set_name, "ggml_set_name");
    g.bind(g.get_data, "ggml_get_data");
    g.bind(g.nbytes, "ggml_nbytes");
    g.bind(g.gguf_init_empty, "gguf_init_empty");
    g.bind(g.gguf_init_from_file, "gguf_init_from_file");
    g.bind(g.gguf_free, "gguf_free");
    g.bind(g.gguf_get_version, "gguf_get_version");
    g.bind(g.gguf_get_alignment, "gguf_get_alignment");
    g.bind(g.gguf_get_data_offset, "gguf_get_data_offset");
    g.bind(g.gguf_get_n_kv, "gguf_get_n_kv");
    g.bind(g.gguf_get_key, "gguf_get_key");
    g.bind(g.gguf_get_kv_type, "gguf_get_kv_type");
    g.bind(g.gguf_get_arr_type, "gguf_get_arr_type");
    g.bind(g.gguf_get_arr_n, "gguf_get_arr_n");
    g.bind(g.gguf_get_arr_data, "gguf_get_arr_data");
    g.bind(g.gguf_get_arr_str, "gguf_get_arr_str");
    g.bind(g.gguf_get_val_data, "gguf_get_val_data");
    g.bind(g.gguf_get_val_str, "gguf_get_val_str");
    g.bind(g.gguf_get_n_tensors, "gguf_get_n_tensors");
    g.bind(g.gguf_get_tensor_name, "gguf_get_tensor_name");
    g.bind(g.gguf_get_tensor_type, "gguf_get_tensor_type");
    g.bind(g.gguf_get_tensor_offset, "gguf_get_tensor_offset");
    g.bind(g.gguf_get_tensor_size, "gguf_get_tensor_size");
    g.bind(g.gguf_set_val_u8, "gguf_set_val_u8");
    g.bind(g.gguf_set_val_i8, "gguf_set_val_i8");
    g.bind(g.gguf_set_val_u16, "gguf_set_val_u16");
    g.bind(g.gguf_set_val_i16, "gguf_set_val_i16");
    g.bind(g.gguf_set_val_u32, "gguf_set_val_u32");
    g.bind(g.gguf_set_val_i32, "gguf_set_val_i32");
    g.bind(g.gguf_set_val_f32, "gguf_set_val_f32");
    g.bind(g.gguf_set_val_u64, "gguf_set_val_u64");
    g.bind(g.gguf_set_val_i64, "gguf_set_val_i64");
    g.bind(g.gguf_set_val_f64, "gguf_set_val_f64");
    g.bind(g.gguf_set_val_bool, "gguf_set_val_bool");
    g.bind(g.gguf_set_val_str, "gguf_set_val_str");
    g.bind(g.gguf_set_arr_data, "gguf_set_arr_data");
    g.bind(g.gguf_set_arr_str, "gguf_set_arr_str");
    g.bind(g.gguf_add_tensor, "gguf_add_tensor");
    g.bind(g.gguf_write_to_file, "gguf_write_to_file");
    return g;
  }

 private:
  template <class F>
  void bind(F& fn, const char* name) {
    void* p = dlsym(lib, name);
    if (p == nullptr) throw std::runtime_error(std::string("libggml-base.so has no ") + name);
    fn = reinterpret_cast<F>(p);  // dlsym's answer is the function's address
  }
};

}  // namespace ferry::testing::ggml
