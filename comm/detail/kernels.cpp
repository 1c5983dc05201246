#include "ferry/comm/detail/kernels.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ferry::comm::detail {

void add(float* out, const float* a, const float* __restrict b, std::size_t n) noexcept {
  using v4 = float __attribute__((vector_size(16)));
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    v4 x[4];
    v4 y[4];
    std::memcpy(x, a + i, sizeof x);
    std::memcpy(y, b + i, sizeof y);
    for (int k = 0; k < 4; ++k) x[k] += y[k];
    std::memcpy(out + i, x, sizeof x);
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

void quantize(encoding enc, std::span<const float> in, std::span<float> residual, std::span<std::byte> out,
              std::span<float> back) noexcept {
  assert(enc != encoding::raw && out.size() == 2 * in.size());
  assert(residual.empty() || residual.size() == in.size());
  assert(back.empty() || back.size() == in.size());
  using v4f = float __attribute__((vector_size(16)));
  using v4i = std::int32_t __attribute__((vector_size(16)));
  constexpr std::size_t step = 2048;
  std::array<float, step> sum;
  std::array<float, step> wide;
  for (std::size_t i = 0; i < in.size(); i += step) {
    const std::size_t len = std::min(step, in.size() - i);
    std::span<const float> s = in.subspan(i, len);
    if (!residual.empty()) {
      add(sum.data(), in.data() + i, residual.data() + i, len);
      s = std::span<const float>(sum).first(len);
    }
    const auto o = out.subspan(2 * i, 2 * len);
    encode_f32_payload(enc, s, o);
    if (residual.empty() && back.empty()) continue;
    const auto w = back.empty() ? std::span(wide).first(len) : back.subspan(i, len);
    decode_f32_payload(enc, wire::host_order, o, w);
    if (residual.empty()) continue;
    float* r = residual.data() + i;
    std::size_t j = 0;
    for (; j + 4 <= len; j += 4) {
      v4f x, y;
      std::memcpy(&x, s.data() + j, 16);
      std::memcpy(&y, w.data() + j, 16);
      const v4f d = x - y;
      v4i bits;
      std::memcpy(&bits, &d, 16);
      bits &= ((d - d) == 0);  // inf - inf and NaN - NaN are NaN: keep finite lanes only
      std::memcpy(r + j, &bits, 16);
    }
    for (; j < len; ++j) {
      const float d = s[j] - w[j];
      r[j] = std::isfinite(d) ? d : 0.0f;
    }
  }
}

}  // namespace ferry::comm::detail
