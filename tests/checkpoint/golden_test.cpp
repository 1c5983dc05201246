// Cross-architecture: the sample checkpoint written in a fixed byte order is
// byte-identical on every architecture, equal to the golden files in
// tests/data/checkpoint, and those files read back identically everywhere
// (a file written on s390x or armhf reads on x86-64 and the reverse). Also:
// a file larger than 4 GiB opens on 32-bit armhf.
//
// To regenerate the golden files after a deliberate format change:
//   FERRY_WRITE_GOLDEN=1 build/native/tests/checkpoint_test --gtest_filter='Golden*'
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "ferry/checkpoint/ferry/layout.h"
#include "ferry/codec/crc32c.h"
#include "helpers.h"

namespace ferry::checkpoint::testing {
namespace {

const fs::path golden_dir = fs::path(FERRY_TEST_DATA_DIR) / "checkpoint";

class Golden : public scratch_dir {};

TEST_F(Golden, WritingIsByteIdenticalToTheGoldenFiles) {
  for (const auto order : {wire::byte_order::little, wire::byte_order::big}) {
    const std::string name = order == wire::byte_order::little ? "golden-little.ferry" : "golden-big.ferry";
    const auto p = dir_ / name;
    write_sample(p, order);
    if (std::getenv("FERRY_WRITE_GOLDEN") != nullptr) fs::copy_file(p, golden_dir / name, fs::copy_options::overwrite_existing);
    const auto golden = slurp(golden_dir / name);
    ASSERT_FALSE(golden.empty()) << name;
    EXPECT_TRUE(slurp(p) == golden) << name << " differs on " << FERRY_TEST_PROCESSOR;
  }
}

TEST_F(Golden, GoldenFilesReadIdentically) {
  for (const char* name : {"golden-little.ferry", "golden-big.ferry"}) {
    auto r = open(golden_dir / name);
    ASSERT_TRUE(r) << r.error();
    expect_sample(*r);
    EXPECT_TRUE(r->verify());
  }
}

// CRC32C of n zero bytes, by doubling (n may be far larger than memory).
std::uint32_t crc_of_zeros(std::uint64_t n) {
  std::uint32_t result = 0;
  bool have = false;
  std::uint32_t block = codec::crc32c(std::vector<std::byte>(1));  // of 2^k zeros
  std::uint64_t block_len = 1;
  for (; n != 0; n >>= 1) {
    if (n & 1) {
      result = have ? codec::crc32c_combine(result, block, block_len) : block;
      have = true;
    }
    block = codec::crc32c_combine(block, block, block_len);
    block_len *= 2;
  }
  return result;
}

// A sparse file: a small tensor, a 4.5 GiB hole of zeros, and a small tensor
// beyond 4 GiB. Built by hand (pwrite at offsets), so it costs no disk.
TEST_F(Golden, FileLargerThanFourGiBOpens) {
  const std::uint64_t big = (std::uint64_t{9} << 29);  // 4.5 GiB
  const std::vector<std::byte> head = bytes_of(std::vector<std::uint32_t>{1, 2, 3, 4});
  const std::vector<std::byte> tail = bytes_of(std::vector<std::uint32_t>{5, 6, 7, 8});
  manifest m;
  const auto add = [&](std::uint64_t offset, std::uint64_t nbytes, std::uint32_t crc) {
    auto s = std::make_shared<storage_record>();
    *s = {offset, nbytes, crc, codec::code(codec::dtype::u32)};
    m.storages.push_back(s);
    return s;
  };
  const auto s0 = add(64, 16, codec::crc32c(head));
  const auto s1 = add(128, big, crc_of_zeros(big));
  const std::uint64_t tail_at = 128 + big;
  const auto s2 = add(tail_at, 16, codec::crc32c(tail));
  m.tensors.push_back({"head", codec::code(codec::dtype::u32), {4}, {1}, 0, s0});
  m.tensors.push_back({"zeros", codec::code(codec::dtype::u32), {big / 4}, {1}, 0, s1});
  m.tensors.push_back({"tail", codec::code(codec::dtype::u32), {4}, {1}, 0, s2});
  const auto order = wire::host_order;
  const auto manifest_bytes = graph::write(m, detail::manifest_options({}, order)).value();
  const std::uint64_t manifest_at = tail_at + 64;
  detail::trailer_fields t;
  t.manifest_offset = manifest_at;
  t.manifest_size = manifest_bytes.size();
  t.file_size = manifest_at + manifest_bytes.size() + trailer_size;
  t.manifest_crc = codec::crc32c(manifest_bytes);
  t.header = {order, 64};

  const auto p = dir_ / "huge.ferry";
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const auto put = [&](std::uint64_t at, std::span<const std::byte> b) {
    ASSERT_EQ(::pwrite(fd, b.data(), b.size(), static_cast<off_t>(at)), static_cast<ssize_t>(b.size()));
  };
  put(0, detail::encode_header(t.header));
  put(64, head);
  put(tail_at, tail);
  put(manifest_at, manifest_bytes);
  put(manifest_at + manifest_bytes.size(), detail::encode_trailer(t));
  ::close(fd);
  ASSERT_GT(fs::file_size(p), std::uint64_t{1} << 32);

  auto r = open(p);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->file_size(), t.file_size);
  for (const auto& [name, want] : {std::pair{"head", &head}, std::pair{"tail", &tail}}) {
    auto got = r->get(name);
    ASSERT_TRUE(got) << got.error();
    EXPECT_TRUE(std::ranges::equal(got->bytes(), *want)) << name;
  }
  if constexpr (sizeof(void*) == 4) {
    // 4.5 GiB cannot be mapped in a 32-bit address space: a clear error.
    const auto z = r->get("zeros");
    ASSERT_FALSE(z);
    EXPECT_EQ(z.error().code(), checkpoint_errc::storage_too_large);
  }
}

}  // namespace
}  // namespace ferry::checkpoint::testing
