// The test vectors of docs/comm-protocol.md section 7, checked by a second
// implementation: Python's `cryptography` package (tests/comm/auth_vectors.py),
// so a peer written in another language provably derives the same keys and
// tags. Skipped, saying why, only when that package is missing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace {

TEST(FrameAuthVectors, PythonCryptographyAgrees) {
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "/usr/bin/python3 is not installed";
  const std::string command =
      std::string("/usr/bin/python3 ") + FERRY_AUTH_VECTORS_PY + " " + FERRY_PROTOCOL_DOC + " 2>&1";
  std::FILE* p = ::popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  const int status = ::pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_NE(out.find("12 vectors agree"), std::string::npos) << out;
}

}  // namespace
