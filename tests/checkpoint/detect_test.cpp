// The format table's probes (detail/formats.h): the kind of a checkpoint
// told from its first bytes, one head of each kind and the edges between
// them, each written to a file and opened as the reader opens it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/checkpoint/detail/formats.h"
#include "ferry/checkpoint/error.h"
#include "ferry/checkpoint/formats.h"
#include "helpers.h"
#include "ferry/checkpoint/ferry/layout.h"
#include "ferry/checkpoint/format.h"
#include "ferry/checkpoint/set.h"

namespace ferry::checkpoint::testing {
namespace {


std::vector<std::byte> bytes(std::string_view s) {
  std::vector<std::byte> out(s.size());
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());
  return out;
}

using DetectFormatDirectory = scratch_dir;

// `file` written to a scratch file and opened as the reader opens it
// (the file is removed at once: the source holds it open).
detail::source opened(const std::vector<std::byte>& file) {
  const fs::path path = fs::temp_directory_path() / ("ferry-detect-test-" + std::to_string(::getpid()));
  spit(path, file);
  auto s = detail::source::open(path);
  fs::remove(path);
  if (!s) std::abort();
  return std::move(*s);
}

// The kind of a file that is `file` whole: the name of the format whose
// probe says yes, else "truncated" or "unknown" as detail::parse() says.
std::string kind_of(const std::vector<std::byte>& file) {
  const detail::source s = opened(file);
  if (const detail::format_ops* f = detail::probe(s, {})) return std::string(f->name);
  const auto parsed = detail::parse(s, {});
  if (parsed.error().code() == errc::truncated) return "truncated";
  EXPECT_EQ(parsed.error().code(), checkpoint_errc::not_a_checkpoint);
  return "unknown";
}

// The error of parsing a file that is `file` whole.
error_code parse_error(const std::vector<std::byte>& file) { return detail::parse(opened(file), {}).error().code(); }

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
  EXPECT_EQ(kind_of(ferry_head(0)), "ferry");
  EXPECT_EQ(kind_of(ferry_head(set_index_flag)), "ferry-set");
  // Any other flags are still .ferry: its decoder refuses them.
  EXPECT_EQ(kind_of(ferry_head(0x80)), "ferry");
}

TEST(DetectFormat, AFerryFileShorterThanItsHeaderIsTruncated) {
  for (const std::size_t n : {std::size_t{1}, std::size_t{3}, sizeof file_magic, std::size_t{9}, header_size - 1}) {
    auto file = ferry_head(0);
    file.resize(n);
    EXPECT_EQ(kind_of(file), "ferry") << n << " bytes";  // the .ferry parser says truncated
    EXPECT_EQ(parse_error(file), errc::truncated) << n << " bytes";
  }
  // A prefix of the magic that then differs is not .ferry.
  auto file = ferry_head(0);
  file[5] = std::byte{'x'};
  EXPECT_EQ(kind_of(file), "unknown");
}

// Zips told apart by their records: every record a .npy is an .npz (the
// probe before .pt's), a zip of no records that is its end record alone
// is an empty .npz, and a torch.save archive is a .pt file.
TEST_F(DetectFormatDirectory, ZipsAreToldApartByTheirRecords) {
  const std::vector<float> a{1.0f, 2.0f};
  const std::vector<std::uint64_t> shape{2};
  const std::vector<tensor_ref> refs{{"a", codec::dtype::f32, shape, {}, 0, std::as_bytes(std::span(a))}};
  for (const file_format f : {file_format::npz, file_format::pytorch}) {
    const auto path = dir_ / "zip";
    ASSERT_TRUE(save_as(f, path, refs, {}));
    EXPECT_EQ(kind_of(slurp(path)), format_name(f));
  }
  std::vector<std::byte> empty(22);
  std::memcpy(empty.data(), "PK\x05\x06", 4);
  EXPECT_EQ(kind_of(empty), "npz");
  EXPECT_EQ(kind_of(std::vector<std::byte>(empty.begin(), empty.begin() + 21)), "unknown");  // too short for an end record
}

TEST(DetectFormat, AZipIsTakenForATorchSaveFile) {
  auto file = bytes(std::string_view("PK\x03\x04", 4));
  EXPECT_EQ(kind_of(file), "pytorch");
  file.resize(300);
  EXPECT_EQ(kind_of(file), "pytorch");
  EXPECT_EQ(kind_of(bytes(std::string_view("PK\x05\x06", 4))), "truncated");  // an empty zip's end record
}

TEST(DetectFormat, ALegacyTorchSaveFile) {
  // Protocol 2: PROTO 2, LONG1 of 10 bytes, torch.save's magic number.
  auto file = bytes(std::string_view("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15));
  EXPECT_EQ(kind_of(file), "pytorch-legacy");
  // Protocol 0: the number in decimal.
  EXPECT_EQ(kind_of(bytes("L119547037146038801333356L\n.")), "pytorch-legacy");
  // Another pickle is not one.
  file[4] = std::byte{0x6d};
  EXPECT_EQ(kind_of(file), "unknown");
}

TEST(DetectFormat, ASafetensorsFile) {
  EXPECT_EQ(kind_of(safetensors_file("{}")), "safetensors");
  EXPECT_EQ(kind_of(safetensors_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})")),
            "safetensors");
  // A header length past the end is still safetensors (its decoder says
  // truncated) unless byte 0 is '{' too.
  auto file = safetensors_file("{}");
  file[1] = std::byte{0x10};
  EXPECT_EQ(kind_of(file), "safetensors");
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
  EXPECT_EQ(kind_of(file), "safetensors");
  // The same first bytes, the file too short for that length: JSON.
  EXPECT_EQ(kind_of(std::vector<std::byte>(file.begin(), file.begin() + 100)), "safetensors-sharded");
  // JSON whose byte 8 is '{'.
  EXPECT_EQ(kind_of(bytes(R"({"a":   {"b": 1}})")), "safetensors-sharded");
}

TEST(DetectFormat, AHuggingFaceIndex) {
  EXPECT_EQ(kind_of(bytes(R"({"metadata": {}, "weight_map": {"w": "model-00001-of-00002.safetensors"}})")),
            "safetensors-sharded");
  EXPECT_EQ(kind_of(bytes(" \t\r\n{\"weight_map\": {}}")), "safetensors-sharded");
  EXPECT_EQ(kind_of(bytes("{}")), "safetensors-sharded");
  EXPECT_EQ(kind_of(bytes("  {")), "safetensors-sharded");
  // Whitespace beyond the head: not told.
  EXPECT_EQ(kind_of(bytes(std::string(header_size, ' ') + "{}")), "unknown");
}

TEST(DetectFormat, ShortFilesAreTruncatedAndOthersUnknown) {
  EXPECT_EQ(kind_of({}), "truncated");
  EXPECT_EQ(kind_of(bytes("12345678")), "truncated");
  EXPECT_EQ(kind_of(bytes("[1, 2, 3]")), "unknown");  // 9 bytes
  EXPECT_EQ(kind_of(bytes("<!DOCTYPE html><html><body>Not Found</body></html>")), "unknown");
  EXPECT_EQ(kind_of(bytes("version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 12\n")), "unknown");
}

TEST(DetectFormat, Gguf) {
  EXPECT_EQ(kind_of(bytes(std::string_view("GGUF\x03\0\0\0", 8))), "gguf");
  EXPECT_EQ(kind_of(bytes(std::string_view("GGUF\0\0\0\x03", 8))), "gguf");  // big-endian
  EXPECT_EQ(kind_of(bytes(std::string_view("FUGG\0\0\0\x03", 8))), "gguf");  // gguf-py's old big-endian magic
  EXPECT_EQ(kind_of(bytes("GGUF")), "gguf");                                  // the parser says truncated
  EXPECT_EQ(kind_of(bytes("GGU")), "truncated");
}

TEST(DetectFormat, SetIndexesAreTheKindsThatNameOtherFiles) {
  for (const detail::format_ops* f : detail::formats()) {
    EXPECT_EQ(f->names_other_files, f->name == "ferry-set" || f->name == "safetensors-sharded") << f->name;
    if (f->name != "pytorch-legacy") {
      EXPECT_EQ(format_name(f->id), f->name);
    }
  }
}

TEST_F(DetectFormatDirectory, ANoFormatClaimsIsNotAFile) {
  auto s = detail::source::open(dir_);
  ASSERT_TRUE(s);
  EXPECT_EQ(detail::probe(*s, {}), nullptr);
  EXPECT_EQ(detail::parse(*s, {}).error().sys_errno(), EISDIR);
}

}  // namespace
}  // namespace ferry::checkpoint::testing
