#include "ferry/base/file.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ferry::base {
namespace {

namespace fs = std::filesystem;

std::vector<std::byte> bytes_of(std::string_view s) {
  const auto b = std::as_bytes(std::span(s.data(), s.size()));
  return {b.begin(), b.end()};
}

// A fresh folder per test, removed afterwards.
class File : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "ferry-file-test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  // Names in the folder other than `keep`: leftovers such as temporaries.
  std::vector<std::string> others(const std::string& keep) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename() != keep) names.push_back(e.path().filename().string());
    }
    return names;
  }
  static mode_t mode_of(const fs::path& p) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0);
    return st.st_mode & 07777;
  }

  fs::path dir_;
};

TEST_F(File, MissingFileSaysWhatTheOsSaid) {
  const auto path = dir_ / "model.ferry";
  const auto r = read_file(path);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::io_error);
  EXPECT_EQ(r.error().sys_errno(), ENOENT);
  EXPECT_EQ(r.error().context(), path.string());
  EXPECT_EQ(r.error().what(), path.string() + ": No such file or directory");
}

TEST_F(File, ReadingAFolderIsEISDIR) {
  const auto r = read_file(dir_);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::io_error);
  EXPECT_EQ(r.error().sys_errno(), EISDIR);
}

TEST_F(File, WriteThenReadRoundTrips) {
  const auto path = dir_ / "a.bin";
  std::vector<std::byte> big(300000);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>(i * 7);
  ASSERT_TRUE(write_file_atomic(path, big));
  auto back = read_file(path);
  ASSERT_TRUE(back) << back.error();
  EXPECT_EQ(*back, big);

  ASSERT_TRUE(write_file_atomic(path, {}));  // replaces, and may be empty
  back = read_file(path);
  ASSERT_TRUE(back);
  EXPECT_TRUE(back->empty());
  EXPECT_TRUE(others("a.bin").empty());
}

TEST_F(File, ReadsFilesWithoutASize) {
  auto r = read_file("/dev/null");
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(r->empty());
}

TEST_F(File, ReplacingKeepsThePermissions) {
  const auto path = dir_ / "kept.ferry";
  ASSERT_TRUE(write_file_atomic(path, bytes_of("old")));
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  ASSERT_TRUE(write_file_atomic(path, bytes_of("new")));
  EXPECT_EQ(mode_of(path), 0640u);
  EXPECT_EQ(*read_file(path), bytes_of("new"));
}

TEST_F(File, NewFilesFollowTheUmask) {
  const mode_t mask = ::umask(022);
  const auto path = dir_ / "new.ferry";
  const auto r = write_file_atomic(path, bytes_of("x"));
  ::umask(mask);
  ASSERT_TRUE(r);
  EXPECT_EQ(mode_of(path), 0644u);
}

TEST_F(File, MissingFolderIsENOENT) {
  const auto path = dir_ / "no" / "such" / "x.ferry";
  const auto r = write_file_atomic(path, bytes_of("x"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().sys_errno(), ENOENT);
  EXPECT_EQ(r.error().what(), path.string() + ": No such file or directory");
}

TEST_F(File, UnwritableFolderIsEACCES) {
  fs::path folder = dir_ / "locked";
  fs::create_directory(folder);
  ASSERT_EQ(::chmod(folder.c_str(), 0555), 0);
  const bool privileged = ::access(folder.c_str(), W_OK) == 0;
  if (privileged) folder = "/sys";  // permissions do not stop root; sysfs refuses new files to everyone
  const auto path = folder / "x.ferry";
  const auto r = write_file_atomic(path, bytes_of("x"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::io_error);
  EXPECT_TRUE(r.error().sys_errno() == EACCES || (privileged && r.error().sys_errno() == EROFS)) << r.error();
  EXPECT_EQ(r.error().context(), path.string());
  if (!privileged) {
    EXPECT_TRUE(fs::is_empty(folder));
  }
}

TEST_F(File, AFailedWriteLeavesNoTemporaryAndTheTargetUntouched) {
  // Renaming a file over a folder fails (EISDIR) after the temporary was
  // written and synced: the last step that can fail.
  const auto target = dir_ / "folder";
  fs::create_directory(target);
  fs::create_directory(target / "inside");
  const auto r = write_file_atomic(target, bytes_of("x"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::io_error);
  EXPECT_NE(r.error().sys_errno(), 0);
  EXPECT_EQ(r.error().context(), target.string());
  EXPECT_TRUE(others("folder").empty());
  EXPECT_TRUE(fs::is_directory(target / "inside"));
}

// Writes `pieces` (sizes) of a pattern through atomic_file, direct or not,
// into `folder` and returns what reads back.
std::vector<std::byte> write_pieces(const fs::path& target, const std::vector<std::size_t>& pieces, bool direct,
                                    std::vector<std::byte>& want, bool& granted) {
  want.clear();
  auto f = atomic_file::create(target, true, direct);
  EXPECT_TRUE(f) << f.error();
  if (!f) return {};
  granted = f->direct();
  for (const std::size_t n : pieces) {
    std::vector<std::byte> piece(n);
    for (std::size_t i = 0; i < n; ++i) piece[i] = static_cast<std::byte>((want.size() + i) * 131 >> 3);
    want.insert(want.end(), piece.begin(), piece.end());
    EXPECT_TRUE(f->write(piece));
    EXPECT_EQ(f->size(), want.size());
  }
  auto moved = std::move(*f);  // the write-behind state moves with the file
  EXPECT_TRUE(moved.commit());
  auto back = read_file(target);
  EXPECT_TRUE(back) << back.error();
  return back ? *back : std::vector<std::byte>{};
}

TEST_F(File, DirectWritesAroundTheCacheReadBackTheSame) {
  // Pieces straddling 4 KiB pages, write-behind's 8 MiB pieces and its
  // 32 MiB window; on tmpfs too (which has no writeback).
  const std::size_t mib = std::size_t{1} << 20;
  const std::vector<std::vector<std::size_t>> cases = {
      {}, {1}, {4095}, {4096}, {4097}, {8 * mib}, {8 * mib - 1, 1, 1}, {3, 8 * mib + 5, 4096, 17}, {3 * mib, 3 * mib, 3 * mib, 100},
      {5 * mib, 7 * mib, 9 * mib, 11 * mib, 13 * mib, 3}};
  std::vector<fs::path> folders = {dir_};
  if (fs::is_directory("/dev/shm") && ::access("/dev/shm", W_OK) == 0) folders.push_back("/dev/shm");
  for (const auto& folder : folders) {
    for (const auto& pieces : cases) {
      for (const bool direct : {true, false}) {
        std::vector<std::byte> want;
        bool granted = false;
        const auto target = folder / ("ferry-direct-test-" + std::to_string(::getpid()));
        const auto got = write_pieces(target, pieces, direct, want, granted);
        EXPECT_EQ(got, want) << folder << " direct " << direct << " granted " << granted << " pieces " << pieces.size();
        if (!direct) {
          EXPECT_FALSE(granted);
        }
        fs::remove(target);
      }
    }
  }
  EXPECT_TRUE(others("").empty());
}

// After one 96 MiB write() with write-behind, at most its window (32 MiB)
// and a piece or two (8 MiB each) are in the page cache before the commit.
// (write() also takes such a span 8 MiB at a time, so that no more than
// that is in the cache while it runs: not observable from here.) In the
// working folder (a disk under ctest); on tmpfs or ramfs, whose pages
// cannot be dropped, only the bytes are checked.
TEST_F(File, DirectWriteOfOneLongSpanKeepsOnlyAWindowCached) {
  const std::size_t mib = std::size_t{1} << 20, n = 96 * mib;
  const auto target = fs::current_path() / ("ferry-window-test-" + std::to_string(::getpid()));
  std::vector<std::byte> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = static_cast<std::byte>(i * 131 >> 3);
  auto f = atomic_file::create(target, true, true);
  ASSERT_TRUE(f) << f.error();
  ASSERT_TRUE(f->write(want));
  struct statfs sf {};
  ASSERT_EQ(::statfs(f->temporary().c_str(), &sf), 0);
  // f_type is int on 32-bit ARM and long elsewhere; the magic numbers are 32-bit.
  const auto type = static_cast<std::uint32_t>(sf.f_type);
  const bool droppable = type != 0x01021994u /* TMPFS_MAGIC */ && type != 0x858458f6u /* RAMFS_MAGIC */;
  if (droppable && f->direct()) {
    const int fd = ::open(f->temporary().c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    void* map = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    ASSERT_NE(map, MAP_FAILED);
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> in_core((n + page - 1) / page);
    ASSERT_EQ(::mincore(map, n, in_core.data()), 0);
    ::munmap(map, n);
    std::size_t cached = 0;
    for (const unsigned char c : in_core) cached += (c & 1) * page;
    EXPECT_LE(cached, 48 * mib) << "of " << n << " bytes written in one call";
  }
  ASSERT_TRUE(f->commit());
  const auto back = read_file(target);
  ASSERT_TRUE(back) << back.error();
  EXPECT_TRUE(*back == want);
  fs::remove(target);
}

TEST_F(File, RelativePathsUseTheCurrentFolder) {
  const auto cwd = fs::current_path();
  fs::current_path(dir_);
  const auto w = write_file_atomic("plain.ferry", bytes_of("here"));
  const auto r = read_file("plain.ferry");
  fs::current_path(cwd);
  ASSERT_TRUE(w) << w.error();
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(*r, bytes_of("here"));
  EXPECT_TRUE(others("plain.ferry").empty());
}

}  // namespace
}  // namespace ferry::base
