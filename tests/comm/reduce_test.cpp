// The reduction kernels (comm/detail/reduce.h) against a plain scalar
// reference written from the rules in that header: every op on every dtype
// it is defined on, lengths around the vector width and the blocks, the
// second operand in both byte orders, the output aliasing either operand,
// and values that stress the rules (NaN payloads, signalling NaNs,
// infinities, signed zeros, subnormals, the integers' extremes). A CRC of
// fixed results is the same constant in every build (x86-64, aarch64,
// armhf, s390x): the kernels give the same bits on every architecture.
#include "ferry/comm/detail/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ferry/base/float16.h"
#include "ferry/codec/crc32c.h"
#include "ferry/codec/half.h"

namespace {

using namespace ferry;
using codec::dtype;
using comm::reduce_op;
using comm::detail::reduce;

// ------------------------------------------------------- the reference

template <class F>
F reference_float(reduce_op op, F a, F b) {
  using U = std::conditional_t<sizeof(F) == 4, std::uint32_t, std::uint64_t>;
  const U quiet = sizeof(F) == 4 ? U{0x0040'0000u} : static_cast<U>(0x0008'0000'0000'0000u);
  const U canonical = sizeof(F) == 4 ? U{0x7FC0'0000u} : static_cast<U>(0x7FF8'0000'0000'0000u);
  if (std::isnan(a)) return std::bit_cast<F>(static_cast<U>(std::bit_cast<U>(a) | quiet));
  if (std::isnan(b)) return std::bit_cast<F>(static_cast<U>(std::bit_cast<U>(b) | quiet));
  F r{};
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg: r = a + b; break;
    case reduce_op::product: r = a * b; break;
    case reduce_op::min:
      if (a == 0 && b == 0) return std::signbit(a) || std::signbit(b) ? F(-0.0) : F(0.0);
      return std::min(a, b);
    case reduce_op::max:
      if (a == 0 && b == 0) return std::signbit(a) && std::signbit(b) ? F(-0.0) : F(0.0);
      return std::max(a, b);
    default: ADD_FAILURE() << "bitwise op on a float";
  }
  return std::isnan(r) ? std::bit_cast<F>(canonical) : r;
}

template <class T>
T reference_integer(reduce_op op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg: return static_cast<T>(static_cast<U>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b)));
    case reduce_op::product:
      return static_cast<T>(static_cast<U>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b)));
    case reduce_op::min: return std::min(a, b);
    case reduce_op::max: return std::max(a, b);
    case reduce_op::band: return static_cast<T>(a & b);
    case reduce_op::bor: return static_cast<T>(a | b);
    case reduce_op::bxor: return static_cast<T>(a ^ b);
  }
  return 0;
}

std::uint8_t reference_bool(reduce_op op, std::uint8_t a, std::uint8_t b) {
  switch (op) {
    case reduce_op::sum:
    case reduce_op::max:
    case reduce_op::bor: return a | b;
    case reduce_op::product:
    case reduce_op::min:
    case reduce_op::band: return a & b;
    case reduce_op::bxor: return a ^ b;
    case reduce_op::avg: break;
  }
  ADD_FAILURE() << "avg of bools";
  return 0;
}

// One element of `t` (host order, width bytes at a and b) combined by the
// reference, written to out.
void reference_element(reduce_op op, dtype t, const std::byte* a, const std::byte* b, std::byte* out) {
  const auto typed = [&]<class T>(T*) {
    T x, y;
    std::memcpy(&x, a, sizeof x);
    std::memcpy(&y, b, sizeof y);
    T r;
    if constexpr (std::is_floating_point_v<T>) {
      r = reference_float(op, x, y);
    } else {
      r = reference_integer(op, x, y);
    }
    std::memcpy(out, &r, sizeof r);
  };
  const auto half = [&]<class H>(H*) {
    H x, y;
    std::memcpy(&x, a, 2);
    std::memcpy(&y, b, 2);
    const float r = reference_float(op, codec::to_float(x), codec::to_float(y));
    H h;
    if constexpr (std::is_same_v<H, f16>) {
      h = codec::to_f16(r);
    } else {
      h = codec::to_bf16(r);
    }
    std::memcpy(out, &h, 2);
  };
  switch (t) {
    case dtype::boolean: {
      const auto r = reference_bool(op, std::to_integer<std::uint8_t>(*a), std::to_integer<std::uint8_t>(*b));
      *out = std::byte{r};
      return;
    }
    case dtype::u8: return typed(static_cast<std::uint8_t*>(nullptr));
    case dtype::i8: return typed(static_cast<std::int8_t*>(nullptr));
    case dtype::u16: return typed(static_cast<std::uint16_t*>(nullptr));
    case dtype::i16: return typed(static_cast<std::int16_t*>(nullptr));
    case dtype::u32: return typed(static_cast<std::uint32_t*>(nullptr));
    case dtype::i32: return typed(static_cast<std::int32_t*>(nullptr));
    case dtype::u64: return typed(static_cast<std::uint64_t*>(nullptr));
    case dtype::i64: return typed(static_cast<std::int64_t*>(nullptr));
    case dtype::f16: return half(static_cast<f16*>(nullptr));
    case dtype::bf16: return half(static_cast<bf16*>(nullptr));
    case dtype::f32: return typed(static_cast<float*>(nullptr));
    case dtype::f64: return typed(static_cast<double*>(nullptr));
    case dtype::c32:
    case dtype::c64:
    case dtype::c128: {  // part by part, as the part's dtype
      const dtype part = codec::part_of(t);
      const std::size_t w = codec::size_of(part);
      reference_element(op, part, a, b, out);
      reference_element(op, part, a + w, b + w, out + w);
      return;
    }
    default: ADD_FAILURE() << "no reference for " << codec::name(t);
  }
}

// ------------------------------------------------------------ the values

// n values of `t` as host-order bytes: specials (NaNs of every kind,
// infinities, zeros, subnormals, extremes) mixed with random patterns.
std::vector<std::byte> values(dtype t, std::size_t n, std::uint32_t seed) {
  // Complex: pairs of the part dtype's values (the same numbers on every
  // architecture).
  if (codec::is_complex(t)) return values(codec::part_of(t), 2 * n, seed ^ 0xC0u);
  std::mt19937_64 rng(seed);
  const std::size_t w = codec::size_of(t);
  std::vector<std::byte> v(n * w);
  const std::vector<std::uint64_t> special = [&]() -> std::vector<std::uint64_t> {
    switch (t) {
      case dtype::f16:
        return {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE3F, 0x0001, 0x83FF, 0x3C00, 0x7BFF, 0xFBFF, 0x3C01};
      case dtype::bf16:
        return {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFA5, 0x0001, 0x807F, 0x3F80, 0x7F7F, 0xFF7F, 0x3F81};
      case dtype::f32:
        return {0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFA0BEEF, 0x7FC00001,
                0x00000001, 0x807FFFFF, 0x3F800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800001};
      case dtype::f64:
        return {0, 0x8000000000000000, 0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000000,
                0x7FF0000000000001, 0xFFF4DEADBEEF0001, 0x0000000000000001, 0x800FFFFFFFFFFFFF,
                0x3FF0000000000000, 0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF, 0x3FF0000000000001};
      default: {
        // Integers: 0, 1, all ones (-1), the top bit alone (the minimum of
        // the signed type), the largest signed value.
        const std::uint64_t top = std::uint64_t{1} << (8 * w - 1);
        return {0, 1, 2, top | (top - 1), top, top - 1, 3, top + 1};
      }
    }
  }();
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t x = rng();
    if (t == dtype::boolean) {
      x &= 1;
    } else if (x % 3 == 0) {
      x = special[(x >> 8) % special.size()];
    } else if (t == dtype::f32 && x % 3 == 1) {
      x = std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<std::int32_t>(x >> 20)) * 1e-3f);
    }
    // The low w bytes of x, in host order.
    for (std::size_t k = 0; k < w; ++k) {
      const std::size_t shift = 8 * (wire::host_order == wire::byte_order::little ? k : w - 1 - k);
      v[i * w + k] = static_cast<std::byte>(x >> shift);
    }
  }
  return v;
}

std::vector<std::byte> swapped(std::vector<std::byte> v, std::size_t w) {
  for (std::size_t i = 0; i + w <= v.size(); i += w) std::reverse(v.begin() + static_cast<std::ptrdiff_t>(i), v.begin() + static_cast<std::ptrdiff_t>(i + w));
  return v;
}

constexpr wire::byte_order other_order =
    wire::host_order == wire::byte_order::little ? wire::byte_order::big : wire::byte_order::little;

std::string hex(const std::byte* p, std::size_t w) {
  std::string s;
  for (std::size_t k = 0; k < w; ++k) {
    static constexpr char digits[] = "0123456789abcdef";
    const auto b = std::to_integer<unsigned>(p[k]);
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

// ------------------------------------------------------------ the tests

TEST(Reduce, WhatIsDefinedWhere) {
  using comm::detail::reducible;
  for (const reduce_op op : comm::all_reduce_ops) {
    EXPECT_FALSE(reducible(op, dtype::f8_e4m3));
    EXPECT_FALSE(reducible(op, dtype::f8_e5m2));
    EXPECT_TRUE(reducible(op, dtype::i32));
    EXPECT_TRUE(reducible(op, dtype::u8));
    EXPECT_EQ(reducible(op, dtype::boolean), op != reduce_op::avg);
    const bool bitwise = op == reduce_op::band || op == reduce_op::bor || op == reduce_op::bxor;
    for (const dtype f : {dtype::f16, dtype::bf16, dtype::f32, dtype::f64}) EXPECT_EQ(reducible(op, f), !bitwise);
  }
  for (const reduce_op op : comm::all_reduce_ops) EXPECT_EQ(comm::reduce_op_from_name(comm::name(op)), op);
  EXPECT_FALSE(comm::reduce_op_from_name("SUM").has_value());
}

TEST(Reduce, EveryOpAndDtypeMatchesTheReference) {
  const std::size_t lengths[] = {0, 1, 7, 15, 16, 17, 63, 64, 65, 1500, 4100};
  for (const dtype t : codec::all_dtypes) {
    const std::size_t w = codec::size_of(t);
    for (const reduce_op op : comm::all_reduce_ops) {
      if (!comm::detail::reducible(op, t)) continue;
      for (const std::size_t n : lengths) {
        const auto a = values(t, n, static_cast<std::uint32_t>(n * 131 + w));
        const auto b = values(t, n, static_cast<std::uint32_t>(n * 131 + w + 7));
        std::vector<std::byte> want(n * w);
        for (std::size_t i = 0; i < n; ++i) reference_element(op, t, &a[i * w], &b[i * w], &want[i * w]);
        for (const auto order : {wire::host_order, other_order}) {
          const auto b_sent = order == wire::host_order ? b : swapped(b, codec::order_width(t));
          for (int alias = 0; alias < 3; ++alias) {
            std::vector<std::byte> x = a, y = b_sent, out(n * w);
            std::byte* dst = alias == 0 ? out.data() : alias == 1 ? x.data() : y.data();
            reduce(op, t, dst, x.data(), y.data(), order, n);
            const std::vector<std::byte> got(dst, dst + n * w);
            if (got == want) continue;
            std::size_t i = 0;
            while (std::memcmp(&got[i * w], &want[i * w], w) == 0) ++i;
            FAIL() << codec::name(t) << " " << comm::name(op) << " n=" << n << " swapped=" << (order != wire::host_order)
                   << " alias=" << alias << ": element " << i << " of " << hex(&a[i * w], w) << " and "
                   << hex(&b[i * w], w) << " is " << hex(&got[i * w], w) << ", want " << hex(&want[i * w], w);
          }
        }
      }
    }
  }
}

template <class T>
std::vector<std::byte> bytes_of(std::initializer_list<T> v) {
  std::vector<std::byte> out(v.size() * sizeof(T));
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

template <class T>
std::vector<T> combine(reduce_op op, dtype t, std::initializer_list<T> a, std::initializer_list<T> b) {
  auto x = bytes_of(a);
  const auto y = bytes_of(b);
  reduce(op, t, x.data(), x.data(), y.data(), wire::host_order, a.size());
  std::vector<T> r(a.size());
  std::memcpy(r.data(), x.data(), x.size());
  return r;
}

TEST(Reduce, TheRulesSpelledOut) {
  using u32 = std::uint32_t;
  const auto f = [](u32 bits) { return std::bit_cast<float>(bits); };
  const auto bits = [](const std::vector<float>& v) {
    std::vector<u32> out;
    for (float x : v) out.push_back(std::bit_cast<u32>(x));
    return out;
  };
  // Two NaNs: the first, quieted; a signalling NaN is quieted; inf - inf
  // and 0 * inf make +qNaN on every CPU (x86 alone would make 0xFFC00000).
  EXPECT_EQ(bits(combine<float>(reduce_op::sum, dtype::f32, {f(0xFFA0BEEF), f(1), f(0x7F800000), f(0)},
                                {f(0x7FC00001), f(0x7F800001), f(0xFF800000), f(0x80000000)})),
            (std::vector<u32>{0xFFE0BEEF, 0x7FC00001, 0x7FC00000, 0x00000000}));
  EXPECT_EQ(bits(combine<float>(reduce_op::product, dtype::f32, {f(0), f(0x80000000)}, {f(0x7F800000), f(0)})),
            (std::vector<u32>{0x7FC00000, 0x80000000}));
  // min and max: signed zeros in either order, NaN wins.
  EXPECT_EQ(bits(combine<float>(reduce_op::min, dtype::f32, {f(0), f(0x80000000), f(1), f(0x7FC00000)},
                                {f(0x80000000), f(0), f(0x7F800001), f(2)})),
            (std::vector<u32>{0x80000000, 0x80000000, 0x7FC00001, 0x7FC00000}));
  EXPECT_EQ(bits(combine<float>(reduce_op::max, dtype::f32, {f(0), f(0x80000000), f(0x80000000)},
                                {f(0x80000000), f(0), f(0x80000000)})),
            (std::vector<u32>{0, 0, 0x80000000}));
  // f16 and bf16: the canonical NaN narrowed; a payload kept and quieted.
  EXPECT_EQ(combine<std::uint16_t>(reduce_op::sum, dtype::f16, {0x7C00, 0x7C01, 0x3C00}, {0xFC00, 0x3C00, 0x3C00}),
            (std::vector<std::uint16_t>{0x7E00, 0x7E01, 0x4000}));
  EXPECT_EQ(combine<std::uint16_t>(reduce_op::sum, dtype::bf16, {0x7F80, 0x7F81}, {0xFF80, 0x3F80}),
            (std::vector<std::uint16_t>{0x7FC0, 0x7FC1}));
  // f64's canonical NaN.
  EXPECT_EQ(std::bit_cast<std::uint64_t>(combine<double>(reduce_op::sum, dtype::f64, {INFINITY}, {-INFINITY})[0]),
            0x7FF8'0000'0000'0000u);
  // Integers wrap; min and max compare as the type's values.
  EXPECT_EQ(combine<std::int32_t>(reduce_op::sum, dtype::i32, {INT32_MAX, -5}, {1, 3}),
            (std::vector<std::int32_t>{INT32_MIN, -2}));
  EXPECT_EQ(combine<std::int8_t>(reduce_op::min, dtype::i8, {-128, 5}, {127, -1}), (std::vector<std::int8_t>{-128, -1}));
  EXPECT_EQ(combine<std::uint8_t>(reduce_op::max, dtype::u8, {200, 5}, {100, 250}), (std::vector<std::uint8_t>{200, 250}));
  EXPECT_EQ(combine<std::int64_t>(reduce_op::product, dtype::i64, {INT64_MIN}, {-1}), (std::vector<std::int64_t>{INT64_MIN}));
  // bool: or, and, xor.
  EXPECT_EQ(combine<std::uint8_t>(reduce_op::sum, dtype::boolean, {0, 1, 1, 0}, {0, 0, 1, 1}),
            (std::vector<std::uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(combine<std::uint8_t>(reduce_op::min, dtype::boolean, {0, 1, 1, 0}, {0, 0, 1, 1}),
            (std::vector<std::uint8_t>{0, 0, 1, 0}));
  EXPECT_EQ(combine<std::uint8_t>(reduce_op::bxor, dtype::boolean, {0, 1, 1, 0}, {0, 0, 1, 1}),
            (std::vector<std::uint8_t>{0, 1, 0, 1}));
}

TEST(Reduce, AverageDividesOnce) {
  using comm::detail::divide;
  auto f = bytes_of<float>({3.0f, std::bit_cast<float>(0x7F800001u), -0.0f, INFINITY});
  divide(dtype::f32, f.data(), 4, 2);
  std::uint32_t got[4];
  std::memcpy(got, f.data(), sizeof got);
  EXPECT_EQ(got[0], std::bit_cast<std::uint32_t>(1.5f));
  EXPECT_EQ(got[1], 0x7FC00001u);
  EXPECT_EQ(got[2], 0x80000000u);
  EXPECT_EQ(got[3], 0x7F800000u);
  auto i = bytes_of<std::int32_t>({-7, 7, INT32_MIN});
  divide(dtype::i32, i.data(), 3, 2);
  std::int32_t q[3];
  std::memcpy(q, i.data(), sizeof q);
  EXPECT_EQ(q[0], -3);  // toward zero
  EXPECT_EQ(q[1], 3);
  EXPECT_EQ(q[2], INT32_MIN / 2);
  auto i8 = bytes_of<std::int8_t>({-128, 127});
  divide(dtype::i8, i8.data(), 2, 200);  // a divisor wider than the type
  EXPECT_EQ(i8, bytes_of<std::int8_t>({0, 0}));
  auto h = bytes_of<std::uint16_t>({0x3C00, 0x7C01});  // f16 1.0, a signalling NaN
  divide(dtype::f16, h.data(), 2, 3);
  EXPECT_EQ(h, bytes_of<std::uint16_t>({codec::to_f16(1.0f / 3.0f).bits, 0x7E01}));
}

TEST(Reduce, BadBoolsAreFound) {
  using comm::detail::first_bad_bool;
  const auto v = bytes_of<std::uint8_t>({0, 1, 1, 0, 2, 1});
  EXPECT_EQ(first_bad_bool(v.data(), v.size()), 4u);
  EXPECT_EQ(first_bad_bool(v.data(), 4), 4u);
  EXPECT_EQ(first_bad_bool(v.data(), 0), 0u);
}

// The same inputs give the same bits in every build: this constant is
// checked by the native, ASan, aarch64, armhf and s390x test runs.
TEST(Reduce, SameBitsOnEveryArchitecture) {
  std::uint32_t crc = 0;
  for (const dtype t : codec::all_dtypes) {
    const std::size_t w = codec::size_of(t);
    for (const reduce_op op : comm::all_reduce_ops) {
      if (!comm::detail::reducible(op, t)) continue;
      const std::size_t n = 300;
      auto a = values(t, n, 1000 + static_cast<std::uint32_t>(w));
      const auto b = swapped(values(t, n, 2000 + static_cast<std::uint32_t>(w)), codec::order_width(t));
      reduce(op, t, a.data(), a.data(), b.data(), other_order, n);
      if (op == reduce_op::avg) comm::detail::divide(t, a.data(), n, 3);
      // Little-endian for the CRC, whatever the host.
      const auto le = wire::host_order == wire::byte_order::little ? a : swapped(a, codec::order_width(t));
      crc = codec::crc32c_extend(crc, le);
    }
  }
  EXPECT_EQ(crc, 0x1862354Cu) << std::hex << crc;
}

}  // namespace
