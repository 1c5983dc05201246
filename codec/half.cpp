#include "ferry/codec/half.h"

#include "ferry/codec/detail/half_kernels.h"
#include "ferry/wire/cpu.h"

namespace ferry::codec {
namespace {

using wire::cpu_feature;

[[maybe_unused]] bool use(cpu_feature f) noexcept { return has(wire::enabled_cpu_features(), f); }

template <class In, class Out, class Fn>
result<void> convert_each(std::span<const In> in, std::span<Out> out, Fn fn) noexcept {
  if (in.size() != out.size()) return errc::size_mismatch;
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = fn(in[i]);
  return {};
}

}  // namespace

result<void> to_bf16(std::span<const float> in, std::span<bf16> out) noexcept {
#if defined(__x86_64__)
  if (in.size() == out.size() && use(cpu_feature::avx2)) {
    detail::to_bf16_avx2(in.data(), out.data(), in.size());
    return {};
  }
#endif
  return convert_each(in, out, [](float f) { return to_bf16(f); });
}

result<void> to_float(std::span<const bf16> in, std::span<float> out) noexcept {
#if defined(__x86_64__)
  if (in.size() == out.size() && use(cpu_feature::avx2)) {
    detail::bf16_to_float_avx2(in.data(), out.data(), in.size());
    return {};
  }
#endif
  return convert_each(in, out, [](bf16 h) { return to_float(h); });
}

result<void> to_f16(std::span<const float> in, std::span<f16> out) noexcept {
#if defined(__x86_64__)
  if (in.size() == out.size() && use(cpu_feature::f16c)) {
    detail::to_f16_f16c(in.data(), out.data(), in.size());
    return {};
  }
#endif
  return convert_each(in, out, [](float f) { return to_f16(f); });
}

result<void> to_float(std::span<const f16> in, std::span<float> out) noexcept {
#if defined(__x86_64__)
  if (in.size() == out.size() && use(cpu_feature::f16c)) {
    detail::f16_to_float_f16c(in.data(), out.data(), in.size());
    return {};
  }
#endif
  return convert_each(in, out, [](f16 h) { return to_float(h); });
}

std::string_view half_kernel_name() noexcept {
#if defined(__x86_64__)
  if (use(cpu_feature::f16c)) return "avx2+f16c";
  if (use(cpu_feature::avx2)) return "avx2";
#endif
  return "scalar";
}

}  // namespace ferry::codec
