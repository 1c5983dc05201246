#include "ferry/base/cpu.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
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

// Every feature's name, as describe_cpu_features() writes it and
// FERRY_CPU_FEATURES reads it.
constexpr std::pair<cpu_feature, std::string_view> feature_names[] = {
    {cpu_feature::sse2, "sse2"}, {cpu_feature::ssse3, "ssse3"},
    {cpu_feature::sse4_2, "sse4.2"}, {cpu_feature::avx2, "avx2"},
    {cpu_feature::f16c, "f16c"}, {cpu_feature::avx512bw, "avx512bw"}, {cpu_feature::vpclmulqdq, "vpclmulqdq"},
    {cpu_feature::neon, "neon"},
    {cpu_feature::arm_crc32, "crc32"},
};
constexpr std::string_view no_features = "none (portable paths)";

// The detected features narrowed by FERRY_CPU_FEATURES, read once; an
// invalid value narrows nothing and is kept for check_cpu_features_env().
struct env_features {
  cpu_feature_set usable = 0;
  std::optional<error> problem;
};

const env_features& features_from_env() noexcept {
  static const env_features e = []() noexcept {
    const cpu_feature_set detected = detected_cpu_features();
    try {
      auto narrowed = narrow_cpu_features(detected, std::getenv("FERRY_CPU_FEATURES"));
      if (narrowed) return env_features{*narrowed, std::nullopt};
      return env_features{detected, std::move(narrowed).error()};
    } catch (...) {  // std::bad_alloc building the error's text
      return env_features{detected, std::nullopt};
    }
  }();
  return e;
}

}  // namespace

cpu_feature_set detected_cpu_features() noexcept {
  static const cpu_feature_set detected = detect();
  return detected;
}

cpu_feature_set enabled_cpu_features() noexcept {
  return features_from_env().usable & allowed_mask.load(std::memory_order_relaxed);
}

void limit_cpu_features(cpu_feature_set allowed) noexcept {
  allowed_mask.store(allowed, std::memory_order_relaxed);
}

std::string describe_cpu_features(cpu_feature_set set) {
  std::string out;
  for (const auto& [f, n] : feature_names) {
    if (!has(set, f)) continue;
    if (!out.empty()) out += ' ';
    out += n;
  }
  return out.empty() ? std::string(no_features) : out;
}

result<cpu_feature_set, error> parse_cpu_features(std::string_view text) {
  if (text == no_features) return cpu_feature_set{0};
  cpu_feature_set set = 0;
  constexpr std::string_view separators = ", \t";
  for (std::size_t at = text.find_first_not_of(separators); at != std::string_view::npos;
       at = text.find_first_not_of(separators, at)) {
    const std::size_t end = std::min(text.find_first_of(separators, at), text.size());
    const std::string_view word = text.substr(at, end - at);
    at = end;
    if (word == "none") continue;
    const auto* known = std::find_if(std::begin(feature_names), std::end(feature_names),
                                     [&](const auto& fn) { return fn.second == word; });
    if (known == std::end(feature_names)) {
      std::string names = "none";
      for (const auto& fn : feature_names) names += ", " + std::string(fn.second);
      return error(errc::bad_value, "unknown CPU feature " + quote(word) + " (known: " + names + ")");
    }
    set = set | known->first;
  }
  return set;
}

result<cpu_feature_set, error> narrow_cpu_features(cpu_feature_set detected, const char* value) {
  if (value == nullptr) return detected;
  auto set = parse_cpu_features(value);
  if (!set) return std::move(set).error().wrap("FERRY_CPU_FEATURES");
  return detected & *set;
}

result<void, error> check_cpu_features_env() {
  if (const auto& problem = features_from_env().problem) return *problem;
  return {};
}


}  // namespace ferry::base
