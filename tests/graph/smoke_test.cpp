#include "ferry/graph/archive.h"

#include <gtest/gtest.h>

namespace {
struct node {
  static constexpr std::string_view ferry_name = "test.node";
  std::string label;
  std::vector<std::shared_ptr<node>> children;
  template <class F>
  void describe(F& f) {
    f(1, "label", label);
    f(2, "children", children);
  }
};
}  // namespace

TEST(GraphSmoke, SharedChild) {
  auto c = std::make_shared<node>();
  c->label = "c";
  auto root = std::make_shared<node>();
  root->label = "root";
  root->children = {c, c};
  auto bytes = ferry::graph::write(root);
  ASSERT_TRUE(bytes) << ferry::name(bytes.error());
  auto back = ferry::graph::read<std::shared_ptr<node>>(*bytes);
  ASSERT_TRUE(back) << ferry::name(back.error());
  EXPECT_EQ((*back)->label, "root");
  ASSERT_EQ((*back)->children.size(), 2u);
  EXPECT_EQ((*back)->children[0], (*back)->children[1]);
  EXPECT_EQ((*back)->children[0]->label, "c");
}
