#include "cli.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace ferry::tools {

int fail(const ferry::error& e, int status) {
  std::cout.flush();
  std::fprintf(stderr, "ferry: %s\n", e.what().c_str());
  return status;
}

int flush_stdout() {
  std::cout.flush();
  if (!std::cout) return fail(ferry::error(ferry::errc::io_error, "standard output"));
  return 0;
}

std::string human_bytes(std::uint64_t n) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(units)) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string shape_text(std::span<const std::uint64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::uint64_t total_storage_bytes(const ckpt::reader& r) {
  std::uint64_t n = 0;
  for (const auto& s : r.storages()) n += s.nbytes;
  return n;
}

result<ckpt::reader, error> open_checkpoint(const std::string& path, const read_flags& flags) {
  ckpt::read_options opt;
  opt.pytorch_order = wire::byte_order_from_name(flags.pytorch_order);
  opt.gguf_order = wire::byte_order_from_name(flags.gguf_order);
  opt.npy_native_order = wire::byte_order_from_name(flags.npy_native_order);
  opt.checks = flags.checks;
  return ckpt::open(path, opt);
}

// A GGUF reader has one storage per tensor, tensor i over storage i
// (gguf.h), so the storage index is the tensor info's index.
const ckpt::gguf_tensor* gguf_tensor_of(const ckpt::reader& r, const ckpt::tensor_info& t) noexcept {
  const ckpt::gguf_header* h = r.gguf();
  if (h == nullptr || t.storage >= h->tensors.size()) return nullptr;
  return &h->tensors[t.storage];
}

bool is_quantized(const ckpt::reader& r, const ckpt::tensor_info& t) noexcept {
  const ckpt::gguf_tensor* g = gguf_tensor_of(r, t);
  return g != nullptr && !ckpt::dtype_of(g->type);  // what the reader hands out as u8 blocks
}

progress_bar::progress_bar(std::string label, std::uint64_t total)
    : label_(std::move(label)), total_(total), enabled_(::isatty(STDERR_FILENO) == 1) {}

void progress_bar::update(std::uint64_t done) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_ < std::chrono::milliseconds(100) && done < total_) return;
  last_ = now;
  drawn_ = true;
  const double f = total_ == 0 ? 1.0 : std::min(1.0, static_cast<double>(done) / static_cast<double>(total_));
  const int width = 30;
  const int fill = static_cast<int>(f * width);
  std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %s / %s", label_.c_str(), fill, "##############################",
               width - fill, "", static_cast<int>(f * 100), human_bytes(done).c_str(), human_bytes(total_).c_str());
  std::fflush(stderr);
}

void progress_bar::finish() {
  if (enabled_ && drawn_) std::fputs("\n", stderr);
  drawn_ = false;
}

}  // namespace ferry::tools
