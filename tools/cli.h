// tools/cli.h: what the `ferry` tool's commands share: the one-line error,
// sizes and shapes as text, a progress bar, how a command opens a file, and
// GGUF's view of a tensor.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ferry/base/error.h"
#include "ferry/checkpoint/gguf.h"
#include "ferry/checkpoint/reader.h"

namespace ferry::tools {

namespace ckpt = ferry::checkpoint;

/// Prints "ferry: <what>" on stderr (after flushing stdout); returns status.
int fail(const ferry::error& e, int status = 1);
/// Flushes stdout; 0, or 1 with the error printed when the write failed.
int flush_stdout();

std::string human_bytes(std::uint64_t n);
std::string shape_text(std::span<const std::uint64_t> shape);
std::uint64_t total_storage_bytes(const ckpt::reader& r);

/// Options every command that reads checkpoints takes.
struct read_flags {
  std::string pytorch_order;     // "", "little" or "big"
  std::string gguf_order;        // "", "little" or "big": overrides GGUF's detection
  std::string npy_native_order;  // "", "little" or "big": what a .npy descr '|' or '=' means
  ckpt::fetch_checks checks = ckpt::fetch_checks::standard;
};
/// checkpoint::open() with the flags applied.
result<ckpt::reader, error> open_checkpoint(const std::string& path, const read_flags& flags);

/// A progress bar on stderr, drawn only when stderr is a terminal and at
/// most ten times a second.
class progress_bar {
 public:
  progress_bar(std::string label, std::uint64_t total);
  ~progress_bar() { finish(); }
  progress_bar(const progress_bar&) = delete;
  progress_bar& operator=(const progress_bar&) = delete;
  void update(std::uint64_t done);
  void finish();

 private:
  std::string label_;
  std::uint64_t total_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

/// GGUF's view of tensor `t` of a GGUF reader (its ggml type and extents),
/// or nullptr for other formats.
const ckpt::gguf_tensor* gguf_tensor_of(const ckpt::reader& r, const ckpt::tensor_info& t) noexcept;
/// Whether `t` is a GGUF tensor of a type with no ferry dtype (a quantized
/// one): the reader hands it out as u8, its blocks in host order.
bool is_quantized(const ckpt::reader& r, const ckpt::tensor_info& t) noexcept;

struct convert_options {
  std::string format;  // "", "ferry", "safetensors", "pt", "gguf", "npy" or "npz"
  std::string order;   // "", "little" or "big"
  std::string cast;    // "", "bf16", "f16" or "f32"
  std::string shared = "refuse";
  std::uint32_t alignment = 64;
  bool alignment_given = false;  // --alignment on the command line (GGUF's default is 32)
  bool compress = false;         // .npz: deflate records (np.savez_compressed)
  bool nested_arrays = false;    // .gguf: write arrays of arrays (gguf-py reads them, ggml does not)
  std::uint64_t shard_size = 0;  // 0: one file; else a set of shards of about this many bytes
  read_flags read;
};
/// ferry inspect FILE [--json].
int inspect(const std::string& path, bool as_json, const read_flags& flags);
/// ferry convert IN OUT.
int convert(const std::string& in, const std::string& out, const convert_options& o);
/// ferry diff A B [--json].
int diff(const std::string& a_path, const std::string& b_path, bool as_json, const read_flags& flags);

}  // namespace ferry::tools
