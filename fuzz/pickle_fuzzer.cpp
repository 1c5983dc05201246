// The pickle interpreter and the flattening of its value into names: the
// input is a data.pkl, placed in a zip laid out as torch.save lays it out
// beside storage records archive/data/0..3 (64, 128, 192 and 256 bytes),
// and read through the in-memory entry point of the .pt parser. Every
// program is refused with a typed error or yields tensors whose views lie
// in their storages and names that are unique.
#include <set>
#include <string>

#include "../tests/checkpoint/pt_builder.h"
#include "ferry/checkpoint/pytorch/internal.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ferry::checkpoint;
  testing::zip_builder z;
  z.add("archive/data.pkl", std::as_bytes(std::span(data, size)));
  for (int k = 0; k < 4; ++k) {
    z.add("archive/data/" + std::to_string(k), std::vector<std::byte>(64 * static_cast<std::size_t>(k + 1), std::byte{0x3c}));
  }
  const auto bytes = z.build();
  read_options opt;
  opt.lim.max_tensors = 4096;
  opt.lim.max_metadata_bytes = 1 << 20;
  opt.lim.max_pickle_memory = 8 << 20;
  auto parsed = detail::parse_pytorch(bytes.size(), detail::memory_reader(bytes), opt);
  if (!parsed) {
    FUZZ_CHECK(parsed.error().code() != ferry::error_code{});
    for (const char c : parsed.error().what()) FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
    return 0;
  }
  std::set<std::string> names;
  for (const auto& t : parsed->tensors) {
    FUZZ_CHECK(names.insert(t.name).second);
    FUZZ_CHECK(t.storage < parsed->storages.size());
    const auto& st = parsed->storages[t.storage];
    FUZZ_CHECK(st.offset + st.nbytes <= bytes.size());
    FUZZ_CHECK(check_view(t.dtype, t.shape, t.strides, t.offset, st.nbytes, opt.lim.max_dims).has_value());
  }
  for (const auto& [k, v] : parsed->metadata) {
    FUZZ_CHECK(names.insert(k).second);
    FUZZ_CHECK(valid_utf8(v));
  }
  return 0;
}
