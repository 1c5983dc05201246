// The IDX decoder (trainer/idx.h): every element type bit for bit, the
// exact error of every malformed header, every truncation and every single
// bit flip of small files raw and gzip'd, gzip bombs held to the limit, the
// dataset loader's errors, and (natively, where the package is installed)
// the real Fashion-MNIST.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <string>
#include <vector>

#include "../checkpoint/helpers.h"
#include "../test_bytes.h"
#include "ferry/trainer/idx.h"
#include "ferry/wire/bulk.h"
#include "ferry/wire/byte_order.h"

// The largest single allocation through operator new since the last reset:
// how the tests check that a hostile header or a gzip bomb cannot make the
// decoder allocate more than its input or its limit justifies.
namespace {
std::atomic<std::size_t> largest_allocation{0};
void* allocate(std::size_t n) {
  std::size_t seen = largest_allocation.load(std::memory_order_relaxed);
  while (n > seen && !largest_allocation.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace ferry::trainer {
namespace {

namespace fs = std::filesystem;
using codec::dtype;

std::vector<std::byte> operator+(std::vector<std::byte> a, std::span<const std::byte> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// An IDX file: the header of the layout in idx.h, then `data` as it is.
std::vector<std::byte> idx_file(std::uint8_t code, std::vector<std::uint32_t> dims, std::span<const std::byte> data) {
  std::vector<std::byte> out{std::byte{0}, std::byte{0}, std::byte{code}, std::byte(dims.size())};
  for (std::uint32_t d : dims) {
    const auto be = wire::to_bytes(d, wire::byte_order::big);
    out.insert(out.end(), be.begin(), be.end());
  }
  return out + data;
}

std::vector<std::byte> filled(std::size_t n, std::uint8_t first = 0) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<std::uint8_t>(first + i * 7));
  return v;
}

// `raw` as one gzip member (zlib's deflate with a gzip wrapper).
std::vector<std::byte> gzip(std::span<const std::byte> raw, int level = 9) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, level, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::vector<std::byte> out(deflateBound(&zs, static_cast<uLong>(raw.size())));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(raw.data()));
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// The IDX bytes of a decoded array: header, then the data back in big-endian.
std::vector<std::byte> encode(const idx_array& a) {
  std::vector<std::byte> data(a.data.size());
  wire::convert(a.data, wire::host_order, data, wire::byte_order::big, codec::size_of(a.type));
  std::uint8_t code = 0;
  for (unsigned c = 0; c < 256; ++c) {
    if (auto t = idx_type_from_code(static_cast<std::uint8_t>(c)); t && *t == a.type) code = static_cast<std::uint8_t>(c);
  }
  return idx_file(code, a.dims, data);
}

error_code code_of(const result<idx_array, error>& r) { return r ? error_code{} : r.error().code(); }

// What a decoder must answer for `b`, from the layout in idx.h, written
// independently of trainer/idx.cpp: ok (errc::ok) or the error.
error_code expected_code(std::span<const std::byte> b, const idx_limits& lim = {}) {
  const auto at = [&](std::size_t i) { return std::to_integer<unsigned>(b[i]); };
  if ((b.size() >= 1 && at(0) != 0) || (b.size() >= 2 && at(1) != 0)) return errc::bad_magic;
  if (b.size() < 3) return errc::truncated;
  const unsigned code = at(2);
  unsigned size = 0;
  switch (code) {
    case 0x08: case 0x09: size = 1; break;
    case 0x0B: size = 2; break;
    case 0x0C: case 0x0D: size = 4; break;
    case 0x0E: size = 8; break;
    default: return trainer_errc::bad_idx_type;
  }
  if (b.size() < 4) return errc::truncated;
  const unsigned rank = at(3);
  if (rank == 0) return trainer_errc::bad_idx_dimensions;
  if (rank > lim.max_dims) return errc::limit_exceeded;
  constexpr std::uint64_t huge = std::uint64_t{1} << 62;  // saturated: more than any limit
  std::uint64_t bytes = size;
  for (unsigned k = 0; k < rank; ++k) {
    const std::size_t o = 4 + 4 * k;
    if (b.size() < o + 4) return errc::truncated;
    const std::uint32_t d = (std::uint32_t{at(o)} << 24) | (at(o + 1) << 16) | (at(o + 2) << 8) | at(o + 3);
    if (d == 0) return trainer_errc::bad_idx_dimensions;
    if (d > lim.max_extent) return errc::limit_exceeded;
    bytes = bytes > huge / d ? huge : bytes * d;
  }
  const std::size_t header = 4 + 4 * rank;
  if (bytes + header > lim.max_bytes) return errc::limit_exceeded;
  if (b.size() - header < bytes) return errc::truncated;
  if (b.size() - header > bytes) return errc::trailing_bytes;
  return {};
}

// The i16 sample: dims 2 x 3 x 2, elements 0x0102, 0x0304, ... big-endian.
std::vector<std::byte> sample_file() { return idx_file(0x0B, {2, 3, 2}, filled(24, 1)); }

TEST(Idx, DecodesEveryElementTypeBitForBit) {
  struct type_case {
    std::uint8_t code;
    dtype type;
  };
  const type_case cases[] = {{0x08, dtype::u8}, {0x09, dtype::i8},  {0x0B, dtype::i16},
                             {0x0C, dtype::i32}, {0x0D, dtype::f32}, {0x0E, dtype::f64}};
  for (const auto& c : cases) {
    const std::size_t w = codec::size_of(c.type);
    const auto data = filled(5 * 2 * w, 3);
    const auto file = idx_file(c.code, {5, 2}, data);
    auto r = decode_idx(file);
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->type, c.type);
    EXPECT_EQ(r->dims, (std::vector<std::uint32_t>{5, 2}));
    EXPECT_EQ(r->element_count(), 10u);
    // Element i in host order is big-endian element i reversed on a
    // little-endian host and unchanged on a big-endian one.
    for (std::size_t i = 0; i < 10; ++i) {
      for (std::size_t k = 0; k < w; ++k) {
        const std::size_t from = wire::host_order == wire::byte_order::big ? k : w - 1 - k;
        ASSERT_EQ(r->data[i * w + k], data[i * w + from]) << int(c.code) << " element " << i;
      }
    }
    EXPECT_EQ(encode(*r), file);
    auto f = decode_idx_file(file);
    ASSERT_TRUE(f) << f.error();
    EXPECT_EQ(f->data, r->data);
  }
}

TEST(Idx, FloatsKeepTheirNanPayloads) {
  // Committed, written by Python's struct and gzip (make_golden.py).
  auto r = read_idx(FERRY_TEST_DATA_DIR "/trainer/f32-2x3-idx.gz");
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->type, dtype::f32);
  EXPECT_EQ(r->dims, (std::vector<std::uint32_t>{2, 3}));
  const auto values = r->values<float>();
  const std::uint32_t want[] = {0x7F800001, 0x80000000, 0x3FC00000, 0x00000001, 0x7F800000, 0xFFC12345};
  ASSERT_EQ(values.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(std::bit_cast<std::uint32_t>(values[i]), want[i]) << i;
  EXPECT_EQ(values[2], 1.5f);

  auto s = read_idx(FERRY_TEST_DATA_DIR "/trainer/i16-4-idx");
  ASSERT_TRUE(s) << s.error();
  EXPECT_EQ(s->values<std::int16_t>(), (std::vector<std::int16_t>{-32768, -1, 0, 32767}));
}

TEST(Idx, TypeCodes) {
  for (unsigned c = 0; c < 256; ++c) {
    const auto file = idx_file(static_cast<std::uint8_t>(c), {1}, filled(8));
    const auto r = decode_idx(file);
    const bool known = c == 0x08 || c == 0x09 || c == 0x0B || c == 0x0C || c == 0x0D || c == 0x0E;
    if (!known) {
      EXPECT_EQ(code_of(r), trainer_errc::bad_idx_type) << c;
      EXPECT_EQ(idx_type_from_code(static_cast<std::uint8_t>(c)).error(), trainer_errc::bad_idx_type);
    } else {
      // 8 bytes of data: exactly one f64, trailing bytes for the others.
      EXPECT_EQ(code_of(r), c == 0x0E ? error_code{} : error_code(errc::trailing_bytes)) << c;
    }
  }
}

TEST(Idx, HeaderErrors) {
  const auto one = filled(1);
  EXPECT_EQ(code_of(decode_idx({})), errc::truncated);
  EXPECT_EQ(code_of(decode_idx(idx_file(0x08, {1}, one) + one)), errc::trailing_bytes);
  auto bad = idx_file(0x08, {1}, one);
  bad[0] = std::byte{1};
  EXPECT_EQ(code_of(decode_idx(bad)), errc::bad_magic);
  bad = idx_file(0x08, {1}, one);
  bad[1] = std::byte{0x80};
  EXPECT_EQ(code_of(decode_idx(bad)), errc::bad_magic);
  EXPECT_EQ(code_of(decode_idx(std::vector<std::byte>{std::byte{0x00}, std::byte{0x01}})), errc::bad_magic);
  // rank 0, an extent of 0, more dimensions than max_dims, an extent over max_extent
  EXPECT_EQ(code_of(decode_idx(idx_file(0x08, {}, one))), trainer_errc::bad_idx_dimensions);
  EXPECT_EQ(code_of(decode_idx(idx_file(0x08, {3, 0, 2}, {}))), trainer_errc::bad_idx_dimensions);
  EXPECT_EQ(code_of(decode_idx(idx_file(0x08, {1, 1, 1, 1}, one))), errc::ok);
  EXPECT_EQ(code_of(decode_idx(idx_file(0x08, {1, 1, 1, 1, 1}, one))), errc::limit_exceeded);
  EXPECT_EQ(code_of(decode_idx(idx_file(0x08, {(1u << 30) - 8}, {}))), errc::truncated);  // 1 GiB with the header
  EXPECT_EQ(code_of(decode_idx(idx_file(0x08, {(1u << 30) - 7}, {}))), errc::limit_exceeded);
  EXPECT_EQ(code_of(decode_idx(idx_file(0x08, {0x8000'0000}, {}))), errc::limit_exceeded);
  // An extent of 0 is bad_idx_dimensions even after extents whose product overflows.
  idx_limits wide;
  wide.max_extent = 0xFFFF'FFFF;
  EXPECT_EQ(code_of(decode_idx(idx_file(0x0E, {0xFFFF'FFFF, 0xFFFF'FFFF, 0xFFFF'FFFF, 0}, {}), wide)),
            trainer_errc::bad_idx_dimensions);
  EXPECT_EQ(code_of(decode_idx(idx_file(0x0E, {0xFFFF'FFFF, 0xFFFF'FFFF, 0xFFFF'FFFF, 0xFFFF'FFFF}, {}), wide)),
            errc::limit_exceeded);
  // max_bytes counts the header: 8 + 100 bytes pass a limit of 108, not 107.
  idx_limits lim;
  lim.max_bytes = 108;
  EXPECT_EQ(code_of(decode_idx(idx_file(0x08, {100}, filled(100)), lim)), errc::ok);
  lim.max_bytes = 107;
  EXPECT_EQ(code_of(decode_idx(idx_file(0x08, {100}, filled(100)), lim)), errc::limit_exceeded);
  lim.max_dims = 2;
  EXPECT_EQ(code_of(decode_idx(idx_file(0x08, {2, 2, 2}, filled(8)), lim)), errc::limit_exceeded);
  // The context names the field.
  const auto r = decode_idx(idx_file(0x08, {3, 0, 2}, {}));
  EXPECT_EQ(r.error().context(), "extent 1 is 0");
}

TEST(Idx, EveryTruncationIsTruncated) {
  const auto file = sample_file();
  for (std::size_t n = 0; n < file.size(); ++n) {
    const auto cut = std::span(file).first(n);
    EXPECT_EQ(code_of(decode_idx(cut)), errc::truncated) << n;
    EXPECT_EQ(code_of(decode_idx_file({cut.begin(), cut.end()})), errc::truncated) << n;
  }
  const auto gz = gzip(file);
  for (std::size_t n = 0; n < gz.size(); ++n) {
    EXPECT_EQ(code_of(decode_idx_file({gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(n)})), errc::truncated)
        << n;
  }
}

TEST(Idx, EverySingleBitFlipOfTheRawFile) {
  const auto file = sample_file();
  for (std::size_t at = 0; at < file.size(); ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      auto bad = file;
      bad[at] ^= std::byte(1u << bit);
      const error_code want = expected_code(bad);
      const auto r = decode_idx(bad);
      ASSERT_EQ(code_of(r), want) << "byte " << at << " bit " << bit;
      if (r) {
        EXPECT_EQ(encode(*r), bad) << "byte " << at << " bit " << bit;  // the one meaning of the bytes
      }
      ASSERT_EQ(code_of(decode_idx_file(bad)), want);
    }
  }
  // The model agrees with the explicit cases above, too.
  EXPECT_EQ(expected_code(file), error_code{});
}

TEST(Idx, EverySingleBitFlipOfTheGzipFile) {
  const auto file = sample_file();
  const auto gz = gzip(file);
  const auto good = decode_idx(file);
  ASSERT_TRUE(good);
  for (std::size_t at = 0; at < gz.size(); ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      auto bad = gz;
      bad[at] ^= std::byte(1u << bit);
      const auto r = decode_idx_file(bad);
      if (at < 2) {
        EXPECT_EQ(code_of(r), errc::bad_magic);  // no longer gzip, and not IDX
      } else if (r) {
        // Only fields the CRC does not cover (flags, mtime, OS byte): the
        // same content.
        EXPECT_EQ(r->data, good->data) << at;
        EXPECT_EQ(r->dims, good->dims) << at;
      } else {
        const auto c = r.error().code();
        EXPECT_TRUE(c == trainer_errc::bad_gzip || c == errc::truncated) << at << " " << bit << ": " << r.error();
      }
    }
  }
}

TEST(Idx, GzipMembersAndTrailingBytes) {
  const auto file = sample_file();
  const auto want = decode_idx(file);
  ASSERT_TRUE(want);
  // Three members, as `cat a.gz b.gz c.gz` makes them, one of them empty.
  const auto s = std::span(file);
  const auto multi = gzip(s.first(7)) + gzip({}) + gzip(s.subspan(7, 20)) + gzip(s.subspan(27), 0);
  auto r = decode_idx_file(multi);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->data, want->data);
  // Garbage or zero padding after the last member.
  EXPECT_EQ(code_of(decode_idx_file(gzip(file) + std::vector<std::byte>{std::byte{0}})), errc::trailing_bytes);
  EXPECT_EQ(code_of(decode_idx_file(gzip(file) + std::vector<std::byte>{std::byte{0x1f}, std::byte{0}})),
            errc::trailing_bytes);
  // The IDX bytes inside: trailing after the data, or cut short.
  EXPECT_EQ(code_of(decode_idx_file(gzip(file + filled(1)))), errc::trailing_bytes);
  EXPECT_EQ(code_of(decode_idx_file(gzip(s.first(file.size() - 1)))), errc::truncated);
  // A corrupt CRC-32, a corrupt length, deflate garbage.
  auto bad = gzip(file);
  bad[bad.size() - 5] ^= std::byte{1};
  r = decode_idx_file(bad);
  EXPECT_EQ(code_of(r), trainer_errc::bad_gzip);
  EXPECT_EQ(r.error().context(), "gzip: incorrect data check");
  bad = gzip(file);
  bad[bad.size() - 1] ^= std::byte{1};
  EXPECT_EQ(code_of(decode_idx_file(bad)), trainer_errc::bad_gzip);
  bad = gzip(file);
  bad[10] = std::byte{0xff};  // the first deflate block header: type 3 is reserved
  EXPECT_EQ(code_of(decode_idx_file(bad)), trainer_errc::bad_gzip);
  // Not every gzip'd thing is IDX.
  EXPECT_EQ(code_of(decode_idx_file(gzip(filled(40, 1)))), errc::bad_magic);
}

// first != 0: the first entries of the outermost dimension, raw and
// gzip'd; a gzip'd file is inflated only that far, so damage after them
// goes unseen (a CRC-32 is not checked); rows cut short and bad headers are
// errors as ever; asking for all the entries or more is the whole file.
TEST(Idx, FirstEntriesOnly) {
  const auto file = idx_file(0x0B, {5, 3}, filled(30, 1));  // five rows of three i16
  const auto whole = decode_idx(file);
  ASSERT_TRUE(whole);
  for (const std::size_t first : {1, 2, 4, 5, 9}) {
    const std::size_t kept = std::min<std::size_t>(first, 5);
    for (const bool gz : {false, true}) {
      auto r = decode_idx_file(gz ? gzip(file) : file, {}, first);
      ASSERT_TRUE(r) << first << (gz ? " gzip'd: " : ": ") << r.error();
      EXPECT_EQ(r->dims, (std::vector<std::uint32_t>{static_cast<std::uint32_t>(kept), 3}));
      EXPECT_EQ(r->data, std::vector<std::byte>(whole->data.begin(), whole->data.begin() + static_cast<std::ptrdiff_t>(kept * 6)));
    }
  }
  // A stored (level 0) member's bytes are the file's: a flip in the last
  // row fails the CRC-32 of a whole read, not a read of the first two.
  auto damaged = gzip(file, 0);
  damaged[damaged.size() - 8 - 2] ^= std::byte{1};
  EXPECT_EQ(code_of(decode_idx_file(damaged)), trainer_errc::bad_gzip);
  auto two = decode_idx_file(damaged, {}, 2);
  ASSERT_TRUE(two) << two.error();
  EXPECT_EQ(two->data, std::vector<std::byte>(whole->data.begin(), whole->data.begin() + 12));
  EXPECT_EQ(code_of(decode_idx_file(damaged, {}, 5)), trainer_errc::bad_gzip);
  // Trailing bytes after the data are not looked at, unless every row is
  // asked for; rows cut short, or a bad header, are the errors they
  // always are.
  EXPECT_EQ(code_of(decode_idx_file(file + filled(3), {}, 2)), errc::ok);
  EXPECT_EQ(code_of(decode_idx_file(file + filled(3), {}, 5)), errc::trailing_bytes);
  const auto cut = std::span(file).first(12 + 6 + 5);  // the header, a row and most of the next
  EXPECT_EQ(code_of(decode_idx_file({cut.begin(), cut.end()}, {}, 2)), errc::truncated);
  EXPECT_EQ(code_of(decode_idx_file(gzip(cut), {}, 2)), errc::truncated);
  EXPECT_EQ(code_of(decode_idx_file({cut.begin(), cut.end()}, {}, 1)), errc::ok);
  auto bad = file;
  bad[2] = std::byte{0x07};
  EXPECT_EQ(code_of(decode_idx_file(gzip(bad), {}, 1)), trainer_errc::bad_idx_type);
  // Only the kept rows are allocated: one row of a 16 MiB file.
  const std::size_t n = std::size_t{16} << 20;
  const auto big = gzip(idx_file(0x08, {static_cast<std::uint32_t>(n / 1024), 1024}, std::vector<std::byte>(n)));
  largest_allocation = 0;
  auto row = decode_idx_file(big, {}, 1);
  ASSERT_TRUE(row) << row.error();
  EXPECT_EQ(row->data.size(), 1024u);
  EXPECT_LT(largest_allocation.load(), std::size_t{1} << 16);
}

TEST(Idx, GzipBombsStopAtTheLimit) {
  // 16 MiB of zeros behind a valid header, 16 KiB compressed.
  const std::size_t n = std::size_t{16} << 20;
  const auto bomb = gzip(idx_file(0x08, {static_cast<std::uint32_t>(n)}, std::vector<std::byte>(n)));
  ASSERT_LT(bomb.size(), 32u << 10);
  idx_limits lim;
  lim.max_bytes = 1 << 20;
  largest_allocation = 0;
  auto r = decode_idx_file(bomb, lim);
  EXPECT_EQ(code_of(r), errc::limit_exceeded);
  EXPECT_EQ(r.error().context(), "gzip: inflates to more than 1048576 bytes");
  EXPECT_LE(largest_allocation.load(), lim.max_bytes);
  // The same file under the default limit decodes (and its raw twin).
  r = decode_idx_file(bomb);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->data.size(), n);

  // Exactly at the limit and one byte over, raw and gzip'd alike.
  const auto file = idx_file(0x08, {1000}, filled(1000));
  lim.max_bytes = 1008;
  EXPECT_EQ(code_of(decode_idx_file(gzip(file), lim)), errc::ok);
  EXPECT_EQ(code_of(decode_idx_file(file, lim)), errc::ok);
  lim.max_bytes = 1007;
  EXPECT_EQ(code_of(decode_idx_file(gzip(file), lim)), errc::limit_exceeded);
  EXPECT_EQ(code_of(decode_idx_file(file, lim)), errc::limit_exceeded);
}

TEST(Idx, AllocationsFollowTheInputNotTheHeader) {
  // A 12-byte file announcing 1 GiB - 8 bytes: refused before any allocation of that size.
  auto tiny = idx_file(0x08, {(1u << 30) - 8}, filled(4));
  largest_allocation = 0;
  EXPECT_EQ(code_of(decode_idx(tiny)), errc::truncated);
  EXPECT_EQ(code_of(decode_idx_file(std::move(tiny))), errc::truncated);
  EXPECT_LT(largest_allocation.load(), 4096u);
  // A gzip stream whose length field claims 4 GiB - 1: the first output
  // buffer is sized by what the compressed bytes could produce.
  auto liar = gzip(sample_file());
  std::fill(liar.end() - 4, liar.end(), std::byte{0xff});
  const std::size_t size = liar.size();
  largest_allocation = 0;
  EXPECT_EQ(code_of(decode_idx_file(std::move(liar))), trainer_errc::bad_gzip);
  EXPECT_LE(largest_allocation.load(), std::max<std::size_t>(size * 1032, 1 << 16));
}

class scratch : public checkpoint::testing::scratch_dir {
 protected:
  void write(const std::string& name, std::span<const std::byte> bytes) { checkpoint::testing::spit(dir_ / name, bytes); }
  // A valid split: n images of 2 x 3 pixels and labels i % 10.
  void write_split(const std::string& split, std::uint32_t n, bool gz_images, bool gz_labels) {
    std::vector<std::byte> labels(n);
    for (std::uint32_t i = 0; i < n; ++i) labels[i] = std::byte(static_cast<std::uint8_t>(i % 10));
    const auto images = idx_file(0x08, {n, 2, 3}, filled(n * 6));
    const auto label_file = idx_file(0x08, {n}, labels);
    write(split + "-images-idx3-ubyte" + (gz_images ? ".gz" : ""), gz_images ? gzip(images) : images);
    write(split + "-labels-idx1-ubyte" + (gz_labels ? ".gz" : ""), gz_labels ? gzip(label_file) : label_file);
  }
};

using IdxFile = scratch;

TEST_F(IdxFile, ErrorsNameTheFile) {
  auto r = read_idx(dir_ / "missing");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::io_error);
  EXPECT_EQ(r.error().sys_errno(), ENOENT);
  EXPECT_EQ(r.error().context(), (dir_ / "missing").string());
  r = read_idx(dir_);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::io_error);
  EXPECT_EQ(r.error().sys_errno(), EISDIR);

  write("bad", idx_file(0x08, {3, 0}, {}));
  r = read_idx(dir_ / "bad");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), trainer_errc::bad_idx_dimensions);
  EXPECT_EQ(r.error().context(), (dir_ / "bad").string() + ": extent 1 is 0");
  write("bad.gz", gzip(sample_file()) + filled(3));
  r = read_idx(dir_ / "bad.gz");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::trailing_bytes);
  EXPECT_EQ(r.error().context(), (dir_ / "bad.gz").string() + ": gzip: 3 bytes after the last member");
  // Longer than twice max_bytes: refused before it is read.
  write("big", idx_file(0x08, {100}, filled(100)));
  idx_limits lim;
  lim.max_bytes = 50;
  r = read_idx(dir_ / "big", lim);
  EXPECT_EQ(code_of(r), errc::limit_exceeded);
}

using Dataset = scratch;

TEST_F(Dataset, LoadsRawAndGzipFiles) {
  write_split("train", 12, true, false);
  write_split("t10k", 5, false, true);
  auto train = load_dataset(dir_, "train");
  ASSERT_TRUE(train) << train.error();
  EXPECT_EQ(train->count, 12u);
  EXPECT_EQ(train->rows, 2u);
  EXPECT_EQ(train->cols, 3u);
  ASSERT_EQ(train->labels.size(), 12u);
  EXPECT_EQ(train->labels[11], 1);
  ASSERT_EQ(train->images.size(), 72u);
  const auto pixels = filled(72);
  for (std::size_t i = 0; i < 72; ++i) EXPECT_EQ(train->images[i], std::to_integer<std::uint8_t>(pixels[i]));
  auto test = load_dataset(dir_, "t10k");
  ASSERT_TRUE(test) << test.error();
  EXPECT_EQ(test->count, 5u);
}

TEST_F(Dataset, CommittedTinySet) {
  // Written by Python (make_golden.py); t10k's images gzip'd, train's raw
  // beside a gzip'd twin that must not be picked.
  auto t = load_dataset(FERRY_TEST_DATA_DIR "/trainer/tiny", "t10k");
  ASSERT_TRUE(t) << t.error();
  EXPECT_EQ(t->count, 3u);
  EXPECT_EQ(t->rows, 2u);
  EXPECT_EQ(t->cols, 4u);
  EXPECT_EQ(t->labels, (std::vector<std::uint8_t>{9, 0, 3}));
  for (std::size_t i = 0; i < 24; ++i) EXPECT_EQ(t->images[i], (i / 8) * 16 + i % 8) << i;
  auto train = load_dataset(FERRY_TEST_DATA_DIR "/trainer/tiny", "train");
  ASSERT_TRUE(train) << train.error();
  EXPECT_EQ(train->labels, (std::vector<std::uint8_t>{1, 7}));
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(train->images[i], 255 - (i / 8) * 16 - i % 8) << i;
  // Labels 9 and 7 need 10 and 8 classes.
  EXPECT_EQ(load_dataset(FERRY_TEST_DATA_DIR "/trainer/tiny", "t10k", 9).error().code(), trainer_errc::bad_label);
  EXPECT_TRUE(load_dataset(FERRY_TEST_DATA_DIR "/trainer/tiny", "train", 8));
}

TEST_F(Dataset, TypedErrors) {
  const auto code = [&](std::string_view split, std::uint32_t classes = 10) {
    const auto r = load_dataset(dir_, split, classes);
    return r ? error_code{} : r.error().code();
  };
  // Missing files: io_error, ENOENT, the name with [.gz].
  auto r = load_dataset(dir_, "train");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::io_error);
  EXPECT_EQ(r.error().sys_errno(), ENOENT);
  EXPECT_EQ(r.error().context(), (dir_ / "train-images-idx3-ubyte").string() + "[.gz]");
  EXPECT_NE(r.error().what().find("train-images-idx3-ubyte[.gz]: No such file or directory"), std::string::npos);
  write("a-images-idx3-ubyte", idx_file(0x08, {1, 1, 1}, filled(1)));
  r = load_dataset(dir_, "a");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().sys_errno(), ENOENT);
  EXPECT_EQ(r.error().context(), (dir_ / "a-labels-idx1-ubyte").string() + "[.gz]");

  const auto labels = idx_file(0x08, {2}, filled(2));
  write("b-images-idx3-ubyte", idx_file(0x09, {2, 1, 1}, filled(2)));  // i8
  write("b-labels-idx1-ubyte", labels);
  EXPECT_EQ(code("b"), trainer_errc::bad_idx_type);
  write("c-images-idx3-ubyte", idx_file(0x08, {2, 1}, filled(2)));  // rank 2
  write("c-labels-idx1-ubyte", labels);
  EXPECT_EQ(code("c"), trainer_errc::bad_idx_dimensions);
  write("d-images-idx3-ubyte", idx_file(0x08, {2, 1, 1}, filled(2)));
  write("d-labels-idx1-ubyte", idx_file(0x0B, {2}, filled(4)));  // i16 labels
  EXPECT_EQ(code("d"), trainer_errc::bad_idx_type);
  write("e-images-idx3-ubyte", idx_file(0x08, {2, 1, 1}, filled(2)));
  write("e-labels-idx1-ubyte", idx_file(0x08, {2, 1}, filled(2)));  // rank 2 labels
  EXPECT_EQ(code("e"), trainer_errc::bad_idx_dimensions);
  write("f-images-idx3-ubyte", idx_file(0x08, {3, 1, 1}, filled(3)));
  write("f-labels-idx1-ubyte", labels);
  EXPECT_EQ(code("f"), trainer_errc::count_mismatch);
  write("g-images-idx3-ubyte", idx_file(0x08, {3, 1, 1}, filled(3)));
  write("g-labels-idx1-ubyte", idx_file(0x08, {3}, ferry::testing::bytes({0, 9, 10})));
  EXPECT_EQ(code("g"), trainer_errc::bad_label);
  EXPECT_EQ(code("g", 11), errc::ok);
  r = load_dataset(dir_, "g");
  EXPECT_EQ(r.error().context(), (dir_ / "g-labels-idx1-ubyte").string() + ": sample 2 has label 10; there are 10 classes");
  // A corrupt gzip'd images file: bad_gzip, with the file's name.
  auto corrupt = gzip(idx_file(0x08, {2, 1, 1}, filled(2)));
  corrupt[corrupt.size() - 6] ^= std::byte{0x40};
  write("h-images-idx3-ubyte.gz", corrupt);
  write("h-labels-idx1-ubyte", labels);
  r = load_dataset(dir_, "h");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), trainer_errc::bad_gzip);
  EXPECT_EQ(r.error().context().rfind((dir_ / "h-images-idx3-ubyte.gz").string() + ": gzip: ", 0), 0u);
}

#ifdef FERRY_FASHION_MNIST_DIR
std::uint32_t crc32_of(const std::vector<std::uint8_t>& v) {
  return static_cast<std::uint32_t>(crc32(0, v.data(), static_cast<uInt>(v.size())));
}

// The real data set, as Debian's dataset-fashion-mnist installs it (the
// four .gz files from zalandoresearch/fashion-mnist). Compiled in and
// registered (trainer_fashion_mnist_test) only natively where the folder
// existed when CMake ran; the expected values come from Python's gzip.
TEST(FashionMnist, LoadsBothSplits) {
  largest_allocation = 0;
  auto train = load_dataset(FERRY_FASHION_MNIST_DIR, "train");
  ASSERT_TRUE(train) << train.error();
  // The inflated file, allocated once at the size the gzip trailer gives.
  EXPECT_EQ(largest_allocation.load(), 47'040'016u);
  EXPECT_EQ(train->count, 60000u);
  EXPECT_EQ(train->rows, 28u);
  EXPECT_EQ(train->cols, 28u);
  ASSERT_EQ(train->images.size(), 60000u * 28 * 28);
  ASSERT_EQ(train->labels.size(), 60000u);
  EXPECT_EQ(train->labels[0], 9);  // an ankle boot
  std::array<std::size_t, 10> per_class{};
  for (const auto l : train->labels) ++per_class[l];
  for (const auto c : per_class) EXPECT_EQ(c, 6000u);
  std::uint32_t first_image_sum = 0;
  for (std::size_t i = 0; i < 28 * 28; ++i) first_image_sum += train->images[i];
  EXPECT_EQ(first_image_sum, 76247u);
  EXPECT_EQ(crc32_of(train->images), 2925911245u);
  EXPECT_EQ(crc32_of(train->labels), 785835114u);

  // The first 1000 samples (ferry-train --limit 1000): the same bytes,
  // inflated only that far; the largest allocation is the compressed file,
  // read whole.
  largest_allocation = 0;
  auto some = load_dataset(FERRY_FASHION_MNIST_DIR, "train", 10, {}, 1000);
  ASSERT_TRUE(some) << some.error();
  EXPECT_EQ(largest_allocation.load(), fs::file_size(fs::path(FERRY_FASHION_MNIST_DIR) / "train-images-idx3-ubyte.gz"));
  EXPECT_EQ(some->count, 1000u);
  EXPECT_TRUE(std::equal(some->images.begin(), some->images.end(), train->images.begin()));
  EXPECT_TRUE(std::equal(some->labels.begin(), some->labels.end(), train->labels.begin()));

  auto test = load_dataset(FERRY_FASHION_MNIST_DIR, "t10k");
  ASSERT_TRUE(test) << test.error();
  EXPECT_EQ(test->count, 10000u);
  EXPECT_EQ(test->rows, 28u);
  EXPECT_EQ(test->cols, 28u);
  EXPECT_EQ(test->labels[0], 9);
  EXPECT_EQ(crc32_of(test->images), 309494841u);
  EXPECT_EQ(crc32_of(test->labels), 606848831u);
}
#endif

}  // namespace
}  // namespace ferry::trainer
