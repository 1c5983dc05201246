// The handshake messages and the configuration, without a network: these
// run on every architecture (under qemu for aarch64, armhf and s390x).
#include "ferry/comm/handshake.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <cstdio>
#include <string>
#include <vector>

#include "ferry/codec/crc32c.h"
#include "ferry/comm/config.h"
#include "ferry/comm/detail/rendezvous.h"
#include "hello_sample.h"
#include "ferry/wire/byte_order.h"

namespace ferry::comm {
namespace {

using namespace std::chrono_literals;
using detail::local_hello;

using test::sample;

TEST(Handshake, HelloRoundTripAndHostileBytes) {
  hello h = sample(3);
  h.nonce[5] = std::byte{9};
  h.listen_port = 4242;
  const auto b = encode_hello(h);
  const auto back = parse_hello(b);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, h);
  auto bad = b;
  bad[30] = std::byte{0x01};  // a control character in the arch name
  EXPECT_EQ(parse_hello(bad).error(), errc::bad_value);
  bad = b;
  bad[50] ^= std::byte{0x01};  // a nonce bit
  EXPECT_EQ(parse_hello(bad).error(), errc::checksum_mismatch);
  bad = b;
  bad[12] = std::byte{3};  // world size 3 with rank 3, CRC fixed
  wire::store<std::uint32_t>(codec::crc32c(std::span<const std::byte>(bad).first(76)), bad.data() + 76,
                             wire::byte_order::little);
  EXPECT_EQ(parse_hello(bad).error(), comm_errc::config_mismatch);
  EXPECT_FALSE(compare_worlds(sample(0), sample(1)).size() > 0);
  hello other = sample(1);
  other.world_size = 3;
  EXPECT_NE(compare_worlds(sample(0), other).find("world size 4 on rank 0"), std::string::npos);
}

TEST(Handshake, TableRoundTripAndLimits) {
  std::vector<detail::table_entry> t(3);
  t[1].at.storage.ss_family = AF_INET;
  t[1].at.length = sizeof(sockaddr_in);
  t[1].at.set_port(1234);
  const auto b = detail::encode_table(t);
  const auto back = detail::parse_table(b, 3);
  ASSERT_TRUE(back);
  EXPECT_EQ((*back)[1].at.port(), 1234);
  EXPECT_EQ((*back)[0].at.family(), AF_UNSPEC);
  EXPECT_EQ(detail::parse_table(b, 4).error(), comm_errc::config_mismatch);
  EXPECT_EQ(detail::parse_table(std::span(b).first(b.size() - 1), 3).error(), errc::truncated);
}

TEST(Config, FromEnvironment) {
  ::setenv("MASTER_ADDR", "::1", 1);
  ::setenv("MASTER_PORT", "1234", 1);
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  ::setenv("SLURM_PROCID", "2", 1);
  ::setenv("SLURM_NTASKS", "3", 1);
  ::setenv("FERRY_SECRET", "s3", 1);
  ::setenv("FERRY_TIMEOUT", "2.5", 1);
  config c = config::from_env().value();
  EXPECT_EQ(c.master_addr, "::1");
  EXPECT_EQ(c.master_port, 1234);
  EXPECT_EQ(c.rank, 2u);
  EXPECT_EQ(c.world_size, 3u);
  EXPECT_EQ(c.secret, "s3");
  EXPECT_EQ(c.timeout, 2500ms);
  ::setenv("RANK", "0", 1);  // torchrun's variables win over SLURM's
  EXPECT_EQ(config::from_env()->rank, 0u);
  ::setenv("RANK", "3", 1);
  // A configuration error, with the variable named: not a comm_error.
  EXPECT_EQ(config::from_env().error().code(), comm_errc::bad_config);
  EXPECT_NE(config::from_env().error().what().find("rank 3 is not below the world size 3"), std::string::npos)
      << config::from_env().error().what();
  ::setenv("RANK", "1x", 1);
  EXPECT_EQ(config::from_env().error().code(), comm_errc::bad_config);
  ::setenv("RANK", "1", 1);
  ::unsetenv("FERRY_SECRET");
  const std::string file = ::testing::TempDir() + "ferry-secret";
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    std::fputs("from-a-file\n", f);
    std::fclose(f);
  }
  ::setenv("FERRY_SECRET_FILE", file.c_str(), 1);
  EXPECT_EQ(config::from_env()->secret, "from-a-file");
  ::unsetenv("FERRY_SECRET_FILE");
  EXPECT_EQ(config::from_env().error().code(), comm_errc::bad_config);  // no secret at all
  EXPECT_THROW((void)config::from_env().value(), ferry::exception);
  for (const char* v : {"MASTER_ADDR", "MASTER_PORT", "RANK", "SLURM_PROCID", "SLURM_NTASKS", "FERRY_TIMEOUT"}) {
    ::unsetenv(v);
  }
}

}  // namespace
}  // namespace ferry::comm
