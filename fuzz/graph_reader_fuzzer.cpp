// The graph archive reader on arbitrary bytes, for several root types
// (cycles, weak/raw/unique pointers, every container, polymorphism). It must
// return a value or a typed error, never crash, leak or allocate beyond its
// budget; whatever it accepts must write back and read again.
#include <sstream>

#include "ferry/graph/archive.h"
#include "ferry/graph/dump.h"
#include "fuzz_check.h"
#include "graph_cleanup.h"
#include "graph_types.h"

namespace graph_reader_harness {

using namespace ferry;
using namespace ferry::testing;

template <class T, class Release>
void check(std::span<const std::byte> in, Release release) {
  T value{};
  if (!graph::read_into(in, value)) return;
  auto again = graph::write(value);
  FUZZ_CHECK(again.has_value());
  T twice{};
  FUZZ_CHECK(graph::read_into(*again, twice).has_value());
  release(value);
  release(twice);
}

}  // namespace graph_reader_harness

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace graph_reader_harness;
  static const bool registered = (register_shapes(), true);
  (void)registered;
  const auto in = std::as_bytes(std::span(data, size));
  check<golden>(in, [](golden& g) { release_graph(g.nodes); });
  check<std::shared_ptr<node>>(in, [](std::shared_ptr<node>& n) { release_graph({n}); });
  check<drawing>(in, [](drawing&) {});
  check<everything>(in, [](everything&) {});
  // The dump tool walks any archive without its C++ types.
  std::ostringstream sink;
  (void)graph::dump_json(in, sink);
  return 0;
}
