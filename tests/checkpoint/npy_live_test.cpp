// NumPy against ferry, both ways, on every architecture. Before this test,
// the CTest fixture checkpoint_npy_files runs make_npy_files.py live under
// Debian's /usr/bin/python3 (python3-numpy): np.save / np.savez /
// np.savez_compressed of every dtype in both byte orders, Fortran order,
// 0-d, empty, mixed-order .npz; ferry reads each to the values NumPy read
// (X.expected: dtype, shape, order, CRC-32 of the little-endian elements).
// Then ferry writes its own files into DIR/ferry with the same manifest,
// and the next CTest test (checkpoint_npy_numpy_reads_ferry: make_npy_files.py
// check) loads them with NumPy: same values, zipfile's CRC check, and each
// .npy byte-identical to np.save of the array NumPy read.
#include <gtest/gtest.h>

#include <fstream>
#include <iomanip>
#include <sstream>

#include "ferry/checkpoint/zip/zip.h"
#include "ferry/checkpoint/npy.h"
#include "ferry/wire/bulk.h"
#include "helpers.h"

namespace ferry::checkpoint::testing {
namespace {

using codec::dtype;
using wire::byte_order;

const fs::path live_dir = FERRY_NPY_LIVE_DIR;

std::string shape_text(std::span<const std::uint64_t> shape) {
  if (shape.empty()) return "-";
  std::string out;
  for (std::size_t k = 0; k < shape.size(); ++k) out += (k ? "," : "") + std::to_string(shape[k]);
  return out;
}

std::string descr_of(dtype t, byte_order order) {
  const std::string o = order == byte_order::big ? ">" : "<";
  switch (t) {
    case dtype::boolean: return "|b1";
    case dtype::u8: return "|u1";
    case dtype::i8: return "|i1";
    case dtype::u16: return o + "u2";
    case dtype::i16: return o + "i2";
    case dtype::u32: return o + "u4";
    case dtype::i32: return o + "i4";
    case dtype::u64: return o + "u8";
    case dtype::i64: return o + "i8";
    case dtype::f16: return o + "f2";
    case dtype::f32: return o + "f4";
    case dtype::f64: return o + "f8";
    case dtype::c64: return o + "c8";
    case dtype::c128: return o + "c16";
    default: return "?";
  }
}

// CRC-32 of row-major elements (host order) as little-endian bytes; width
// is the unit of byte order (codec::order_width).
std::uint32_t le_crc(std::span<const std::byte> rows, std::size_t width) {
  std::vector<std::byte> le(rows.size());
  if (!rows.empty()) wire::convert(rows, wire::host_order, le, byte_order::little, width);
  return detail::zip_crc32(le);
}

std::string hex8(std::uint32_t v) {
  std::ostringstream s;
  s << std::hex << std::setw(8) << std::setfill('0') << v;
  return s.str();
}

bool fortran_strides(const tensor_info& t) {
  if (t.shape.size() < 2) return false;
  std::uint64_t step = 1;
  for (std::size_t k = 0; k < t.shape.size(); ++k) {
    if (t.strides[k] != step) return false;
    step *= t.shape[k] == 0 ? 1 : t.shape[k];
  }
  return true;
}

TEST(NpyLive, FerryReadsWhatNumpyWrote) {
  std::size_t files = 0, arrays = 0;
  for (const auto& entry : fs::directory_iterator(live_dir)) {
    const fs::path p = entry.path();
    if (p.extension() != ".expected") continue;
    const fs::path file = p.parent_path() / p.stem();
    SCOPED_TRACE(file.filename().string());
    auto r = reader::open(file);
    ASSERT_TRUE(r) << r.error();
    std::ifstream in(p);
    std::string name, descr, fortran, shape, crc;
    std::size_t i = 0;
    while (in >> name >> descr >> fortran >> shape >> crc) {
      ASSERT_LT(i, r->tensors().size());
      const tensor_info& info = r->tensors()[i++];
      EXPECT_EQ(info.name, name);
      const byte_order order = descr[0] == '>' ? byte_order::big : byte_order::little;
      EXPECT_EQ(descr_of(info.dtype, order), descr);
      if (codec::size_of(info.dtype) > 1) { EXPECT_EQ(r->storages()[info.storage].order.value_or(r->order()), order); }
      EXPECT_EQ(shape_text(info.shape), shape);
      EXPECT_EQ(fortran_strides(info), fortran == "True");
      auto t = r->get(info);
      ASSERT_TRUE(t) << t.error();
      EXPECT_EQ(hex8(le_crc(t->contiguous_copy(), codec::order_width(info.dtype))), crc) << name;
      ++arrays;
    }
    EXPECT_EQ(i, r->tensors().size());
    EXPECT_TRUE(r->verify()) << r->verify().error();
    ++files;
  }
  EXPECT_GE(files, 25u);
  EXPECT_GE(arrays, 30u);
}

// Elements of any dtype from a counter: every byte pattern class, NaNs and
// infinities among the floats.
std::vector<std::byte> pattern(dtype t, std::size_t n, std::uint32_t seed) {
  std::vector<std::byte> out(n * codec::size_of(t));
  std::uint32_t x = seed;
  for (std::size_t i = 0; i < out.size(); ++i) {
    x = x * 1664525u + 1013904223u;
    out[i] = static_cast<std::byte>(t == dtype::boolean ? (x >> 24) & 1 : x >> 24);
  }
  return out;
}

struct manifest {
  std::ofstream out;
  void line(const tensor_ref& ref, byte_order order, bool fortran) {
    out << (ref.name.empty() ? "arr_0" : std::string(ref.name)) << ' ' << descr_of(ref.dtype, order) << ' '
        << (fortran ? "True" : "False") << ' ' << shape_text(ref.shape) << ' '
        << hex8(le_crc(gather(ref), codec::order_width(ref.dtype))) << '\n';
  }
};

TEST(NpyLive, FerryWritesForNumpy) {
  const fs::path dir = live_dir / "ferry";
  fs::remove_all(dir);
  fs::create_directories(dir);
  npy_options opt;
  opt.sync = false;
  const std::uint64_t shape[] = {3, 5};
  std::uint32_t seed = 1;
  for (const dtype t : {dtype::boolean, dtype::u8, dtype::i8, dtype::u16, dtype::i16, dtype::u32, dtype::i32,
                        dtype::u64, dtype::i64, dtype::f16, dtype::f32, dtype::f64}) {
    const auto data = pattern(t, 15, seed++);
    const tensor_ref ref{"", t, shape, {}, 0, data};
    for (const byte_order order : {byte_order::little, byte_order::big}) {
      if (codec::size_of(t) == 1 && order == byte_order::big) continue;
      const std::string name = std::string(codec::name(t)) + (order == byte_order::big ? "_be" : "_le") + ".npy";
      opt.order = order;
      auto saved = save_npy(dir / name, ref, opt);
      ASSERT_TRUE(saved) << saved.error();
      manifest{std::ofstream(dir / (name + ".expected"))}.line(ref, order, false);
    }
  }
  // Fortran order (a column-major view), a gathered view, 0-d, empty.
  const auto f32 = pattern(dtype::f32, 24, 99);
  const std::uint64_t s3[] = {2, 3, 4};
  const std::uint64_t f_strides[] = {1, 2, 6};
  const std::uint64_t odd_strides[] = {1, 8, 2};
  const std::uint64_t s0[] = {0, 3};
  const tensor_ref views[] = {{"", dtype::f32, s3, f_strides, 0, f32},
                              {"", dtype::f32, s3, odd_strides, 0, f32},
                              {"", dtype::f64, {}, {}, 0, std::span(f32).first(8)},
                              {"", dtype::i32, s0, {}, 0, {}}};
  const char* view_names[] = {"fortran_be.npy", "gathered_be.npy", "scalar_be.npy", "empty_le.npy"};
  for (std::size_t k = 0; k < 4; ++k) {
    opt.order = k == 3 ? byte_order::little : byte_order::big;
    auto saved = save_npy(dir / view_names[k], views[k], opt);
    ASSERT_TRUE(saved) << saved.error();
    manifest{std::ofstream(dir / (std::string(view_names[k]) + ".expected"))}.line(views[k], opt.order, k == 0);
  }
  // .npz, stored and deflated, in both orders (named records).
  const auto i16 = pattern(dtype::i16, 7, 5);
  const std::uint64_t s7[] = {7};
  const tensor_ref named[] = {{"layer.weight", dtype::f32, s3, {}, 0, f32},
                              {"columns", dtype::f32, s3, f_strides, 0, f32},
                              {"steps", dtype::i16, s7, {}, 0, i16},
                              {"scale", dtype::f64, {}, {}, 0, std::span(f32).first(8)}};
  for (const bool compress : {false, true}) {
    for (const byte_order order : {byte_order::little, byte_order::big}) {
      const std::string name = std::string(compress ? "deflated" : "stored") + (order == byte_order::big ? "_be" : "_le") + ".npz";
      opt.order = order;
      opt.compress = compress;
      auto saved = save_npz(dir / name, named, opt);
      ASSERT_TRUE(saved) << saved.error();
      manifest m{std::ofstream(dir / (name + ".expected"))};
      for (const auto& ref : named) m.line(ref, order, &ref == &named[1]);
    }
  }
  opt.compress = false;
  ASSERT_TRUE(save_npz(dir / "empty.npz", {}, opt));
  std::ofstream(dir / "empty.npz.expected").close();
}

}  // namespace
}  // namespace ferry::checkpoint::testing
