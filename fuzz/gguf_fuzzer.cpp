// checkpoint::open() on arbitrary bytes taken for a GGUF file: magic,
// version and byte order, counts, every metadata value type (nested
// arrays), tensor infos and the data layout (checkpoint/gguf.h). It must
// open the file or return a typed error in one printable line. For a file
// it opens: every tensor fetches (quantized blocks swapped to host order
// field by field) and dequantizes; the header written back in the file's
// own order is the file's own header bytes (decode then encode is the
// identity, "FUGG" files aside, which are written "GGUF"); written in the
// other order, it parses back to the same header; a prefix of the file
// parses to the same header or asks for more (the reader's re-read path). The byte order is
// forced on a third of the inputs (read_options::gguf_order), so corpus
// files stay plain GGUF files.
#include "checkpoint_file.h"
#include "ferry/checkpoint/gguf.h"
#include "ferry/checkpoint/reader.h"
#include "fuzz_check.h"

#include <algorithm>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ck = ferry::checkpoint;
  using ferry::wire::byte_order;
  static ferry::fuzzing::memory_file file;
  const auto bytes = std::as_bytes(std::span(data, size));
  ck::read_options opt;
  opt.lim.max_gguf_header_bytes = 1 << 20;
  opt.lim.max_metadata_bytes = 1 << 20;
  opt.lim.max_tensors = 4096;
  if (size % 3 == 1) opt.gguf_order = (size / 3) % 2 == 0 ? byte_order::little : byte_order::big;
  auto r = ck::open(file.hold(bytes), opt);
  if (!r) {
    for (const char c : r.error().what()) FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
    return 0;
  }
  const ck::gguf_header* h = r->gguf();
  if (h == nullptr) return 0;  // another format
  FUZZ_CHECK(h->tensors.size() == r->tensors().size());
  for (std::size_t i = 0; i < r->tensors().size(); ++i) {
    const auto& info = r->tensors()[i];
    auto t = r->get(info);
    FUZZ_CHECK(t.has_value());
    FUZZ_CHECK(t->bytes().size() == h->tensors[i].nbytes);
    auto f = ck::get_dequantized(*r, info.name);
    FUZZ_CHECK(f.has_value());
    FUZZ_CHECK(f->bytes().size() == h->tensors[i].numel() * 4);
  }
  // A prefix of the file, as a caller reading it in pieces holds it (the
  // reader's re-read loop): the same header, or "read more" before its end.
  const std::size_t cut = size == 0 ? 0 : (std::size_t{data[0]} * 257u + size) % (size + 1);
  bool needs_more = false;
  auto part = ck::parse_gguf_header(bytes.first(cut), size, opt.lim, h->order, &needs_more);
  if (part) {  // the same header, bit for bit (a NaN value is unequal to itself)
    const auto a = ck::encode_gguf_header(*part, h->order, opt.lim), b = ck::encode_gguf_header(*h, h->order, opt.lim);
    FUZZ_CHECK(a.has_value() && b.has_value() && *a == *b && part->tensors == h->tensors);
  } else {
    FUZZ_CHECK(needs_more && cut < h->header_bytes);
  }
  // Decode then encode: the same bytes.
  auto same = ck::encode_gguf_header(*h, h->order, opt.lim);
  FUZZ_CHECK(same.has_value());
  FUZZ_CHECK(same->size() == h->data_offset);
  FUZZ_CHECK(h->fugg_magic || std::equal(same->begin(), same->begin() + static_cast<std::ptrdiff_t>(h->header_bytes),
                                         bytes.begin()));
  // Through the other order and back.
  const byte_order other = h->order == byte_order::little ? byte_order::big : byte_order::little;
  auto swapped = ck::encode_gguf_header(*h, other, opt.lim);
  FUZZ_CHECK(swapped.has_value());
  auto back = ck::parse_gguf_header(*swapped, h->padded_end(), opt.lim, other);
  FUZZ_CHECK(back.has_value());
  FUZZ_CHECK(back->order == other && back->data_offset == h->data_offset && back->tensors == h->tensors);
  auto again = ck::encode_gguf_header(*back, h->order, opt.lim);
  FUZZ_CHECK(again.has_value() && *again == *same);
  return 0;
}
