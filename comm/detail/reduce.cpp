#include "ferry/comm/detail/reduce.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include "ferry/base/float16.h"
#include "ferry/codec/half.h"
#include "ferry/wire/bulk.h"

namespace ferry::comm::detail {
namespace {

// ------------------------------------------------------------ the lanes

// 16-byte vectors of T (GCC's vector extensions: SSE2, NEON, z/Arch).
template <class T>
struct vec {
  typedef T type __attribute__((vector_size(16)));
};
template <class T>
using vec_t = typename vec<T>::type;
template <class T>
inline constexpr std::size_t lanes = 16 / sizeof(T);
// Four vectors per step: enough independent work to hide the latencies.
constexpr std::size_t unroll = 4;

// Elements are read and written with memcpy: buffers are bytes (a frame's
// payload, a user's tensor), aligned or not.
template <class T>
T load(const std::byte* p, std::size_t i) noexcept {
  T v;
  std::memcpy(&v, p + sizeof(T) * i, sizeof v);
  return v;
}
template <class T>
void store(std::byte* p, std::size_t i, T v) noexcept {
  std::memcpy(p + sizeof(T) * i, &v, sizeof v);
}

// out[i] = op(a[i], b[i]) for n elements of T, where op takes scalars and
// vectors alike.
template <class T, class Op>
void each(std::byte* out, const std::byte* a, const std::byte* b, std::size_t n, Op op) noexcept {
  using V = vec_t<T>;
  constexpr std::size_t step = unroll * lanes<T>;
  std::size_t i = 0;
  for (; i + step <= n; i += step) {
    V x[unroll];
    V y[unroll];
    std::memcpy(x, a + sizeof(T) * i, sizeof x);
    std::memcpy(y, b + sizeof(T) * i, sizeof y);
    for (std::size_t k = 0; k < unroll; ++k) x[k] = op(x[k], y[k]);
    std::memcpy(out + sizeof(T) * i, x, sizeof x);
  }
  for (; i < n; ++i) store<T>(out, i, op(load<T>(a, i), load<T>(b, i)));
}

// ------------------------------------------------------- floating point

template <class F>
using bits_of = std::conditional_t<sizeof(F) == 4, std::uint32_t, std::uint64_t>;

template <class F>
F quieted(F x) noexcept {
  constexpr bits_of<F> quiet_bit = sizeof(F) == 4 ? 0x0040'0000u : static_cast<bits_of<F>>(0x0008'0000'0000'0000u);
  return std::bit_cast<F>(static_cast<bits_of<F>>(std::bit_cast<bits_of<F>>(x) | quiet_bit));
}

// The NaN an operation makes from numbers: positive and quiet.
template <class F>
F canonical_nan() noexcept {
  if constexpr (sizeof(F) == 4) {
    return std::bit_cast<F>(std::uint32_t{0x7FC0'0000u});
  } else {
    return std::bit_cast<F>(std::uint64_t{0x7FF8'0000'0000'0000u});
  }
}

// The rule for a result r = a op b of sum or product (see reduce.h).
template <class F>
F arithmetic_rule(F a, F b, F r) noexcept {
  if (a != a) return quieted(a);
  if (b != b) return quieted(b);
  if (r != r) return canonical_nan<F>();
  return r;
}

template <class F, bool Min>
F min_max_rule(F a, F b) noexcept {
  if (a != a) return quieted(a);
  if (b != b) return quieted(b);
  if (a == b) {  // equal numbers have equal bits, but for -0 and +0
    const auto x = std::bit_cast<bits_of<F>>(a);
    const auto y = std::bit_cast<bits_of<F>>(b);
    return std::bit_cast<F>(static_cast<bits_of<F>>(Min ? (x | y) : (x & y)));
  }
  return Min ? (a < b ? a : b) : (a > b ? a : b);
}

// out = op(a, b) for floats: the lanes with IEEE arithmetic, and the rule
// lane by lane in the few steps where some lane needs it.
template <class F>
void float_reduce(reduce_op op, std::byte* out, const std::byte* a, const std::byte* b, std::size_t n) noexcept {
  using V = vec_t<F>;
  using M = decltype(V{} != V{});
  constexpr std::size_t L = lanes<F>;
  constexpr std::size_t step = unroll * L;
  // `compute` is the IEEE operation; `needs` marks the lanes the rule must
  // redo; `rule` is the whole rule on scalars.
  const auto run = [&](auto compute, auto needs, auto rule) {
    std::size_t i = 0;
    for (; i + step <= n; i += step) {
      V x[unroll];
      V y[unroll];
      V r[unroll];
      std::memcpy(x, a + sizeof(F) * i, sizeof x);
      std::memcpy(y, b + sizeof(F) * i, sizeof y);
      M flagged{};
      for (std::size_t k = 0; k < unroll; ++k) {
        r[k] = compute(x[k], y[k]);
        flagged |= needs(x[k], y[k], r[k]);
      }
      std::uint64_t any[2];
      std::memcpy(any, &flagged, sizeof any);
      if ((any[0] | any[1]) != 0) {
        for (std::size_t k = 0; k < unroll; ++k) {
          for (std::size_t j = 0; j < L; ++j) r[k][j] = rule(x[k][j], y[k][j], r[k][j]);
        }
      }
      std::memcpy(out + sizeof(F) * i, r, sizeof r);
    }
    for (; i < n; ++i) {
      const F x = load<F>(a, i);
      const F y = load<F>(b, i);
      store<F>(out, i, rule(x, y, compute(x, y)));
    }
  };
  const auto result_nan = [](auto, auto, auto r) { return r != r; };
  const auto operand_nan_or_zero = [](auto x, auto y, auto) { return (x != x) | (y != y) | (x == decltype(x){}); };
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg:
      return run([](auto x, auto y) { return x + y; }, result_nan, arithmetic_rule<F>);
    case reduce_op::product:
      return run([](auto x, auto y) { return x * y; }, result_nan, arithmetic_rule<F>);
    case reduce_op::min:
      return run([](auto x, auto y) { return x < y ? x : y; }, operand_nan_or_zero,
                 [](F x, F y, F) { return min_max_rule<F, true>(x, y); });
    case reduce_op::max:
      return run([](auto x, auto y) { return x > y ? x : y; }, operand_nan_or_zero,
                 [](F x, F y, F) { return min_max_rule<F, false>(x, y); });
    case reduce_op::band:
    case reduce_op::bor:
    case reduce_op::bxor:
      break;  // not on floats (reducible)
  }
}

// f16 and bf16: widened to f32 a block at a time, combined by the f32
// kernel, rounded back (nearest even, NaNs quieted with their payload).
template <class H>
void half_reduce(reduce_op op, std::byte* out, const std::byte* a, const std::byte* b, std::size_t n) noexcept {
  constexpr std::size_t block = 1024;
  H ha[block];
  H hb[block];
  float fa[block];
  float fb[block];
  for (std::size_t i = 0; i < n; i += block) {
    const std::size_t m = std::min(block, n - i);
    std::memcpy(ha, a + 2 * i, 2 * m);
    std::memcpy(hb, b + 2 * i, 2 * m);
    codec::to_float(std::span<const H>(ha, m), std::span<float>(fa, m));
    codec::to_float(std::span<const H>(hb, m), std::span<float>(fb, m));
    float_reduce<float>(op, reinterpret_cast<std::byte*>(fa), reinterpret_cast<const std::byte*>(fa),
                        reinterpret_cast<const std::byte*>(fb), m);
    if constexpr (std::is_same_v<H, f16>) {
      codec::to_f16(std::span<const float>(fa, m), std::span<H>(ha, m));
    } else {
      codec::to_bf16(std::span<const float>(fa, m), std::span<H>(ha, m));
    }
    std::memcpy(out + 2 * i, ha, 2 * m);
  }
}

// ------------------------------------------------------------- integers

template <class T>
void integer_reduce(reduce_op op, std::byte* out, const std::byte* a, const std::byte* b, std::size_t n) noexcept {
  // Sums and products wrap: computed unsigned, where wrapping is defined.
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg:
      return each<U>(out, a, b, n, [](auto x, auto y) { return static_cast<decltype(x)>(x + y); });
    case reduce_op::product:
      // Scalars narrower than int are promoted to (signed) int, where
      // 65535 * 65535 overflows: multiplied as unsigned instead.
      return each<U>(out, a, b, n, [](auto x, auto y) {
        if constexpr (std::is_integral_v<decltype(x)> && sizeof(x) < sizeof(unsigned)) {
          return static_cast<decltype(x)>(static_cast<unsigned>(x) * static_cast<unsigned>(y));
        } else {
          return static_cast<decltype(x)>(x * y);
        }
      });
    case reduce_op::band:
      return each<U>(out, a, b, n, [](auto x, auto y) { return static_cast<decltype(x)>(x & y); });
    case reduce_op::bor:
      return each<U>(out, a, b, n, [](auto x, auto y) { return static_cast<decltype(x)>(x | y); });
    case reduce_op::bxor:
      return each<U>(out, a, b, n, [](auto x, auto y) { return static_cast<decltype(x)>(x ^ y); });
    case reduce_op::min:
      return each<T>(out, a, b, n, [](auto x, auto y) { return x < y ? x : y; });
    case reduce_op::max:
      return each<T>(out, a, b, n, [](auto x, auto y) { return x > y ? x : y; });
  }
}

// bool is a byte holding 0 or 1: or, and, xor of the bytes.
reduce_op bool_op(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum:
    case reduce_op::max:
      return reduce_op::bor;
    case reduce_op::product:
    case reduce_op::min:
      return reduce_op::band;
    default:
      return op;
  }
}

template <class T>
void typed_reduce(reduce_op op, std::byte* out, const std::byte* a, const std::byte* b, std::size_t n) noexcept {
  if constexpr (std::is_floating_point_v<T>) {
    float_reduce<T>(op, out, a, b, n);
  } else {
    integer_reduce<T>(op, out, a, b, n);
  }
}

template <class T>
void typed_divide(std::byte* data, std::size_t n, std::uint32_t divisor) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const T x = load<T>(data, i);
    if constexpr (std::is_floating_point_v<T>) {
      store<T>(data, i, x != x ? quieted(x) : x / static_cast<T>(divisor));
    } else if constexpr (std::is_signed_v<T>) {
      store<T>(data, i, static_cast<T>(static_cast<std::int64_t>(x) / static_cast<std::int64_t>(divisor)));
    } else {
      store<T>(data, i, static_cast<T>(static_cast<std::uint64_t>(x) / divisor));
    }
  }
}

template <class H>
void half_divide(std::byte* data, std::size_t n, std::uint32_t divisor) noexcept {
  constexpr std::size_t block = 1024;
  H h[block];
  float f[block];
  for (std::size_t i = 0; i < n; i += block) {
    const std::size_t m = std::min(block, n - i);
    std::memcpy(h, data + 2 * i, 2 * m);
    codec::to_float(std::span<const H>(h, m), std::span<float>(f, m));
    typed_divide<float>(reinterpret_cast<std::byte*>(f), m, divisor);
    if constexpr (std::is_same_v<H, f16>) {
      codec::to_f16(std::span<const float>(f, m), std::span<H>(h, m));
    } else {
      codec::to_bf16(std::span<const float>(f, m), std::span<H>(h, m));
    }
    std::memcpy(data + 2 * i, h, 2 * m);
  }
}

void host_order_reduce(reduce_op op, codec::dtype t, std::byte* out, const std::byte* a, const std::byte* b,
                       std::size_t n) noexcept {
  using codec::dtype;
  switch (t) {
    case dtype::boolean:
      return typed_reduce<std::uint8_t>(bool_op(op), out, a, b, n);
    case dtype::u8: return typed_reduce<std::uint8_t>(op, out, a, b, n);
    case dtype::i8: return typed_reduce<std::int8_t>(op, out, a, b, n);
    case dtype::u16: return typed_reduce<std::uint16_t>(op, out, a, b, n);
    case dtype::i16: return typed_reduce<std::int16_t>(op, out, a, b, n);
    case dtype::u32: return typed_reduce<std::uint32_t>(op, out, a, b, n);
    case dtype::i32: return typed_reduce<std::int32_t>(op, out, a, b, n);
    case dtype::u64: return typed_reduce<std::uint64_t>(op, out, a, b, n);
    case dtype::i64: return typed_reduce<std::int64_t>(op, out, a, b, n);
    case dtype::f16: return half_reduce<f16>(op, out, a, b, n);
    case dtype::bf16: return half_reduce<bf16>(op, out, a, b, n);
    case dtype::f32: return typed_reduce<float>(op, out, a, b, n);
    case dtype::f64: return typed_reduce<double>(op, out, a, b, n);
    // Complex: sum only (reducible()), part by part (codec::part_of).
    case dtype::c32: return half_reduce<f16>(op, out, a, b, 2 * n);
    case dtype::c64: return typed_reduce<float>(op, out, a, b, 2 * n);
    case dtype::c128: return typed_reduce<double>(op, out, a, b, 2 * n);
    case dtype::f8_e4m3:
    case dtype::f8_e5m2:
    case dtype::f8_e4m3fnuz:
    case dtype::f8_e5m2fnuz:
      return;  // not reducible
  }
}

}  // namespace

bool reducible(reduce_op op, codec::dtype t) noexcept {
  using codec::dtype;
  const bool bitwise = op == reduce_op::band || op == reduce_op::bor || op == reduce_op::bxor;
  switch (t) {
    case dtype::f8_e4m3:
    case dtype::f8_e5m2:
    case dtype::f8_e4m3fnuz:
    case dtype::f8_e5m2fnuz:
      return false;
    case dtype::c32:
    case dtype::c64:
    case dtype::c128:
      return op == reduce_op::sum || op == reduce_op::avg;
    case dtype::boolean:
      return op != reduce_op::avg;
    case dtype::f16:
    case dtype::bf16:
    case dtype::f32:
    case dtype::f64:
      return !bitwise;
    default:
      return true;
  }
}

void reduce(reduce_op op, codec::dtype t, std::byte* out, const std::byte* a, const std::byte* b,
            wire::byte_order b_order, std::size_t n) noexcept {
  const std::size_t width = codec::size_of(t);
  if (width == 1 || b_order == wire::host_order) return host_order_reduce(op, t, out, a, b, n);
  // b in the other order: swapped a block at a time into host order (the
  // bulk kernels, at copy speed), then combined.
  alignas(64) std::byte swapped[8192];
  const std::size_t block = sizeof swapped / width;
  for (std::size_t i = 0; i < n; i += block) {
    const std::size_t m = std::min(block, n - i);
    wire::convert(std::span<const std::byte>(b + width * i, width * m), b_order,
                  std::span<std::byte>(swapped, width * m), wire::host_order, codec::order_width(t));
    host_order_reduce(op, t, out + width * i, a + width * i, swapped, m);
  }
}

void divide(codec::dtype t, std::byte* data, std::size_t n, std::uint32_t divisor) noexcept {
  using codec::dtype;
  switch (t) {
    case dtype::u8: return typed_divide<std::uint8_t>(data, n, divisor);
    case dtype::i8: return typed_divide<std::int8_t>(data, n, divisor);
    case dtype::u16: return typed_divide<std::uint16_t>(data, n, divisor);
    case dtype::i16: return typed_divide<std::int16_t>(data, n, divisor);
    case dtype::u32: return typed_divide<std::uint32_t>(data, n, divisor);
    case dtype::i32: return typed_divide<std::int32_t>(data, n, divisor);
    case dtype::u64: return typed_divide<std::uint64_t>(data, n, divisor);
    case dtype::i64: return typed_divide<std::int64_t>(data, n, divisor);
    case dtype::f16: return half_divide<f16>(data, n, divisor);
    case dtype::bf16: return half_divide<bf16>(data, n, divisor);
    case dtype::f32: return typed_divide<float>(data, n, divisor);
    case dtype::f64: return typed_divide<double>(data, n, divisor);
    case dtype::c32: return half_divide<f16>(data, 2 * n, divisor);
    case dtype::c64: return typed_divide<float>(data, 2 * n, divisor);
    case dtype::c128: return typed_divide<double>(data, 2 * n, divisor);
    case dtype::boolean:
    case dtype::f8_e4m3:
    case dtype::f8_e5m2:
    case dtype::f8_e4m3fnuz:
    case dtype::f8_e5m2fnuz:
      return;  // no avg
  }
}

std::size_t first_bad_bool(const std::byte* data, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    if (std::to_integer<std::uint8_t>(data[i]) > 1) return i;
  }
  return n;
}

}  // namespace ferry::comm::detail
