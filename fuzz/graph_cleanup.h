// Frees fuzzed node graphs that may contain cycles, iteratively, so
// LeakSanitizer sees no leak and deep chains do not recurse.
#pragma once

#include <unordered_set>
#include <vector>

#include "graph_types.h"

namespace ferry::testing {

inline void release_graph(std::vector<std::shared_ptr<node>> roots) {
  std::unordered_set<node*> seen;
  std::vector<std::shared_ptr<node>> all;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    if (!roots[i] || !seen.insert(roots[i].get()).second) continue;
    all.push_back(roots[i]);
    for (auto& c : roots[i]->children) roots.push_back(c);
  }
  for (auto& n : all) n->children.clear();
}

}  // namespace ferry::testing
