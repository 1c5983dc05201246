// Golden input: tensors written by the reference safetensors implementation
// decode to the same numbers through wire/ and codec/ on every architecture.
// (Only the few header fields needed are located here; parsing safetensors
// headers properly is the checkpoint layer's job.)
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ferry/codec/dtype.h"
#include "ferry/codec/half.h"
#include "ferry/wire/bulk.h"
#include "ferry/wire/cursor.h"

namespace ferry::codec {
namespace {

using wire::byte_order;

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  for (std::size_t i = 0; i < chars.size(); ++i) out[i] = static_cast<std::byte>(chars[i]);
  return out;
}

std::string field(const std::string& json, const std::string& key, char end) {
  const auto at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return {};
  const auto start = at + key.size() + 3;
  return json.substr(start, json.find(end, start) - start + 1);
}

template <class T>
std::vector<double> decode(std::span<const std::byte> data) {
  std::vector<T> v(data.size() / sizeof(T));
  EXPECT_EQ(data.size(), v.size() * sizeof(T));
  wire::load_array<T>(data.first(v.size() * sizeof(T)), byte_order::little, std::span<T>(v));
  return std::vector<double>(v.begin(), v.end());
}

TEST(SafetensorsGolden, EveryFixtureDecodesToRangeMinus3To3) {
  const std::pair<const char*, std::vector<double>> fixtures[] = {
      {"B", {253, 254, 255, 0, 1, 2}},
      {"H", {65533, 65534, 65535, 0, 1, 2}},
      {"I", {4294967293.0, 4294967294.0, 4294967295.0, 0, 1, 2}},
      {"b", {-3, -2, -1, 0, 1, 2}},
      {"d", {-3, -2, -1, 0, 1, 2}},
      {"e", {-3, -2, -1, 0, 1, 2}},
      {"f", {-3, -2, -1, 0, 1, 2}},
  };
  for (const auto& [name, expected] : fixtures) {
    SCOPED_TRACE(name);
    const auto file = read_file(std::string(FERRY_TEST_DATA_DIR "/safetensors/") + name + ".safetensors");
    wire::reader r(file);
    auto header_size = r.read<std::uint64_t>(byte_order::little);
    ASSERT_TRUE(header_size);
    auto header = r.read_bytes(static_cast<std::size_t>(*header_size));
    ASSERT_TRUE(header);
    std::string json;
    for (std::byte b : *header) json += static_cast<char>(b);

    const std::string dtype_field = field(json, "dtype", ',');  // "F32",
    auto t = dtype_from_name(dtype_field.substr(1, dtype_field.size() - 3));
    ASSERT_TRUE(t) << json;
    EXPECT_EQ(field(json, "shape", ']'), "[6]");
    const auto data = r.rest();
    ASSERT_EQ(data.size(), 6 * size_of(*t));

    std::vector<double> got;
    switch (*t) {
      case dtype::u8: got = decode<std::uint8_t>(data); break;
      case dtype::i8: got = decode<std::int8_t>(data); break;
      case dtype::u16: got = decode<std::uint16_t>(data); break;
      case dtype::u32: got = decode<std::uint32_t>(data); break;
      case dtype::f32: got = decode<float>(data); break;
      case dtype::f64: got = decode<double>(data); break;
      case dtype::f16: {
        std::vector<f16> h(6);
        ASSERT_EQ(data.size(), h.size() * sizeof(f16));
        wire::load_array<f16>(data, byte_order::little, std::span<f16>(h));
        std::vector<float> w(6);
        to_float(std::span<const f16>(h), w);
        got.assign(w.begin(), w.end());
        break;
      }
      default: FAIL() << "unexpected dtype " << name;
    }
    EXPECT_EQ(got, expected);
  }
}

}  // namespace
}  // namespace ferry::codec
