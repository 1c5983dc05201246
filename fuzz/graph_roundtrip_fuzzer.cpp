// Round trip: a graph of up to 64 nodes built from the fuzz input (children
// with sharing and cycles, weak parents, raw buddies, in either byte order)
// is written and read back; the copy must have the same shape and sharing.
#include <unordered_map>

#include "ferry/graph/archive.h"
#include "fuzz_check.h"
#include "graph_cleanup.h"
#include "graph_types.h"

namespace graph_roundtrip_harness {
using namespace ferry;
using namespace ferry::testing;
}  // namespace graph_roundtrip_harness

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace graph_roundtrip_harness;
  if (size < 2) return 0;
  const std::size_t n = 1 + data[0] % 64;
  graph::options opt;
  opt.order = (data[1] & 1) ? wire::byte_order::big : wire::byte_order::little;
  std::vector<std::shared_ptr<node>> nodes(n);
  for (std::size_t i = 0; i < n; ++i) {
    nodes[i] = std::make_shared<node>();
    nodes[i]->label = std::to_string(i);
  }
  // Each following byte adds one edge: which node, what kind, which target.
  for (std::size_t k = 2; k + 1 < size; k += 2) {
    node& from = *nodes[data[k] % n];
    const std::size_t to = data[k + 1] % n;
    switch (data[k] / 64) {
      case 0:
      case 1: from.children.push_back(nodes[to]); break;
      case 2: from.parent = nodes[to]; break;
      default: from.buddy = nodes[to].get(); break;
    }
  }
  // Roots: every node, so raw and weak targets are all held in the archive.
  auto bytes = graph::write(nodes, opt);
  FUZZ_CHECK(bytes.has_value());
  std::vector<std::shared_ptr<node>> back;
  FUZZ_CHECK(graph::read_into(*bytes, back, opt).has_value());
  FUZZ_CHECK(back.size() == n);
  std::unordered_map<const node*, std::size_t> index;
  for (std::size_t i = 0; i < n; ++i) index[back[i].get()] = i;
  FUZZ_CHECK(index.size() == n);  // distinct objects stay distinct
  for (std::size_t i = 0; i < n; ++i) {
    const node& a = *nodes[i];
    const node& b = *back[i];
    FUZZ_CHECK(a.label == b.label);
    FUZZ_CHECK(a.children.size() == b.children.size());
    for (std::size_t c = 0; c < a.children.size(); ++c) {
      FUZZ_CHECK(index.at(b.children[c].get()) == std::stoul(a.children[c]->label));  // same sharing
    }
    FUZZ_CHECK(a.parent.expired() == b.parent.expired());
    if (!a.parent.expired()) FUZZ_CHECK(b.parent.lock()->label == a.parent.lock()->label);
    FUZZ_CHECK((a.buddy == nullptr) == (b.buddy == nullptr));
    if (a.buddy != nullptr) FUZZ_CHECK(b.buddy == back[std::stoul(a.buddy->label)].get());
  }
  // Same graph, same bytes.
  auto again = graph::write(back, opt);
  FUZZ_CHECK(again.has_value() && *again == *bytes);
  release_graph(nodes);
  release_graph(back);
  return 0;
}
