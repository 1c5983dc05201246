// What torch.load read from a .pt file, as tests/data/pytorch/make_pt_files.py
// writes it beside the file (X.pt.expected), and the check that ferry's
// reader sees the same: every tensor's dtype, shape, strides, offset and
// sharing, the zlib CRC-32 of its elements in row-major order as
// little-endian bytes, and every non-tensor leaf as JSON text.
//
//   NAME DTYPE [SHAPE] [STRIDES] OFFSET STORAGE_GROUP CRC32
//   META KEY JSON
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/checkpoint/reader.h"
#include "ferry/wire/bulk.h"
#include "pt_builder.h"

namespace ferry::checkpoint::testing {

struct expected_tensor {
  std::string dtype, shape, strides;
  std::uint64_t offset = 0;
  int group = 0;
  std::string crc;
};

struct expected_pt {
  std::map<std::string, expected_tensor> tensors;
  std::map<std::string, std::string> metadata;
};

inline expected_pt read_expected(const std::filesystem::path& p) {
  expected_pt out;
  std::ifstream in(p);
  EXPECT_TRUE(in) << p;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.starts_with("META ")) {
      const std::size_t k = line.find(' ', 5);
      out.metadata[line.substr(5, k - 5)] = line.substr(k + 1);
      continue;
    }
    std::istringstream fields(line);
    std::string name;
    expected_tensor t;
    fields >> name >> t.dtype >> t.shape >> t.strides >> t.offset >> t.group >> t.crc;
    out.tensors[name] = t;
  }
  return out;
}

inline std::string bracket_list(std::span<const std::uint64_t> v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

/// Checks that `r` holds what `expected` says torch.load read.
inline void expect_as_torch_read(const reader& r, const expected_pt& expected) {
  EXPECT_EQ(r.tensors().size(), expected.tensors.size());
  std::map<int, std::uint32_t> storage_of_group;
  for (const auto& [name, want] : expected.tensors) {
    SCOPED_TRACE(name);
    const tensor_info* info = r.find(name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(codec::name(info->dtype), want.dtype);
    EXPECT_EQ(bracket_list(info->shape), want.shape);
    EXPECT_EQ(bracket_list(info->strides), want.strides);
    EXPECT_EQ(info->offset, want.offset);
    // Tensors torch saw over one storage share one here, and only those.
    const auto [it, fresh] = storage_of_group.try_emplace(want.group, info->storage);
    EXPECT_EQ(it->second, info->storage) << "group " << want.group;
    auto t = r.get(*info);
    ASSERT_TRUE(t) << t.error();
    auto bytes = t->contiguous_copy();
    const std::size_t width = codec::order_width(info->dtype);
    if (wire::host_order != wire::byte_order::little && width > 1) {
      wire::convert_in_place(bytes, width, wire::host_order, wire::byte_order::little);
    }
    char crc[9];
    std::snprintf(crc, sizeof crc, "%08x", zip_builder::crc32(bytes));
    EXPECT_EQ(crc, want.crc);
  }
  std::map<int, int> groups;
  for (const auto& [g, s] : storage_of_group) groups[static_cast<int>(s)]++;
  for (const auto& [s, n] : groups) EXPECT_EQ(n, 1) << "storage " << s << " holds two groups";
  auto metadata = r.metadata();
  metadata.erase("pytorch.byteorder");
  metadata.erase("pytorch.raw_dtypes");  // checked by the tests of files with torch.bits*
  EXPECT_EQ(metadata, expected.metadata);
}

}  // namespace ferry::checkpoint::testing
