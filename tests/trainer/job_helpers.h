// What the tests that run ferry-run and ferry-train as a user does share:
// a scratch folder to run command lines in, and the metrics file's records.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../checkpoint/helpers.h"

namespace ferry::trainer::testing {

struct run_result {
  int status = -1;
  std::string out, err;
};

/// The records of `kind` in a metrics file (lines that are not JSON
/// objects skipped).
inline std::vector<nlohmann::json> records(const std::filesystem::path& p, const std::string& kind) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j["kind"] == kind) out.push_back(j);
  }
  return out;
}

class job_dir : public checkpoint::testing::scratch_dir {
 protected:
  // Runs a shell command line in the scratch folder, capturing its output.
  run_result shell(const std::string& line) {
    const auto out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string cmd = "cd '" + dir_.string() + "' && { " + line + "; } >'" + out.string() + "' 2>'" +
                            err.string() + "'";
    const int rc = std::system(cmd.c_str());
    return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, checkpoint::testing::read_text(out),
            checkpoint::testing::read_text(err)};
  }
};

}  // namespace ferry::trainer::testing
