// Authenticated rings on loopback: every collective gives the bits of an
// unauthenticated ring in both modes, and ranks that disagree on FERRY_AUTH
// both fail naming both sides.
#include <gtest/gtest.h>

#include <vector>

#include "ferry/comm/communicator.h"
#include "world.h"

namespace ferry::comm {
namespace {

using namespace std::chrono_literals;
using test::run_world;

// Every collective, several chunks each (small chunk_bytes), as bytes.
std::vector<std::byte> everything(std::uint32_t r, config& c, std::optional<listener>& l) {
  c.chunk_bytes = 4096;
  communicator comm(c, std::move(l));
  std::vector<float> out;
  std::vector<float> v(10'001);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(r + 1) * 0.37f + static_cast<float>(i) * 1e-3f;
  auto sum = v;
  comm.allreduce(sum);
  out.insert(out.end(), sum.begin(), sum.end());
  auto half = v;
  error_feedback ef(half.size());
  comm.allreduce(half, {.op = reduce_op::avg, .comp = compression::bf16, .feedback = &ef});
  out.insert(out.end(), half.begin(), half.end());
  auto b = v;
  comm.broadcast(b, 1);
  out.insert(out.end(), b.begin(), b.end());
  const auto all = comm.allgather(static_cast<double>(r) + 0.5);
  out.insert(out.end(), all.begin(), all.end());
  comm.barrier();
  return test::to_bytes(out);
}

TEST(AuthRing, EveryCollectiveGivesTheBitsOfAPlainRing) {
  const auto plain = run_world(3, everything);
  for (const auto& o : plain) ASSERT_TRUE(o.ok) << o.text;
  for (const frame_auth mode : {frame_auth::frames, frame_auth::encrypt}) {
    const auto out = run_world(3, everything, [mode](std::uint32_t, config& c) { c.auth = mode; });
    for (std::uint32_t r = 0; r < 3; ++r) {
      ASSERT_TRUE(out[r].ok) << name(mode) << ": " << out[r].text;
      EXPECT_EQ(out[r].bytes, plain[r].bytes) << name(mode) << ", rank " << r;
    }
  }
}

TEST(AuthRing, ModesThatDifferFailOnBothSidesNamingBoth) {
  const auto out = run_world(2, [](std::uint32_t, config& c, std::optional<listener>& l) {
    c.timeout = 5s;
    communicator comm(c, std::move(l));
    return std::vector<std::byte>();
  }, [](std::uint32_t r, config& c) { c.auth = r == 0 ? frame_auth::none : frame_auth::frames; });
  for (const auto& o : out) {
    EXPECT_EQ(o.code, comm_errc::config_mismatch) << o.text;
    EXPECT_NE(o.text.find("FERRY_AUTH=none on rank 0 ("), std::string::npos) << o.text;
    EXPECT_NE(o.text.find("FERRY_AUTH=frames on rank 1 ("), std::string::npos) << o.text;
  }
}

}  // namespace
}  // namespace ferry::comm
