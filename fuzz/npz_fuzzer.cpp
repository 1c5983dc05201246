// checkpoint::open() on arbitrary bytes taken for an .npz: the zip's end
// records (ZIP64 too), central directory and local headers, the records'
// names, each record's .npy header (inflated just far enough when
// deflated), then on fetch the whole raw-deflate stream: it must inflate to
// exactly the declared size, end with the record and match its CRC-32, or
// be refused with a typed error in one printable line. Every tensor of a
// file that opens fetches or fails with bad_deflate, crc32_mismatch,
// storage_too_large or out_of_memory; verify() ends with a result. Every checksum is
// checked on fetch for a fifth of the inputs, copy-on-write storages for a
// third (written to), so corpus files stay plain .npz files.
#include "checkpoint_file.h"
#include "ferry/checkpoint/reader.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ck = ferry::checkpoint;
  static ferry::fuzzing::memory_file file;
  ck::read_options opt;
  opt.lim.max_tensors = 4096;
  opt.copy_on_write = size % 3 == 0;
  if (size % 5 == 0) opt.checks = ck::fetch_checks::every_checksum;
  if (size % 7 == 1) opt.npy_native_order = ferry::wire::byte_order::big;
  auto r = ck::open(file.hold(std::as_bytes(std::span(data, size))), opt);
  if (!r) {
    for (const char c : r.error().what()) FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
    return 0;
  }
  for (const auto& info : r->tensors()) {
    FUZZ_CHECK(r->find(info.name) != nullptr);
    auto t = r->get(info);
    if (!t) {
      for (const char c : t.error().what()) FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
      FUZZ_CHECK(t.error().code() == ferry::checkpoint_errc::storage_too_large ||
                 t.error().code() == ferry::checkpoint_errc::out_of_memory ||
                 t.error().code() == ferry::checkpoint_errc::bad_deflate ||
                 t.error().code() == ferry::checkpoint_errc::crc32_mismatch);
      continue;
    }
    if (info.nbytes() <= (1u << 20)) FUZZ_CHECK(t->contiguous_copy().size() == info.nbytes());
    const auto writable = t->storage()->mutable_bytes();
    if (!writable.empty()) writable[writable.size() - 1] ^= std::byte{1};
  }
  (void)r->verify();
  return 0;
}
