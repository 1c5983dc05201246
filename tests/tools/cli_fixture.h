// tests/tools/cli_fixture.h: running the built `ferry` binary (FERRY_CLI)
// from a test, capturing its status, stdout and stderr, in a scratch folder.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "../checkpoint/helpers.h"

namespace ferry::checkpoint::testing {

struct run_result {
  int status = -1;
  std::string out, err;
};

class Cli : public scratch_dir {
 protected:
  run_result run(const std::string& args) { return shell("'" + std::string(FERRY_CLI) + "' " + args); }
  // Runs a shell command line, capturing its output.
  run_result shell(const std::string& line) {
    const auto out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string cmd = "{ " + line + "; } >'" + out.string() + "' 2>'" + err.string() + "'";
    const int rc = std::system(cmd.c_str());
    return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, read_text(out), read_text(err)};
  }
  static std::string golden(const char* name) { return (fs::path(FERRY_TEST_DATA_DIR) / "checkpoint" / name).string(); }
  std::string path(const char* name) { return (dir_ / name).string(); }
  // The offset of the first storage of .pt `bytes` (written to `file`).
  static std::size_t ckpt_open(const std::vector<std::byte>& bytes, const std::string& file) {
    spit(file, bytes);
    return static_cast<std::size_t>(checkpoint::open(file).value().storages()[0].offset);
  }
};

// One line, starting "ferry: ".
inline void expect_one_error_line(const run_result& r, const std::string& text) {
  EXPECT_EQ(r.err, "ferry: " + text + "\n");
}

}  // namespace ferry::checkpoint::testing
