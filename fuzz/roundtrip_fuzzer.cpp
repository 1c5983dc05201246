// Round trip: values built from the fuzz input are written with the writer
// in a chosen byte order and read back with the reader; every bit must come
// back, with nothing left over. Also: bulk conversion there and back is the
// identity, and f16/bf16 widening then narrowing returns every quiet input.
#include <cstring>
#include <vector>

#include "ferry/codec/half.h"
#include "ferry/wire/cursor.h"
#include "fuzz_check.h"

namespace roundtrip_harness {

using namespace ferry;
using namespace ferry::wire;

struct item {
  std::uint8_t kind;
  std::uint64_t bits;
};

template <scalar T>
T take(reader& in) {
  bits_t<T> u = 0;
  const auto raw = in.read_bytes(sizeof(T));
  if (raw) std::memcpy(&u, raw->data(), sizeof(T));
  return from_bits<T>(u);
}

}  // namespace roundtrip_harness

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace roundtrip_harness;
  const auto input = std::as_bytes(std::span(data, size));
  reader in(input);
  const auto order = (size > 0 && (data[0] & 1)) ? byte_order::big : byte_order::little;
  (void)in.skip(1);

  std::vector<item> items;
  std::vector<std::byte> out;
  vector_writer w(out);
  while (!in.at_end() && items.size() < 512) {
    const auto kind = static_cast<std::uint8_t>(*in.read<std::uint8_t>(order) % 7);
    std::uint64_t bits = 0;
    switch (kind) {
      case 0: { auto v = take<std::uint16_t>(in); bits = v; w.write(v, order); break; }
      case 1: { auto v = take<float>(in); bits = to_bits(v); w.write(v, order); break; }
      case 2: { auto v = take<double>(in); bits = to_bits(v); w.write(v, order); break; }
      case 3: { auto v = take<std::uint64_t>(in); bits = v; w.write_varint(v); break; }
      case 4: { auto v = take<std::int64_t>(in); bits = static_cast<std::uint64_t>(v); w.write_zigzag(v); break; }
      case 5: { auto v = take<f16>(in); bits = v.bits; w.write(v, order); break; }
      default: { auto v = take<std::int8_t>(in); bits = static_cast<std::uint8_t>(v); w.write(v, order); break; }
    }
    items.push_back({kind, bits});
  }

  w.flush();
  reader back(out);
  for (const auto& it : items) {
    std::uint64_t bits = 0;
    switch (it.kind) {
      case 0: bits = *back.read<std::uint16_t>(order); break;
      case 1: bits = to_bits(*back.read<float>(order)); break;
      case 2: bits = to_bits(*back.read<double>(order)); break;
      case 3: bits = *back.read_varint(); break;
      case 4: bits = static_cast<std::uint64_t>(*back.read_zigzag()); break;
      case 5: bits = back.read<f16>(order)->bits; break;
      default: bits = static_cast<std::uint8_t>(*back.read<std::int8_t>(order)); break;
    }
    FUZZ_CHECK(bits == it.bits);
  }
  FUZZ_CHECK(back.at_end());

  // Bulk conversion to the other order and back is the identity.
  for (std::size_t width : {2u, 4u, 8u}) {
    std::vector<std::byte> buf(input.begin(), input.begin() + static_cast<std::ptrdiff_t>(size - size % width));
    const auto original = buf;
    convert_in_place(buf, width, byte_order::little, byte_order::big);
    convert_in_place(buf, width, byte_order::big, byte_order::little);
    FUZZ_CHECK(buf == original);
  }

  // Half precision: widen then narrow gives back every non-signalling pattern.
  std::vector<f16> h(size / 2);
  load_array<f16>(input.first(h.size() * 2), byte_order::little, std::span<f16>(h));
  std::vector<float> wide(h.size());
  codec::to_float(std::span<const f16>(h), wide);
  std::vector<f16> narrow(h.size());
  codec::to_f16(wide, narrow);
  for (std::size_t i = 0; i < h.size(); ++i) {
    const bool nan = (h[i].bits & 0x7C00) == 0x7C00 && (h[i].bits & 0x03FF) != 0;
    FUZZ_CHECK(narrow[i].bits == (nan ? (h[i].bits | 0x0200) : h[i].bits));
  }
  return 0;
}
