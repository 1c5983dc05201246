// The distributed sampler (trainer/sampler.h) against what PyTorch 1.13
// printed (tests/data/trainer/sampler_reference.txt, from
// sampler_reference.py): on every architecture, the same indices. Natively,
// where python3-torch is installed, also against the script run live, which
// keeps the committed file honest.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/trainer/sampler.h"
#include "ferry/wire/byte_order.h"

namespace ferry::trainer {
namespace {

// "COUNT CRC FIRST...", as sampler_reference.py's summary() writes it: the
// CRC-32 of the indices as 64-bit little-endian integers, then the first 8.
template <class T>
std::string summary(const std::vector<T>& v) {
  uLong crc = crc32(0, nullptr, 0);
  for (const T x : v) {
    const auto le = wire::to_bytes(static_cast<std::int64_t>(x), wire::byte_order::little);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(le.data()), static_cast<uInt>(le.size()));
  }
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc));
  std::string out = std::to_string(v.size()) + " " + hex;
  for (std::size_t i = 0; i < v.size() && i < 8; ++i) out += " " + std::to_string(v[i]);
  return out;
}

std::vector<std::string> fields(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string f; in >> f;) out.push_back(f);
  return out;
}

// The line ferry computes for the case a reference line describes (its
// leading fields), in the reference's format.
std::string ferry_line(const std::string& reference) {
  const auto f = fields(reference);
  const auto u = [&](std::size_t i) { return std::stoull(f.at(i)); };
  if (f.at(0) == "randperm") {
    return "randperm " + f.at(1) + " " + f.at(2) + " " + summary(randperm(static_cast<std::int64_t>(u(1)), u(2)));
  }
  if (f.at(0) == "sampler") {
    distributed_sampler s(u(1), static_cast<std::uint32_t>(u(2)), static_cast<std::uint32_t>(u(3)), u(4), u(6) != 0,
                          u(7) != 0);
    s.set_epoch(u(5));
    const auto indices = s.indices();
    EXPECT_EQ(indices.size(), s.num_samples());
    std::string out = "sampler";
    for (std::size_t i = 1; i <= 7; ++i) out += " " + f.at(i);
    return out + " " + summary(indices);
  }
  ADD_FAILURE() << "unknown line: " << reference;
  return {};
}

std::vector<std::string> case_lines(std::istream& in) {
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') out.push_back(line);
  }
  return out;
}

std::vector<std::string> committed_lines() {
  std::ifstream in(FERRY_TEST_DATA_DIR "/trainer/sampler_reference.txt");
  EXPECT_TRUE(in) << "cannot read sampler_reference.txt";
  return case_lines(in);
}

TEST(Sampler, MatchesCommittedPyTorchReference) {
  const auto lines = committed_lines();
  ASSERT_GT(lines.size(), 2000u);
  std::size_t randperms = 0;
  for (const auto& line : lines) {
    ASSERT_EQ(ferry_line(line), line);
    randperms += line.starts_with("randperm") ? 1 : 0;
  }
  EXPECT_EQ(randperms, 40u);
}

TEST(Sampler, SeedsKeepTheirLow32Bits) {
  EXPECT_EQ(randperm(1000, 5), randperm(1000, (std::uint64_t{1} << 32) + 5));
  EXPECT_NE(randperm(1000, 5), randperm(1000, 6));
  // The generator is seeded with seed + epoch, wrapping.
  distributed_sampler a(1000, 3, 1, 40);
  a.set_epoch(2);
  distributed_sampler b(1000, 3, 1, 42);
  EXPECT_EQ(a.indices(), b.indices());
  distributed_sampler c(1000, 3, 1, ~std::uint64_t{0});
  c.set_epoch(43);  // 2^64 - 1 + 43 = 42 (mod 2^64)
  EXPECT_EQ(c.indices(), b.indices());
  EXPECT_TRUE(randperm(0, 1).empty());
  EXPECT_EQ(randperm(1, 1), std::vector<std::int64_t>{0});
}

TEST(Sampler, RanksShareEveryEpoch) {
  for (const std::size_t n : {0, 1, 2, 5, 7, 64, 1001}) {
    for (std::uint32_t world = 1; world <= 9; ++world) {
      for (const bool drop_last : {false, true}) {
        for (const bool shuffle : {false, true}) {
          std::vector<std::size_t> seen(n);
          std::size_t total = 0;
          for (std::uint32_t rank = 0; rank < world; ++rank) {
            distributed_sampler s(n, world, rank, 7, shuffle, drop_last);
            s.set_epoch(3);
            EXPECT_EQ(s.num_samples(), drop_last ? n / world : (n + world - 1) / world);
            EXPECT_EQ(s.total_size(), s.num_samples() * world);
            const auto idx = s.indices();
            ASSERT_EQ(idx.size(), s.num_samples());
            for (const std::size_t i : idx) {
              ASSERT_LT(i, n);
              ++seen[i];
            }
            total += idx.size();
            if (!shuffle) {
              for (std::size_t j = 0; j < idx.size(); ++j) EXPECT_EQ(idx[j], (rank + j * world) % n);
            }
          }
          const std::size_t once = static_cast<std::size_t>(std::count(seen.begin(), seen.end(), 1));
          if (drop_last) {
            // Disjoint; n mod world samples left out.
            EXPECT_EQ(once, total);
            EXPECT_EQ(n - total, n % world);
          } else {
            // Everything at least once, padding repeats a few.
            EXPECT_EQ(std::count(seen.begin(), seen.end(), 0), 0);
            EXPECT_EQ(total - n, (world - n % world) % world) << n << " " << world;
          }
        }
      }
    }
  }
}

TEST(Sampler, ExactShardCountsEverySampleOnce) {
  for (const std::size_t n : {0, 1, 2, 5, 7, 64, 1001}) {
    for (std::uint32_t world = 1; world <= 9; ++world) {
      std::vector<int> seen(n);
      for (std::uint32_t rank = 0; rank < world; ++rank) {
        const auto idx = exact_shard(n, world, rank);
        EXPECT_EQ(idx.size(), n / world + (rank < n % world ? 1 : 0));
        for (std::size_t j = 0; j < idx.size(); ++j) {
          ASSERT_EQ(idx[j], rank + j * world);
          ++seen[idx[j]];
        }
      }
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<std::ptrdiff_t>(n));
    }
  }
}

#ifdef FERRY_TORCH_PYTHON
// Runs sampler_reference.py with --large under the Python that has torch
// (registered as trainer_torch_reference_test natively where CMake found
// it): ferry must give every line it prints, and the committed file must be
// exactly its output without the large cases.
TEST(SamplerTorch, MatchesLivePyTorch) {
  const std::string cmd = FERRY_TORCH_PYTHON " " FERRY_SAMPLER_REFERENCE_SCRIPT " --large";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) text.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << cmd;
  std::istringstream in(text);
  const auto live = case_lines(in);
  std::vector<std::string> committable;
  for (const auto& line : live) {
    EXPECT_EQ(ferry_line(line), line);
    const auto f = fields(line);
    if (!(f.at(0) == "randperm" && std::stoull(f.at(1)) > 3'000'000)) committable.push_back(line);
  }
  EXPECT_GT(live.size(), committable.size());  // the large cases ran
  EXPECT_EQ(committable, committed_lines()) << "regenerate tests/data/trainer/sampler_reference.txt";
}
#endif

}  // namespace
}  // namespace ferry::trainer
