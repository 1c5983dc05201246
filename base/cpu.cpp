#include "ferry/base/cpu.h"

#include <atomic>
#include <utility>

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__) || defined(__arm__)
#include <sys/auxv.h>
#endif

namespace ferry::base {
namespace {

cpu_feature_set detect() noexcept {
  cpu_feature_set s = 0;
#if defined(__x86_64__)
  __builtin_cpu_init();
  s |= static_cast<cpu_feature_set>(cpu_feature::sse2);
  if (__builtin_cpu_supports("ssse3")) s = s | cpu_feature::ssse3;
  if (__builtin_cpu_supports("sse4.2")) s = s | cpu_feature::sse4_2;
  // libgcc checks XCR0 for AVX state, so avx2 here means the OS saves YMM.
  if (__builtin_cpu_supports("avx2")) s = s | cpu_feature::avx2;
  // libgcc also checks XCR0 for opmask and ZMM state here.
  if (__builtin_cpu_supports("avx512bw")) s = s | cpu_feature::avx512bw;
  if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("vpclmulqdq")) s = s | cpu_feature::vpclmulqdq;
  // ferry's F16C path uses 256-bit AVX registers, so it needs AVX state too.
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C)) {
    s = s | cpu_feature::f16c;
  }
#elif defined(__aarch64__)
  s |= static_cast<cpu_feature_set>(cpu_feature::neon);
  const unsigned long hw = getauxval(AT_HWCAP);
  if (hw & (1ul << 7)) s = s | cpu_feature::arm_crc32;  // HWCAP_CRC32
#elif defined(__arm__)
  const unsigned long hw2 = getauxval(AT_HWCAP2);
  if (hw2 & (1ul << 4)) s = s | cpu_feature::arm_crc32;  // HWCAP2_CRC32
#endif
  return s;
}

// Constant-initialised, so it is valid before any dynamic initialiser runs.
std::atomic<cpu_feature_set> allowed_mask{all_cpu_features};

}  // namespace

cpu_feature_set detected_cpu_features() noexcept {
  static const cpu_feature_set detected = detect();
  return detected;
}

cpu_feature_set enabled_cpu_features() noexcept {
  return detected_cpu_features() & allowed_mask.load(std::memory_order_relaxed);
}

void limit_cpu_features(cpu_feature_set allowed) noexcept {
  allowed_mask.store(allowed, std::memory_order_relaxed);
}

std::string describe_cpu_features(cpu_feature_set set) {
  static constexpr std::pair<cpu_feature, const char*> names[] = {
      {cpu_feature::sse2, "sse2"}, {cpu_feature::ssse3, "ssse3"},
      {cpu_feature::sse4_2, "sse4.2"}, {cpu_feature::avx2, "avx2"},
      {cpu_feature::f16c, "f16c"}, {cpu_feature::avx512bw, "avx512bw"}, {cpu_feature::vpclmulqdq, "vpclmulqdq"},
      {cpu_feature::neon, "neon"},
      {cpu_feature::arm_crc32, "crc32"},
  };
  std::string out;
  for (const auto& [f, n] : names) {
    if (!has(set, f)) continue;
    if (!out.empty()) out += ' ';
    out += n;
  }
  return out.empty() ? "none (portable paths)" : out;
}

}  // namespace ferry::base
