// graph/ against Boost.Serialization (binary archives, object tracking) and
// cereal (binary archives, shared_ptr/weak_ptr), on the three graphs of the
// issue: a 100,000-node DAG with ~3 references per node, a 100,000-node
// doubly-linked ring, and a tree of 10,000 records with a string and 64
// floats each. Reports write time, read time and archive bytes, and ends
// with the ratio table docs/benchmarks.md shows.
//
// Boost and cereal recurse along references, so a 100,000-node ring needs a
// deep stack: every benchmark runs on a thread with a 1 GiB stack (ferry
// itself needs none; see the million-node tests).
#include <benchmark/benchmark.h>
#include <pthread.h>

#include <boost/archive/binary_iarchive.hpp>
#include <boost/archive/binary_oarchive.hpp>
#include <boost/serialization/shared_ptr.hpp>
#include <boost/serialization/string.hpp>
#include <boost/serialization/vector.hpp>
#include <boost/serialization/weak_ptr.hpp>
#include <cereal/archives/binary.hpp>
#include <cereal/types/memory.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include <cstdio>
#include <random>
#include <sstream>
#include <streambuf>

#include "ferry/graph/archive.h"
#include "ratio_table.h"

namespace {

constexpr int dag_nodes = 100'000;
constexpr int ring_nodes = 100'000;
constexpr int tree_records = 10'000;

// One type per library (their serialize() conventions collide).
namespace f {
struct dag {
  static constexpr std::string_view ferry_name = "bench.dag";
  std::int32_t id = 0;
  std::vector<std::shared_ptr<dag>> out;
  template <class F>
  void describe(F& fl) {
    fl(1, "id", id)(2, "out", out);
  }
};
struct ring {
  static constexpr std::string_view ferry_name = "bench.ring";
  std::int32_t id = 0;
  std::shared_ptr<ring> next;
  std::weak_ptr<ring> prev;
  template <class F>
  void describe(F& fl) {
    fl(1, "id", id)(2, "next", next)(3, "prev", prev);
  }
};
struct record {
  static constexpr std::string_view ferry_name = "bench.record";
  std::string name;
  std::vector<float> values;
  std::vector<record> children;
  template <class F>
  void describe(F& fl) {
    fl(1, "name", name)(2, "values", values)(3, "children", children);
  }
};
}  // namespace f

namespace b {
struct dag {
  std::int32_t id = 0;
  std::vector<std::shared_ptr<dag>> out;
  template <class A>
  void serialize(A& a, unsigned) {
    a& id& out;
  }
};
struct ring {
  std::int32_t id = 0;
  std::shared_ptr<ring> next;
  std::weak_ptr<ring> prev;
  template <class A>
  void serialize(A& a, unsigned) {
    a& id& next& prev;
  }
};
struct record {
  std::string name;
  std::vector<float> values;
  std::vector<record> children;
  template <class A>
  void serialize(A& a, unsigned) {
    a& name& values& children;
  }
};
}  // namespace b

namespace c {
struct dag {
  std::int32_t id = 0;
  std::vector<std::shared_ptr<dag>> out;
  template <class A>
  void serialize(A& a) {
    a(id, out);
  }
};
struct ring {
  std::int32_t id = 0;
  std::shared_ptr<ring> next;
  std::weak_ptr<ring> prev;
  template <class A>
  void serialize(A& a) {
    a(id, next, prev);
  }
};
struct record {
  std::string name;
  std::vector<float> values;
  std::vector<record> children;
  template <class A>
  void serialize(A& a) {
    a(name, values, children);
  }
};
}  // namespace c

// ---------------------------------------------------------------- graphs

template <class Dag>
std::vector<std::shared_ptr<Dag>> make_dag() {
  std::vector<std::shared_ptr<Dag>> nodes(dag_nodes);
  for (int i = 0; i < dag_nodes; ++i) {
    nodes[static_cast<std::size_t>(i)] = std::make_shared<Dag>();
    nodes[static_cast<std::size_t>(i)]->id = i;
  }
  std::mt19937 rng(1);
  for (int i = 0; i + 1 < dag_nodes; ++i) {
    std::uniform_int_distribution<int> later(i + 1, dag_nodes - 1);
    for (int k = 0; k < 3; ++k) nodes[static_cast<std::size_t>(i)]->out.push_back(nodes[static_cast<std::size_t>(later(rng))]);
  }
  return nodes;
}

template <class Ring>
std::shared_ptr<Ring> make_ring() {
  std::vector<std::shared_ptr<Ring>> nodes(ring_nodes);
  for (int i = 0; i < ring_nodes; ++i) {
    nodes[static_cast<std::size_t>(i)] = std::make_shared<Ring>();
    nodes[static_cast<std::size_t>(i)]->id = i;
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    nodes[i]->next = nodes[(i + 1) % nodes.size()];
    nodes[i]->prev = nodes[(i + nodes.size() - 1) % nodes.size()];
  }
  return nodes[0];
}

// Opens the ring and frees it iteratively.
template <class Ring>
void free_ring(std::shared_ptr<Ring> head) {
  if (!head) return;
  auto last = head->prev.lock();
  if (last) last->next.reset();
  while (head && head.use_count() == 1) head = std::move(head->next);
}

template <class Record>
Record make_tree() {
  // Fan-out 4 by breadth: 10,000 records in total.
  Record root;
  std::vector<Record*> frontier = {&root};
  int made = 1;
  std::mt19937 rng(2);
  std::normal_distribution<float> d;
  auto fill = [&](Record& r, int i) {
    r.name = "record-" + std::to_string(i);
    r.values.resize(64);
    for (auto& v : r.values) v = d(rng);
  };
  fill(root, 0);
  for (std::size_t i = 0; made < tree_records; ++i) {
    Record* parent = frontier[i];
    parent->children.resize(static_cast<std::size_t>(std::min(4, tree_records - made)));
    for (auto& child : parent->children) fill(child, made++);
    for (auto& child : parent->children) frontier.push_back(&child);
  }
  return root;
}

// --------------------------------------------------- library adapters

/// A read-only streambuf over bytes, so reading does not copy the archive.
class view_buf : public std::streambuf {
 public:
  explicit view_buf(const std::string& s) {
    char* p = const_cast<char*>(s.data());  // get area is never written through
    setg(p, p, p + s.size());
  }
};

template <class T>
std::string boost_write(const T& v) {
  std::ostringstream out(std::ios::binary);
  {
    boost::archive::binary_oarchive ar(out, boost::archive::no_header);
    ar << v;
  }
  return std::move(out).str();
}
template <class T>
void boost_read(const std::string& bytes, T& v) {
  view_buf buf(bytes);
  std::istream in(&buf);
  boost::archive::binary_iarchive ar(in, boost::archive::no_header);
  ar >> v;
}
template <class T>
std::string cereal_write(const T& v) {
  std::ostringstream out(std::ios::binary);
  {
    cereal::BinaryOutputArchive ar(out);
    ar(v);
  }
  return std::move(out).str();
}
template <class T>
void cereal_read(const std::string& bytes, T& v) {
  view_buf buf(bytes);
  std::istream in(&buf);
  cereal::BinaryInputArchive ar(in);
  ar(v);
}

// ------------------------------------------------------------ benchmarks

template <class T, class Make, class Write, class Free>
void bench_write(benchmark::State& state, Make make, Write write, Free release) {
  T graph = make();
  std::size_t size = 0;
  for (auto _ : state) {
    auto bytes = write(graph);
    size = bytes.size();
    benchmark::DoNotOptimize(bytes.data());
  }
  state.counters["archive_bytes"] = static_cast<double>(size);
  release(graph);
}

template <class T, class Make, class Write, class Read, class Free>
void bench_read(benchmark::State& state, Make make, Write write, Read read, Free release) {
  T graph = make();
  const auto bytes = write(graph);
  release(graph);
  for (auto _ : state) {
    T back{};
    read(bytes, back);
    state.PauseTiming();  // freeing the result is not part of reading
    release(back);
    back = T{};
    state.ResumeTiming();
  }
  state.counters["archive_bytes"] = static_cast<double>(bytes.size());
}

auto ferry_write = [](const auto& v) { return *ferry::graph::write(v); };
auto ferry_read = [](const auto& bytes, auto& v) {
  if (!ferry::graph::read_into(bytes, v)) std::abort();
};
auto boost_w = [](const auto& v) { return boost_write(v); };
auto boost_r = [](const std::string& bytes, auto& v) { boost_read(bytes, v); };
auto cereal_w = [](const auto& v) { return cereal_write(v); };
auto cereal_r = [](const std::string& bytes, auto& v) { cereal_read(bytes, v); };
auto keep = [](auto&) {};
auto free_rings = [](auto& r) { free_ring(std::move(r)); };

void register_all() {
  using namespace benchmark;
  auto reg = [](const char* name, auto fn) { RegisterBenchmark(name, fn)->Unit(kMillisecond)->MinTime(0.3); };
  // 1. DAG
  reg("dag/write/ferry", [](State& s) { bench_write<std::vector<std::shared_ptr<f::dag>>>(s, make_dag<f::dag>, ferry_write, keep); });
  reg("dag/write/boost", [](State& s) { bench_write<std::vector<std::shared_ptr<b::dag>>>(s, make_dag<b::dag>, boost_w, keep); });
  reg("dag/write/cereal", [](State& s) { bench_write<std::vector<std::shared_ptr<c::dag>>>(s, make_dag<c::dag>, cereal_w, keep); });
  reg("dag/read/ferry", [](State& s) { bench_read<std::vector<std::shared_ptr<f::dag>>>(s, make_dag<f::dag>, ferry_write, ferry_read, keep); });
  reg("dag/read/boost", [](State& s) { bench_read<std::vector<std::shared_ptr<b::dag>>>(s, make_dag<b::dag>, boost_w, boost_r, keep); });
  reg("dag/read/cereal", [](State& s) { bench_read<std::vector<std::shared_ptr<c::dag>>>(s, make_dag<c::dag>, cereal_w, cereal_r, keep); });
  // 2. Ring
  reg("ring/write/ferry", [](State& s) { bench_write<std::shared_ptr<f::ring>>(s, make_ring<f::ring>, ferry_write, free_rings); });
  reg("ring/write/boost", [](State& s) { bench_write<std::shared_ptr<b::ring>>(s, make_ring<b::ring>, boost_w, free_rings); });
  reg("ring/write/cereal", [](State& s) { bench_write<std::shared_ptr<c::ring>>(s, make_ring<c::ring>, cereal_w, free_rings); });
  reg("ring/read/ferry", [](State& s) { bench_read<std::shared_ptr<f::ring>>(s, make_ring<f::ring>, ferry_write, ferry_read, free_rings); });
  reg("ring/read/boost", [](State& s) { bench_read<std::shared_ptr<b::ring>>(s, make_ring<b::ring>, boost_w, boost_r, free_rings); });
  reg("ring/read/cereal", [](State& s) { bench_read<std::shared_ptr<c::ring>>(s, make_ring<c::ring>, cereal_w, cereal_r, free_rings); });
  // 3. Tree of records
  reg("tree/write/ferry", [](State& s) { bench_write<f::record>(s, make_tree<f::record>, ferry_write, keep); });
  reg("tree/write/boost", [](State& s) { bench_write<b::record>(s, make_tree<b::record>, boost_w, keep); });
  reg("tree/write/cereal", [](State& s) { bench_write<c::record>(s, make_tree<c::record>, cereal_w, keep); });
  reg("tree/read/ferry", [](State& s) { bench_read<f::record>(s, make_tree<f::record>, ferry_write, ferry_read, keep); });
  reg("tree/read/boost", [](State& s) { bench_read<b::record>(s, make_tree<b::record>, boost_w, boost_r, keep); });
  reg("tree/read/cereal", [](State& s) { bench_read<c::record>(s, make_tree<c::record>, cereal_w, cereal_r, keep); });
}

void print_table(const ferry::bench::results& r) {
  auto ms = [&](const std::string& n) {
    const auto it = r.find(n);
    return it == r.end() ? 0.0 : it->second.ns / 1e6;
  };
  auto size = [&](const std::string& n) {
    const auto it = r.find(n);
    return it == r.end() ? 0.0 : it->second.counter("archive_bytes");
  };
  std::printf("\nferry graph vs Boost.Serialization and cereal (median of 3, ms; bytes)\n\n");
  std::printf("| graph | write ferry | write Boost | write cereal | read ferry | read Boost | read cereal |"
              " bytes ferry | bytes Boost | bytes cereal |\n|---|---|---|---|---|---|---|---|---|---|\n");
  const char* cases[] = {"dag", "ring", "tree"};
  for (const char* c : cases) {
    const std::string k = c;
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f | %.0f |\n", c, ms(k + "/write/ferry"),
                ms(k + "/write/boost"), ms(k + "/write/cereal"), ms(k + "/read/ferry"), ms(k + "/read/boost"),
                ms(k + "/read/cereal"), size(k + "/write/ferry"), size(k + "/write/boost"), size(k + "/write/cereal"));
  }
  std::printf("\n| goal | measured | target | |\n|---|---|---|---|\n");
  for (const char* c : cases) {
    const std::string k = c;
    for (const char* op : {"write", "read"}) {
      const double vs_boost = ms(k + "/" + op + "/boost") / ms(k + "/" + op + "/ferry");
      const double vs_cereal = ms(k + "/" + op + "/cereal") / ms(k + "/" + op + "/ferry");
      std::printf("| %s %s: Boost time / ferry time | %.2fx | >= 2x | %s |\n", c, op, vs_boost,
                  vs_boost >= 2 ? "met" : "MISSED");
      std::printf("| %s %s: cereal time / ferry time | %.2fx | >= 1x | %s |\n", c, op, vs_cereal,
                  vs_cereal >= 1 ? "met" : "MISSED");
    }
    const double fb = size(k + "/write/ferry");
    const double smallest = std::min(size(k + "/write/boost"), size(k + "/write/cereal"));
    std::printf("| %s: ferry bytes / smallest peer | %.2fx | <= 1x | %s |\n", c, fb / smallest,
                fb <= smallest ? "met" : "MISSED");
  }
}

struct run_args {
  int argc;
  char** argv;
  int status;
};

void* run(void* p) {
  auto* a = static_cast<run_args*>(p);
  register_all();
  const auto results = ferry::bench::run_benchmarks(a->argc, a->argv, "graph");
  if (!results) {
    a->status = 1;
    return nullptr;
  }
  print_table(*results);
  a->status = 0;
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  // The peers recurse along the 100,000-node ring: give every benchmark a
  // 1 GiB stack.
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, std::size_t{1} << 30);
  run_args a{argc, argv, 1};
  pthread_t t;
  if (pthread_create(&t, &attr, run, &a) != 0) return 1;
  pthread_join(t, nullptr);
  return a.status;
}
