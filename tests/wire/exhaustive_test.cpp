// Slow: every one of the 2^32 f32 bit patterns (make soak; a sample of them
// in make test, exhaustive_parallel.h) through the scalar and bulk
// byte-order paths, in every order pair, against a plain reference and
// Boost.Endian. Label `slow`.
#include <boost/endian/conversion.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "../exhaustive_parallel.h"
#include "ferry/wire/bulk.h"
#include "ferry/base/cpu.h"

namespace ferry::wire {
namespace {

using namespace ferry::base;  // the cpu feature controls

// The plain reference: byte i of the pattern in the given order, by shifts.
std::uint8_t reference_byte(std::uint32_t pattern, std::size_t i, byte_order order) {
  const std::size_t shift = 8 * (order == byte_order::little ? i : 3 - i);
  return static_cast<std::uint8_t>(pattern >> shift);
}

// One set of buffers per thread, reused for every chunk: allocating and
// zeroing them per chunk (and the page faults that brings) cost more than
// the checks themselves.
struct buffers {
  std::vector<float> values, decoded;
  std::vector<std::byte> little, big, back, in_place;
  void resize(std::uint32_t count) {
    values.resize(count);
    decoded.resize(count);
    for (auto* v : {&little, &big, &back, &in_place}) v->resize(std::size_t{count} * 4);
  }
};

std::optional<std::uint32_t> check_chunk(std::uint32_t first, std::uint32_t count) {
  thread_local buffers b;
  b.resize(count);
  auto& [values, decoded, little, big, back, in_place] = b;
  for (std::uint32_t k = 0; k < count; ++k) values[k] = from_bits<float>(first + k);

  // Scalar store against the reference bytes, and the load back.
  for (std::uint32_t k = 0; k < count; ++k) {
    const std::uint32_t p = first + k;
    store<float>(values[k], little.data() + 4 * k, byte_order::little);
    store<float>(values[k], big.data() + 4 * k, byte_order::big);
    for (std::size_t i = 0; i < 4; ++i) {
      if (std::to_integer<std::uint8_t>(little[4 * k + i]) != reference_byte(p, i, byte_order::little) ||
          std::to_integer<std::uint8_t>(big[4 * k + i]) != reference_byte(p, i, byte_order::big)) {
        return p;
      }
    }
    if (to_bits(load<float>(big.data() + 4 * k, byte_order::big)) != p ||
        to_bits(load<float>(little.data() + 4 * k, byte_order::little)) != p ||
        byteswap(p) != boost::endian::endian_reverse(p)) {
      return p;
    }
  }
  // Bulk, every order pair, copying and in place, against the scalar bytes
  // (memcmp: vector<std::byte>'s == compares a byte at a time, and was most
  // of this test's time).
  const auto same = [](const std::vector<std::byte>& x, const std::vector<std::byte>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size()) == 0;
  };
  const std::pair<byte_order, const std::vector<std::byte>*> encodings[] = {
      {byte_order::little, &little}, {byte_order::big, &big}};
  for (const auto& [from, src] : encodings) {
    for (const auto& [to, expected] : encodings) {
      convert(*src, from, back, to, 4);
      if (!same(back, *expected)) return first;
      std::copy(src->begin(), src->end(), in_place.begin());
      convert_in_place(in_place, 4, from, to);
      if (!same(in_place, *expected)) return first;
    }
    load_array<float>(*src, from, std::span<float>(decoded));
    for (std::uint32_t k = 0; k < count; ++k) {
      if (to_bits(decoded[k]) != first + k) return first + k;
    }
  }
  return std::nullopt;
}

// Every pattern under make soak; make test's sample of them otherwise.
TEST(Exhaustive, EveryF32PatternThroughEveryPath) {
  // The fastest kernel, then the portable one.
  for (cpu_feature_set features : {all_cpu_features, cpu_feature_set{0}}) {
    limit_cpu_features(features);
    SCOPED_TRACE(std::string(bulk_kernel_name()));
    const auto bad = testing::for_all_u32(check_chunk);
    EXPECT_FALSE(bad.has_value()) << "first failing pattern 0x" << std::hex << *bad;
  }
  limit_cpu_features(all_cpu_features);
}

}  // namespace
}  // namespace ferry::wire
