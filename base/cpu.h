// ferry/base/cpu.h: run-time CPU feature detection for ferry's dispatchers.
//
// Every SIMD or hardware-accelerated path in ferry (bulk byte swaps, CRC32C,
// f16/bf16 conversion) is chosen at run time from enabled_cpu_features(), so
// a default build (-O2, no -march) runs the fastest path the machine has and
// the same binary still runs on the oldest CPU of its architecture. All paths
// of one operation produce identical bytes; tests check that by narrowing the
// enabled set with limit_cpu_features().
//
// FERRY_CPU_FEATURES narrows the set for a whole process, as simdjson's
// SIMDJSON_FORCE_IMPLEMENTATION does, so a bug report can name the path it
// saw and anyone can run the same path: a list of feature names
// (describe_cpu_features()'s: "sse2 ssse3", "sse4.2,avx2"), or "none" for
// the portable paths. It can only take features away: one the CPU lacks
// stays off. Read once, at the first dispatch; a value naming an unknown
// feature narrows nothing, and ferry's programs (`ferry`, ferry.info())
// refuse it with one line (check_cpu_features_env()).
//
// codec/kernels.h lists every dispatcher and the kernel each picks, for
// `ferry --version` and ferry.info().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/error.h"

namespace ferry::base {

enum class cpu_feature : std::uint32_t {
  // x86-64
  sse2 = 1u << 0,    ///< baseline on x86-64
  ssse3 = 1u << 1,   ///< pshufb
  sse4_2 = 1u << 2,  ///< crc32 instruction (CRC32C)
  avx2 = 1u << 3,    ///< 256-bit integer shuffles
  f16c = 1u << 4,    ///< vcvtps2ph / vcvtph2ps
  avx512bw = 1u << 5,  ///< 512-bit byte shuffles (with the OS saving ZMM state)
  vpclmulqdq = 1u << 6,  ///< 512-bit carry-less multiply (with avx512bw: the OS saves ZMM)
  // ARM
  neon = 1u << 8,       ///< Advanced SIMD (baseline on aarch64)
  arm_crc32 = 1u << 9,  ///< ARMv8 CRC32C instructions
};

/// A set of cpu_feature bits.
using cpu_feature_set = std::uint32_t;

inline constexpr cpu_feature_set all_cpu_features = ~cpu_feature_set{0};

[[nodiscard]] constexpr cpu_feature_set operator|(cpu_feature a, cpu_feature b) noexcept {
  return static_cast<cpu_feature_set>(a) | static_cast<cpu_feature_set>(b);
}
[[nodiscard]] constexpr cpu_feature_set operator|(cpu_feature_set a, cpu_feature b) noexcept {
  return a | static_cast<cpu_feature_set>(b);
}

/// What this CPU and OS support (detected once).
[[nodiscard]] cpu_feature_set detected_cpu_features() noexcept;

/// What the dispatchers may use: detected features narrowed by
/// FERRY_CPU_FEATURES and by the last limit_cpu_features() call.
[[nodiscard]] cpu_feature_set enabled_cpu_features() noexcept;

[[nodiscard]] inline bool has(cpu_feature_set set, cpu_feature f) noexcept {
  return (set & static_cast<cpu_feature_set>(f)) != 0;
}

/// Restricts every dispatcher to `allowed` (intersected with what is
/// detected); limit_cpu_features(0) forces the portable scalar paths,
/// limit_cpu_features(all_cpu_features) restores the default. For tests and
/// benchmarks; safe to call from any thread, though calls racing with running
/// conversions may let an in-flight call use either path.
void limit_cpu_features(cpu_feature_set allowed) noexcept;

/// Names of the features in `set`, space-separated, e.g. "sse2 ssse3 avx2";
/// "none (portable paths)" for the empty set.
[[nodiscard]] std::string describe_cpu_features(cpu_feature_set set);

/// FERRY_CPU_FEATURES's grammar: feature names as describe_cpu_features()
/// writes them, separated by commas and/or spaces, or "none" (also "" and
/// describe_cpu_features(0)): the empty set. Errors: bad_value, naming the
/// unknown word and the known ones.
[[nodiscard]] result<cpu_feature_set, error> parse_cpu_features(std::string_view text);

/// The features FERRY_CPU_FEATURES=`value` leaves on a CPU with `detected`:
/// detected & parse_cpu_features(value), never more than detected; all of
/// `detected` for a null `value` (the variable unset). Errors: as
/// parse_cpu_features, with "FERRY_CPU_FEATURES" in the context.
[[nodiscard]] result<cpu_feature_set, error> narrow_cpu_features(cpu_feature_set detected, const char* value);

/// Whether this process's FERRY_CPU_FEATURES (as read at the first
/// dispatch) is valid: the error a program reports before it does anything.
[[nodiscard]] result<void, error> check_cpu_features_env();


}  // namespace ferry::base
