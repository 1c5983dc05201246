#include "ferry/codec/half.h"

#include <cassert>

#include "ferry/codec/detail/half_kernels.h"
#include "ferry/base/cpu.h"

namespace ferry::codec {
namespace {

using base::cpu_feature;

template <class In, class Out>
using kernel = void (*)(const In*, Out*, std::size_t) noexcept;

// This architecture's SIMD kernels (nullptr where there are none) and the
// CPU feature each family needs.
struct simd_kernels {
  cpu_feature bf16_needs;
  kernel<float, bf16> to_bf16;
  kernel<bf16, float> from_bf16;
  cpu_feature f16_needs;
  kernel<float, f16> to_f16;
  kernel<f16, float> from_f16;
};

#if defined(__x86_64__)
constexpr simd_kernels simd = {cpu_feature::avx2, &detail::to_bf16_avx2, &detail::bf16_to_float_avx2,
                               cpu_feature::f16c, &detail::to_f16_f16c, &detail::f16_to_float_f16c};
#elif defined(__aarch64__)
constexpr simd_kernels simd = {cpu_feature::neon, &detail::to_bf16_neon, &detail::bf16_to_float_neon,
                               cpu_feature::neon, &detail::to_f16_neon, &detail::f16_to_float_neon};
#else
constexpr simd_kernels simd = {cpu_feature::neon, nullptr, nullptr, cpu_feature::neon, nullptr, nullptr};
#endif

bool use(cpu_feature f) noexcept { return has(base::enabled_cpu_features(), f); }

template <class In, class Out, class Scalar>
void convert(std::span<const In> in, std::span<Out> out, kernel<In, Out> fast, cpu_feature needs,
             Scalar scalar) noexcept {
  assert(in.size() == out.size());
  if (fast != nullptr && use(needs)) {
    fast(in.data(), out.data(), in.size());
  } else {
    for (std::size_t i = 0; i < in.size(); ++i) out[i] = scalar(in[i]);
  }
}

}  // namespace

void to_bf16(std::span<const float> in, std::span<bf16> out) noexcept {
  convert(in, out, simd.to_bf16, simd.bf16_needs, [](float x) { return to_bf16(x); });
}

void to_float(std::span<const bf16> in, std::span<float> out) noexcept {
  convert(in, out, simd.from_bf16, simd.bf16_needs, [](bf16 h) { return to_float(h); });
}

void to_f16(std::span<const float> in, std::span<f16> out) noexcept {
  convert(in, out, simd.to_f16, simd.f16_needs, [](float x) { return to_f16(x); });
}

void to_float(std::span<const f16> in, std::span<float> out) noexcept {
  convert(in, out, simd.from_f16, simd.f16_needs, [](f16 h) { return to_float(h); });
}

std::string_view half_kernel_name() noexcept {
#if defined(__x86_64__)
  if (use(cpu_feature::f16c)) return "avx2+f16c";
  if (use(cpu_feature::avx2)) return "avx2";
#elif defined(__aarch64__)
  if (use(cpu_feature::neon)) return "neon";
#endif
  return "scalar";
}


}  // namespace ferry::codec
