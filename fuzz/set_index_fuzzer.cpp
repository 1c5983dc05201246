// A .ferry set's index (checkpoint/set.h) over real shards: the input is
// the index's manifest (a graph archive of ferry.checkpoint.set), wrapped in
// a valid container (header and trailer flagged as a set, CRCs right), so
// mutations reach the index's rules rather than its CRC; or, when the first
// byte is odd, the whole index file as given. Every index is refused with a
// typed error or opens a set whose tensors all fetch at their size.
#include <vector>

#include "ferry/checkpoint/ferry/layout.h"
#include "ferry/checkpoint/reader.h"
#include "ferry/codec/crc32c.h"
#include "fuzz_check.h"
#include "set_shards.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ck = ferry::checkpoint;
  static const ferry::fuzzing::set_shards shards;
  if (size == 0) return 0;
  const auto input = std::as_bytes(std::span(data + 1, size - 1));
  std::vector<std::byte> file;
  if (data[0] % 2 == 1) {
    file.assign(input.begin(), input.end());
  } else {
    const ck::detail::header_fields h{ferry::wire::byte_order::little, ck::min_alignment, ck::set_index_flag};
    const auto head = ck::detail::encode_header(h);
    file.assign(head.begin(), head.end());
    file.insert(file.end(), input.begin(), input.end());
    ck::detail::trailer_fields t;
    t.manifest_offset = ck::header_size;
    t.manifest_size = input.size();
    t.file_size = ck::header_size + input.size() + ck::trailer_size;
    t.manifest_crc = ferry::codec::crc32c(input);
    t.header = h;
    const auto tail = ck::detail::encode_trailer(t);
    file.insert(file.end(), tail.begin(), tail.end());
  }
  const auto path = shards.put("fuzzed.ferry", file);
  auto r = ck::open(path);
  if (!r) return 0;
  for (const auto& info : r->tensors()) {
    auto t = r->get(info);
    FUZZ_CHECK(t.has_value());
    FUZZ_CHECK(t->contiguous_copy().size() == info.nbytes());
  }
  FUZZ_CHECK(r->verify().has_value());
  return 0;
}
