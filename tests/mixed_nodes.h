// What the cross-architecture tests share (ferry_mixed_test in
// tests/CMakeLists.txt): each architecture's node program, the foreign ones
// run under qemu-user, and the command that runs one.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

namespace ferry::testing {

struct node {
  const char* arch;
  std::string prefix;  // emulator and binary
};

inline node native_node() { return {"x86-64", FERRY_NATIVE_NODE}; }
#ifdef FERRY_AARCH64_NODE
inline node aarch64_node() { return {"aarch64", std::string("qemu-aarch64 -L /usr/aarch64-linux-gnu ") + FERRY_AARCH64_NODE}; }
#endif
inline node armhf_node() { return {"armhf", std::string("qemu-arm -L /usr/arm-linux-gnueabihf ") + FERRY_ARMHF_NODE}; }
inline node s390x_node() { return {"s390x", std::string("qemu-s390x -L /usr/s390x-linux-gnu ") + FERRY_S390X_NODE}; }

/// Runs a command; returns its exit status and standard output.
inline std::pair<int, std::string> run(const std::string& cmd) {
  std::FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int rc = ::pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

/// A file's bytes as a string.
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace ferry::testing
