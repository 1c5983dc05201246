// Hostile .npy and .npz files (checkpoint/npy.h): cut, grown and flipped
// files refused or read, never a crash; zips built field by field: stored,
// deflated and ZIP64 records, a deflate bomb, a short stream, bytes after
// the stream, a bad CRC-32, records that are not .npy.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "ferry/checkpoint/zip/zip.h"
#include "ferry/wire/bulk.h"

#include "npy_helpers.h"

namespace ferry::checkpoint::testing {
namespace {

// ---------------------------------------------------------------------------
// Files cut, grown and edited.

class NpyHostile : public bytes_files {};

TEST_F(NpyHostile, DataMustCoverTheFileExactly) {
  const auto good = slurp(npy_dir / "f4_le.npy");
  auto cut = good;
  cut.pop_back();
  refused(cut, errc::truncated);
  auto grown = good;
  grown.push_back(std::byte{0});
  refused(grown, errc::trailing_bytes);
  // The header alone of a non-empty array.
  refused(std::vector<std::byte>(good.begin(), good.begin() + 128), errc::truncated);
}

TEST_F(NpyHostile, NativeOrderFileNeedsTheOption) {
  auto b = npy_head(dict("=f4", "(2,)"));
  const float v[2] = {1.5f, -2.0f};
  std::vector<std::byte> data(8);
  wire::convert(std::as_bytes(std::span(v)), wire::host_order, data, byte_order::big, 4);
  b.insert(b.end(), data.begin(), data.end());
  refused(b, errc::bad_byte_order);
  read_options opt;
  opt.npy_native_order = byte_order::big;
  auto r = open_bytes(b, opt);
  ASSERT_TRUE(r) << r.error();
  auto t = r->get("arr_0");
  ASSERT_TRUE(t);
  EXPECT_EQ(std::memcmp(t->bytes().data(), v, 8), 0);
}

TEST_F(NpyHostile, EveryPrefixAndByteFlipIsReadOrRefused) {
  for (const char* name : {"f4_fortran_be.npy", "stored.npz", "deflated.npz"}) {
    SCOPED_TRACE(name);
    const auto good = slurp(npy_dir / name);
    for (std::size_t n = 0; n < good.size(); n += (name[0] == 'f' ? 1 : 7)) {
      auto r = open_bytes(std::vector<std::byte>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)));
      ASSERT_FALSE(r) << n;
    }
    for (std::size_t at = 0; at < good.size(); at += (name[0] == 'f' ? 1 : 3)) {
      auto b = good;
      b[at] ^= std::byte{0x41};
      auto r = open_bytes(b);
      if (!r) continue;
      auto all = r->get_all();  // a flipped deflate stream or data: refused or read, never a crash
      (void)r->verify();
    }
  }
}

// ---------------------------------------------------------------------------
// .npz records built by hand.

std::vector<std::byte> raw_deflate(std::span<const std::byte> in) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::vector<std::byte> out(deflateBound(&z, in.size()) + 64);
  z.next_in = const_cast<Bytef*>(reinterpret_cast<const Bytef*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A .npy file of `n` bytes of u1 data, all `fill`.
std::vector<std::byte> u1_npy(std::uint64_t n, std::byte fill = std::byte{7}) {
  const std::uint64_t shape[] = {n};
  auto b = *write_npy_header(dtype::u8, byte_order::little, false, shape);
  b.resize(b.size() + n, fill);
  return b;
}

// A zip written field by field: records stored or deflated, sizes and CRC
// as given (to lie), ZIP64 everywhere when asked.
struct zip_builder {
  struct record {
    std::string name;
    std::vector<std::byte> stored;  // what lies in the file
    std::uint16_t method;
    std::uint32_t crc;
    std::uint64_t size;  // declared uncompressed size
    std::uint64_t offset = 0;
  };
  std::vector<record> records;
  bool zip64 = false;

  // `content` the record's real bytes; `declared` the size to claim (default: the real one).
  zip_builder& add(std::string name, std::span<const std::byte> content, bool deflate,
                   std::optional<std::uint64_t> declared = {}, std::optional<std::uint32_t> crc = {}) {
    record r{std::move(name), {}, static_cast<std::uint16_t>(deflate ? 8 : 0),
             crc.value_or(detail::zip_crc32(content)), declared.value_or(content.size())};
    r.stored = deflate ? raw_deflate(content) : std::vector<std::byte>(content.begin(), content.end());
    records.push_back(std::move(r));
    return *this;
  }

  std::vector<std::byte> bytes() {
    std::vector<std::byte> out;
    const auto u16 = [&](std::uint64_t v) { for (int k = 0; k < 2; ++k) out.push_back(static_cast<std::byte>(v >> (8 * k))); };
    const auto u32 = [&](std::uint64_t v) { for (int k = 0; k < 4; ++k) out.push_back(static_cast<std::byte>(v >> (8 * k))); };
    const auto u64 = [&](std::uint64_t v) { for (int k = 0; k < 8; ++k) out.push_back(static_cast<std::byte>(v >> (8 * k))); };
    const auto name = [&](const std::string& n) { for (const char c : n) out.push_back(static_cast<std::byte>(c)); };
    const std::uint64_t sat = 0xFFFFFFFF;
    for (auto& r : records) {
      r.offset = out.size();
      u32(0x04034b50);
      u16(zip64 ? 45 : 20);
      u16(0);
      u16(r.method);
      u16(0);
      u16(0x21);
      u32(r.crc);
      u32(zip64 ? sat : r.stored.size());
      u32(zip64 ? sat : r.size);
      u16(r.name.size());
      u16(zip64 ? 20 : 0);
      name(r.name);
      if (zip64) {
        u16(1);
        u16(16);
        u64(r.size);
        u64(r.stored.size());
      }
      out.insert(out.end(), r.stored.begin(), r.stored.end());
    }
    const std::uint64_t dir_offset = out.size();
    for (const auto& r : records) {
      u32(0x02014b50);
      u16(zip64 ? 45 : 20);
      u16(zip64 ? 45 : 20);
      u16(0);
      u16(r.method);
      u16(0);
      u16(0x21);
      u32(r.crc);
      u32(zip64 ? sat : r.stored.size());
      u32(zip64 ? sat : r.size);
      u16(r.name.size());
      u16(zip64 ? 28 : 0);
      u16(0);
      u16(0);
      u16(0);
      u32(0);
      u32(zip64 ? sat : r.offset);
      name(r.name);
      if (zip64) {
        u16(1);
        u16(24);
        u64(r.size);
        u64(r.stored.size());
        u64(r.offset);
      }
    }
    const std::uint64_t dir_size = out.size() - dir_offset;
    if (zip64) {
      const std::uint64_t at = out.size();
      u32(0x06064b50);
      u64(44);
      u16(45);
      u16(45);
      u32(0);
      u32(0);
      u64(records.size());
      u64(records.size());
      u64(dir_size);
      u64(dir_offset);
      u32(0x07064b50);
      u32(0);
      u64(at);
      u32(1);
    }
    u32(0x06054b50);
    u16(0);
    u16(0);
    u16(zip64 ? 0xFFFF : records.size());
    u16(zip64 ? 0xFFFF : records.size());
    u32(zip64 ? sat : dir_size);
    u32(zip64 ? sat : dir_offset);
    u16(0);
    return out;
  }
};

TEST_F(NpyHostile, StoredAndDeflatedRecordsBuiltByHand) {
  const auto a = u1_npy(1000, std::byte{3});
  const auto b = u1_npy(5, std::byte{9});
  for (const bool zip64 : {false, true}) {
    SCOPED_TRACE(zip64 ? "ZIP64" : "plain");
    zip_builder z;
    z.zip64 = zip64;
    z.add("a.npy", a, false).add("b.npy", b, true);
    auto r = open_bytes(z.bytes());
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->format(), file_format::npz);
    auto ta = r->get("a");
    auto tb = r->get("b");
    ASSERT_TRUE(ta && tb);
    EXPECT_EQ(ta->bytes().size(), 1000u);
    EXPECT_EQ(ta->bytes()[999], std::byte{3});
    EXPECT_EQ(tb->bytes().size(), 5u);
    EXPECT_EQ(tb->bytes()[4], std::byte{9});
    EXPECT_TRUE(r->verify()) << r->verify().error();
  }
}

TEST_F(NpyHostile, DeflateBombRefused) {
  // The stream inflates to 1 MiB; the record declares its header and 1024
  // bytes (a .npy header saying (1024,)): what comes out past the declared
  // size is refused, never written anywhere.
  auto small = u1_npy(1024);
  auto big = u1_npy(1024);
  big.resize(small.size() + (1 << 20), std::byte{7});
  zip_builder z;
  z.add("x.npy", big, true, small.size(), detail::zip_crc32(small));
  auto r = open_bytes(z.bytes());
  ASSERT_TRUE(r) << r.error();  // the header inflates fine
  auto t = r->get("x");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code(), checkpoint_errc::bad_deflate) << t.error();
  auto v = r->verify();
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code(), checkpoint_errc::bad_deflate) << v.error();
}

TEST_F(NpyHostile, DeclaredSizeBeyondDeflatesRatioRefusedAtOpen) {
  // A few hundred compressed bytes declaring 1 GiB (a .npy header saying so):
  // refused before anything is allocated.
  const std::uint64_t huge = std::uint64_t{1} << 30;
  auto head = u1_npy(huge - 128, std::byte{0});
  head.resize(128);
  zip_builder z;
  z.add("x.npy", head, true, huge);
  refused(z.bytes(), checkpoint_errc::bad_deflate);
}

TEST_F(NpyHostile, StreamShorterThanDeclaredRefused) {
  const auto full = u1_npy(4096);
  const auto shorter = std::span(full).first(full.size() - 100);
  zip_builder z;
  z.add("x.npy", shorter, true, full.size(), detail::zip_crc32(full));
  auto r = open_bytes(z.bytes());
  ASSERT_TRUE(r) << r.error();
  auto t = r->get("x");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code(), checkpoint_errc::bad_deflate) << t.error();
}

TEST_F(NpyHostile, BytesAfterTheStreamRefused) {
  const auto content = u1_npy(4096);
  zip_builder z;
  z.add("x.npy", content, true);
  z.records[0].stored.push_back(std::byte{0});  // one byte more than the stream
  auto r = open_bytes(z.bytes());
  ASSERT_TRUE(r) << r.error();
  auto t = r->get("x");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code(), checkpoint_errc::bad_deflate) << t.error();
}

TEST_F(NpyHostile, CrcMismatchRefused) {
  const auto content = u1_npy(4096);
  const std::uint32_t wrong = detail::zip_crc32(content) ^ 1;
  {  // deflated: the CRC-32 is always checked (every byte is read anyway)
    zip_builder z;
    z.add("x.npy", content, true, {}, wrong);
    auto r = open_bytes(z.bytes());
    ASSERT_TRUE(r) << r.error();
    auto t = r->get("x");
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error().code(), checkpoint_errc::crc32_mismatch) << t.error();
  }
  {  // stored: by verify(), and on fetch with every_checksum
    zip_builder z;
    z.add("x.npy", content, false, {}, wrong);
    const auto bytes = z.bytes();
    auto r = open_bytes(bytes);
    ASSERT_TRUE(r) << r.error();
    EXPECT_TRUE(r->get("x"));
    auto v = r->verify();
    ASSERT_FALSE(v);
    EXPECT_EQ(v.error().code(), checkpoint_errc::crc32_mismatch);
    read_options every;
    every.checks = fetch_checks::every_checksum;
    auto again = open_bytes(bytes, every);
    ASSERT_TRUE(again);
    auto t = again->get("x");
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error().code(), checkpoint_errc::crc32_mismatch);
  }
}

TEST_F(NpyHostile, RecordsThatAreNotNpy) {
  const auto content = u1_npy(16);
  {  // a record with another name: not an .npz (nor a .pt)
    zip_builder z;
    z.add("a.npy", content, false).add("readme.txt", content, false);
    auto r = open_bytes(z.bytes());
    ASSERT_FALSE(r);
  }
  {  // a name that is only ".npy"
    zip_builder z;
    z.add(".npy", content, false);
    refused(z.bytes(), checkpoint_errc::bad_name);
  }
  {  // a record whose bytes are not a .npy
    zip_builder z;
    const auto junk = bytes_of("not a numpy file at all");
    z.add("a.npy", junk, false);
    refused(z.bytes(), errc::bad_magic);
  }
  {  // a record with trailing bytes after its array
    auto more = content;
    more.push_back(std::byte{1});
    zip_builder z;
    z.add("a.npy", more, true);
    refused(z.bytes(), errc::trailing_bytes);
  }
}

}  // namespace
}  // namespace ferry::checkpoint::testing
