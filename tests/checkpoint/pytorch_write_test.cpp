// save_pt() against ferry's own .pt reader, on every architecture (the
// cross trees run it under qemu: on s390x the storages are swapped to
// little-endian as they are written). torch itself reads what it writes in
// pytorch_live_test.cpp's FerryWritesWhatTorchLoads.
#include <bit>
#include <cstring>

#include "ferry/checkpoint/zip/zip.h"
#include "ferry/checkpoint/pytorch.h"
#include "helpers.h"

namespace ferry::checkpoint::testing {
namespace {

using codec::dtype;

class PytorchWrite : public scratch_dir {
 protected:
  result<reader, error> write_and_open(std::span<const tensor_ref> refs, const std::string& name = "m.pt") {
    pt_options opt;
    opt.sync = false;
    if (auto s = save_pt(dir_ / name, refs, opt); !s) return s.error();
    return reader::open(dir_ / name);
  }
};

// Every ferry dtype, its bytes patterns that must survive: NaN payloads,
// signed zeros, subnormals, infinities (as whole elements of each width).
TEST_F(PytorchWrite, EveryDtypeRoundTripsBitForBit) {
  std::vector<std::vector<std::byte>> data;
  std::vector<std::string> names;
  std::vector<tensor_ref> refs;
  const std::uint64_t shape[] = {2, 3};
  for (const dtype d : codec::all_dtypes) {
    const std::size_t w = codec::size_of(d);
    std::vector<std::byte> bytes(6 * w);
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(0x81 + 37 * i);
    if (d == dtype::boolean) {
      for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i % 2);
    }
    if (d == dtype::f32) {  // a NaN with a payload, -0, a subnormal, -inf
      const std::uint32_t bits[] = {0x7fa00001, 0x80000000, 0x00000001, 0xff800000, 0x3f800000, 0x7f7fffff};
      std::memcpy(bytes.data(), bits, sizeof bits);
    }
    data.push_back(std::move(bytes));
    names.push_back("t." + std::string(codec::name(d)));
  }
  for (std::size_t i = 0; i < data.size(); ++i) {
    refs.push_back({names[i], codec::all_dtypes[i], shape, {}, 0, data[i]});
  }
  auto r = write_and_open(refs);
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(r->verify()) << r->verify().error();
  EXPECT_EQ(r->metadata().at("pytorch.byteorder"), "little");
  ASSERT_EQ(r->tensors().size(), refs.size());
  for (std::size_t i = 0; i < refs.size(); ++i) {
    SCOPED_TRACE(names[i]);
    const auto t = r->get(names[i]);
    ASSERT_TRUE(t) << t.error();
    EXPECT_EQ(t->dtype(), refs[i].dtype);
    EXPECT_EQ(t->shape().size(), 2u);
    EXPECT_TRUE(std::ranges::equal(t->bytes(), data[i]));
  }
}

// Tensors over one storage stay over one storage, each its own view: an
// offset, a transpose, a 0-d element; tensors over equal bytes elsewhere
// are their own storages.
TEST_F(PytorchWrite, ViewsAndSharedStoragesAreKept) {
  std::vector<float> base(12);
  for (std::size_t i = 0; i < base.size(); ++i) base[i] = static_cast<float>(i) - 5.5f;
  std::vector<float> copy = base;
  const auto storage = std::as_bytes(std::span(base));
  const std::uint64_t s34[] = {3, 4}, s43[] = {4, 3}, st43[] = {1, 4}, s2[] = {2};
  const tensor_ref refs[] = {
      {"whole", dtype::f32, s34, {}, 0, storage},
      {"transposed", dtype::f32, s43, st43, 0, storage},
      {"row", dtype::f32, s2, {}, 5, storage},
      {"scalar", dtype::f32, {}, {}, 11, storage},
      {"copy", dtype::f32, s34, {}, 0, std::as_bytes(std::span(copy))},
  };
  auto r = write_and_open(refs);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->storages().size(), 2u);
  const auto whole = r->get("whole"), transposed = r->get("transposed"), row = r->get("row"),
             scalar = r->get("scalar"), copied = r->get("copy");
  ASSERT_TRUE(whole && transposed && row && scalar && copied);
  EXPECT_EQ(whole->storage().get(), transposed->storage().get());
  EXPECT_EQ(whole->storage().get(), scalar->storage().get());
  EXPECT_NE(whole->storage().get(), copied->storage().get());
  EXPECT_EQ(transposed->info().strides, (std::vector<std::uint64_t>{1, 4}));
  EXPECT_EQ(row->info().offset, 5u);
  EXPECT_TRUE(scalar->shape().empty());
  EXPECT_TRUE(std::ranges::equal(whole->storage_bytes(), storage));
  float v = 0;
  std::memcpy(&v, scalar->bytes().data(), 4);
  EXPECT_EQ(v, 5.5f);
}

// Views of one byte buffer as dtypes without a torch storage class share
// one UntypedStorage, as torch.save writes float8 views; a dtype with a
// class over the same bytes (u8: ByteStorage) gets its own copy.
TEST_F(PytorchWrite, Float8ViewsShareAnUntypedStorage) {
  std::vector<std::uint8_t> patterns(256);
  for (std::size_t i = 0; i < patterns.size(); ++i) patterns[i] = static_cast<std::uint8_t>(i);
  const auto storage = std::as_bytes(std::span(patterns));
  const std::uint64_t s[] = {256};
  const tensor_ref refs[] = {{"e4m3", dtype::f8_e4m3, s, {}, 0, storage},
                             {"e5m2", dtype::f8_e5m2, s, {}, 0, storage},
                             {"fnuz", dtype::f8_e4m3fnuz, s, {}, 0, storage},
                             {"bytes", dtype::u8, s, {}, 0, storage}};
  auto r = write_and_open(refs);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->storages().size(), 2u);
  for (const char* name : {"e4m3", "e5m2", "fnuz", "bytes"}) {
    const auto t = r->get(name);
    ASSERT_TRUE(t) << t.error();
    EXPECT_TRUE(std::ranges::equal(t->bytes(), storage)) << name;
  }
  EXPECT_EQ(r->get("e4m3")->storage().get(), r->get("fnuz")->storage().get());
  EXPECT_NE(r->get("e4m3")->storage().get(), r->get("bytes")->storage().get());
}

// What torch.save writes: records archive/data.pkl first, byteorder,
// data/0..., version; every record's data on a 64-byte boundary.
TEST_F(PytorchWrite, RecordsAreTorchSavesAligned) {
  std::vector<std::uint16_t> a(3, 7), b(5, 9);
  const std::uint64_t s3[] = {3}, s5[] = {5};
  const tensor_ref refs[] = {{"a", dtype::u16, s3, {}, 0, std::as_bytes(std::span(a))},
                             {"b", dtype::bf16, s5, {}, 0, std::as_bytes(std::span(b))}};
  pt_options opt;
  opt.sync = false;
  ASSERT_TRUE(save_pt(dir_ / "m.pt", refs, opt));
  const auto bytes = slurp(dir_ / "m.pt");
  auto dir = detail::read_zip_directory(bytes.size(), detail::memory_reader(bytes), {});
  ASSERT_TRUE(dir) << dir.error();
  auto records = detail::check_zip_records(std::move(*dir), detail::memory_reader(bytes));
  ASSERT_TRUE(records) << records.error();
  std::vector<std::string> names;
  for (const auto& rec : records->records) {
    names.push_back(rec.name);
    EXPECT_EQ(rec.data_offset % 64, 0u) << rec.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"archive/data.pkl", "archive/byteorder", "archive/data/0",
                                             "archive/data/1", "archive/version"}));
}

// Each width of pickle integer (BININT1, BININT2, BININT, LONG1): offsets
// of 300 and 70000 elements, strides of 2^31 and 2^40 over extents of 1;
// empty tensors (their own empty storages, a 0 x 3 view, a 0-d one is not
// empty); and a file of no tensors.
TEST_F(PytorchWrite, IntegersOfEveryWidthAndEmptyTensors) {
  std::vector<std::int16_t> big(70001);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::int16_t>(i * 7);
  const auto storage = std::as_bytes(std::span(big));
  const std::uint64_t s1[] = {1}, s13[] = {1, 3}, st13[] = {std::uint64_t{1} << 31, 1}, s11[] = {1, 1},
                      st11[] = {std::uint64_t{1} << 40, 5}, s03[] = {0, 3};
  const tensor_ref refs[] = {
      {"at300", dtype::i16, s1, {}, 300, storage},
      {"at70000", dtype::i16, s1, {}, 70000, storage},
      {"wide", dtype::i16, s13, st13, 7, storage},
      {"wider", dtype::i16, s11, st11, 9, storage},
      {"empty", dtype::f32, s03, {}, 0, {}},
      {"empty_view", dtype::i16, s03, {}, 0, storage},
  };
  auto r = write_and_open(refs);
  ASSERT_TRUE(r) << r.error();
  const auto expect = [&](const char* name, std::vector<std::int16_t> want) {
    const auto t = r->get(name);
    ASSERT_TRUE(t) << t.error();
    const auto got = t->contiguous_copy();
    ASSERT_EQ(got.size(), want.size() * 2) << name;
    EXPECT_TRUE(std::ranges::equal(got, std::as_bytes(std::span(want)))) << name;
  };
  expect("at300", {static_cast<std::int16_t>(2100)});
  expect("at70000", {static_cast<std::int16_t>(70000 * 7)});
  expect("wide", {49, 56, 63});
  expect("wider", {63});
  expect("empty", {});
  expect("empty_view", {});
  EXPECT_EQ(r->find("wide")->strides, (std::vector<std::uint64_t>{std::uint64_t{1} << 31, 1}));
  EXPECT_EQ(r->find("wider")->strides, (std::vector<std::uint64_t>{std::uint64_t{1} << 40, 5}));
  EXPECT_EQ(r->find("at70000")->offset, 70000u);
  EXPECT_EQ(r->find("empty")->shape, (std::vector<std::uint64_t>{0, 3}));

  auto none = write_and_open({}, "none.pt");
  ASSERT_TRUE(none) << none.error();
  EXPECT_TRUE(none->tensors().empty());
}

// A refused tensor leaves no file, and the target keeps what it held.
TEST_F(PytorchWrite, RefusalsNameTheTensorAndWriteNothing) {
  spit(dir_ / "m.pt", std::as_bytes(std::span("old", 3)));
  std::vector<float> x(4);
  const std::uint64_t s4[] = {4}, s5[] = {5}, st[] = {1}, s1[] = {1}, huge[] = {std::uint64_t{1} << 63}, s0[] = {0};
  const auto storage = std::as_bytes(std::span(x));
  const std::vector<std::pair<std::vector<tensor_ref>, error_code>> cases = {
      {{{"a", dtype::f32, s4, {}, 0, storage}, {"a", dtype::f32, s4, {}, 0, storage}}, errc::duplicate_key},
      {{{"", dtype::f32, s4, {}, 0, storage}}, checkpoint_errc::bad_name},
      {{{"big", dtype::f32, s5, {}, 0, storage}}, checkpoint_errc::view_out_of_bounds},
      {{{"past", dtype::f32, s4, st, 1, storage}}, checkpoint_errc::view_out_of_bounds},
      {{{"odd", dtype::f32, s4, {}, 0, storage.first(15)}}, checkpoint_errc::shape_size_mismatch},
      {{{"stride", dtype::f32, s1, huge, 0, storage}}, checkpoint_errc::shape_overflow},
      {{{"offset", dtype::f32, s0, {}, std::uint64_t{1} << 63, storage}}, checkpoint_errc::shape_overflow},
  };
  for (const auto& [refs, code] : cases) {
    const auto s = save_pt(dir_ / "m.pt", refs);
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().code(), code) << s.error().what();
    EXPECT_NE(s.error().what().find((dir_ / "m.pt").string() + ": tensor '"), std::string::npos) << s.error().what();
    EXPECT_EQ(slurp(dir_ / "m.pt").size(), 3u);
  }
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1u);
}

// Many tensors: the ZIP64 record count (over 65535 records).
TEST_F(PytorchWrite, SeventyThousandTensors) {
  constexpr std::size_t n = 70000;
  std::vector<std::int64_t> values(n);
  std::vector<std::string> names(n);
  std::vector<tensor_ref> refs;
  refs.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    values[i] = static_cast<std::int64_t>(i) * 1000003;
    names[i] = "layer." + std::to_string(i);
    refs.push_back({names[i], dtype::i64, {}, {}, 0, std::as_bytes(std::span(&values[i], 1))});
  }
  auto r = write_and_open(refs);
  ASSERT_TRUE(r) << r.error();
  ASSERT_EQ(r->tensors().size(), n);
  for (const std::size_t i : {std::size_t{0}, std::size_t{255}, std::size_t{256}, n - 1}) {
    const auto t = r->get(names[i]);
    ASSERT_TRUE(t) << t.error();
    std::int64_t v = 0;
    std::memcpy(&v, t->bytes().data(), 8);
    EXPECT_EQ(v, values[i]);
  }
}

}  // namespace
}  // namespace ferry::checkpoint::testing
