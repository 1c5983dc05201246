// ferry-codec-demo: the codecs at work. Prints the worked example of
// docs/wire-and-codec.md (section 1, Scalars) byte by byte, then converts a
// 64 MiB array of floats to network order and back, to bf16 and to f16, and
// checksums it, with measured speeds.
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "ferry/codec/crc32c.h"
#include "ferry/codec/half.h"
#include "ferry/codec/kernels.h"
#include "ferry/wire/bulk.h"
#include "ferry/base/cpu.h"

namespace {

using namespace ferry;
using wire::byte_order;

void print_bytes(const char* label, std::span<const std::byte> b) {
  std::printf("  %-34s", label);
  for (std::byte x : b) std::printf(" %02X", std::to_integer<unsigned>(x));
  std::printf("\n");
}

// Runs fn `reps` times and returns the best GB/s for `bytes` per run.
template <class Fn>
double best_gbps(std::size_t bytes, int reps, Fn fn) {
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    best = std::max(best, static_cast<double>(bytes) / dt.count() / 1e9);
  }
  return best;
}

}  // namespace

int main() {
  std::printf("ferry codec demo\n\nCPU features: %s\n", base::describe_cpu_features(base::enabled_cpu_features()).c_str());
  std::printf("kernels:");
  for (const auto& [dispatcher, kernel] : codec::kernel_choices()) {
    std::printf(" %.*s=%.*s", static_cast<int>(dispatcher.size()), dispatcher.data(), static_cast<int>(kernel.size()),
                kernel.data());
  }
  std::printf("\n\n");

  std::printf("The worked example:\n");
  const float value = 6.342e-5f;
  std::printf("  float %.4g has bit pattern 0x%08" PRIX32 "\n", static_cast<double>(value), wire::to_bits(value));
  const auto little = wire::to_bytes(value, byte_order::little);
  const auto network = wire::to_bytes(value, byte_order::network);
  print_bytes("stored little-endian (x86):", little);
  print_bytes("in network order (big-endian):", network);
  std::array<std::byte, 4> received{};
  wire::convert(network, byte_order::network, received, byte_order::little, 4);
  print_bytes("reversed back by an x86 receiver:", received);
  const float back = wire::load<float>(received.data(), byte_order::little);
  std::printf("  which reads as %.4g again: %s\n\n", static_cast<double>(back),
              wire::to_bits(back) == wire::to_bits(value) ? "bit-identical" : "MISMATCH");

  constexpr std::size_t n = std::size_t{16} << 20;  // 16 Mi floats = 64 MiB
  std::vector<float> floats(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& f : floats) f = dist(rng);
  const auto src = std::as_bytes(std::span(floats));
  std::vector<std::byte> wire_bytes(src.size()), copy(src.size());
  std::vector<float> decoded(n);
  std::vector<bf16> b16(n);
  std::vector<f16> h16(n);

  std::printf("Bulk work on %zu MiB of float32 (best of 5):\n", src.size() >> 20);
  const double memcpy_gbps = best_gbps(src.size(), 5, [&] { std::memcpy(copy.data(), src.data(), src.size()); });
  const double to_net = best_gbps(src.size(), 5, [&] {
    wire::store_array<float>(floats, wire_bytes, byte_order::network);
  });
  const double from_net = best_gbps(src.size(), 5, [&] {
    wire::load_array<float>(wire_bytes, byte_order::network, std::span<float>(decoded));
  });
  const double bf = best_gbps(src.size(), 5, [&] { codec::to_bf16(floats, b16); });
  const double hf = best_gbps(src.size(), 5, [&] { codec::to_f16(floats, h16); });
  std::uint32_t crc = 0;
  const double crc_gbps = best_gbps(src.size(), 5, [&] { crc = codec::crc32c(src); });
  std::printf("  %-34s %6.2f GB/s\n", "memcpy (the physical limit)", memcpy_gbps);
  std::printf("  %-34s %6.2f GB/s (%.2fx memcpy)\n", "float32 -> network order", to_net, to_net / memcpy_gbps);
  std::printf("  %-34s %6.2f GB/s (%.2fx memcpy)\n", "network order -> float32", from_net, from_net / memcpy_gbps);
  std::printf("  %-34s %6.2f GB/s of input\n", "float32 -> bf16 (round to even)", bf);
  std::printf("  %-34s %6.2f GB/s of input\n", "float32 -> f16 (round to even)", hf);
  std::printf("  %-34s %6.2f GB/s (crc 0x%08" PRIX32 ")\n", "CRC32C", crc_gbps, crc);
  const bool same = std::memcmp(decoded.data(), floats.data(), src.size()) == 0;
  std::printf("\nRound trip through network order is bit-identical: %s\n", same ? "yes" : "NO");
  return same ? 0 : 1;
}
