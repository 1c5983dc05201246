// The reader cursor driven by its own input: each step reads an opcode byte
// and performs that read. Invariants: no crash, the position never passes
// the end, a failed read leaves the position unchanged, and only the errors
// each call documents are returned.
#include <array>

#include "ferry/wire/cursor.h"
#include "fuzz_check.h"

namespace reader_harness {

using namespace ferry;
using namespace ferry::wire;

bool is_varint_error(error_code e) {
  return e == errc::truncated || e == errc::varint_overlong || e == errc::varint_overflow;
}

template <class R>
void expect(const R& r, bool (*allowed)(error_code)) {
  if (!r) FUZZ_CHECK(allowed(r.error()));
}

bool truncated_only(error_code e) { return e == errc::truncated; }
bool count_errors(error_code e) { return is_varint_error(e) || e == errc::limit_exceeded; }

}  // namespace reader_harness

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace reader_harness;
  reader r(std::as_bytes(std::span(data, size)));
  // Bounded even though seek() can move backwards.
  for (int step = 0; step < 4096; ++step) {
    auto op = r.read<std::uint8_t>(byte_order::little);
    if (!op) break;
    const std::size_t before = r.position();
    const auto order = (*op & 0x80) ? byte_order::big : byte_order::little;
    bool ok = true;
    switch (*op & 0x0F) {
      case 0: { auto v = r.read<std::uint16_t>(order); expect(v, truncated_only); ok = v.has_value(); break; }
      case 1: { auto v = r.read<std::uint32_t>(order); expect(v, truncated_only); ok = v.has_value(); break; }
      case 2: { auto v = r.read<double>(order); expect(v, truncated_only); ok = v.has_value(); break; }
      case 3: { auto v = r.read<bf16>(order); expect(v, truncated_only); ok = v.has_value(); break; }
      case 4: { auto v = r.read_varint(); expect(v, is_varint_error); ok = v.has_value(); break; }
      case 5: { auto v = r.read_varint<std::uint16_t>(); expect(v, is_varint_error); ok = v.has_value(); break; }
      case 6: { auto v = r.read_zigzag<std::int32_t>(); expect(v, is_varint_error); ok = v.has_value(); break; }
      case 7: { auto v = r.read_bytes(*op >> 4); expect(v, truncated_only); ok = v.has_value(); break; }
      case 8: { auto v = r.skip(std::size_t{*op} * 97); expect(v, truncated_only); ok = v.has_value(); break; }
      case 9: {
        auto v = r.seek(r.position() / 2 + (*op >> 4));
        if (!v) FUZZ_CHECK(v.error() == errc::out_of_range);
        ok = v.has_value();
        break;
      }
      case 10: { auto v = r.read_count(1 + (*op >> 4), 1000); expect(v, count_errors); ok = v.has_value(); break; }
      case 11: { auto v = r.read_length_prefixed(64); expect(v, count_errors); ok = v.has_value(); break; }
      case 12: {
        std::array<float, 3> a{};
        auto v = r.read_array<float>(a, order);
        expect(v, truncated_only);
        ok = v.has_value();
        break;
      }
      default: { auto v = r.read<std::uint64_t>(order); expect(v, truncated_only); ok = v.has_value(); break; }
    }
    FUZZ_CHECK(r.position() <= r.size());
    if (!ok) FUZZ_CHECK(r.position() == before);
  }
  return 0;
}
