// The schema section and the remaining exact errors of hostile archives.
#include "ferry/schema/schema.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "types.h"

namespace ferry::testing {
namespace {

using schema::kind;

// Builds a schema section by hand: types of (name, fields of (tag, name, descriptor bytes)).
struct raw_field {
  std::uint32_t tag;
  std::string name;
  std::vector<std::uint8_t> desc;
};
std::vector<std::byte> section(const std::vector<std::pair<std::string, std::vector<raw_field>>>& types) {
  std::vector<std::byte> out;
  wire::vector_writer w(out);
  auto text = [&](const std::string& s) { (void)w.write_length_prefixed(std::as_bytes(std::span(s.data(), s.size()))); };
  (void)w.write_varint(types.size());
  for (const auto& [name, fields] : types) {
    text(name);
    (void)w.write_varint(1);
    (void)w.write<std::uint8_t>(0, wire::byte_order::little);
    (void)w.write_varint(fields.size());
    for (const auto& f : fields) {
      (void)w.write_varint(f.tag);
      text(f.name);
      for (auto b : f.desc) (void)w.write<std::uint8_t>(b, wire::byte_order::little);
    }
  }
  w.flush();
  return out;
}

error_code decode_error(const std::vector<std::byte>& bytes) {
  wire::reader in(bytes);
  auto s = schema::decode(in, {});
  return s ? error_code() : s.error();
}

TEST(Schema, RoundTripsThroughEncode) {
  schema::schema s;
  s.types.push_back({"a.b", 3, false, {{1, "x", {std::byte{0x06}}}, {2, "next", {std::byte{0x19}, std::byte{0x18}, std::byte{0}}}}});
  s.types.push_back({"a.base", 1, true, {}});
  std::vector<std::byte> out;
  {
    wire::vector_writer w(out);
    schema::encode(s, w);
  }
  wire::reader in(out);
  auto back = schema::decode(in, {});
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, s);
  EXPECT_TRUE(in.at_end());
  EXPECT_EQ(back->find("a.base"), 1);
  EXPECT_EQ(back->find("nope"), -1);
  EXPECT_EQ(schema::to_string(s.types[0].fields[1].type, s), "shared<struct<a.b>>");
}

TEST(Schema, EveryDecodeErrorIsExact) {
  EXPECT_EQ(decode_error(section({{"t", {{1, "f", {0x06}}}}})), errc::ok);
  EXPECT_EQ(decode_error(section({{"t", {{1, "f", {0x7F}}}}})), schema_errc::bad_descriptor);       // unknown kind
  EXPECT_EQ(decode_error(section({{"t", {{1, "f", {0x16, 0x00}}}}})), schema_errc::bad_descriptor); // variant of 0
  EXPECT_EQ(decode_error(section({{"t", {{1, "f", {0x18, 0x05}}}}})), schema_errc::bad_type_index); // struct 5 of 1
  EXPECT_EQ(decode_error(section({{"t", {{1, "f", {0x06}}, {1, "g", {0x06}}}}})), schema_errc::duplicate_field);  // tag
  EXPECT_EQ(decode_error(section({{"t", {{1, "f", {0x06}}, {2, "f", {0x06}}}}})), schema_errc::duplicate_field);  // name
  EXPECT_EQ(decode_error(section({{"t", {}}, {"t", {}}})), errc::duplicate_key);                          // type name
  EXPECT_EQ(decode_error(section({{"t", {{0, "f", {0x06}}}}})), errc::bad_value);                          // tag 0
  EXPECT_EQ(decode_error(section({{"", {{1, "f", {0x06}}}}})), errc::bad_value);                          // empty name
  // A descriptor nested past max_depth: 100 optionals around a u8.
  std::vector<std::uint8_t> deep(100, 0x15);
  deep.push_back(0x02);
  EXPECT_EQ(decode_error(section({{"t", {{1, "f", deep}}}})), errc::depth_exceeded);
  auto cut = section({{"t", {{1, "f", {0x06}}}}});
  cut.pop_back();
  EXPECT_EQ(decode_error(cut), errc::truncated);
}

struct free_described {
  static constexpr std::string_view ferry_name = "test.free";
  std::int32_t a = 0;
  std::string b;
};
template <class F>
void describe(F& f, free_described& v) {  // found by argument-dependent lookup
  f(1, "a", v.a)(2, "b", v.b);
}

TEST(Graph, FreeFunctionDescribeAndStreams) {
  free_described v{7, "seven"};
  std::stringstream stream;
  ASSERT_TRUE(graph::write(stream, v));
  auto back = graph::read<free_described>(stream);
  ASSERT_TRUE(back) << name(back.error());
  EXPECT_EQ(back->a, 7);
  EXPECT_EQ(back->b, "seven");
}

TEST(Hostile, MapKeysOutOfOrderOrTwice) {
  using int_map = std::map<std::int32_t, std::int32_t>;
  const int_map m = {{1, 10}, {2, 20}};
  auto bytes = *graph::write(m);
  // Body: count 2, key 1, value 10, key 2, value 20 (i32, little).
  ASSERT_EQ(bytes[15], std::byte{2});
  auto twice = bytes;
  twice[15 + 1 + 8] = std::byte{1};  // second key 2 -> 1
  EXPECT_EQ(graph::read<int_map>(twice).error(), errc::duplicate_key);
  auto reversed = bytes;
  reversed[15 + 1] = std::byte{3};  // first key 1 -> 3, then 2
  EXPECT_EQ(graph::read<int_map>(reversed).error(), errc::duplicate_key);
  auto flag = *graph::write(std::optional<std::int32_t>(5));
  flag[15] = std::byte{2};  // optional flag must be 0 or 1
  EXPECT_EQ(graph::read<std::optional<std::int32_t>>(flag).error(), errc::bad_value);
}

}  // namespace
}  // namespace ferry::testing
