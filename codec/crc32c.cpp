#include "ferry/codec/crc32c.h"

#include "ferry/codec/detail/crc32c_kernels.h"
#include "ferry/wire/byte_order.h"
#include "ferry/base/cpu.h"

namespace ferry::codec {
namespace detail {

constinit const shift_table<crc_long_block> crc_shift_long{};
constinit const shift_table<crc_short_block> crc_shift_short{};

}  // namespace detail

namespace {

using base::cpu_feature;

// Slicing-by-8 tables: slice[0] is the classic byte table; slice[k][b] is
// the register after b and then k zero bytes.
struct slice_tables {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  constexpr slice_tables() noexcept {
    for (std::uint32_t b = 0; b < 256; ++b) {
      std::uint32_t r = b;
      for (int i = 0; i < 8; ++i) r = (r & 1u) ? (r >> 1) ^ detail::crc32c_poly : r >> 1;
      t[0][b] = r;
    }
    for (std::size_t k = 1; k < 8; ++k) {
      for (std::size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
    }
  }
};
constinit const slice_tables slices{};

std::uint32_t crc32c_table(std::uint32_t reg, const std::byte* p, std::size_t n) noexcept {
  const auto& t = slices.t;
  for (; n >= 8; n -= 8, p += 8) {
    const std::uint32_t a = reg ^ wire::load<std::uint32_t>(p, wire::byte_order::little);
    const std::uint32_t b = wire::load<std::uint32_t>(p + 4, wire::byte_order::little);
    reg = t[7][a & 0xFF] ^ t[6][(a >> 8) & 0xFF] ^ t[5][(a >> 16) & 0xFF] ^ t[4][a >> 24] ^
          t[3][b & 0xFF] ^ t[2][(b >> 8) & 0xFF] ^ t[1][(b >> 16) & 0xFF] ^ t[0][b >> 24];
  }
  for (; n > 0; --n, ++p) reg = (reg >> 8) ^ t[0][(reg ^ std::to_integer<std::uint32_t>(*p)) & 0xFF];
  return reg;
}

using register_fn = std::uint32_t (*)(std::uint32_t, const std::byte*, std::size_t) noexcept;

struct path {
  register_fn fn;
  std::string_view name;
};

path choose() noexcept {
  [[maybe_unused]] const auto f = base::enabled_cpu_features();
#if defined(__x86_64__)
  if (has(f, cpu_feature::vpclmulqdq) && has(f, cpu_feature::sse4_2)) {
    return {&detail::crc32c_vpclmul, "avx512-vpclmulqdq"};
  }
  if (has(f, cpu_feature::sse4_2)) return {&detail::crc32c_sse42, "sse4.2"};
#elif defined(__aarch64__) || defined(__arm__)
  if (has(f, cpu_feature::arm_crc32)) return {&detail::crc32c_armv8, "armv8-crc"};
#endif
  return {&crc32c_table, "table"};
}

}  // namespace

std::uint32_t crc32c_extend(std::uint32_t crc, std::span<const std::byte> data) noexcept {
  if (data.empty()) return crc;
  return ~choose().fn(~crc, data.data(), data.size());
}

std::uint32_t crc32c(std::span<const std::byte> data) noexcept { return crc32c_extend(0, data); }

std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t length_b) noexcept {
  // The pre- and post-conditioning cancel out: see detail/crc32c_kernels.h.
  return detail::gf2_multiply(crc_a, detail::x_pow_8n(length_b)) ^ crc_b;
}

std::string_view crc32c_kernel_name() noexcept { return choose().name; }


}  // namespace ferry::codec
