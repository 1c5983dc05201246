// host_arch(): the name that travels in the comm HELLO's 16-byte arch field
// and that the trainer stores beside its CPU generator state.
#include "ferry/base/arch.h"

#include <gtest/gtest.h>

#include <string_view>

namespace ferry::base {
namespace {

TEST(HostArch, FitsTheHelloFieldAndNamesThisMachine) {
  const std::string_view a = host_arch();
  ASSERT_FALSE(a.empty());
  EXPECT_LE(a.size(), 16u);
  for (const char c : a) EXPECT_TRUE(c > ' ' && c < 0x7f) << a;
#if defined(__x86_64__)
  EXPECT_EQ(a, "x86_64");
#elif defined(__aarch64__)
  EXPECT_EQ(a, "aarch64");
#elif defined(__s390x__)
  EXPECT_EQ(a, "s390x");
#elif defined(__arm__) && defined(__ARM_PCS_VFP)
  EXPECT_EQ(a, "armhf");
#endif
}

}  // namespace
}  // namespace ferry::base
