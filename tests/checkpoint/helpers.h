// Helpers of the checkpoint tests: a scratch folder per test, and a small
// deterministic checkpoint (the same on every architecture) that the golden,
// bit-flip and cross-architecture tests share.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ferry/checkpoint/reader.h"
#include "ferry/checkpoint/writer.h"

namespace ferry::checkpoint::testing {

namespace fs = std::filesystem;

class scratch_dir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "ferry-ckpt-test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

inline std::vector<std::byte> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

inline void spit(const fs::path& p, std::span<const std::byte> bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

/// Host-order bytes of `values`.
template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& values) {
  std::vector<std::byte> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

/// The sample checkpoint's tensors: a 2x3 f32 weight with a NaN payload, a
/// -0 and a subnormal; its tied twin; a strided view (the weight's first
/// column) over the same storage; a 0-d i64; an empty f16; bf16 and u8
/// tensors. Storages live as long as the object.
struct sample {
  std::vector<std::byte> weight = bytes_of(std::vector<std::uint32_t>{
      0x3885005Au, 0x80000000u, 0x00000001u, 0x7FC01234u, 0xFF800000u, 0x3F800000u});
  std::vector<std::byte> step = bytes_of(std::vector<std::int64_t>{-42});
  std::vector<std::byte> none;
  std::vector<std::byte> half = bytes_of(std::vector<std::uint16_t>{0x3C00, 0x8001, 0x7E01, 0xFC00});
  std::vector<std::byte> small = bytes_of(std::vector<std::uint8_t>{1, 2, 3, 250, 255});
  std::uint64_t shape_2x3[2] = {2, 3};
  std::uint64_t shape_col[1] = {2};
  std::uint64_t stride_col[1] = {3};
  std::uint64_t shape_empty[2] = {0, 4};
  std::uint64_t shape_4[1] = {4};
  std::uint64_t shape_5[1] = {5};

  [[nodiscard]] std::vector<tensor_ref> refs() const {
    return {
        {"encoder.embed.weight", codec::dtype::f32, shape_2x3, {}, 0, weight},
        {"decoder.out.weight", codec::dtype::f32, shape_2x3, {}, 0, weight},
        {"encoder.embed.column1", codec::dtype::f32, shape_col, stride_col, 1, weight},
        {"step", codec::dtype::i64, {}, {}, 0, step},
        {"empty", codec::dtype::f16, shape_empty, {}, 0, none},
        {"half", codec::dtype::bf16, shape_4, {}, 0, half},
        {"bytes", codec::dtype::u8, shape_5, {}, 0, small},
    };
  }
  [[nodiscard]] static std::map<std::string, std::string> metadata() {
    return {{"format", "pt"}, {"epoch", "3"}, {"note", "caf\xC3\xA9"}};
  }
};

inline void write_sample(const fs::path& p, wire::byte_order order, std::uint32_t alignment = 64) {
  sample s;
  write_options opt;
  opt.order = order;
  opt.alignment = alignment;
  opt.sync = false;
  const auto refs = s.refs();
  auto r = save(p, refs, sample::metadata(), opt);
  ASSERT_TRUE(r) << r.error();
}

/// Checks that `r` holds exactly the sample, in host order, sharing kept.
inline void expect_sample(const reader& r) {
  sample s;
  const auto refs = s.refs();
  ASSERT_EQ(r.tensors().size(), refs.size());
  for (const auto& ref : refs) {
    const tensor_info* info = r.find(ref.name);
    ASSERT_NE(info, nullptr) << ref.name;
    auto t = r.get(ref.name);
    ASSERT_TRUE(t) << t.error();
    EXPECT_EQ(t->dtype(), ref.dtype) << ref.name;
    EXPECT_TRUE(std::ranges::equal(t->shape(), ref.shape)) << ref.name;
    EXPECT_EQ(t->info().offset, ref.offset) << ref.name;
    EXPECT_EQ(t->contiguous_copy(), gather(ref)) << ref.name;  // bit for bit
  }
  const auto a = r.get("encoder.embed.weight");
  const auto b = r.get("decoder.out.weight");
  const auto c = r.get("encoder.embed.column1");
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->storage(), b->storage());
  EXPECT_EQ(a->storage(), c->storage());
  EXPECT_EQ(a->storage_bytes().data(), b->storage_bytes().data());
  EXPECT_EQ(r.metadata(), sample::metadata());
}

}  // namespace ferry::checkpoint::testing
