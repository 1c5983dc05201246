// The varint decoder on arbitrary bytes: it must never crash, must report
// only its documented errors, and whatever it accepts must be canonical
// (re-encoding gives back exactly the bytes it consumed).
#include <cstring>

#include "ferry/wire/varint.h"
#include "fuzz_check.h"

namespace varint_harness {

using namespace ferry;
using namespace ferry::wire;

template <class T>
void check(std::span<const std::byte> in) {
  auto d = decode_varint<T>(in);
  if (!d) {
    FUZZ_CHECK(d.error() == errc::truncated || d.error() == errc::varint_overlong ||
               d.error() == errc::varint_overflow);
    return;
  }
  FUZZ_CHECK(d->size >= 1 && d->size <= max_varint_bytes<T> && d->size <= in.size());
  std::byte again[10];
  const std::size_t n = encode_varint(d->value, again);
  FUZZ_CHECK(n == d->size && std::memcmp(again, in.data(), n) == 0);
}

}  // namespace varint_harness

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace varint_harness;
  const auto in = std::as_bytes(std::span(data, size));
  check<std::uint8_t>(in);
  check<std::uint16_t>(in);
  check<std::uint32_t>(in);
  check<std::uint64_t>(in);
  return 0;
}
