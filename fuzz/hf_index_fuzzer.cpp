// A Hugging Face sharded safetensors index (checkpoint/safetensors.h,
// SHARDED FILES): the input is the index's JSON, written beside two real
// safetensors shards (a.safetensors holds "w", b.safetensors "b"). Every
// index is refused with a typed error or opens a set whose tensors fetch.
#include "ferry/checkpoint/reader.h"
#include "fuzz_check.h"
#include "set_shards.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const ferry::fuzzing::set_shards shards;
  const auto path = shards.put("fuzzed.safetensors.index.json", std::as_bytes(std::span(data, size)));
  auto r = ferry::checkpoint::open(path);
  if (!r) return 0;
  FUZZ_CHECK(!r->shards().empty());
  for (const auto& info : r->tensors()) {
    auto t = r->get(info);
    FUZZ_CHECK(t.has_value());
    FUZZ_CHECK(t->contiguous_copy().size() == info.nbytes());
  }
  return 0;
}
