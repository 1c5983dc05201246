// The file forms of graph/archive.h: errors say which file and why.
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <string>

#include "ferry/base/file.h"
#include "types.h"

namespace ferry::testing {
namespace {

namespace fs = std::filesystem;

TEST(GraphFile, AMissingFileNamesThePathAndTheOsReason) {
  const fs::path path = fs::temp_directory_path() / "ferry-graph-file-test-missing.fga";
  fs::remove(path);
  const auto r = graph::read_file<everything>(path);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::io_error);
  EXPECT_EQ(r.error().sys_errno(), ENOENT);
  EXPECT_EQ(r.error().what(), path.string() + ": No such file or directory");
  everything e;
  EXPECT_EQ(graph::read_file_into(path, e).error().sys_errno(), ENOENT);
}

TEST(GraphFile, ABadArchiveKeepsItsDecodeCodeWithThePath) {
  const fs::path path = fs::temp_directory_path() / "ferry-graph-file-test-garbage.fga";
  const std::string text = "not an archive";
  ASSERT_TRUE(base::write_file_atomic(path, std::as_bytes(std::span(text.data(), text.size()))));
  const auto r = graph::read_file<everything>(path);
  fs::remove(path);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::bad_magic);
  EXPECT_EQ(r.error().sys_errno(), 0);
  EXPECT_EQ(r.error().context(), path.string());
}

TEST(GraphFile, WritingIntoAMissingFolderFailsWithThePath) {
  const fs::path path = fs::temp_directory_path() / "ferry-no-such-folder" / "x.fga";
  const auto r = graph::write_file(path, make_everything());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::io_error);
  EXPECT_EQ(r.error().sys_errno(), ENOENT);
  EXPECT_EQ(r.error().context(), path.string());
}

}  // namespace
}  // namespace ferry::testing
