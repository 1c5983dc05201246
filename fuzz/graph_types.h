// The C++ types of the graph tests and fuzzers, defined once here (the
// fuzz build does not reach into tests/; tests/graph/types.h includes this
// and adds the test helpers). The seeds in corpus/graph_reader are archives
// of these types: change a name, tag or field type and they turn into
// type_mismatch inputs.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

#include "ferry/graph/archive.h"

namespace ferry::testing {

struct node {
  static constexpr std::string_view ferry_name = "test.node";
  std::string label;
  std::vector<std::shared_ptr<node>> children;
  std::weak_ptr<node> parent;
  node* buddy = nullptr;
  template <class F>
  void describe(F& f) {
    f(1, "label", label);
    f(2, "children", children);
    f(3, "parent", parent);
    f(4, "buddy", buddy);
  }
};

enum class color : std::uint8_t { red = 1, green = 2, blue = 3 };

struct point {
  static constexpr std::string_view ferry_name = "test.point";
  float x = 0, y = 0;
  template <class F>
  void describe(F& f) {
    f(1, "x", x);
    f(2, "y", y);
  }
  friend bool operator==(const point&, const point&) = default;
};

/// Every container and scalar kind the archive supports.
struct everything {
  static constexpr std::string_view ferry_name = "test.everything";
  bool flag = false;
  char letter = 0;
  std::int8_t i8 = 0;
  std::uint16_t u16 = 0;
  std::int32_t i32 = 0;
  std::uint64_t u64 = 0;
  float single = 0;
  double d = 0;
  color c = color::red;
  std::string text;
  std::vector<float> floats;
  std::vector<bool> bits;
  std::vector<point> points;
  std::array<std::int16_t, 3> triple{};
  std::map<std::string, int> counts;
  std::unordered_map<int, std::string> names;
  std::set<std::uint32_t> ids;
  std::optional<point> maybe;
  std::optional<std::string> nothing;
  std::variant<std::int32_t, std::string, point> choice;
  std::pair<std::string, double> pair;
  std::tuple<bool, std::int64_t, std::string> tuple;
  std::unique_ptr<point> owned;
  // Added with format 2 (a format-1 archive reads them as defaults).
  f16 half{};
  bf16 brain{};
  std::vector<bf16> brains;
  std::array<f16, 2> halves{};
  std::deque<std::int16_t> queue;
  std::list<std::string> words;
  f8_e4m3 tiny{};
  std::vector<f8_e5m2> tinies;
  template <class F>
  void describe(F& f) {
    f(1, "flag", flag)(2, "letter", letter)(3, "i8", i8)(4, "u16", u16)(5, "i32", i32)(6, "u64", u64);
    f(7, "single", single)(8, "d", d)(9, "c", c)(10, "text", text)(11, "floats", floats)(12, "bits", bits);
    f(13, "points", points)(14, "triple", triple)(15, "counts", counts)(16, "names", names);
    f(17, "ids", ids)(18, "maybe", maybe)(19, "nothing", nothing)(20, "choice", choice);
    f(21, "pair", pair)(22, "tuple", tuple)(23, "owned", owned);
    f(24, "half", half)(25, "brain", brain)(26, "brains", brains)(27, "halves", halves)(28, "queue", queue);
    f(29, "words", words)(30, "tiny", tiny)(31, "tinies", tinies);
  }
};


// Polymorphism.
struct shape {
  static constexpr std::string_view ferry_name = "test.shape";
  virtual ~shape() = default;
  virtual double area() const = 0;
  std::string name;
  template <class F>
  void describe(F& f) {
    f(1, "name", name);
  }
};

struct circle : shape {
  static constexpr std::string_view ferry_name = "test.circle";
  double r = 0;
  double area() const override { return 3 * r * r; }
  template <class F>
  void describe(F& f) {
    shape::describe(f);
    f(2, "r", r);
  }
};

struct square : shape {
  static constexpr std::string_view ferry_name = "test.square";
  double side = 0;
  double area() const override { return side * side; }
  template <class F>
  void describe(F& f) {
    shape::describe(f);
    f(2, "side", side);
  }
};

struct drawing {
  static constexpr std::string_view ferry_name = "test.drawing";
  std::vector<std::shared_ptr<shape>> shapes;
  shape* focus = nullptr;
  template <class F>
  void describe(F& f) {
    f(1, "shapes", shapes);
    f(2, "focus", focus);
  }
};

inline void register_shapes() {
  graph::register_type<circle, shape>();
  graph::register_type<square, shape>();
}

/// The graph of the cross-architecture golden files: sharing, a cycle, a
/// weak back link, a raw pointer, and every container kind.
struct golden {
  static constexpr std::string_view ferry_name = "test.golden";
  std::vector<std::shared_ptr<node>> nodes;
  everything all;
  template <class F>
  void describe(F& f) {
    f(1, "nodes", nodes);
    f(2, "all", all);
  }
};

}  // namespace ferry::testing
