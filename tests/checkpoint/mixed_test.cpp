// Checkpoints across architectures, by the programs themselves: the x86-64,
// armhf and s390x builds of checkpoint_node (the last two under qemu-user)
// each write the sample in both byte orders, and each reads every file the
// others wrote. Every file of one order is byte-identical, and every reader
// prints the same tensors, values and metadata.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../mixed_nodes.h"

namespace {

using ferry::testing::armhf_node;
using ferry::testing::native_node;
using ferry::testing::node;
using ferry::testing::run;
using ferry::testing::s390x_node;
using ferry::testing::slurp;

namespace fs = std::filesystem;

const std::vector<node> nodes = {native_node(), armhf_node(), s390x_node()};

TEST(CheckpointAcrossArchitectures, WrittenAnywhereReadsIdenticallyEverywhere) {
  std::string templ = (fs::temp_directory_path() / "ferry-ckpt-mixed.XXXXXX").string();
  ASSERT_NE(::mkdtemp(templ.data()), nullptr);
  const fs::path dir = templ;
  std::string expected;  // what the x86-64 reader prints for the x86-64 file
  for (const char* order : {"little", "big"}) {
    std::string first_file;
    for (const auto& writer : nodes) {
      const auto file = dir / (std::string(writer.arch) + "-" + order + ".ferry");
      ASSERT_EQ(run(writer.prefix + " write '" + file.string() + "' " + order).first, 0) << writer.arch;
      const std::string bytes = slurp(file);
      if (first_file.empty()) first_file = bytes;
      EXPECT_TRUE(bytes == first_file) << writer.arch << " wrote other bytes (" << order << ")";
      for (const auto& reader : nodes) {
        const auto [rc, out] = run(reader.prefix + " read '" + file.string() + "'");
        ASSERT_EQ(rc, 0) << reader.arch << " reading " << file;
        if (expected.empty()) expected = out;
        EXPECT_EQ(out, expected) << reader.arch << " reading the " << order << "-endian file of " << writer.arch;
      }
    }
  }
  EXPECT_NE(expected.find("encoder.embed.weight F32 [ 2 3 ]"), std::string::npos) << expected;
  fs::remove_all(dir);
}

}  // namespace
