#include "ferry/checkpoint/cast.h"

#include <cassert>
#include <cstring>

#include "ferry/codec/half.h"

namespace ferry::checkpoint {
namespace {

template <class T>
T load_host(const std::byte* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// As float for f32 targets, as double for f64 (f64 -> f32 is one rounding).
float as_float(codec::dtype t, const std::byte* p) noexcept {
  switch (t) {
    case codec::dtype::f16: return codec::to_float(load_host<f16>(p));
    case codec::dtype::bf16: return codec::to_float(load_host<bf16>(p));
    case codec::dtype::f8_e4m3: return codec::to_float(load_host<f8_e4m3>(p));
    case codec::dtype::f8_e5m2: return codec::to_float(load_host<f8_e5m2>(p));
    case codec::dtype::f8_e4m3fnuz: return codec::to_float(load_host<f8_e4m3fnuz>(p));
    case codec::dtype::f8_e5m2fnuz: return codec::to_float(load_host<f8_e5m2fnuz>(p));
    case codec::dtype::f64: return static_cast<float>(load_host<double>(p));
    default: return load_host<float>(p);
  }
}

}  // namespace

bool is_cast_target(codec::dtype t) noexcept {
  return t == codec::dtype::f16 || t == codec::dtype::bf16 || t == codec::dtype::f32 || t == codec::dtype::f64;
}

result<std::vector<std::byte>> cast(codec::dtype from, std::span<const std::byte> in, codec::dtype to) {
  if (!codec::is_floating_point(from) || !is_cast_target(to)) return errc::bad_value;
  const std::size_t win = codec::size_of(from), wout = codec::size_of(to);
  assert(in.size() % win == 0);
  const std::size_t n = in.size() / win;
  std::vector<std::byte> out(n * wout);
  for (std::size_t i = 0; i < n; ++i) {
    const std::byte* p = in.data() + i * win;
    std::byte* q = out.data() + i * wout;
    if (to == codec::dtype::f64) {
      const double d = from == codec::dtype::f64 ? load_host<double>(p) : static_cast<double>(as_float(from, p));
      std::memcpy(q, &d, 8);
      continue;
    }
    const float f = as_float(from, p);
    if (to == codec::dtype::f32) {
      std::memcpy(q, &f, 4);
    } else {
      const std::uint16_t bits = to == codec::dtype::f16 ? codec::to_f16(f).bits : codec::to_bf16(f).bits;
      std::memcpy(q, &bits, 2);
    }
  }
  return out;
}

double element_as_double(codec::dtype t, const std::byte* p) noexcept {
  switch (t) {
    case codec::dtype::boolean: return load_host<std::uint8_t>(p) != 0 ? 1.0 : 0.0;
    case codec::dtype::u8: return load_host<std::uint8_t>(p);
    case codec::dtype::i8: return load_host<std::int8_t>(p);
    case codec::dtype::u16: return load_host<std::uint16_t>(p);
    case codec::dtype::i16: return load_host<std::int16_t>(p);
    case codec::dtype::u32: return load_host<std::uint32_t>(p);
    case codec::dtype::i32: return load_host<std::int32_t>(p);
    case codec::dtype::u64: return static_cast<double>(load_host<std::uint64_t>(p));
    case codec::dtype::i64: return static_cast<double>(load_host<std::int64_t>(p));
    case codec::dtype::f64: return load_host<double>(p);
    default: return as_float(t, p);
  }
}

}  // namespace ferry::checkpoint
