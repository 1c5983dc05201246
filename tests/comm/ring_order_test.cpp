// Where ranks sit on the ring (config.h's ring_order, rendezvous.h's
// ring_positions): grouped by the host rank 0 saw each rank join from, or
// plain rank order; and the TABLE that carries the choice.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <vector>

#include "ferry/codec/crc32c.h"
#include "ferry/comm/detail/rendezvous.h"
#include "ferry/wire/byte_order.h"

namespace {

using namespace ferry::comm;
// An alias, not plain detail::, which another file of the unity batch
// makes ambiguous.
namespace cd = ferry::comm::detail;
using cd::table_entry;

table_entry at(const char* ipv4, std::uint16_t port) {
  table_entry e;
  auto* in = reinterpret_cast<sockaddr_in*>(&e.at.storage);
  in->sin_family = AF_INET;
  ::inet_pton(AF_INET, ipv4, &in->sin_addr);
  e.at.length = sizeof(sockaddr_in);
  e.at.set_port(port);
  return e;
}

using ring = std::vector<std::uint32_t>;

TEST(RingOrder, GroupsRanksOfOneHostWhateverTheirNumbers) {
  // SLURM's cyclic distribution: node A has ranks 0 and 2, node B 1 and 3.
  const std::vector<table_entry> cyclic = {at("10.0.0.1", 0), at("10.0.0.2", 7001), at("10.0.0.1", 7002),
                                           at("10.0.0.2", 7003)};
  EXPECT_EQ(cd::ring_positions(cyclic, ring_order::node), (ring{0, 2, 1, 3}));
  EXPECT_EQ(cd::ring_positions(cyclic, ring_order::rank), (ring{0, 1, 2, 3}));
  // torchrun's node-major numbering is already grouped: unchanged.
  const std::vector<table_entry> major = {at("10.0.0.1", 0), at("10.0.0.1", 7001), at("10.0.0.2", 7002),
                                          at("10.0.0.2", 7003)};
  EXPECT_EQ(cd::ring_positions(major, ring_order::node), (ring{0, 1, 2, 3}));
  // Hosts in the order of their lowest rank; ports do not matter.
  const std::vector<table_entry> three = {at("10.0.0.9", 0), at("10.0.0.5", 1), at("10.0.0.7", 2),
                                          at("10.0.0.5", 3), at("10.0.0.9", 4), at("10.0.0.7", 5)};
  EXPECT_EQ(cd::ring_positions(three, ring_order::node), (ring{0, 4, 1, 3, 2, 5}));
  // One host (loopback), and one rank.
  const std::vector<table_entry> local = {at("127.0.0.1", 0), at("127.0.0.1", 1), at("127.0.0.1", 2)};
  EXPECT_EQ(cd::ring_positions(local, ring_order::node), (ring{0, 1, 2}));
  EXPECT_EQ(cd::ring_positions(std::vector<table_entry>{at("127.0.0.1", 0)}, ring_order::node), (ring{0}));
  // An entry without an address is a host of its own.
  std::vector<table_entry> none = {table_entry{}, at("10.0.0.2", 1), table_entry{}, at("10.0.0.2", 3)};
  EXPECT_EQ(cd::ring_positions(none, ring_order::node), (ring{0, 1, 3, 2}));
}

TEST(RingOrder, TableCarriesRankZerosChoiceAndRefusesOtherValues) {
  std::vector<table_entry> t = {at("10.0.0.1", 0), at("10.0.0.2", 7001)};
  for (const ring_order o : {ring_order::node, ring_order::rank}) {
    t[0].order = o;
    const auto bytes = cd::encode_table(t);
    const auto back = cd::parse_table(bytes, 2);
    ASSERT_TRUE(back);
    EXPECT_EQ((*back)[0].order, o);
    EXPECT_EQ((*back)[1].at.port(), 7001);
  }
  auto bytes = cd::encode_table(t);
  bytes[9] = std::byte{2};  // entry 0's order: no such value
  const auto crc = ferry::codec::crc32c(std::span<const std::byte>(bytes).first(bytes.size() - 4));
  ferry::wire::store<std::uint32_t>(crc, bytes.data() + bytes.size() - 4, ferry::wire::byte_order::little);
  EXPECT_EQ(cd::parse_table(bytes, 2).error(), ferry::errc::bad_value);
  bytes[9] = std::byte{0};
  bytes[29] = std::byte{1};  // entry 1's byte stays reserved
  const auto crc2 = ferry::codec::crc32c(std::span<const std::byte>(bytes).first(bytes.size() - 4));
  ferry::wire::store<std::uint32_t>(crc2, bytes.data() + bytes.size() - 4, ferry::wire::byte_order::little);
  EXPECT_EQ(cd::parse_table(bytes, 2).error(), ferry::errc::bad_value);
}

TEST(RingOrder, FromEnvironment) {
  ::setenv("WORLD_SIZE", "1", 1);
  ::setenv("RANK", "0", 1);
  ::setenv("FERRY_RING_ORDER", "rank", 1);
  auto c = config::from_env();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->order, ring_order::rank);
  ::setenv("FERRY_RING_ORDER", "nodes", 1);
  c = config::from_env();
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().what().find("FERRY_RING_ORDER='nodes'"), std::string::npos);
  ::unsetenv("FERRY_RING_ORDER");
  c = config::from_env();
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->order);  // rank 0 then picks node
}

}  // namespace
