// Uses ferry::trainer (and the codec and wire it brings), nothing else: an
// IDX file decoded (the decoder's object also holds the gzip path, so zlib
// must link), and one rank's evaluation shard.
#include <ferry/trainer/idx.h>
#include <ferry/trainer/sampler.h>

#include <cstddef>
#include <cstdio>
#include <vector>

int main() {
  // A 1-D u8 IDX file of 3 elements: magic 00 00 08 01, extent 3 (big-endian).
  std::vector<std::byte> file;
  for (const int b : {0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9}) file.push_back(std::byte(b));
  const auto a = ferry::trainer::decode_idx_file(file);
  const auto shard = ferry::trainer::exact_shard(10, 3, 1);
  const bool ok = a && a->dims == std::vector<std::uint32_t>{3} && a->values<std::uint8_t>()[2] == 9 &&
                  shard == std::vector<std::size_t>{1, 4, 7};
  std::puts(ok ? "trainer consumer ok" : "trainer consumer FAILED");
  return ok ? 0 : 1;
}
