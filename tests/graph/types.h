// Types of the graph tests and the cross-architecture golden files: those
// the fuzzers share (fuzz/graph_types.h), plus the tests' own and helpers.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "../../fuzz/graph_types.h"

namespace ferry::testing {

/// A singly linked list node; long lists must not recurse.
struct link {
  static constexpr std::string_view ferry_name = "test.link";
  std::int64_t value = 0;
  std::shared_ptr<link> next;
  template <class F>
  void describe(F& f) {
    f(1, "value", value);
    f(2, "next", next);
  }
};

/// Frees a long list iteratively (the default destructor would recurse).
inline void unlink(std::shared_ptr<link> head) {
  while (head && head.use_count() == 1) head = std::move(head->next);
}

inline everything make_everything() {
  everything e;
  e.flag = true;
  e.letter = 'Z';
  e.i8 = -5;
  e.u16 = 0xBEEF;
  e.i32 = -123456;
  e.u64 = 0x0123456789ABCDEFull;
  e.single = 6.342e-5f;
  e.d = -1.0 / 3.0;
  e.c = color::blue;
  e.text = "hello, ferry";
  e.floats = {1.5f, -0.0f, 3.25f};
  e.bits = {true, false, true};
  e.points = {{1, 2}, {3, 4}};
  e.triple = {-1, 0, 1};
  e.counts = {{"a", 1}, {"b", 2}};
  e.names = {{3, "three"}, {1, "one"}, {2, "two"}};
  e.ids = {7, 3, 5};
  e.maybe = point{9, 8};
  e.choice = std::string("alt");
  e.pair = {"pi", 3.14159};
  e.tuple = {true, -42, "t"};
  e.owned = std::make_unique<point>(point{5, 6});
  e.half = f16{0x8001};                                     // -(smallest subnormal)
  e.brain = bf16{0x7FC1};                                   // a NaN with a payload
  e.brains = {bf16{0x3F80}, bf16{0xFF80}, bf16{0x0001}};  // 1, -inf, a subnormal
  e.halves = {f16{0x7E01}, f16{0x3C00}};                    // a NaN with a payload, 1
  e.queue = {-7, 0, 7};
  e.words = {"x", "", "yz"};
  e.tiny = f8_e4m3{0xB8};                    // -1
  e.tinies = {f8_e5m2{0x3C}, f8_e5m2{0x7C}};  // 1, +inf
  return e;
}

inline golden make_golden() {
  golden g;
  auto a = std::make_shared<node>(), b = std::make_shared<node>(), c = std::make_shared<node>();
  a->label = "a";
  b->label = "b";
  c->label = "c";
  a->children = {b, c};
  b->children = {c};
  c->children = {a};  // cycle a -> c -> a
  b->parent = a;
  c->parent = a;
  a->buddy = c.get();
  g.nodes = {a, b};
  g.all = make_everything();
  return g;
}

/// Breaks the cycle of make_golden() so the test leaks nothing.
inline void break_golden(golden& g) {
  for (auto& n : g.nodes) {
    if (!n) continue;
    for (auto& c : n->children) {
      if (c) c->children.clear();
    }
    n->children.clear();
  }
}

}  // namespace ferry::testing
