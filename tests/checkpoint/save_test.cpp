// checkpoint::save_as() and format_to_write() (formats.h): the format table's
// writers, chosen by name or suffix, each read back by the reader.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ferry/checkpoint/error.h"
#include "ferry/checkpoint/formats.h"
#include "ferry/checkpoint/reader.h"
#include "helpers.h"

namespace ferry::checkpoint::testing {
namespace {

using Save = scratch_dir;

TEST(FormatToWrite, ByNameThenSuffixThenFerry) {
  EXPECT_EQ(*format_to_write("pt", "x.ferry"), file_format::pytorch);
  EXPECT_EQ(*format_to_write("pytorch", ""), file_format::pytorch);
  EXPECT_EQ(*format_to_write("", "model.pth"), file_format::pytorch);
  EXPECT_EQ(*format_to_write("", "model.safetensors"), file_format::safetensors);
  EXPECT_EQ(*format_to_write("", "a.npy"), file_format::npy);
  EXPECT_EQ(*format_to_write("npz", "a.npy"), file_format::npz);
  EXPECT_EQ(*format_to_write("", "a.gguf"), file_format::gguf);
  EXPECT_EQ(*format_to_write("", "a.bin"), file_format::ferry);
  EXPECT_EQ(format_to_write("zip", "a.bin").error().code(), errc::bad_value);
  EXPECT_EQ(format_to_write("pytorch-legacy", "a.bin").error().code(), errc::bad_value);  // read, never written
}

TEST_F(Save, EveryWriterOfTheTableWritesWhatTheReaderReads) {
  const std::vector<float> a{1.5f, -0.0f, 3.0f, 4.0f};
  const std::vector<std::uint64_t> shape{2, 2}, half{2};
  const auto bytes = std::as_bytes(std::span(a));
  // Two tensors over one storage: the second is the first's second row.
  const std::vector<tensor_ref> refs{{"w", codec::dtype::f32, shape, {}, 0, bytes},
                                     {"row", codec::dtype::f32, half, {}, 2, bytes}};
  const std::map<std::string, std::string> meta{{"k", "v"}};
  for (const file_format f : {file_format::ferry, file_format::safetensors, file_format::pytorch, file_format::npz}) {
    SCOPED_TRACE(std::string(format_name(f)));
    const auto path = dir_ / ("m." + std::string(format_name(f)));
    save_options opt;
    opt.shared = "copy";  // safetensors cannot share
    ASSERT_TRUE(save_as(f, path, refs, meta, opt));
    auto r = open(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->format(), f);
    ASSERT_EQ(r->tensors().size(), 2u);
    auto row = r->get("row");
    ASSERT_TRUE(row);
    EXPECT_EQ(std::vector<std::byte>(row->bytes().begin(), row->bytes().end()),
              std::vector<std::byte>(bytes.begin() + 8, bytes.end()));
    if (f == file_format::ferry || f == file_format::pytorch) {
      EXPECT_EQ(r->storages().size(), 1u);  // shared where the format can share
    }
    if (f == file_format::ferry || f == file_format::safetensors) {
      EXPECT_EQ(r->metadata().at("k"), "v");
    }
  }
}

TEST_F(Save, WritersRefuseWhatTheirFormatCannotHold) {
  const std::vector<float> a{1.0f, 2.0f};
  const std::vector<std::uint64_t> shape{2};
  const auto bytes = std::as_bytes(std::span(a));
  const std::vector<tensor_ref> two{{"a", codec::dtype::f32, shape, {}, 0, bytes},
                                    {"b", codec::dtype::f32, shape, {}, 0, bytes}};
  save_options big;
  big.order = wire::byte_order::big;
  for (const file_format f : {file_format::safetensors, file_format::pytorch}) {
    const auto path = dir_ / "big";
    const auto r = save_as(f, path, std::span(two).first(1), {}, big);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), errc::bad_value);
    EXPECT_NE(r.error().what().find("little-endian only"), std::string::npos) << r.error().what();
    EXPECT_FALSE(fs::exists(path));
  }
  EXPECT_EQ(save_as(file_format::npy, dir_ / "two.npy", two, {}).error().code(), errc::bad_value);
  EXPECT_EQ(save_as(file_format::gguf, dir_ / "x.gguf", two, {}).error().code(), errc::bad_value);  // save_gguf()
  save_options odd;
  odd.shared = "sometimes";
  EXPECT_EQ(save_as(file_format::safetensors, dir_ / "x.safetensors", two, {}, odd).error().code(), errc::bad_value);
  // An empty tensor of each of two dtypes: never one storage.
  const std::vector<std::uint64_t> none{0};
  const std::vector<tensor_ref> empties{{"e8", codec::dtype::f64, none, {}, 0, {}},
                                        {"e2", codec::dtype::f16, none, {}, 0, {}}};
  EXPECT_TRUE(save_as(file_format::ferry, dir_ / "empty.ferry", empties, {}));
}

}  // namespace
}  // namespace ferry::checkpoint::testing
