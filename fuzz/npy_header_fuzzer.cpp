// parse_npy_header() on arbitrary bytes (checkpoint/npy.h's grammar), and
// checkpoint::open() on the same bytes as a .npy file, the path users
// call. The header parser must return a header or a typed error in one
// printable line; a header it accepts describes itself consistently
// (data_offset within the input, data_bytes = product(shape) * item size),
// and write_npy_header() of what it says parses back to the same shape,
// order and fortran flag. An opened file's one tensor fetches.
#include "checkpoint_file.h"
#include "ferry/checkpoint/npy.h"
#include "ferry/checkpoint/reader.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ck = ferry::checkpoint;
  static ferry::fuzzing::memory_file file;
  const auto bytes = std::as_bytes(std::span(data, size));
  ck::limits lim;
  auto h = ck::parse_npy_header(bytes, lim);
  if (!h) {
    for (const char c : h.error().what()) FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
  } else {
    FUZZ_CHECK(h->data_offset <= size && h->shape.size() <= lim.max_dims);
    std::uint64_t n = h->item_size;
    for (const auto d : h->shape) FUZZ_CHECK(!__builtin_mul_overflow(n, d, &n));
    FUZZ_CHECK(n == h->data_bytes);
    const auto t = ck::npy_dtype(*h);
    const auto order = ck::npy_order(*h, ferry::wire::byte_order::big);
    FUZZ_CHECK(order.has_value());
    if (t) {
      auto again = ck::write_npy_header(*t, *order, h->fortran_order, h->shape, lim);
      FUZZ_CHECK(again.has_value() && again->size() % 64 == 0);
      auto back = ck::parse_npy_header(*again, lim);
      FUZZ_CHECK(back.has_value() && back->shape == h->shape && back->fortran_order == h->fortran_order &&
                 back->data_bytes == h->data_bytes);
      FUZZ_CHECK(ck::npy_dtype(*back).value() == *t);
    }
  }
  // The same bytes as a file; a third of the inputs read '|'/'=' wide
  // elements in an order given.
  ck::read_options opt;
  if (size % 3 == 1) opt.npy_native_order = (size / 3) % 2 == 0 ? ferry::wire::byte_order::little : ferry::wire::byte_order::big;
  auto r = ck::open(file.hold(bytes), opt);
  if (!r) {
    for (const char c : r.error().what()) FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
    return 0;
  }
  for (const auto& info : r->tensors()) {
    auto t = r->get(info);
    FUZZ_CHECK(t.has_value() || t.error().code() == ferry::checkpoint_errc::storage_too_large ||
               t.error().code() == ferry::checkpoint_errc::out_of_memory);
    if (t && info.nbytes() <= (1u << 20)) FUZZ_CHECK(t->contiguous_copy().size() == info.nbytes());
  }
  FUZZ_CHECK(r->verify().has_value() || r->format() != ck::file_format::npy);
  return 0;
}
