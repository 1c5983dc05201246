#include "ferry/graph/archive.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <sstream>

#include <filesystem>
#include <random>
#include <thread>

#include "ferry/graph/dump.h"
#include "types.h"

namespace ferry::testing {
namespace {

template <class T>
T round_trip(const T& value, const graph::options& opt = {}) {
  auto bytes = graph::write(value, opt);
  EXPECT_TRUE(bytes) << name(bytes.error());
  if (!bytes) return T{};
  auto back = graph::read<T>(*bytes, opt);
  EXPECT_TRUE(back) << name(back.error());
  if (!back) return T{};
  return std::move(*back);
}

TEST(Graph, SharedObjectIsStoredOnceAndComesBackShared) {
  // A and B both refer to C: C is stored once and shared after reading.
  auto c = std::make_shared<node>();
  c->label = "C";
  auto a = std::make_shared<node>(), b = std::make_shared<node>();
  a->children = {c};
  b->children = {c};
  const std::vector<std::shared_ptr<node>> roots = {a, b};
  auto bytes = graph::write(roots);
  ASSERT_TRUE(bytes);
  // "C" appears once in the archive.
  const std::string text(reinterpret_cast<const char*>(bytes->data()), bytes->size());  // NOLINT: search only
  EXPECT_EQ(text.find("\x01" "C"), text.rfind("\x01" "C"));
  auto back = graph::read<std::vector<std::shared_ptr<node>>>(*bytes);
  ASSERT_TRUE(back);
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0]->children[0], (*back)[1]->children[0]);
  EXPECT_EQ((*back)[0]->children[0]->label, "C");
  EXPECT_EQ((*back)[0]->children[0].use_count(), 2);
}

TEST(Graph, SelfReference) {
  auto a = std::make_shared<node>();
  a->label = "self";
  a->children = {a};
  a->parent = a;
  a->buddy = a.get();
  auto back = round_trip(a);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->children[0], back);
  EXPECT_EQ(back->parent.lock(), back);
  EXPECT_EQ(back->buddy, back.get());
  a->children.clear();
  back->children.clear();
}

TEST(Graph, TwoNodeCycle) {
  auto a = std::make_shared<node>(), b = std::make_shared<node>();
  a->label = "A";
  b->label = "B";
  a->children = {b};
  b->children = {a};
  auto back = round_trip(a);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->children[0]->children[0], back);
  EXPECT_EQ(back->children[0]->label, "B");
  a->children.clear();
  back->children.clear();
}

TEST(Graph, MillionNodeRingAndListOnTheDefaultStack) {
  constexpr int n = 1'000'000;
  auto head = std::make_shared<link>();
  auto tail = head;
  for (int i = 1; i < n; ++i) {
    tail->next = std::make_shared<link>();
    tail = tail->next;
    tail->value = i;
  }
  {
    auto back = round_trip(head);
    ASSERT_TRUE(back);
    std::int64_t count = 0;
    for (auto p = back.get(); p != nullptr; p = p->next.get()) ASSERT_EQ(p->value, count++);
    EXPECT_EQ(count, n);
    unlink(std::move(back));
  }
  // Close the ring: the last node points back to the first.
  tail->next = head;
  auto back = round_trip(head);
  ASSERT_TRUE(back);
  auto p = back;
  for (int i = 0; i < n; ++i) p = p->next;
  EXPECT_EQ(p, back);
  tail->next.reset();
  unlink(std::move(head));
  // Open the read ring before freeing it.
  p = back;
  for (int i = 0; i < n - 1; ++i) p = p->next;
  p->next.reset();
  unlink(std::move(back));
}

struct holder {
  static constexpr std::string_view ferry_name = "test.holder";
  std::shared_ptr<node> strong;
  std::weak_ptr<node> watched;
  std::weak_ptr<node> orphan;
  std::weak_ptr<node> expired;
  template <class F>
  void describe(F& f) {
    f(1, "strong", strong)(2, "watched", watched)(3, "orphan", orphan)(4, "expired", expired);
  }
};

TEST(Graph, WeakPointersKeepExpirySemantics) {
  holder h;
  h.strong = std::make_shared<node>();
  h.watched = h.strong;
  auto outside = std::make_shared<node>();  // owned outside the graph
  h.orphan = outside;
  h.expired = std::make_shared<node>();     // already gone
  ASSERT_TRUE(h.expired.expired());
  auto back = round_trip(h);
  EXPECT_EQ(back.watched.lock(), back.strong);  // held in the graph: alive
  EXPECT_TRUE(back.orphan.expired());           // nothing in the graph owns it
  EXPECT_TRUE(back.expired.expired());
}

struct tree {
  static constexpr std::string_view ferry_name = "test.tree";
  int value = 0;
  std::vector<std::unique_ptr<tree>> kids;
  tree* first = nullptr;  // into a unique-owned child
  template <class F>
  void describe(F& f) {
    f(1, "value", value)(2, "kids", kids)(3, "first", first);
  }
};

TEST(Graph, UniquePointersOwnTheirObjects) {
  tree t;
  t.value = 1;
  for (int i = 0; i < 3; ++i) {
    auto k = std::make_unique<tree>();
    k->value = 10 + i;
    t.kids.push_back(std::move(k));
  }
  t.first = t.kids[0].get();
  auto back = round_trip(t);
  ASSERT_EQ(back.kids.size(), 3u);
  EXPECT_EQ(back.kids[2]->value, 12);
  EXPECT_EQ(back.first, back.kids[0].get());
}

struct world {
  static constexpr std::string_view ferry_name = "test.world";
  std::vector<point> points;
  point origin;
  const point* selected = nullptr;
  point* home = nullptr;
  template <class F>
  void describe(F& f) {
    // The pointer comes before its target: resolved after reading.
    f(1, "selected", selected)(2, "points", points)(3, "origin", origin)(4, "home", home);
  }
};

TEST(Graph, RawPointersToObjectsHeldByValue) {
  world w;
  w.points = {{1, 1}, {2, 2}, {3, 3}};
  w.selected = &w.points[2];
  w.home = &w.origin;
  auto bytes = graph::write(w);
  ASSERT_TRUE(bytes);
  world back;
  ASSERT_TRUE(graph::read_into(*bytes, back));
  EXPECT_EQ(back.selected, &back.points[2]);
  EXPECT_EQ(back.home, &back.origin);
  // read() moves its result, so a pointer to the root's own member is refused.
  EXPECT_EQ(graph::read<world>(*bytes).error(), graph_errc::pointer_into_root);
  w.home = nullptr;
  auto moved = round_trip(w);
  EXPECT_EQ(moved.selected, &moved.points[2]);
}

TEST(Graph, RawPointerOutsideTheArchiveIsAWriteError) {
  point stray;
  node n;
  n.buddy = reinterpret_cast<node*>(&stray);  // NOLINT: deliberately foreign
  node other;
  n.buddy = &other;  // a node the archive does not hold
  auto bytes = graph::write(n);
  EXPECT_EQ(bytes.error(), graph_errc::untracked_pointer);
}

struct selfish : std::enable_shared_from_this<selfish> {
  static constexpr std::string_view ferry_name = "test.selfish";
  int v = 0;
  template <class F>
  void describe(F& f) {
    f(1, "v", v);
  }
};

TEST(Graph, EnableSharedFromThis) {
  auto s = std::make_shared<selfish>();
  s->v = 7;
  auto back = round_trip(s);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->shared_from_this(), back);
  EXPECT_EQ(back->v, 7);
}

TEST(Graph, PolymorphicPointersComeBackAsTheirDynamicType) {
  register_shapes();
  drawing d;
  auto c = std::make_shared<circle>();
  c->name = "c";
  c->r = 2;
  auto s = std::make_shared<square>();
  s->name = "s";
  s->side = 3;
  d.shapes = {c, s, c};
  d.focus = s.get();
  auto back = round_trip(d);
  ASSERT_EQ(back.shapes.size(), 3u);
  EXPECT_NE(dynamic_cast<circle*>(back.shapes[0].get()), nullptr);
  EXPECT_NE(dynamic_cast<square*>(back.shapes[1].get()), nullptr);
  EXPECT_EQ(back.shapes[0], back.shapes[2]);
  EXPECT_EQ(back.shapes[0]->area(), 12);
  EXPECT_EQ(back.shapes[1]->name, "s");
  EXPECT_EQ(back.focus, back.shapes[1].get());
}

struct hexagon : shape {
  static constexpr std::string_view ferry_name = "test.hexagon";
  double area() const override { return 0; }
};

TEST(Graph, UnregisteredDynamicTypeIsAWriteError) {
  drawing d;
  d.shapes = {std::make_shared<hexagon>()};
  EXPECT_EQ(graph::write(d).error(), graph_errc::unregistered_type);
}

TEST(Graph, EveryContainerAndScalarRoundTrips) {
  const everything e = make_everything();
  for (auto order : {wire::byte_order::little, wire::byte_order::big}) {
    graph::options opt;
    opt.order = order;
    everything back = round_trip(e, opt);
    EXPECT_EQ(back.flag, e.flag);
    EXPECT_EQ(back.letter, e.letter);
    EXPECT_EQ(back.i8, e.i8);
    EXPECT_EQ(back.u16, e.u16);
    EXPECT_EQ(back.i32, e.i32);
    EXPECT_EQ(back.u64, e.u64);
    EXPECT_EQ(back.single, e.single);
    EXPECT_EQ(back.d, e.d);
    EXPECT_EQ(back.c, e.c);
    EXPECT_EQ(back.text, e.text);
    EXPECT_EQ(wire::to_bits(back.floats[1]), 0x80000000u);
    EXPECT_EQ(back.floats, e.floats);
    EXPECT_EQ(back.bits, e.bits);
    EXPECT_EQ(back.points, e.points);
    EXPECT_EQ(back.triple, e.triple);
    EXPECT_EQ(back.counts, e.counts);
    EXPECT_EQ(back.names, e.names);
    EXPECT_EQ(back.ids, e.ids);
    EXPECT_EQ(back.maybe, e.maybe);
    EXPECT_EQ(back.nothing, e.nothing);
    EXPECT_EQ(back.choice, e.choice);
    EXPECT_EQ(back.pair, e.pair);
    EXPECT_EQ(back.tuple, e.tuple);
    ASSERT_TRUE(back.owned);
    EXPECT_EQ(*back.owned, *e.owned);
    // 16-bit float patterns bit for bit (NaN payloads, -0, subnormals).
    EXPECT_EQ(back.half, e.half);
    EXPECT_EQ(back.brain, e.brain);
    EXPECT_EQ(back.brains, e.brains);
    EXPECT_EQ(back.halves, e.halves);
    EXPECT_EQ(back.queue, e.queue);
    EXPECT_EQ(back.words, e.words);
    EXPECT_EQ(back.tiny, e.tiny);
    EXPECT_EQ(back.tinies, e.tinies);
  }
}

// A type of someone else's, stored through value_codec as its wire_type: a
// fixed-point number as i32, and a third-party struct as a tuple whose
// reading rejects what the type cannot hold.
struct q16 {
  std::int32_t raw = 0;
  friend bool operator==(q16, q16) = default;
};
struct rgb {  // no ferry_name, no describe(): a library's type
  std::uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const rgb&, const rgb&) = default;
};

}  // namespace
}  // namespace ferry::testing

template <>
struct ferry::graph::value_codec<ferry::testing::q16> {
  using wire_type = std::int32_t;
  static wire_type to_wire(const ferry::testing::q16& v) { return v.raw; }
  static ferry::result<void> from_wire(wire_type w, ferry::testing::q16& v) {
    v.raw = w;
    return {};
  }
};

template <>
struct ferry::graph::value_codec<ferry::testing::rgb> {
  using wire_type = std::string;  // "#rrggbb"
  static wire_type to_wire(const ferry::testing::rgb& c) {
    char s[8];
    std::snprintf(s, sizeof s, "#%02x%02x%02x", c.r, c.g, c.b);
    return s;
  }
  static ferry::result<void> from_wire(const wire_type& w, ferry::testing::rgb& c) {
    unsigned r = 0, g = 0, b = 0;
    if (w.size() != 7 || std::sscanf(w.c_str(), "#%2x%2x%2x", &r, &g, &b) != 3) return ferry::errc::bad_value;
    c = {static_cast<std::uint8_t>(r), static_cast<std::uint8_t>(g), static_cast<std::uint8_t>(b)};
    return {};
  }
};

namespace ferry::testing {
namespace {

struct palette {
  static constexpr std::string_view ferry_name = "test.palette";
  std::vector<q16> prices;
  std::map<std::string, rgb> colors;
  template <class F>
  void describe(F& f) {
    f(1, "prices", prices)(2, "colors", colors);
  }
};

TEST(ValueCodec, UserTypesTravelAsTheirWireType) {
  palette p;
  p.prices = {q16{65536}, q16{-1}};
  p.colors = {{"sky", rgb{0x12, 0xAB, 0xFF}}};
  auto bytes = graph::write(p);
  ASSERT_TRUE(bytes);
  auto back = graph::read<palette>(*bytes);
  ASSERT_TRUE(back) << back.error();
  EXPECT_EQ(back->prices, p.prices);
  EXPECT_EQ(back->colors, p.colors);
  // The archive describes them as what they travel as.
  std::ostringstream json;
  ASSERT_TRUE(graph::dump_json(*bytes, json));
  EXPECT_NE(json.str().find("\"#12abff\""), std::string::npos) << json.str();
  // from_wire's verdict fails the read.
  std::string text(reinterpret_cast<const char*>(bytes->data()), bytes->size());  // NOLINT
  const auto at = text.find("#12abff");
  ASSERT_NE(at, std::string::npos);
  (*bytes)[at + 1] = std::byte{'z'};
  EXPECT_EQ(graph::read<palette>(*bytes).error(), errc::bad_value);
}

// The writer counts depth and values as the reader does: the smallest
// max_values a graph can be written with is the smallest it reads with.
TEST(Limits, WriterAndReaderAgreeOnValueCounts) {
  const everything e = make_everything();
  const auto bytes = graph::write(e);
  ASSERT_TRUE(bytes);
  graph::options opt;
  std::size_t n = 1;
  for (; n < 10000; ++n) {
    opt.limits.max_values = n;
    if (graph::write(e, opt)) break;
    EXPECT_EQ(graph::write(e, opt).error(), errc::limit_exceeded);
  }
  ASSERT_LT(n, 10000u);
  opt.limits.max_values = n;
  EXPECT_TRUE(graph::read<everything>(*bytes, opt));
  opt.limits.max_values = n - 1;
  EXPECT_EQ(graph::read<everything>(*bytes, opt).error(), errc::limit_exceeded);
}

TEST(Graph, OutputIsDeterministicAndOrderTagged) {
  const everything e = make_everything();
  auto a = graph::write(e), b = graph::write(e);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, *b);
  // An unordered_map filled in another order gives the same bytes.
  everything e2 = make_everything();
  e2.names.clear();
  e2.names = {{2, "two"}, {1, "one"}, {3, "three"}};
  EXPECT_EQ(*graph::write(e2), *a);
  graph::options big;
  big.order = wire::byte_order::big;
  auto c = graph::write(e, big);
  ASSERT_TRUE(c);
  EXPECT_EQ((*a)[5], std::byte{0});
  EXPECT_EQ((*c)[5], std::byte{1});
}

TEST(Graph, FilesAreWrittenAtomicallyAndReadBack) {
  const auto path = std::filesystem::temp_directory_path() / "ferry-graph-test.fga";
  ASSERT_TRUE(graph::write_file(path, make_everything()));
  auto back = graph::read_file<everything>(path);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->text, "hello, ferry");
  std::filesystem::remove(path);
  EXPECT_EQ(graph::read_file<everything>(path).error(), errc::io_error);
}

// ------------------------------------------------------------- evolution

struct record_v1 {
  static constexpr std::string_view ferry_name = "test.record";
  static constexpr std::uint32_t ferry_version = 1;
  std::string name;
  std::int32_t count = 0;
  template <class F>
  void describe(F& f) {
    f(1, "name", name)(2, "count", count);
  }
};

struct record_v2 {  // gained a field with a default
  static constexpr std::string_view ferry_name = "test.record";
  static constexpr std::uint32_t ferry_version = 2;
  std::string name;
  std::int32_t count = 0;
  std::vector<float> weights = {0.5f};
  template <class F>
  void describe(F& f) {
    f(1, "name", name)(2, "count", count)(3, "weights", weights);
  }
};

struct record_renamed {
  static constexpr std::string_view ferry_name = "test.record";
  std::string title;  // tag 1 under another name
  std::int32_t count = 0;
  template <class F>
  void describe(F& f) {
    f(1, "title", title)(2, "count", count);
  }
};

struct record_retagged {
  static constexpr std::string_view ferry_name = "test.record";
  std::string name;
  std::int32_t count = 0;
  template <class F>
  void describe(F& f) {
    f(5, "name", name)(2, "count", count);
  }
};

struct record_retyped {
  static constexpr std::string_view ferry_name = "test.record";
  std::string name;
  std::int64_t count = 0;  // was i32
  template <class F>
  void describe(F& f) {
    f(1, "name", name)(2, "count", count);
  }
};

TEST(Evolution, NewerReaderFillsDefaultsForMissingFields) {
  record_v1 old{"old", 3};
  auto bytes = graph::write(old);
  auto back = graph::read<record_v2>(*bytes);
  ASSERT_TRUE(back) << name(back.error());
  EXPECT_EQ(back->name, "old");
  EXPECT_EQ(back->count, 3);
  EXPECT_EQ(back->weights, std::vector<float>{0.5f});
}

TEST(Evolution, OlderReaderSkipsFieldsItDoesNotKnow) {
  record_v2 newer{"new", 4, {1, 2, 3}};
  auto bytes = graph::write(std::vector<record_v2>{newer, newer});
  auto back = graph::read<std::vector<record_v1>>(*bytes);
  ASSERT_TRUE(back) << name(back.error());
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].name, "new");
  EXPECT_EQ((*back)[1].count, 4);
}

TEST(Evolution, RenamedAndRetypedFieldsAreErrors) {
  auto bytes = graph::write(record_v1{"x", 1});
  EXPECT_EQ(graph::read<record_renamed>(*bytes).error(), graph_errc::field_renamed);
  EXPECT_EQ(graph::read<record_retagged>(*bytes).error(), graph_errc::field_renamed);
  EXPECT_EQ(graph::read<record_retyped>(*bytes).error(), graph_errc::field_type_mismatch);
}

// ---------------------------------------------------------- hostile input

std::vector<std::byte> golden_bytes() {
  golden g = make_golden();
  auto bytes = graph::write(g);
  break_golden(g);
  return *bytes;
}

struct as_point {
  static constexpr std::string_view ferry_name = "test.ptr";
  std::shared_ptr<point> p;
  template <class F>
  void describe(F& f) {
    f(1, "p", p);
  }
};

struct as_node {
  static constexpr std::string_view ferry_name = "test.ptr";
  std::shared_ptr<node> p;
  template <class F>
  void describe(F& f) {
    f(1, "p", p);
  }
};

// The archive with its body (after the 15-byte header, body_size long)
// replaced by `body`, and body_size patched to match.
std::vector<std::byte> with_body(const std::vector<std::byte>& archive, const std::vector<std::byte>& body) {
  const auto order = static_cast<wire::byte_order>(archive[5]);
  const auto old_size = static_cast<std::size_t>(wire::load<std::uint64_t>(archive.data() + 7, order));
  std::vector<std::byte> out(archive.begin(), archive.begin() + 15);
  wire::store<std::uint64_t>(body.size(), out.data() + 7, order);
  out.insert(out.end(), body.begin(), body.end());
  out.insert(out.end(), archive.begin() + 15 + static_cast<std::ptrdiff_t>(old_size), archive.end());
  return out;
}

TEST(Hostile, TypeConfusionThroughAPointerIsRejected) {
  // cereal issue #870: an archive whose object is a point, read through a
  // pointer to node, must not be misread.
  auto p = std::make_shared<point>(point{1, 2});
  auto bytes = graph::write(as_point{p});
  EXPECT_EQ(graph::read<as_node>(*bytes).error(), graph_errc::field_type_mismatch);
  // The same through the root type.
  auto root = graph::write(p);
  EXPECT_EQ(graph::read<std::shared_ptr<node>>(*root).error(), graph_errc::type_mismatch);
  // And a polymorphic object read through an unrelated base.
  register_shapes();
  std::shared_ptr<shape> s = std::make_shared<circle>();
  auto poly = graph::write(s);
  EXPECT_TRUE(graph::read<std::shared_ptr<shape>>(*poly));
  EXPECT_EQ(graph::read<std::shared_ptr<node>>(*poly).error(), graph_errc::type_mismatch);
}

TEST(Hostile, HeaderErrors) {
  auto bytes = golden_bytes();
  auto with = [&](std::size_t i, std::uint8_t v) {
    auto b = bytes;
    b[i] = std::byte{v};
    return graph::read<golden>(b).error();
  };
  EXPECT_EQ(with(0, 'X'), errc::bad_magic);
  EXPECT_EQ(with(4, 3), errc::unsupported_version);
  EXPECT_EQ(with(4, 0), errc::unsupported_version);
  EXPECT_EQ(with(5, 7), errc::bad_byte_order);
  EXPECT_EQ(with(6, 0x80), errc::bad_value);
  EXPECT_EQ(graph::read<golden>(std::span(bytes).first(3)).error(), errc::truncated);
  EXPECT_EQ(graph::read<golden>({}).error(), errc::truncated);
  auto longer = bytes;
  longer.push_back(std::byte{0});
  EXPECT_EQ(graph::read<golden>(longer).error(), errc::trailing_bytes);
  // A body longer than the archive.
  auto huge = bytes;
  wire::store<std::uint64_t>(~std::uint64_t{0}, huge.data() + 7, wire::byte_order::little);
  EXPECT_EQ(graph::read<golden>(huge).error(), errc::truncated);
  // Bytes left over inside the body.
  std::vector<std::byte> body(bytes.begin() + 15, bytes.begin() + 15 + static_cast<std::ptrdiff_t>(
                                                      wire::load<std::uint64_t>(bytes.data() + 7, wire::byte_order::little)));
  body.push_back(std::byte{0});
  EXPECT_EQ(graph::read<golden>(with_body(bytes, body)).error(), errc::trailing_bytes);
}

TEST(Hostile, EveryTruncationFailsCleanly) {
  const auto bytes = golden_bytes();
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto r = graph::read<golden>(std::span(bytes).first(n));
    ASSERT_FALSE(r) << n;
  }
}

TEST(Hostile, EverySingleBitFlipReadsOrFailsWithATypedError) {
  const auto bytes = golden_bytes();
  std::size_t ok = 0, failed = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      auto b = bytes;
      b[i] ^= std::byte{static_cast<std::uint8_t>(1u << bit)};
      auto r = graph::read<golden>(b);
      if (r) {
        ++ok;
        break_golden(*r);
      } else {
        ++failed;
        EXPECT_NE(name(r.error()), "unknown");
      }
    }
  }
  EXPECT_GT(failed, 0u);
  EXPECT_GT(ok, 0u);  // flips inside payload bytes (string text, floats) still read
}

TEST(Hostile, CountsLargerThanTheInputAreRejectedBeforeAllocating) {
  // A vector<float> claiming 2^40 elements in a few bytes.
  std::vector<float> v = {1, 2, 3};
  const auto bytes = *graph::write(v);
  auto with_count = [&](std::initializer_list<std::uint8_t> varint) {
    std::vector<std::byte> body;
    for (std::uint8_t x : varint) body.push_back(std::byte{x});
    return graph::read<std::vector<float>>(with_body(bytes, body)).error();
  };
  EXPECT_EQ(with_count({0x80, 0x80, 0x80, 0x80, 0x80, 0x20}), errc::limit_exceeded);  // 2^40 > max_count
  EXPECT_EQ(with_count({0x80, 0x80, 0x80, 0x10}), errc::truncated);                  // 2^25 floats, no bytes
}

TEST(Hostile, CountLimitsAreEnforcedOnBothSides) {
  graph::options small;
  small.limits.max_count = 3;
  const std::vector<float> four = {1, 2, 3, 4};
  EXPECT_EQ(graph::write(four, small).error(), errc::limit_exceeded);
  EXPECT_EQ(graph::write(std::string("four"), small).error(), errc::limit_exceeded);
  EXPECT_EQ(graph::write(std::set<int>{1, 2, 3, 4}, small).error(), errc::limit_exceeded);
  EXPECT_TRUE(graph::write(std::vector<float>{1, 2, 3}, small));
  EXPECT_EQ(graph::read<std::vector<float>>(*graph::write(four), small).error(), errc::limit_exceeded);
}

TEST(Hostile, DepthBeyondTheLimitIsAnError) {
  using nested = std::vector<std::vector<std::vector<std::vector<int>>>>;
  nested n = {{{{1}}}};
  graph::options shallow;
  shallow.limits.max_depth = 3;
  EXPECT_EQ(graph::write(n, shallow).error(), errc::depth_exceeded);
  auto bytes = graph::write(n);
  ASSERT_TRUE(bytes);
  EXPECT_EQ(graph::read<nested>(*bytes, shallow).error(), errc::depth_exceeded);
}

TEST(Hostile, ReferenceErrors) {
  // Root shared_ptr<point> whose id is patched.
  auto bytes = *graph::write(std::make_shared<point>(point{1, 2}));
  // The body starts after the 15-byte header: root id (01), payload.
  const std::size_t id_at = 15;
  ASSERT_EQ(bytes[id_at], std::byte{1});
  auto b = bytes;
  b[id_at] = std::byte{2};
  EXPECT_EQ(graph::read<std::shared_ptr<point>>(b).error(), graph_errc::bad_reference);
  b[id_at] = std::byte{0};  // null root: object 1 is never referenced
  EXPECT_EQ(graph::read<std::shared_ptr<point>>(b).error(), graph_errc::bad_reference);
}

struct two {
  static constexpr std::string_view ferry_name = "test.two";
  std::shared_ptr<point> a;
  std::shared_ptr<point> b;
  template <class F>
  void describe(F& f) {
    f(1, "a", a)(2, "b", b);
  }
};

struct two_unique {
  static constexpr std::string_view ferry_name = "test.two";
  std::unique_ptr<point> a;
  std::unique_ptr<point> b;
  template <class F>
  void describe(F& f) {
    f(1, "a", a)(2, "b", b);
  }
};

TEST(Hostile, OwnershipConflicts) {
  auto p = std::make_shared<point>();
  auto bytes = graph::write(two{p, p});
  // Read as two unique_ptrs: the descriptors differ.
  EXPECT_EQ(graph::read<two_unique>(*bytes).error(), graph_errc::field_type_mismatch);
  // Writing one object through two unique_ptrs is impossible in C++, but
  // the table's ownership byte can be forged: shared -> unique.
  auto b = *bytes;
  // Find the object table: its single entry is "01 18 <idx>".
  bool patched = false;
  for (std::size_t i = 0; i + 2 < b.size() && !patched; ++i) {
    if (b[i] == std::byte{1} && b[i + 1] == std::byte{0x18} && b[i - 1] == std::byte{1}) {
      b[i] = std::byte{2};
      patched = true;
    }
  }
  ASSERT_TRUE(patched);
  EXPECT_EQ(graph::read<two>(b).error(), graph_errc::ownership_conflict);
}

TEST(Hostile, UnknownPolymorphicTypeName) {
  register_shapes();
  std::shared_ptr<shape> s = std::make_shared<square>();
  auto bytes = *graph::write(s);
  // Rename "test.square" to "test.squarf" in the schema.
  std::string text(bytes.size(), '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) text[i] = static_cast<char>(bytes[i]);
  const auto at = text.find("test.square");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 10] = std::byte{'f'};
  EXPECT_EQ(graph::read<std::shared_ptr<shape>>(bytes).error(), graph_errc::unknown_type);
}

struct big {
  static constexpr std::string_view ferry_name = "test.big";
  std::array<std::uint8_t, 1 << 16> payload{};
  template <class F>
  void describe(F& f) {
    f(1, "payload", payload);
  }
};

TEST(Hostile, AllocationIsBoundedByTheInput) {
  std::vector<std::shared_ptr<big>> many(4, std::make_shared<big>());
  auto bytes = graph::write(many);
  ASSERT_TRUE(bytes);
  graph::options tight;
  tight.allocation_factor = 0;  // only the 1 MiB floor
  EXPECT_TRUE(graph::read<std::vector<std::shared_ptr<big>>>(*bytes, tight));
  std::vector<std::shared_ptr<big>> more;
  for (int i = 0; i < 20; ++i) more.push_back(std::make_shared<big>());
  auto large = graph::write(more);
  EXPECT_EQ(graph::read<std::vector<std::shared_ptr<big>>>(*large, tight).error(), errc::limit_exceeded);
}

// A writer keeps scratch memory in its thread for the next write
// (archive.cpp). What it writes must not depend on what the thread wrote
// before, nor on a writer running inside another: a value_codec that
// writes a graph of its own (sealed, below).
struct sealed {
  std::vector<std::shared_ptr<node>> nodes;
};

std::vector<std::shared_ptr<node>> make_web(int n) {
  std::vector<std::shared_ptr<node>> v;
  for (int i = 0; i < n; ++i) {
    v.push_back(std::make_shared<node>());
    v.back()->label = std::to_string(i);
  }
  for (int i = 0; i < n; ++i) {
    auto& x = *v[static_cast<std::size_t>(i)];
    for (int j : {i + 1, i + n / 2, i + 7}) {
      if (j < n) x.children.push_back(v[static_cast<std::size_t>(j)]);  // forward only: no cycles
    }
    x.parent = v[static_cast<std::size_t>(i / 2)];
    x.buddy = v[static_cast<std::size_t>(i * 3 % n)].get();
  }
  return v;
}

template <class T>
std::vector<std::byte> write_on_new_thread(const T& root) {
  std::vector<std::byte> out;
  std::thread([&] { out = *graph::write(root); }).join();
  return out;
}

}  // namespace
}  // namespace ferry::testing

template <>
struct ferry::graph::value_codec<ferry::testing::sealed> {
  using wire_type = std::vector<std::uint8_t>;  // an archive of its own
  static wire_type to_wire(const ferry::testing::sealed& s) {
    const auto bytes = *ferry::graph::write(s.nodes);
    wire_type w(bytes.size());
    std::memcpy(w.data(), bytes.data(), bytes.size());
    return w;
  }
  static ferry::result<void> from_wire(const wire_type& w, ferry::testing::sealed& s) {
    std::vector<std::byte> bytes(w.size());
    std::memcpy(bytes.data(), w.data(), w.size());
    FERRY_TRY_ASSIGN(s.nodes, ferry::graph::read<std::vector<std::shared_ptr<ferry::testing::node>>>(bytes));
    return {};
  }
};

namespace ferry::testing {
namespace {

TEST(Graph, WritesDoNotDependOnWhatTheThreadWroteBefore) {
  const auto large = make_web(20000);
  const auto small = make_web(3);
  const auto large_alone = write_on_new_thread(large);
  const auto small_alone = write_on_new_thread(small);
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(*graph::write(large), large_alone);
    EXPECT_EQ(*graph::write(small), small_alone);
  }
  // The inner writer runs while the outer one holds the thread's scratch.
  const auto both = std::make_pair(sealed{small}, large);
  const auto both_alone = write_on_new_thread(both);
  auto bytes = graph::write(both);
  ASSERT_TRUE(bytes);
  EXPECT_EQ(*bytes, both_alone);
  EXPECT_EQ(*graph::write(large), large_alone);
  auto back = graph::read<std::pair<sealed, std::vector<std::shared_ptr<node>>>>(*bytes);
  ASSERT_TRUE(back) << name(back.error());
  ASSERT_EQ(back->first.nodes.size(), 3U);
  EXPECT_EQ(back->first.nodes[2]->label, "2");
  EXPECT_EQ(back->first.nodes[1]->children[0], back->first.nodes[2]);
  ASSERT_EQ(back->second.size(), large.size());
  EXPECT_EQ(back->second[12345]->buddy, back->second[12345 * 3 % 20000].get());
}

}  // namespace
}  // namespace ferry::testing
