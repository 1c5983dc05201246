// Memory as a multiple of the input, for the ferry tool's commands (GGUF
// headers that padding, nested arrays and escaping inflated), each
// command's peak in a child process. A program of its own: a process
// that has grown (ferry_scale_test's files) would lend its children its
// peak (ru_maxrss counts what a forked child inherits).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_fixture.h"

namespace ferry::checkpoint::testing {
namespace {

// The peak resident bytes of a shell command line (its output discarded)
// and its exit status.
std::pair<std::uint64_t, int> peak_of(const std::string& line) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", (line + " >/dev/null 2>&1").c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  rusage ru{};
  ::wait4(pid, &status, 0, &ru);
  return {static_cast<std::uint64_t>(ru.ru_maxrss) * 1024, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

// A GGUF header, little-endian, built field by field.
struct gguf_builder {
  std::vector<std::byte> out;
  template <class T>
  gguf_builder& le(T v) {
    std::byte b[sizeof(T)];
    wire::store<T>(v, b, wire::byte_order::little);
    out.insert(out.end(), b, b + sizeof(T));
    return *this;
  }
  gguf_builder& str(std::string_view s) {
    le<std::uint64_t>(s.size());
    for (const char c : s) out.push_back(static_cast<std::byte>(c));
    return *this;
  }
  gguf_builder(std::uint64_t tensors, std::uint64_t keys) {
    str("GGUF");
    out.erase(out.begin(), out.begin() + 8);  // the magic has no length
    le<std::uint32_t>(3).le(tensors).le(keys);
  }
};

class Memory : public Cli {
 protected:
  std::string ferry(const std::string& args) { return "'" + std::string(FERRY_CLI) + "' " + args; }
  // Writes g's bytes to the file `name` and frees them (a child inherits
  // what this process holds); the bytes written.
  std::uint64_t put_and_free(gguf_builder& g, const std::string& name) {
    spit(name, g.out);
    const std::uint64_t n = g.out.size();
    std::vector<std::byte>().swap(g.out);
    return n;
  }
};

// A 57-byte file of general.alignment 2^30 and no tensors: ggml and ferry
// read it (its padding cut short); converting it wrote 1 GiB of padding
// in 2 GB of memory. Now the output is as small as the input.
TEST_F(Memory, AlignmentPaddingCostsNoMoreThanTheInput) {
  gguf_builder g(0, 1);
  g.str("general.alignment").le<std::uint32_t>(4).le<std::uint32_t>(1u << 30);
  ASSERT_EQ(g.out.size(), 57u);
  const auto in = path("aligned.gguf"), out = path("big.gguf");
  spit(in, g.out);
  for (const std::string& args : {"convert " + in + " " + out + " --order big", "inspect " + in, "inspect --json " + in}) {
    const auto [peak, status] = peak_of(ferry(args));
    EXPECT_EQ(status, 0) << args;
    EXPECT_LT(peak, std::uint64_t{64} << 20) << args;
  }
  EXPECT_LE(fs::file_size(out), 57u);
  auto r = open(out);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->alignment(), 1u << 30);
  EXPECT_EQ(r->order(), wire::byte_order::big);
}

// 64 MiB of header holding 5.5M empty arrays (an array of arrays): the
// parsed values cost at most 6 times the header (limits.h); no command
// adds a copy of them (convert read the header twice; --json built a
// document of them: 772 MB), and diff holds its two inputs.
TEST_F(Memory, NestedArraysCostWhatTheirParseCosts) {
  constexpr std::uint64_t count = 5'500'000;
  gguf_builder g(0, 1);
  g.str("a").le<std::uint32_t>(9).le<std::uint32_t>(9).le<std::uint64_t>(count);
  for (std::uint64_t i = 0; i < count; ++i) g.le<std::uint32_t>(0).le<std::uint64_t>(0);
  const auto in = path("nested.gguf");
  const std::uint64_t header = put_and_free(g, in);
  const auto [base, base_status] = peak_of(ferry("inspect " + in));
  EXPECT_EQ(base_status, 0);
  EXPECT_LT(base, 6 * header);
  for (const std::string& args : {"inspect --json " + in, "convert --nested-arrays " + in + " " + path("o.gguf")}) {
    const auto [peak, status] = peak_of(ferry(args));
    EXPECT_EQ(status, 0) << args;
    EXPECT_LT(peak, base + header) << args << ": " << base << " bytes for inspect";
    std::printf("%s: peak %llu bytes (inspect %llu) for a header of %llu\n", args.c_str(),
                static_cast<unsigned long long>(peak), static_cast<unsigned long long>(base),
                static_cast<unsigned long long>(header));
  }
  EXPECT_EQ(fs::file_size(path("o.gguf")), header);
  // Without --nested-arrays the file is refused, with the key named.
  const auto refused = run("convert " + in + " " + path("p.gguf"));
  EXPECT_EQ(refused.status, 1);
  EXPECT_NE(refused.err.find("gguf key 'a': an array of arrays"), std::string::npos) << refused.err;
  const auto [diff_peak, diff_status] = peak_of(ferry("diff " + in + " " + path("o.gguf")));
  EXPECT_EQ(diff_status, 0);
  EXPECT_LT(diff_peak, 2 * base + header);
}

// Strings of control bytes: --json prints each value once (not also as
// text under "metadata"), escaped (6 bytes a byte, \u0001), streamed rather
// than built in memory (1.69 GB for 60 MiB before), and counts the escaped
// bytes against limits.max_metadata_bytes (64 MiB): 10 MiB is printed
// whole, 50 MiB past it is omitted and says so.
TEST_F(Memory, EscapingStreamsEachValueOnceWithinItsLimit) {
  const std::size_t small = std::size_t{10} << 20, large = std::size_t{50} << 20;
  gguf_builder g(0, 2);
  g.str("small").le<std::uint32_t>(8).str(std::string(small, '\x01'));
  g.str("large").le<std::uint32_t>(8).str(std::string(large, '\x01'));
  const auto in = path("control.gguf");
  const std::uint64_t file_bytes = put_and_free(g, in);
  const auto [peak, status] = peak_of(ferry("inspect --json " + in));
  EXPECT_EQ(status, 0);
  EXPECT_LT(peak, 4 * file_bytes);
  const auto r = shell(ferry("inspect --json " + in) + " > " + path("out.json"));
  ASSERT_EQ(r.status, 0) << r.err;
  const auto size = fs::file_size(path("out.json"));
  EXPECT_GT(size, 6 * small);
  EXPECT_LT(size, 6 * small + 4096);
  const auto j = nlohmann::json::parse(read_text(path("out.json")));
  EXPECT_EQ(j["gguf"]["metadata"][0]["value"].get<std::string>(), std::string(small, '\x01'));
  EXPECT_TRUE(j["gguf"]["metadata"][1].contains("value_omitted")) << j["gguf"]["metadata"][1].dump();
  EXPECT_FALSE(j.contains("metadata"));
}

}  // namespace
}  // namespace ferry::checkpoint::testing

