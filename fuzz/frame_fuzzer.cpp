// The gradient frame and ABORT decoders on arbitrary bytes: a frame either decodes (and
// then re-encodes to the same bytes and converts to floats) or fails with a
// typed error; the header's size check bounds everything before allocation.
#include <cstring>
#include <vector>

#include "ferry/comm/frame.h"
#include "fuzz_check.h"

using namespace ferry;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto in = std::as_bytes(std::span(data, size));
  constexpr std::size_t max_frame = std::size_t{1} << 16;
  // An ABORT may stand where a frame does.
  if (size >= comm::abort_size) {
    const auto a = comm::parse_abort(in.first<comm::abort_size>());
    if (a && std::memcmp(data + 5, "\x00", 1) == 0) {
      const auto again = comm::encode_abort(*a);  // host order: compare on little-endian hosts only
      if (wire::host_order == wire::byte_order::little) {
        FUZZ_CHECK(std::equal(again.begin(), again.end(), in.begin()));
      }
    }
  }
  auto f = comm::decode_frame(in, max_frame);
  if (!f) {
    FUZZ_CHECK(f.error() != errc::ok);
    return 0;
  }
  std::vector<std::byte> again;
  FUZZ_CHECK(comm::encode_raw(f->header, f->payload, again).has_value());
  FUZZ_CHECK(again.size() == size && std::equal(again.begin(), again.end(), in.begin()));
  if (f->header.type == codec::dtype::f32) {
    std::vector<float> values(f->header.count);
    FUZZ_CHECK(comm::payload_to_f32(*f, values).has_value());
  }
  return 0;
}
