// fuzz_replay: the fuzz harnesses in ordinary builds (no libFuzzer), all in
// one program. `fuzz_replay NAME PATH...` runs harness NAME's
// LLVMFuzzerTestOneInput over every file named, or every file in a named
// folder. `make test` replays the checked-in corpora this way in every
// tree but tsan, so the harnesses always compile and the corpora always
// pass.
//
// The harnesses are compiled as one translation unit that CMake generates
// (replay_all.cpp, see fuzz/CMakeLists.txt), each entry point renamed
// ferry_replay_NAME; replay_harnesses.h, generated too, lists the names.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>
#include <vector>

#define FERRY_HARNESS(name) extern "C" int ferry_replay_##name(const std::uint8_t* data, std::size_t size);
#include "replay_harnesses.h"
#undef FERRY_HARNESS

namespace replay_main {

using entry_point = int (*)(const std::uint8_t*, std::size_t);

struct harness {
  std::string_view name;
  entry_point run;
};

constexpr harness harnesses[] = {
#define FERRY_HARNESS(name) {#name, ferry_replay_##name},
#include "replay_harnesses.h"
#undef FERRY_HARNESS
};

int replay(entry_point run, const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz_replay: cannot read %s\n", file.c_str());
    return 1;
  }
  const std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::uint8_t> bytes(chars.begin(), chars.end());
  run(bytes.data(), bytes.size());
  return 0;
}

}  // namespace replay_main

int main(int argc, char** argv) {
  using namespace replay_main;
  entry_point run = nullptr;
  for (const auto& h : harnesses) {
    if (argc > 1 && h.name == argv[1]) run = h.run;
  }
  if (run == nullptr || argc < 3) {
    if (argc > 1 && run == nullptr) std::fprintf(stderr, "fuzz_replay: no harness '%s'\n", argv[1]);
    std::fputs("usage: fuzz_replay HARNESS FILE_OR_FOLDER...; HARNESS is one of:", stderr);
    for (const auto& h : harnesses) std::fprintf(stderr, " %.*s", static_cast<int>(h.name.size()), h.name.data());
    std::fputc('\n', stderr);
    return 2;
  }
  std::size_t count = 0;
  int failures = 0;
  for (int i = 2; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(arg)) {
        if (!entry.is_regular_file()) continue;
        failures += replay(run, entry.path());
        ++count;
      }
    } else {
      failures += replay(run, arg);
      ++count;
    }
  }
  std::printf("replayed %zu inputs\n", count);
  return failures == 0 && count > 0 ? 0 : 1;
}
