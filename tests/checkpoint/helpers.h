// Helpers of the checkpoint tests (and of the tools' and trainer's): a
// scratch folder per test, files read and written whole, and a small
// deterministic checkpoint (the same on every architecture) that the golden,
// bit-flip and cross-architecture tests share.
#pragma once

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ferry/checkpoint/reader.h"
#include "ferry/checkpoint/writer.h"
#include "sample.h"

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

inline void spit(const fs::path& p, std::span<const std::byte> bytes);

/// A scratch folder for tests of files built in memory: written as
/// `name`, opened, and (refused) expected to fail with one code.
class bytes_files : public scratch_dir {
 protected:
  fs::path put(const std::vector<std::byte>& bytes, const std::string& name = "m.pt") {
    const fs::path p = dir_ / name;
    spit(p, bytes);
    return p;
  }
  result<reader, error> open_bytes(const std::vector<std::byte>& bytes, const read_options& opt = {}) {
    return reader::open(put(bytes), opt);
  }
  // Opens `bytes` and expects error `code`; returns the error.
  error refused(const std::vector<std::byte>& bytes, error_code code, const read_options& opt = {}) {
    auto r = open_bytes(bytes, opt);
    EXPECT_FALSE(r.has_value());
    if (r) return {};
    EXPECT_EQ(r.error().code(), code) << r.error().what();
    return r.error();
  }
};

inline std::vector<std::byte> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

inline std::string read_text(const fs::path& p) {
  const auto b = slurp(p);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

inline void spit(const fs::path& p, std::span<const std::byte> bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

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

// A size-limited tmpfs at `mnt` (created), for disk-full tests; unmounted
// on destruction. why() says why it is not mounted (not root, mount failed):
// the test skips with it.
class small_tmpfs {
 public:
  small_tmpfs(const fs::path& mnt, const std::string& size) : mnt_(mnt) {
    if (::geteuid() != 0) {
      why_ = "mounting a size-limited tmpfs needs root";
      return;
    }
    fs::create_directory(mnt_);
    if (::mount("tmpfs", mnt_.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) {
      why_ = "cannot mount a tmpfs at " + mnt_.string() + ": " + std::strerror(errno);
    }
  }
  ~small_tmpfs() {
    if (why_.empty()) ::umount2(mnt_.c_str(), MNT_DETACH);
  }
  small_tmpfs(const small_tmpfs&) = delete;
  small_tmpfs& operator=(const small_tmpfs&) = delete;
  [[nodiscard]] const std::string& why() const noexcept { return why_; }

 private:
  fs::path mnt_;
  std::string why_;
};

}  // namespace ferry::checkpoint::testing
