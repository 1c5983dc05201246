// trainer::decode_idx_file() on arbitrary bytes, the path read_idx() takes
// after reading a file: raw IDX, or gzip (1F 8B) inflated first. It must
// decode or return a typed error; what it decodes must be the one meaning
// of the bytes (re-encoded, the input again), and the in-place path must
// agree with decode_idx()'s copying one.
//
// Every input is also decoded cut to its first 1 + size % 7 entries: the
// whole array's first rows whenever the whole decodes (the whole array when
// that asks for every row), and an error only when the whole fails too;
// in differential mode, the gzip'd and raw cuts agree.
//
// Input FF, s, rest...: differential mode. `rest` is gzip'd by zlib, in two
// members split at s mod (len + 1), and the gzip path must give exactly what
// the raw path gives for `rest` (the same array, or the same error code).
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ferry/trainer/idx.h"
#include "ferry/wire/bulk.h"
#include "fuzz_check.h"

namespace idx_harness {

using ferry::trainer::idx_array;

std::vector<std::byte> gzip_member(std::span<const std::byte> raw) {
  z_stream zs{};
  FUZZ_CHECK(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::vector<std::byte> out(deflateBound(&zs, static_cast<uLong>(raw.size())));
  zs.next_in = static_cast<Bytef*>(static_cast<void*>(const_cast<std::byte*>(raw.data())));
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = static_cast<Bytef*>(static_cast<void*>(out.data()));
  zs.avail_out = static_cast<uInt>(out.size());
  FUZZ_CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// The IDX bytes of an array: its header, then the data in big-endian.
std::vector<std::byte> encode(const idx_array& a) {
  std::uint8_t code = 0;
  for (unsigned c = 0; c < 256 && code == 0; ++c) {
    const auto t = ferry::trainer::idx_type_from_code(static_cast<std::uint8_t>(c));
    if (t && *t == a.type) code = static_cast<std::uint8_t>(c);
  }
  std::vector<std::byte> out{std::byte{0}, std::byte{0}, std::byte{code}, std::byte(a.dims.size())};
  for (const std::uint32_t d : a.dims) {
    const auto be = ferry::wire::to_bytes(d, ferry::wire::byte_order::big);
    out.insert(out.end(), be.begin(), be.end());
  }
  const std::size_t header = out.size();
  out.resize(header + a.data.size());
  ferry::wire::convert(a.data, ferry::wire::host_order, std::span(out).subspan(header), ferry::wire::byte_order::big,
                       ferry::codec::size_of(a.type));
  return out;
}

void check_same(const ferry::result<idx_array, ferry::error>& a, const ferry::result<idx_array, ferry::error>& b) {
  FUZZ_CHECK(a.has_value() == b.has_value());
  if (!a) {
    FUZZ_CHECK(a.error().code() == b.error().code());
    return;
  }
  FUZZ_CHECK(a->type == b->type && a->dims == b->dims && a->data == b->data);
}

}  // namespace idx_harness

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace idx_harness;
  ferry::trainer::idx_limits lim;
  lim.max_bytes = 1 << 22;  // a bomb stops at 4 MiB
  const auto in = std::as_bytes(std::span(data, size));
  const std::size_t first = 1 + size % 7;  // the cut every input is also decoded with

  if (size >= 2 && data[0] == 0xFF) {
    const auto rest = in.subspan(2);
    if (rest.size() > lim.max_bytes) return 0;  // only gzip'd is that limit_exceeded whatever it holds
    const std::size_t split = data[1] % (rest.size() + 1);
    auto gz = gzip_member(rest.first(split));
    const auto second = gzip_member(rest.subspan(split));
    gz.insert(gz.end(), second.begin(), second.end());
    if (rest.empty() || rest[0] != std::byte{0x1F}) {  // else decode_idx_file would take `rest` for gzip
      check_same(ferry::trainer::decode_idx_file(gz, lim, first),
                 ferry::trainer::decode_idx_file(std::vector<std::byte>(rest.begin(), rest.end()), lim, first));
    }
    check_same(ferry::trainer::decode_idx_file(std::move(gz), lim), ferry::trainer::decode_idx(rest, lim));
    return 0;
  }

  auto file = ferry::trainer::decode_idx_file(std::vector<std::byte>(in.begin(), in.end()), lim);
  if (file) {
    FUZZ_CHECK(!file->dims.empty() && file->dims.size() <= lim.max_dims);
    std::uint64_t elements = 1;
    for (const std::uint32_t d : file->dims) {
      FUZZ_CHECK(d >= 1 && d <= lim.max_extent);
      elements *= d;  // bounded: the data fits max_bytes
    }
    FUZZ_CHECK(file->element_count() == elements);
    FUZZ_CHECK(file->data.size() == elements * ferry::codec::size_of(file->type));
    FUZZ_CHECK(file->data.size() <= lim.max_bytes);
  }
  // The first entries alone (ferry-train --limit): a value or a typed
  // error for any input, and the whole array's first rows when it decodes.
  const auto part = ferry::trainer::decode_idx_file(std::vector<std::byte>(in.begin(), in.end()), lim, first);
  // A gzip'd whole reports the gzip layer's errors before the IDX ones, a
  // cut one finds an IDX error in what it inflated first: the same code
  // only when raw.
  const bool gzipped = size >= 1 && data[0] == 0x1F;
  if (!part) FUZZ_CHECK(!file && (gzipped || file.error().code() == part.error().code()));
  if (file && first >= file->dims[0]) check_same(part, file);
  if (file) {
    FUZZ_CHECK(part.has_value());
    const std::size_t kept = std::min<std::size_t>(first, file->dims[0]);
    FUZZ_CHECK(part->type == file->type && part->dims.size() == file->dims.size() && part->dims[0] == kept);
    FUZZ_CHECK(std::equal(part->dims.begin() + 1, part->dims.end(), file->dims.begin() + 1));
    FUZZ_CHECK(part->data.size() == file->data.size() / file->dims[0] * kept);
    FUZZ_CHECK(std::equal(part->data.begin(), part->data.end(), file->data.begin()));
  }
  if (gzipped) return 0;  // no raw twin to compare with
  const auto raw = ferry::trainer::decode_idx(in, lim);
  check_same(file, raw);
  if (raw) {
    const auto again = encode(*raw);
    FUZZ_CHECK(again.size() == size && std::equal(again.begin(), again.end(), in.begin()));
  }
  return 0;
}
