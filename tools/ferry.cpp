// ferry: the command-line tool.
//   ferry dump FILE    print a graph archive as JSON from its embedded schema
#include <cstdio>
#include <iostream>
#include <string_view>

#include "ferry/graph/archive.h"
#include "ferry/graph/dump.h"

namespace {

int usage() {
  std::fputs("usage: ferry dump FILE\n  print a ferry graph archive as JSON, using only its embedded schema\n",
             stderr);
  return 2;
}

int fail(const char* what, ferry::error_code e) {
  std::fprintf(stderr, "ferry: %s: %.*s (%.*s)\n", what, static_cast<int>(ferry::message(e).size()),
               ferry::message(e).data(), static_cast<int>(ferry::name(e).size()), ferry::name(e).data());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::string_view(argv[1]) != "dump") return usage();
  auto bytes = ferry::graph::detail::read_file_bytes(argv[2]);
  if (!bytes) return fail(argv[2], bytes.error());
  if (auto r = ferry::graph::dump_json(*bytes, std::cout); !r) {
    std::cout.flush();
    return fail(argv[2], r.error());
  }
  return 0;
}
