// Cross-architecture: the checked-in golden archives (written once on x86,
// in both byte orders) must be what every architecture writes for the same
// graph, byte for byte, and must read back identically everywhere.
// Regenerate with FERRY_WRITE_GOLDEN=1 (only when the format changes).
// The format-1 archives (golden-v1-*) are kept as they were written by
// ferry 0.1: every reader still reads them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "ferry/base/file.h"
#include "types.h"

namespace ferry::testing {
namespace {

std::string golden_path(wire::byte_order order, int format = 2) {
  return std::string(FERRY_TEST_DATA_DIR "/graph/golden-") + (format == 1 ? "v1-" : "") +
         (order == wire::byte_order::little ? "little" : "big") + ".fga";
}

TEST(Golden, EveryArchitectureWritesTheSameBytes) {
  for (auto order : {wire::byte_order::little, wire::byte_order::big}) {
    golden g = make_golden();
    graph::options opt;
    opt.order = order;
    auto bytes = graph::write(g, opt);
    break_golden(g);
    ASSERT_TRUE(bytes) << name(bytes.error());
    if (std::getenv("FERRY_WRITE_GOLDEN") != nullptr) {
      ASSERT_TRUE(base::write_file_atomic(golden_path(order), *bytes));
    }
    auto expected = base::read_file(golden_path(order));
    ASSERT_TRUE(expected) << expected.error();
    EXPECT_EQ(*bytes, *expected) << golden_path(order);
  }
}

TEST(Golden, BothByteOrdersAndBothFormatsReadIdentically) {
  for (int format : {1, 2})
  for (auto order : {wire::byte_order::little, wire::byte_order::big}) {
    SCOPED_TRACE(golden_path(order, format));
    golden g;
    ASSERT_TRUE(graph::read_file_into(golden_path(order, format), g));
    ASSERT_EQ(g.nodes.size(), 2u);
    const auto& a = g.nodes[0];
    const auto& b = g.nodes[1];
    EXPECT_EQ(a->label, "a");
    EXPECT_EQ(b->label, "b");
    ASSERT_EQ(a->children.size(), 2u);
    EXPECT_EQ(a->children[0], b);                 // shared
    const auto& c = a->children[1];
    EXPECT_EQ(b->children[0], c);                 // shared
    EXPECT_EQ(c->children[0], a);                 // cycle
    EXPECT_EQ(b->parent.lock(), a);               // weak
    EXPECT_EQ(a->buddy, c.get());                 // raw
    const everything expected = make_everything();
    EXPECT_EQ(wire::to_bits(g.all.single), 0x3885005Au);
    EXPECT_EQ(g.all.letter, 'Z');
    EXPECT_EQ(g.all.u64, expected.u64);
    EXPECT_EQ(g.all.names, expected.names);
    EXPECT_EQ(g.all.points, expected.points);
    EXPECT_EQ(g.all.choice, expected.choice);
    EXPECT_EQ(*g.all.owned, *expected.owned);
    if (format == 1) {  // fields added with format 2 keep their defaults
      EXPECT_EQ(g.all.half, f16{});
      EXPECT_TRUE(g.all.brains.empty());
      EXPECT_TRUE(g.all.words.empty());
    } else {
      EXPECT_EQ(g.all.half, expected.half);
      EXPECT_EQ(g.all.brain, expected.brain);
      EXPECT_EQ(g.all.brains, expected.brains);
      EXPECT_EQ(g.all.halves, expected.halves);
      EXPECT_EQ(g.all.queue, expected.queue);
      EXPECT_EQ(g.all.words, expected.words);
      EXPECT_EQ(g.all.tiny, expected.tiny);
      EXPECT_EQ(g.all.tinies, expected.tinies);
    }
    break_golden(g);
  }
}

}  // namespace
}  // namespace ferry::testing
