#include "ferry/comm/cost_model.h"

#include <cmath>
#include <cstdio>

namespace ferry::comm {

double predict(algorithm a, std::uint32_t world, std::size_t bytes, const link_cost& c) noexcept {
  if (world <= 1) return 0;
  if (a == algorithm::automatic) a = choose(world, bytes, c);
  const double p = world;
  const auto n = static_cast<double>(bytes);
  if (a == algorithm::recursive_doubling || a == algorithm::rabenseifner) {
    std::uint32_t p2 = 1;
    double steps = 0;
    while (p2 * 2 <= world) {
      p2 *= 2;
      steps += 1;
    }
    const double fold = p2 != world ? 2 * (c.alpha_s + n * c.beta_s_per_byte) + n * c.gamma_s_per_byte : 0;
    if (a == algorithm::recursive_doubling) {
      return fold + steps * (c.alpha_s + n * c.beta_s_per_byte + n * c.gamma_s_per_byte);
    }
    const double share = (p2 - 1.0) / p2;
    return fold + 2 * steps * c.alpha_s + 2 * share * n * c.beta_s_per_byte + share * n * c.gamma_s_per_byte;
  }
  return 2 * (p - 1) * c.alpha_s + 2 * (p - 1) / p * n * c.beta_s_per_byte + (p - 1) / p * n * c.gamma_s_per_byte;
}

algorithm choose_tree(std::uint32_t world, std::size_t bytes, const link_cost& c) noexcept {
  return predict(algorithm::recursive_doubling, world, bytes, c) < predict(algorithm::rabenseifner, world, bytes, c)
             ? algorithm::recursive_doubling
             : algorithm::rabenseifner;
}

algorithm choose(std::uint32_t world, std::size_t bytes, const link_cost& c) noexcept {
  if (world <= 1) return algorithm::ring;
  const algorithm tree = choose_tree(world, bytes, c);
  return predict(tree, world, bytes, c) <= ring_margin * predict(algorithm::ring, world, bytes, c) ? tree
                                                                                                    : algorithm::ring;
}

std::vector<std::pair<std::size_t, algorithm>> crossovers(std::uint32_t world, const link_cost& c) {
  std::vector<std::pair<std::size_t, algorithm>> out;
  algorithm last = choose(world, 1, c);
  out.emplace_back(1, last);
  // Each algorithm's time is linear in the size, so the choice changes
  // where two lines cross: bisect between powers of two.
  for (std::size_t hi = 2; hi <= (std::size_t{1} << 30); hi *= 2) {
    const algorithm now = choose(world, hi, c);
    if (now == last) continue;
    std::size_t lo = hi / 2;  // choose(lo) == last, choose(hi) == now
    std::size_t top = hi;
    while (top - lo > 1) {
      const std::size_t mid = lo + (top - lo) / 2;
      (choose(world, mid, c) == last ? lo : top) = mid;
    }
    out.emplace_back(top, now);
    last = now;
  }
  return out;
}

namespace {

std::string size_text(std::size_t b) {
  char buf[32];
  if (b >= (std::size_t{1} << 20) && b % (std::size_t{1} << 20) == 0) {
    std::snprintf(buf, sizeof buf, "%zu MiB", b >> 20);
  } else if (b >= 1024 && b % 1024 == 0) {
    std::snprintf(buf, sizeof buf, "%zu KiB", b >> 10);
  } else {
    std::snprintf(buf, sizeof buf, "%zu B", b);
  }
  return buf;
}

}  // namespace

std::string explain(std::uint32_t world, const link_cost& c) {
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line,
                "allreduce cost model: %u ranks, alpha %.1f us per message, beta %.3f Gbit/s, gamma %.2f GB/s\n",
                world, c.alpha_s * 1e6, 8e-9 / c.beta_s_per_byte, 1e-9 / c.gamma_s_per_byte);
  out += line;
  out += "| size | ring | recursive_doubling | rabenseifner | auto picks |\n|---|---|---|---|---|\n";
  for (std::size_t b = 4096; b <= (std::size_t{256} << 20); b *= 4) {
    std::snprintf(line, sizeof line, "| %s | %.3f ms | %.3f ms | %.3f ms | %s |\n", size_text(b).c_str(),
                  1e3 * predict(algorithm::ring, world, b, c), 1e3 * predict(algorithm::recursive_doubling, world, b, c),
                  1e3 * predict(algorithm::rabenseifner, world, b, c), std::string(name(choose(world, b, c))).c_str());
    out += line;
  }
  for (const auto& [from, a] : crossovers(world, c)) {
    out += "from " + size_text(from) + ": " + std::string(name(a)) + "\n";
  }
  return out;
}

}  // namespace ferry::comm
