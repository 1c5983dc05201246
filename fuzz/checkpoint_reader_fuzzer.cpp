// checkpoint::open() on arbitrary bytes (.ferry or .safetensors, told apart
// by the reader): it must open the file or return a typed error, and every
// tensor of a file it opens must fetch (or fail its CRC) and gather without
// reading outside its storage.
#include "checkpoint_file.h"
#include "ferry/checkpoint/reader.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static ferry::fuzzing::memory_file file;
  const auto path = file.hold(std::as_bytes(std::span(data, size)));
  ferry::checkpoint::limits lim;
  lim.max_manifest_bytes = 1 << 20;
  lim.max_header_bytes = 1 << 20;
  auto r = ferry::checkpoint::open(path, lim);
  if (!r) return 0;
  for (const auto& info : r->tensors()) {
    FUZZ_CHECK(r->find(info.name) != nullptr);
    auto t = r->get(info);
    if (!t) {
      FUZZ_CHECK(t.error().code() == ferry::errc::checksum_mismatch ||
                 t.error().code() == ferry::checkpoint_errc::storage_too_large ||
                 t.error().code() == ferry::checkpoint_errc::out_of_memory);
      continue;
    }
    if (info.nbytes() <= (1u << 20)) FUZZ_CHECK(t->contiguous_copy().size() == info.nbytes());
  }
  (void)r->verify();
  return 0;
}
