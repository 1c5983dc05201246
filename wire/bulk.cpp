#include "ferry/wire/bulk.h"

#include <cassert>

#include "ferry/base/cpu.h"
#include "ferry/wire/detail/bulk_kernels.h"

namespace ferry::wire {
namespace detail {
namespace {

struct portable {};

template <std::size_t Width>
void reverse_portable(const std::byte* in, std::byte* out, std::size_t count) noexcept {
  reverse_scalar<portable, Width>(in, out, count);
}

}  // namespace

const reverse_kernels scalar_kernels = {&reverse_portable<2>, &reverse_portable<4>,
                                        &reverse_portable<8>, "scalar"};

}  // namespace detail

namespace {

using base::cpu_feature;
using base::cpu_feature_set;

const detail::reverse_kernels& kernels() noexcept {
  [[maybe_unused]] const cpu_feature_set f = base::enabled_cpu_features();
#if defined(__x86_64__)
  if (base::has(f, cpu_feature::avx512bw)) return detail::avx512_kernels;
  if (base::has(f, cpu_feature::avx2)) return detail::avx2_kernels;
  if (base::has(f, cpu_feature::ssse3)) return detail::ssse3_kernels;
  if (base::has(f, cpu_feature::sse2)) return detail::sse2_kernels;
#elif defined(__aarch64__)
  if (base::has(f, cpu_feature::neon)) return detail::neon_kernels;
#endif
  return detail::scalar_kernels;
}

}  // namespace

void reverse_bytes(const std::byte* in, std::byte* out, std::size_t count,
                   std::size_t width) noexcept {
  const detail::reverse_kernels& k = kernels();
  switch (width) {
    case 1:
      if (in != out && count != 0) std::memcpy(out, in, count);
      return;
    case 2: return k.r16(in, out, count);
    case 4: return k.r32(in, out, count);
    case 8: return k.r64(in, out, count);
    default: assert(false && "reverse_bytes: width must be 1, 2, 4 or 8");
  }
}

void convert(std::span<const std::byte> in, byte_order from, std::span<std::byte> out, byte_order to,
             std::size_t width) noexcept {
  assert(width == 1 || width == 2 || width == 4 || width == 8);
  assert(in.size() == out.size() && in.size() % width == 0);
  // Same range or disjoint; a partial overlap would read bytes already written.
  assert(in.data() == out.data() || in.empty() ||
         std::less<>{}(in.data() + in.size() - 1, out.data()) ||
         std::less<>{}(out.data() + out.size() - 1, in.data()));
  if (from == to || width == 1) {
    if (in.data() != out.data() && !in.empty()) std::memcpy(out.data(), in.data(), in.size());
    return;
  }
  reverse_bytes(in.data(), out.data(), in.size() / width, width);
}

void convert_in_place(std::span<std::byte> data, std::size_t width, byte_order from,
                      byte_order to) noexcept {
  convert(data, from, data, to, width);
}

std::string_view bulk_kernel_name() noexcept { return kernels().name; }


}  // namespace ferry::wire
