// .npy and .npz files (checkpoint/npy.h): those NumPy wrote
// (tests/data/npy, make_npy_files.py golden) read to the values NumPy read,
// in both byte orders, Fortran order as column-major strides, host-order
// data mapped without a copy; ferry's own files read back.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "ferry/checkpoint/zip/zip.h"
#include "ferry/wire/bulk.h"

#include "npy_helpers.h"

namespace ferry::checkpoint::testing {
namespace {

// ---------------------------------------------------------------------------
// The files NumPy wrote.

struct expected_array {
  std::string name, descr;
  bool fortran = false;
  std::vector<std::uint64_t> shape;
  std::uint32_t crc = 0;
};

std::vector<expected_array> read_expected_npy(const fs::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in) << p;
  std::vector<expected_array> out;
  std::string name, descr, fortran, shape, crc;
  while (in >> name >> descr >> fortran >> shape >> crc) {
    out.push_back({name, descr, fortran == "True", shape_of(shape), static_cast<std::uint32_t>(std::stoul(crc, nullptr, 16))});
  }
  return out;
}

// zlib's CRC-32 of `t`'s elements, row-major, as little-endian bytes.
std::uint32_t le_crc(const tensor& t) {
  auto rows = t.contiguous_copy();
  const std::size_t width = codec::order_width(t.dtype());
  std::vector<std::byte> le(rows.size());
  if (!rows.empty()) wire::convert(rows, wire::host_order, le, byte_order::little, width);
  return detail::zip_crc32(le);
}

std::vector<std::uint64_t> column_major(std::span<const std::uint64_t> shape) {
  std::vector<std::uint64_t> s(shape.size());
  std::uint64_t step = 1;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    s[k] = step;
    step *= shape[k] == 0 ? 1 : shape[k];
  }
  return s;
}

// Checks that `r` holds what `want` lists, in order, bit for bit.
void expect_as_numpy_read(const reader& r, const std::vector<expected_array>& want) {
  ASSERT_EQ(r.tensors().size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const auto& w = want[i];
    SCOPED_TRACE(w.name);
    const tensor_info& info = r.tensors()[i];
    EXPECT_EQ(info.name, w.name);
    EXPECT_EQ(info.dtype, dtype_of_descr(w.descr).first);
    EXPECT_EQ(info.shape, w.shape);
    EXPECT_EQ(info.strides, w.fortran ? column_major(w.shape) : contiguous_strides(w.shape));
    const storage_info& st = r.storages()[info.storage];
    if (codec::size_of(info.dtype) > 1) {
      EXPECT_EQ(st.order.value_or(r.order()), w.descr[0] == '>' ? byte_order::big : byte_order::little);
    }
    auto t = r.get(info);
    ASSERT_TRUE(t) << t.error();
    EXPECT_EQ(le_crc(*t), w.crc);
  }
}

// Whether tensor `t` of `r` is a mapping of the file (its address lies at
// the storage's offset within a page, which a copy's almost never does).
bool mapped(const reader& r, const tensor& t) {
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const auto addr = reinterpret_cast<std::uintptr_t>(t.storage_bytes().data());  // an address, not a read
  return addr % page == r.storages()[t.info().storage].offset % page;
}

TEST(NpyFiles, EveryNumpyFileReadsAsNumpyReadIt) {
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(npy_dir)) {
    const fs::path p = entry.path();
    if (p.extension() != ".expected") continue;
    const fs::path file = p.parent_path() / p.stem();
    SCOPED_TRACE(file.filename().string());
    auto r = reader::open(file);
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->format(), file.extension() == ".npy" ? file_format::npy : file_format::npz);
    expect_as_numpy_read(*r, read_expected_npy(p));
    EXPECT_TRUE(r->verify()) << r->verify().error();
    read_options every;
    every.checks = fetch_checks::every_checksum;
    auto again = reader::open(file, every);
    ASSERT_TRUE(again) << again.error();
    auto all = again->get_all();
    EXPECT_TRUE(all) << all.error();
    ++files;
  }
  EXPECT_GE(files, 25u);
}

TEST(NpyFiles, BigAndLittleReadToTheSameValues) {
  for (const char* kind : {"i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", "f4_fortran"}) {
    SCOPED_TRACE(kind);
    auto le = reader::open(npy_dir / (std::string(kind) + "_le.npy"));
    auto be = reader::open(npy_dir / (std::string(kind) + "_be.npy"));
    ASSERT_TRUE(le && be);
    EXPECT_EQ(le->order(), byte_order::little);
    EXPECT_EQ(be->order(), byte_order::big);
    auto a = le->get("arr_0");
    auto b = be->get("arr_0");
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->contiguous_copy(), b->contiguous_copy());
    EXPECT_EQ(a->info().strides, b->info().strides);
  }
}

TEST(NpyFiles, FortranOrderIsColumnMajorStrides) {
  auto r = reader::open(npy_dir / "f4_fortran_le.npy");
  ASSERT_TRUE(r) << r.error();
  auto t = r->get("arr_0");
  ASSERT_TRUE(t) << t.error();
  EXPECT_EQ(std::vector<std::uint64_t>(t->shape().begin(), t->shape().end()), (std::vector<std::uint64_t>{2, 3, 4}));
  EXPECT_EQ(std::vector<std::uint64_t>(t->strides().begin(), t->strides().end()), (std::vector<std::uint64_t>{1, 2, 6}));
  EXPECT_FALSE(t->info().is_contiguous());
  // Element (1, 2, 3) lies at 1 + 2*2 + 3*6 = 23 in the file's order.
  float file_value = 0, row_value = 0;
  std::memcpy(&file_value, t->storage_bytes().data() + 23 * 4, 4);
  const auto rows = t->contiguous_copy();
  std::memcpy(&row_value, rows.data() + (1 * 12 + 2 * 4 + 3) * 4, 4);
  EXPECT_EQ(std::memcmp(&file_value, &row_value, 4), 0);
}

TEST(NpyFiles, HostOrderArraysLoadWithoutACopy) {
  const char* name = wire::host_order == byte_order::little ? "f8_le.npy" : "f8_be.npy";
  auto r = reader::open(npy_dir / name);
  ASSERT_TRUE(r) << r.error();
  auto t = r->get("arr_0");
  ASSERT_TRUE(t) << t.error();
  EXPECT_EQ(r->storages()[0].offset, 128u);  // numpy.save aligns the data to 64
  EXPECT_TRUE(mapped(*r, *t));
  // The other order is a converted copy.
  auto other = reader::open(npy_dir / (wire::host_order == byte_order::little ? "f8_be.npy" : "f8_le.npy"));
  ASSERT_TRUE(other);
  auto u = other->get("arr_0");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->contiguous_copy(), t->contiguous_copy());
}

TEST(NpyFiles, ComplexArraysAreC64AndC128) {
  for (const auto& [name, type] : {std::pair{"c8_le.npy", codec::dtype::c64}, {"c16_be.npy", codec::dtype::c128}}) {
    auto r = reader::open(npy_dir / name);
    ASSERT_TRUE(r) << name << ": " << r.error();
    ASSERT_EQ(r->tensors().size(), 1u);
    EXPECT_EQ(r->tensors()[0].dtype, type) << name;
    auto t = r->get(r->tensors()[0].name);
    ASSERT_TRUE(t) << t.error();
  }
}

TEST(NpyFiles, EmptyNpzHasNoTensors) {
  const auto bytes = slurp(npy_dir / "empty.npz");
  ASSERT_EQ(bytes.size(), 22u);
  auto r = reader::open(npy_dir / "empty.npz");
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->format(), file_format::npz);
  EXPECT_TRUE(r->tensors().empty());
  EXPECT_TRUE(r->verify());
}

TEST(NpyFiles, DeflatedOutputFarLargerThanItsInput) {
  auto r = reader::open(npy_dir / "deflated_steps.npz");
  ASSERT_TRUE(r) << r.error();
  auto t = r->get("steps");
  ASSERT_TRUE(t) << t.error();
  ASSERT_EQ(t->bytes().size(), 512u * 1024 * 4);
  float v = 0;
  std::memcpy(&v, t->bytes().data() + (8192 * 5 + 17) * 4, 4);
  EXPECT_EQ(v, 5.0f);
}


// ---------------------------------------------------------------------------
// What ferry writes, read back.

class NpyWrite : public scratch_dir {};

TEST_F(NpyWrite, EveryDtypeBothOrdersReadsBack) {
  const std::uint64_t shape[] = {3, 5};
  for (const dtype t : {dtype::boolean, dtype::u8, dtype::i8, dtype::u16, dtype::i16, dtype::u32, dtype::i32,
                        dtype::u64, dtype::i64, dtype::f16, dtype::f32, dtype::f64}) {
    const std::size_t w = codec::size_of(t);
    std::vector<std::byte> data(15 * w);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(t == dtype::boolean ? i % 2 : i * 37 + 11);
    const tensor_ref ref{"x", t, shape, {}, 0, data};
    for (const byte_order order : {byte_order::little, byte_order::big}) {
      SCOPED_TRACE(std::string(codec::name(t)) + (order == byte_order::big ? " big" : " little"));
      npy_options opt;
      opt.order = order;
      opt.sync = false;
      const fs::path p = dir_ / "x.npy";
      auto saved = save_npy(p, ref, opt);
      ASSERT_TRUE(saved) << saved.error();
      const auto file = slurp(p);
      const auto header = write_npy_header(t, order, false, shape);
      ASSERT_TRUE(header);
      ASSERT_GE(file.size(), header->size());
      EXPECT_TRUE(std::equal(header->begin(), header->end(), file.begin()));
      auto r = reader::open(p);
      ASSERT_TRUE(r) << r.error();
      auto got = r->get("arr_0");
      ASSERT_TRUE(got) << got.error();
      EXPECT_EQ(got->contiguous_copy(), data);
      if (order == wire::host_order) { EXPECT_TRUE(mapped(*r, *got)); }
    }
  }
}

// A foreign-order array of 64 MiB and more is read and converted by one
// thread per core, each a share of the pieces: every value lands where it
// belongs, through get() and read_into() alike, and a file cut short is
// an error, not a partial array.
TEST_F(NpyWrite, LargeForeignOrderArraysConvertWhole) {
  const std::size_t n = (std::size_t{64} << 20) / 8 + 12345;  // f64, a last piece shorter than the others
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<double>(i) * 0.25 - 7.0;
  const std::uint64_t shape[] = {n};
  const tensor_ref ref{"x", dtype::f64, shape, {}, 0, std::as_bytes(std::span(v))};
  npy_options opt;
  opt.order = wire::host_order == byte_order::little ? byte_order::big : byte_order::little;
  opt.sync = false;
  const fs::path p = dir_ / "big.npy";
  ASSERT_TRUE(save_npy(p, ref, opt));
  auto r = reader::open(p);
  ASSERT_TRUE(r) << r.error();
  auto got = r->get("arr_0");
  ASSERT_TRUE(got) << got.error();
  ASSERT_EQ(got->bytes().size(), n * 8);
  EXPECT_EQ(std::memcmp(got->bytes().data(), v.data(), n * 8), 0);
  std::vector<std::byte> into(n * 8);
  ASSERT_TRUE(r->read_into(r->tensors().front(), into));
  EXPECT_EQ(std::memcmp(into.data(), v.data(), n * 8), 0);
  // get_all with one thread and with four (the conversion shares them).
  for (const unsigned threads : {1u, 4u}) {
    auto fresh = reader::open(p);
    ASSERT_TRUE(fresh) << fresh.error();
    auto all = fresh->get_all(threads);
    ASSERT_TRUE(all) << all.error();
    EXPECT_EQ(std::memcmp(all->front().bytes().data(), v.data(), n * 8), 0);
  }
  // Opened whole, then cut short (another program truncating it): the
  // threads' pieces past the end fail, and the error says so.
  auto opened = reader::open(p);
  ASSERT_TRUE(opened) << opened.error();
  fs::resize_file(p, fs::file_size(p) - 5000);
  auto late = opened->get("arr_0");
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code(), errc::truncated) << late.error();
  EXPECT_FALSE(opened->read_into(opened->tensors().front(), into));
  auto cut = reader::open(p);
  EXPECT_FALSE(cut && cut->get("arr_0"));
}

TEST_F(NpyWrite, ColumnMajorViewsWriteFortranOrderOthersGather) {
  const std::uint64_t shape[] = {2, 3, 4};
  std::vector<float> v(24);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  const std::uint64_t f_strides[] = {1, 2, 6};
  const tensor_ref f{"f", dtype::f32, shape, f_strides, 0, std::as_bytes(std::span(v))};
  const std::uint64_t odd_strides[] = {1, 8, 2};  // neither C nor F
  const tensor_ref odd{"g", dtype::f32, shape, odd_strides, 0, std::as_bytes(std::span(v))};
  npy_options opt;
  opt.sync = false;
  for (const auto& [ref, fortran] : {std::pair{f, true}, std::pair{odd, false}}) {
    SCOPED_TRACE(ref.name);
    const fs::path p = dir_ / "v.npy";
    ASSERT_TRUE(save_npy(p, ref, opt));
    auto h = parse_npy_header(slurp(p));
    ASSERT_TRUE(h) << h.error();
    EXPECT_EQ(h->fortran_order, fortran);
    auto r = reader::open(p);
    ASSERT_TRUE(r) << r.error();
    auto t = r->get("arr_0");
    ASSERT_TRUE(t);
    EXPECT_EQ(t->contiguous_copy(), gather(ref));
  }
}

TEST_F(NpyWrite, NpzStoredIsAlignedAndMappedDeflatedReadsBack) {
  std::vector<double> a(100);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(i) / 3;
  std::vector<std::int16_t> b(7, -3);
  const std::uint64_t sa[] = {10, 10};
  const std::uint64_t sb[] = {7};
  const tensor_ref refs[] = {{"layer.weight", dtype::f64, sa, {}, 0, std::as_bytes(std::span(a))},
                             {"steps", dtype::i16, sb, {}, 0, std::as_bytes(std::span(b))}};
  for (const bool compress : {false, true}) {
    for (const byte_order order : {byte_order::little, byte_order::big}) {
      SCOPED_TRACE(std::string(compress ? "deflated " : "stored ") + (order == byte_order::big ? "big" : "little"));
      npy_options opt;
      opt.compress = compress;
      opt.order = order;
      opt.sync = false;
      const fs::path p = dir_ / "w.npz";
      auto saved = save_npz(p, refs, opt);
      ASSERT_TRUE(saved) << saved.error();
      auto r = reader::open(p);
      ASSERT_TRUE(r) << r.error();
      EXPECT_EQ(r->format(), file_format::npz);
      ASSERT_EQ(r->tensors().size(), 2u);
      for (const auto& ref : refs) {
        auto t = r->get(ref.name);
        ASSERT_TRUE(t) << t.error();
        EXPECT_EQ(t->contiguous_copy(), gather(ref));
        if (!compress) {
          EXPECT_EQ(r->storages()[t->info().storage].offset % 64, 0u);
          if (order == wire::host_order) { EXPECT_TRUE(mapped(*r, *t)); }
        }
      }
      EXPECT_TRUE(r->verify()) << r->verify().error();
    }
  }
}

// zlib may take in a record's last compressed byte while output is still
// to come (an unfinished match): runs of one byte, at every length up to
// 300, put that moment at the header's end and inside the data.
TEST_F(NpyWrite, DeflatedRunsReadBackAtEveryLength) {
  npy_options opt;
  opt.compress = true;
  opt.sync = false;
  const fs::path p = dir_ / "runs.npz";
  for (const dtype type : {dtype::u8, dtype::u64}) {  // '|u1' and '<u8' headers
    for (std::uint64_t n = 0; n <= 300; ++n) {
      SCOPED_TRACE(std::to_string(n) + " of " + std::string(codec::name(type)));
      const std::vector<std::byte> data(static_cast<std::size_t>(n * codec::size_of(type)), std::byte{0x20});
      const std::uint64_t shape[] = {n};
      const tensor_ref refs[] = {{"x", type, shape, {}, 0, data}};
      ASSERT_TRUE(save_npz(p, refs, opt));
      auto r = reader::open(p);
      ASSERT_TRUE(r) << r.error();
      auto t = r->get("x");
      ASSERT_TRUE(t) << t.error();
      EXPECT_EQ(t->contiguous_copy(), data);
      EXPECT_TRUE(r->verify()) << r->verify().error();
    }
  }
}

TEST_F(NpyWrite, NpzRefusesBadNamesAndDuplicates) {
  std::vector<float> v(4);
  const std::uint64_t s[] = {4};
  npy_options opt;
  opt.sync = false;
  const tensor_ref same[] = {{"a", dtype::f32, s, {}, 0, std::as_bytes(std::span(v))},
                             {"a", dtype::f32, s, {}, 0, std::as_bytes(std::span(v))}};
  auto r = save_npz(dir_ / "d.npz", same, opt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::duplicate_key);
  const tensor_ref empty_name[] = {{"", dtype::f32, s, {}, 0, std::as_bytes(std::span(v))}};
  r = save_npz(dir_ / "e.npz", empty_name, opt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), checkpoint_errc::bad_name);
  const tensor_ref bf16[] = {{"b", dtype::bf16, s, {}, 0, std::as_bytes(std::span(v)).first(8)}};
  r = save_npz(dir_ / "f.npz", bf16, opt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), checkpoint_errc::unsupported_npy_dtype);
  EXPECT_FALSE(fs::exists(dir_ / "f.npz"));
}

// NumPy has no complex32, bf16 or float8: .npy and .npz refuse them with
// one line naming the dtype, and leave no file.
TEST_F(NpyWrite, DtypesNumpyLacksAreRefusedByName) {
  std::vector<std::byte> bytes(16);
  const std::uint64_t s[] = {2};
  npy_options opt;
  opt.sync = false;
  for (const dtype t : {dtype::c32, dtype::bf16, dtype::f8_e4m3, dtype::f8_e5m2, dtype::f8_e4m3fnuz,
                        dtype::f8_e5m2fnuz}) {
    const tensor_ref x{"x", t, s, {}, 0, std::span(bytes).first(2 * codec::size_of(t))};
    const auto npy = save_npy(dir_ / "x.npy", x, opt);
    ASSERT_FALSE(npy) << codec::name(t);
    EXPECT_EQ(npy.error().code(), checkpoint_errc::unsupported_npy_dtype);
    EXPECT_NE(npy.error().what().find(std::string(codec::name(t)) + ": NumPy has no such dtype"), std::string::npos)
        << npy.error().what();
    const auto npz = save_npz(dir_ / "x.npz", std::span(&x, 1), opt);
    ASSERT_FALSE(npz) << codec::name(t);
    EXPECT_EQ(npz.error().code(), checkpoint_errc::unsupported_npy_dtype);
    EXPECT_FALSE(fs::exists(dir_ / "x.npy"));
    EXPECT_FALSE(fs::exists(dir_ / "x.npz"));
  }
}

TEST_F(NpyWrite, EmptyNpzIsTheEndRecordAlone) {
  npy_options opt;
  opt.sync = false;
  ASSERT_TRUE(save_npz(dir_ / "none.npz", {}, opt));
  EXPECT_EQ(slurp(dir_ / "none.npz"), slurp(npy_dir / "empty.npz"));  // what np.savez() of nothing writes
  auto r = reader::open(dir_ / "none.npz");
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(r->tensors().empty());
}

}  // namespace
}  // namespace ferry::checkpoint::testing
