#include "ferry/graph/dump.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "types.h"

namespace ferry::testing {
namespace {

std::string dump(std::span<const std::byte> bytes) {
  std::ostringstream out;
  auto r = graph::dump_json(bytes, out);
  EXPECT_TRUE(r) << name(r.error());
  return out.str();
}

TEST(Dump, ShowsSharingAndCyclesByIdWithoutTheCppTypes) {
  golden g = make_golden();
  const auto bytes = *graph::write(g);
  break_golden(g);
  const std::string json = dump(bytes);
  EXPECT_NE(json.find(R"("root": {"$type": "test.golden", "nodes": [{"$ref": 1}, {"$ref": 2}])"), std::string::npos)
      << json;
  // Node c (id 4) points back to a (id 1): the cycle, by id.
  EXPECT_NE(json.find(R"("label": "c", "children": [{"$ref": 1}])"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("parent": {"$weak": 1})"), std::string::npos);
  EXPECT_NE(json.find(R"("buddy": {"$raw": 4})"), std::string::npos);
  EXPECT_NE(json.find(R"({"tag": 2, "name": "children", "type": "sequence<shared<struct<test.node>>>"})"),
            std::string::npos);
  EXPECT_NE(json.find(R"("names": [[1, "one"], [2, "two"], [3, "three"]])"), std::string::npos);
  EXPECT_NE(json.find(R"("choice": {"$variant": 1, "value": "alt"})"), std::string::npos);
  // 16- and 8-bit floats print as their values, described by their kinds.
  EXPECT_NE(json.find(R"("brains": [1, "-Infinity", 9.1835e-41])"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("tiny": -1, "tinies": [1, "Infinity"])"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("type": "sequence<f8_e5m2>")"), std::string::npos) << json;
}

TEST(Dump, NonFiniteFloatsAndInvalidUtf8StayValidJson) {
  std::vector<std::string> strings = {std::string("caf\xC3\xA9"), std::string("bad\x80\xFFq\"\n")};
  auto s = dump(*graph::write(strings));
  EXPECT_NE(s.find("\"caf\xC3\xA9\""), std::string::npos) << s;
  EXPECT_NE(s.find(R"("bad\u0080\u00ffq\"\n")"), std::string::npos) << s;
  std::vector<double> d = {NAN, -INFINITY, 0.1};
  auto f = dump(*graph::write(d));
  EXPECT_NE(f.find(R"(["NaN", "-Infinity", 0.1])"), std::string::npos) << f;
}

TEST(Dump, ReportsTheArchiveErrors) {
  const auto bytes = *graph::write(make_everything());
  std::ostringstream out;
  EXPECT_EQ(graph::dump_json(std::span(bytes).first(bytes.size() - 1), out).error(), errc::truncated);
  auto bad = bytes;
  bad[0] = std::byte{'x'};
  EXPECT_EQ(graph::dump_json(bad, out).error(), errc::bad_magic);
}

}  // namespace
}  // namespace ferry::testing
