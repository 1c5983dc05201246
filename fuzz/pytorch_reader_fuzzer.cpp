// checkpoint::open() on arbitrary bytes taken for a PyTorch .pt file: the
// zip's end records, central directory and local headers, the records'
// names and ranges, then the pickle. It must open the file or return a
// typed error, and every tensor of a file it opens must fetch and gather
// within its storage; verify() must end with a result. The read options
// vary with the input's length (so corpus files stay plain .pt files):
// a byte order for files without a byteorder record, and copy-on-write
// storages, which are written to; every checksum checked on fetch (as
// ferry convert reads). Every error is one printable line.
#include "checkpoint_file.h"
#include "ferry/checkpoint/reader.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static ferry::fuzzing::memory_file file;
  const auto path = file.hold(std::as_bytes(std::span(data, size)));
  ferry::checkpoint::read_options opt;
  opt.lim.max_pickle_bytes = 1 << 20;
  opt.lim.max_metadata_bytes = 1 << 20;
  opt.lim.max_tensors = 4096;
  if (size % 2 == 1) opt.pytorch_order = (size / 2) % 2 == 0 ? ferry::wire::byte_order::little : ferry::wire::byte_order::big;
  opt.copy_on_write = size % 3 == 0;
  opt.lim.max_pickle_memory = 16 << 20;
  // ferry convert's reads (every checksum) on a fifth of the inputs.
  if (size % 5 == 0) opt.checks = ferry::checkpoint::fetch_checks::every_checksum;
  auto r = ferry::checkpoint::open(path, opt);
  if (!r) {
    for (const char c : r.error().what()) FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
    return 0;
  }
  for (const auto& info : r->tensors()) {
    FUZZ_CHECK(r->find(info.name) != nullptr);
    auto t = r->get(info);
    if (!t) {
      FUZZ_CHECK(t.error().code() == ferry::checkpoint_errc::storage_too_large ||
                 t.error().code() == ferry::checkpoint_errc::out_of_memory ||
                 (opt.checks == ferry::checkpoint::fetch_checks::every_checksum &&
                  t.error().code() == ferry::checkpoint_errc::crc32_mismatch));
      continue;
    }
    if (info.nbytes() <= (1u << 20)) FUZZ_CHECK(t->contiguous_copy().size() == info.nbytes());
    const auto writable = t->storage()->mutable_bytes();
    FUZZ_CHECK(writable.empty() != opt.copy_on_write || t->storage_bytes().empty());
    if (!writable.empty()) writable[writable.size() - 1] ^= std::byte{1};
  }
  (void)r->verify();
  return 0;
}
