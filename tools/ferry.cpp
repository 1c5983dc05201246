// ferry: the command-line tool.
//   ferry dump FILE    print a graph archive as JSON from its embedded schema
//
// Exit status: 0 on success, 1 when the file cannot be read or is not a
// valid archive (one line on stderr: "ferry: FILE: reason"), 2 on a usage
// error (usage on stderr). --help prints usage to stdout.
#include <cstdio>
#include <iostream>
#include <string_view>

#include "ferry/base/error.h"
#include "ferry/base/file.h"
#include "ferry/graph/dump.h"

namespace {

constexpr std::string_view usage_text =
    "usage: ferry dump FILE\n"
    "       ferry --help\n"
    "  dump FILE   print a ferry graph archive as JSON, using only its embedded schema\n";

int usage(std::FILE* to, int status) {
  std::fwrite(usage_text.data(), 1, usage_text.size(), to);
  return status;
}

int fail(const ferry::error& e) {
  std::cout.flush();
  std::fprintf(stderr, "ferry: %s\n", e.what().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h")) {
    return usage(stdout, 0);
  }
  if (argc != 3 || std::string_view(argv[1]) != "dump") return usage(stderr, 2);
  const char* path = argv[2];
  auto bytes = ferry::base::read_file(path);
  if (!bytes) return fail(bytes.error());
  if (auto r = ferry::graph::dump_json(*bytes, std::cout); !r) return fail(ferry::error(r.error(), path));
  std::cout.flush();
  if (!std::cout) return fail(ferry::error(ferry::errc::io_error, "standard output"));
  return 0;
}
