// FERRY_CPU_FEATURES's grammar and narrowing, and the dispatchers' names
// (base/cpu.h).
#include "ferry/base/cpu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "ferry/codec/crc32c.h"
#include "ferry/codec/half.h"
#include "ferry/codec/kernels.h"
#include "ferry/wire/bulk.h"

namespace ferry::base {
namespace {

constexpr cpu_feature_set every_feature = cpu_feature::sse2 | cpu_feature::ssse3 | cpu_feature::sse4_2 |
                                          cpu_feature::avx2 | cpu_feature::f16c | cpu_feature::avx512bw |
                                          cpu_feature::vpclmulqdq | cpu_feature::neon | cpu_feature::arm_crc32;

TEST(CpuFeatures, ParseReadsTheNamesDescribeWrites) {
  EXPECT_EQ(parse_cpu_features("sse2").value(), static_cast<cpu_feature_set>(cpu_feature::sse2));
  EXPECT_EQ(parse_cpu_features("sse4.2,avx2").value(), cpu_feature::sse4_2 | cpu_feature::avx2);
  EXPECT_EQ(parse_cpu_features(" ssse3 , f16c\tneon ").value(),
            cpu_feature::ssse3 | cpu_feature::f16c | cpu_feature::neon);
  EXPECT_EQ(parse_cpu_features("crc32").value(), static_cast<cpu_feature_set>(cpu_feature::arm_crc32));
  for (const char* none : {"", "none", " , ", "none (portable paths)"}) {
    EXPECT_EQ(parse_cpu_features(none).value(), 0u) << none;
  }
  // describe_cpu_features() and parse_cpu_features() agree on every name.
  EXPECT_EQ(parse_cpu_features(describe_cpu_features(every_feature)).value(), every_feature);
  for (cpu_feature_set bit = 1; bit != 0; bit <<= 1) {
    if ((every_feature & bit) == 0) continue;
    EXPECT_EQ(parse_cpu_features(describe_cpu_features(bit)).value(), bit) << describe_cpu_features(bit);
  }
  EXPECT_EQ(parse_cpu_features(describe_cpu_features(0)).value(), 0u);
}

TEST(CpuFeatures, AnUnknownNameIsOneClearError) {
  for (const char* text : {"avx9", "sse2,avx9", "SSE2", "sse4_2", "sse2;avx2"}) {
    const auto r = parse_cpu_features(text);
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().code(), errc::bad_value) << text;
    EXPECT_EQ(r.error().context().rfind("unknown CPU feature '", 0), 0u) << r.error().what();
    EXPECT_NE(r.error().context().find("known: none, sse2, "), std::string::npos) << r.error().what();
  }
  const auto r = narrow_cpu_features(every_feature, "sse2 avx9");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().context().rfind("FERRY_CPU_FEATURES: unknown CPU feature 'avx9'", 0), 0u) << r.error().what();
  EXPECT_EQ(r.error().what().find('\n'), std::string::npos);
}

TEST(CpuFeatures, TheVariableOnlyNarrows) {
  const cpu_feature_set detected = cpu_feature::sse2 | cpu_feature::ssse3;
  EXPECT_EQ(narrow_cpu_features(detected, nullptr).value(), detected);  // unset
  EXPECT_EQ(narrow_cpu_features(detected, "none").value(), 0u);
  EXPECT_EQ(narrow_cpu_features(detected, "ssse3").value(), static_cast<cpu_feature_set>(cpu_feature::ssse3));
  // Features the CPU lacks stay off, whatever the variable names.
  EXPECT_EQ(narrow_cpu_features(detected, "ssse3,avx2,avx512bw,neon").value(),
            static_cast<cpu_feature_set>(cpu_feature::ssse3));
  EXPECT_EQ(narrow_cpu_features(0, "sse2 ssse3 avx2").value(), 0u);
  // On this machine: never more than detected.
  const cpu_feature_set here = detected_cpu_features();
  EXPECT_EQ(narrow_cpu_features(here, describe_cpu_features(every_feature).c_str()).value(), here);
  // The test binary runs without the variable (or with a valid one).
  EXPECT_TRUE(check_cpu_features_env());
  EXPECT_EQ(enabled_cpu_features() & ~here, 0u);
}

std::string kernel_of(std::string_view dispatcher) {
  const auto all = codec::kernel_choices();
  const auto it =
      std::find_if(all.begin(), all.end(), [&](const codec::kernel_choice& k) { return k.dispatcher == dispatcher; });
  return it == all.end() ? std::string("(not listed)") : std::string(it->kernel);
}

TEST(KernelChoices, EveryDispatcherSaysWhichKernelItRuns) {
  EXPECT_EQ(kernel_of("byte_swap"), wire::bulk_kernel_name());
  EXPECT_EQ(kernel_of("crc32c"), codec::crc32c_kernel_name());
  EXPECT_EQ(kernel_of("f16_bf16"), codec::half_kernel_name());

  const auto all = codec::kernel_choices();
  EXPECT_EQ(all.size(), 3u);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end(), [](const codec::kernel_choice& a, const codec::kernel_choice& b) {
    return a.dispatcher < b.dispatcher;
  }));

  // Narrowed to nothing, every dispatcher names its portable kernel.
  limit_cpu_features(0);
  EXPECT_EQ(kernel_of("byte_swap"), "scalar");
  EXPECT_EQ(kernel_of("crc32c"), "table");
  EXPECT_EQ(kernel_of("f16_bf16"), "scalar");
  limit_cpu_features(all_cpu_features);
  EXPECT_EQ(kernel_of("crc32c"), codec::crc32c_kernel_name());
}

}  // namespace
}  // namespace ferry::base
