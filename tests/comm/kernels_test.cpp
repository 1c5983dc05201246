// The compressed ring's fused kernel (comm/detail/kernels.h) against the
// operations it fuses, done one by one with codec's scalar conversions:
// every combination of its steps, both byte orders of the received values,
// lengths around the vector width, and values that stress the rounding
// (halfway cases, NaN payloads, infinities, signed zeros, subnormals,
// overflow to infinity).
#include "ferry/comm/detail/kernels.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ferry/codec/half.h"

namespace {

using namespace ferry;
using comm::encoding;
using comm::detail::compress_step;

std::vector<float> hard_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const std::uint32_t special[] = {0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001, 0xFFA0BEEF,
                                   0x00000001, 0x807FFFFF, 0x3F808000, 0x3F818000, 0x477FF000, 0x477FEFFF,
                                   0x7F7FFFFF, 0x38800000, 0x33800000, 0x3F7FFFFF};
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t r = rng();
    std::uint32_t bits = 0;
    switch (r % 4) {
      case 0: bits = special[(r >> 8) % std::size(special)]; break;
      case 1: bits = r; break;                                           // anything, NaNs included
      case 2: bits = (r & 0x8000FFFFu) | (0x7Eu + (r >> 24) % 8) << 23; break;  // near 1: bf16 halfway cases
      default: bits = std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<std::int32_t>(r)) * 1e-9f);
    }
    v[i] = std::bit_cast<float>(bits);
  }
  return v;
}

std::uint16_t round16(encoding e, float x) {
  return e == encoding::bf16 ? codec::to_bf16(x).bits : codec::to_f16(x).bits;
}
float widen16(encoding e, std::uint16_t h) {
  return e == encoding::bf16 ? codec::to_float(bf16{h}) : codec::to_float(f16{h});
}

std::uint32_t u(float f) { return std::bit_cast<std::uint32_t>(f); }

TEST(CompressKernel, EqualsTheStepsDoneOneByOne) {
  for (const encoding e : {encoding::bf16, encoding::f16}) {
    for (const std::size_t n : {0u, 1u, 3u, 4u, 5u, 8u, 17u, 511u, 512u, 513u, 2000u}) {
      for (int mask = 0; mask < 32; ++mask) {
        const bool recv = mask & 1, divide = mask & 2, fb = mask & 4, back = mask & 8, swap = mask & 16;
        if (swap && !recv) continue;
        const auto a = hard_values(n, static_cast<std::uint32_t>(n * 64 + mask));
        const auto other = hard_values(n, static_cast<std::uint32_t>(n * 64 + mask + 7777));
        std::vector<std::uint16_t> received(n);
        for (std::size_t i = 0; i < n; ++i) received[i] = round16(e, other[i]);
        std::vector<std::byte> wire_bytes(2 * n);
        for (std::size_t i = 0; i < n; ++i) {
          const std::uint16_t h = swap ? static_cast<std::uint16_t>((received[i] << 8) | (received[i] >> 8)) : received[i];
          std::memcpy(wire_bytes.data() + 2 * i, &h, 2);
        }
        auto residual = hard_values(n, static_cast<std::uint32_t>(n * 64 + mask + 31));
        for (float& r : residual) r = std::isfinite(r) ? r * 1e-3f : 0.0f;

        // The reference.
        std::vector<std::uint16_t> want_out(n);
        std::vector<float> want_residual = residual, want_back(n);
        for (std::size_t i = 0; i < n; ++i) {
          float s = a[i];
          if (recv) s = s + widen16(e, received[i]);
          if (divide) s = s / 3.0f;
          if (fb) s = s + residual[i];
          want_out[i] = round16(e, s);
          const float w = widen16(e, want_out[i]);
          if (fb) want_residual[i] = std::isfinite(s - w) ? s - w : 0.0f;
          want_back[i] = w;
        }

        std::vector<float> got_back = a;  // back aliases a, as the ring uses it
        std::vector<float> got_residual = residual;
        std::vector<std::uint16_t> got_out(n);
        compress_step s;
        s.enc = e;
        s.n = n;
        s.a = got_back.data();
        if (recv) {
          s.received = wire_bytes.data();
          s.received_order = swap ? (wire::host_order == wire::byte_order::little ? wire::byte_order::big
                                                                                  : wire::byte_order::little)
                                  : wire::host_order;
        }
        if (divide) s.divisor = 3.0f;
        if (fb) s.residual = got_residual.data();
        if (back) s.back = got_back.data();
        s.out = reinterpret_cast<std::byte*>(got_out.data());
        comm::detail::compress(s);
        for (std::size_t i = 0; i < n; ++i) {
          SCOPED_TRACE(testing::Message() << (e == encoding::bf16 ? "bf16" : "f16") << " n=" << n << " mask=" << mask
                                          << " i=" << i << " a=" << std::hex << u(a[i]));
          if (recv && std::isnan(a[i]) && std::isnan(widen16(e, received[i]))) {
            // Two NaNs meet: which payload an IEEE addition keeps is the
            // CPU's rule (and the compiler's operand order); a NaN it is.
            ASSERT_TRUE(std::isnan(widen16(e, got_out[i])));
            ASSERT_EQ(u(got_residual[i]), u(want_residual[i]));
            continue;
          }
          ASSERT_EQ(got_out[i], want_out[i]);
          ASSERT_EQ(u(got_residual[i]), u(want_residual[i]));
          ASSERT_EQ(u(got_back[i]), u(back ? want_back[i] : a[i]));
        }
      }
    }
  }
}

TEST(WidenKernel, EqualsTheFrameDecoderForEveryPatternAndOrder) {
  std::vector<std::byte> in(2 * 65536);
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i * 40503u);  // every pattern, shuffled
    std::memcpy(in.data() + 2 * i, &h, 2);
  }
  for (const encoding e : {encoding::bf16, encoding::f16}) {
    for (const auto order : {wire::byte_order::little, wire::byte_order::big}) {
      for (const std::size_t n : {0u, 1u, 3u, 4u, 7u, 65536u}) {
        std::vector<float> want(n), got(n);
        comm::decode_f32_payload(e, order, std::span(in).first(2 * n), want);
        comm::detail::widen(e, order, in.data(), got.data(), n);
        for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(u(got[i]), u(want[i])) << "n=" << n << " i=" << i;
      }
    }
  }
}

}  // namespace
