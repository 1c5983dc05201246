// Slow: float -> f16 and float -> bf16 for all 2^32 inputs (make soak; a
// sample of them in make test, exhaustive_parallel.h) against the
// independent arithmetic reference, and the bulk kernels against the scalar
// functions. Label `slow`.
#include <gtest/gtest.h>

#include <vector>

#include "../exhaustive_parallel.h"
#include "ferry/codec/half.h"
#include "ferry/base/cpu.h"
#include "half_reference.h"

namespace ferry::codec {
namespace {

TEST(Exhaustive, ScalarNarrowingMatchesReference) {
  const auto bad = ferry::testing::for_all_u32([](std::uint32_t first, std::uint32_t count) -> std::optional<std::uint32_t> {
    for (std::uint32_t k = 0; k < count; ++k) {
      const float x = std::bit_cast<float>(first + k);
      if (to_f16(x).bits != testing::reference_f16(x) || to_bf16(x).bits != testing::reference_bf16(x)) {
        return first + k;
      }
    }
    return std::nullopt;
  });
  EXPECT_FALSE(bad.has_value()) << "first failing pattern 0x" << std::hex << *bad;
}

TEST(Exhaustive, BulkNarrowingMatchesScalar) {
  const auto bad = ferry::testing::for_all_u32([](std::uint32_t first, std::uint32_t count) -> std::optional<std::uint32_t> {
    // Reused per thread: allocating per chunk costs more than the checks.
    thread_local std::vector<float> in;
    thread_local std::vector<f16> h;
    thread_local std::vector<bf16> b;
    in.resize(count);
    h.resize(count);
    b.resize(count);
    for (std::uint32_t k = 0; k < count; ++k) in[k] = std::bit_cast<float>(first + k);
    to_f16(in, h);
    to_bf16(in, b);
    for (std::uint32_t k = 0; k < count; ++k) {
      if (h[k] != to_f16(in[k]) || b[k] != to_bf16(in[k])) return first + k;
    }
    return std::nullopt;
  });
  EXPECT_FALSE(bad.has_value()) << half_kernel_name() << ": first failing pattern 0x" << std::hex << *bad;
}

}  // namespace
}  // namespace ferry::codec
