// detect_format(): the kind of a checkpoint told from its first bytes, one
// head of each kind and the edges between them (detail/detect.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/checkpoint/detail/detect.h"
#include "ferry/checkpoint/detail/layout.h"
#include "ferry/checkpoint/format.h"
#include "ferry/checkpoint/set.h"

namespace ferry::checkpoint::testing {
namespace {

using detail::detect_format;
using detail::head_format;

std::vector<std::byte> bytes(std::string_view s) {
  std::vector<std::byte> out(s.size());
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());
  return out;
}

// The kind of a file that is `file` whole (the head is its first bytes).
head_format kind_of(const std::vector<std::byte>& file) {
  const std::size_t have = std::min(file.size(), header_size);
  return detect_format(std::span(file).first(have), file.size());
}

std::vector<std::byte> ferry_head(std::uint8_t flags) {
  const auto h = detail::encode_header({wire::byte_order::little, min_alignment, flags});
  std::vector<std::byte> file(h.begin(), h.end());
  file.resize(200);  // the rest, whatever it is
  return file;
}

// A safetensors file: an 8-byte little-endian length, then that much JSON.
std::vector<std::byte> safetensors_file(std::string_view json) {
  std::vector<std::byte> file(8);
  std::uint64_t n = json.size();
  for (auto& b : file) {
    b = static_cast<std::byte>(n & 0xff);
    n >>= 8;
  }
  const auto j = bytes(json);
  file.insert(file.end(), j.begin(), j.end());
  return file;
}

TEST(DetectFormat, AFerryFileAndASetIndex) {
  EXPECT_EQ(kind_of(ferry_head(0)), head_format::ferry_file);
  EXPECT_EQ(kind_of(ferry_head(set_index_flag)), head_format::ferry_set_index);
  // Any other flags are still .ferry: its decoder refuses them.
  EXPECT_EQ(kind_of(ferry_head(0x80)), head_format::ferry_file);
}

TEST(DetectFormat, AFerryFileShorterThanItsHeaderIsTruncated) {
  for (const std::size_t n : {std::size_t{1}, std::size_t{3}, sizeof file_magic, std::size_t{9}, header_size - 1}) {
    auto file = ferry_head(0);
    file.resize(n);
    EXPECT_EQ(kind_of(file), head_format::truncated) << n << " bytes";
  }
  // A prefix of the magic that then differs is not .ferry.
  auto file = ferry_head(0);
  file[5] = std::byte{'x'};
  EXPECT_EQ(kind_of(file), head_format::unknown);
}

TEST(DetectFormat, AZipIsTakenForATorchSaveFile) {
  auto file = bytes(std::string_view("PK\x03\x04", 4));
  EXPECT_EQ(kind_of(file), head_format::pytorch_zip);
  file.resize(300);
  EXPECT_EQ(kind_of(file), head_format::pytorch_zip);
  EXPECT_EQ(kind_of(bytes(std::string_view("PK\x05\x06", 4))), head_format::truncated);  // an empty zip's end record
}

TEST(DetectFormat, ALegacyTorchSaveFile) {
  // Protocol 2: PROTO 2, LONG1 of 10 bytes, torch.save's magic number.
  auto file = bytes(std::string_view("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15));
  EXPECT_EQ(kind_of(file), head_format::pytorch_legacy);
  // Protocol 0: the number in decimal.
  EXPECT_EQ(kind_of(bytes("L119547037146038801333356L\n.")), head_format::pytorch_legacy);
  // Another pickle is not one.
  file[4] = std::byte{0x6d};
  EXPECT_EQ(kind_of(file), head_format::unknown);
}

TEST(DetectFormat, ASafetensorsFile) {
  EXPECT_EQ(kind_of(safetensors_file("{}")), head_format::safetensors);
  EXPECT_EQ(kind_of(safetensors_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})")),
            head_format::safetensors);
  // A header length past the end is still safetensors (its decoder says
  // truncated) unless byte 0 is '{' too.
  auto file = safetensors_file("{}");
  file[1] = std::byte{0x10};
  EXPECT_EQ(kind_of(file), head_format::safetensors);
}

TEST(DetectFormat, BraceAtBytes0And8IsSafetensorsOnlyWhenTheLengthFits) {
  // A header of 0x7b (123, '{') bytes: its length starts with '{'.
  std::string json = "{\"__metadata__\":{\"a\":\"";
  json.resize(120, 'x');
  json += "\"}}";
  const auto file = safetensors_file(json);
  ASSERT_EQ(json.size(), 123u);
  ASSERT_EQ(file[0], std::byte{'{'});
  ASSERT_EQ(file[8], std::byte{'{'});
  EXPECT_EQ(kind_of(file), head_format::safetensors);
  // The same first bytes, the file too short for that length: JSON.
  EXPECT_EQ(kind_of(std::vector<std::byte>(file.begin(), file.begin() + 100)), head_format::safetensors_index);
  // JSON whose byte 8 is '{'.
  EXPECT_EQ(kind_of(bytes(R"({"a":   {"b": 1}})")), head_format::safetensors_index);
}

TEST(DetectFormat, AHuggingFaceIndex) {
  EXPECT_EQ(kind_of(bytes(R"({"metadata": {}, "weight_map": {"w": "model-00001-of-00002.safetensors"}})")),
            head_format::safetensors_index);
  EXPECT_EQ(kind_of(bytes(" \t\r\n{\"weight_map\": {}}")), head_format::safetensors_index);
  EXPECT_EQ(kind_of(bytes("{}")), head_format::safetensors_index);
  EXPECT_EQ(kind_of(bytes("  {")), head_format::safetensors_index);
  // Whitespace beyond the head: not told.
  EXPECT_EQ(kind_of(bytes(std::string(header_size, ' ') + "{}")), head_format::unknown);
}

TEST(DetectFormat, ShortFilesAreTruncatedAndOthersUnknown) {
  EXPECT_EQ(kind_of({}), head_format::truncated);
  EXPECT_EQ(kind_of(bytes("12345678")), head_format::truncated);
  EXPECT_EQ(kind_of(bytes("[1, 2, 3]")), head_format::unknown);  // 9 bytes
  EXPECT_EQ(kind_of(bytes("<!DOCTYPE html><html><body>Not Found</body></html>")), head_format::unknown);
  EXPECT_EQ(kind_of(bytes("version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 12\n")), head_format::unknown);
}

TEST(DetectFormat, Gguf) {
  EXPECT_EQ(kind_of(bytes(std::string_view("GGUF\x03\0\0\0", 8))), head_format::gguf);
  EXPECT_EQ(kind_of(bytes(std::string_view("GGUF\0\0\0\x03", 8))), head_format::gguf);  // big-endian
  EXPECT_EQ(kind_of(bytes(std::string_view("FUGG\0\0\0\x03", 8))), head_format::gguf);  // gguf-py's old big-endian magic
  EXPECT_EQ(kind_of(bytes("GGUF")), head_format::gguf);                                  // the parser says truncated
  EXPECT_EQ(kind_of(bytes("GGU")), head_format::truncated);
  EXPECT_EQ(detail::head_format_name(head_format::gguf), "gguf");
}

TEST(DetectFormat, SetIndexesAreTheKindsThatNameOtherFiles) {
  for (const auto f : {head_format::ferry_file, head_format::ferry_set_index, head_format::pytorch_zip,
                       head_format::pytorch_legacy, head_format::npy, head_format::gguf, head_format::safetensors,
                       head_format::safetensors_index, head_format::truncated, head_format::unknown}) {
    EXPECT_EQ(detail::is_set_index(f), f == head_format::ferry_set_index || f == head_format::safetensors_index)
        << detail::head_format_name(f);
  }
}

}  // namespace
}  // namespace ferry::checkpoint::testing
