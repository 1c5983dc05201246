// Multi-process tests of the collectives on loopback: each test forks a
// world of 2, 3 or 4 ranks (world.h).
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "ferry/codec/crc32c.h"
#include "ferry/comm/communicator.h"
#include "ferry/comm/detail/reduce.h"
#include "ferry/comm/frame.h"
#include "typed_input.h"
#include "world.h"

namespace ferry::comm {
namespace {

using test::from_bytes;
using test::expect_all_ok;
using test::run_world;
using test::to_bytes;
using test::typed_input;

// Deterministic, rank-dependent inputs with a wide spread of magnitudes,
// signed zeros and subnormals, so the summation order shows in the bits.
std::vector<float> input(std::uint32_t rank, std::size_t count, std::uint32_t salt = 0) {
  std::mt19937 rng(1234 + rank * 7919 + salt);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-30, 30);
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) {
    v[i] = std::ldexp(mant(rng), expo(rng));
    if (i % 97 == 5) v[i] = -0.0f;
    if (i % 101 == 7) v[i] = std::numeric_limits<float>::denorm_min() * static_cast<float>(rank + 1);
  }
  return v;
}

// Integers small enough that every order of summation is exact.
std::vector<float> integers(std::uint32_t rank, std::size_t count) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>(static_cast<int>((i * 31 + rank * 1009) % 2001) - 1000);
  return v;
}

// The ring's summation order, independently: block k (of n, sizes differing
// by at most one, larger first) is ((x_k + x_k+1) + x_k+2) + ...
std::vector<float> ring_reference(const std::vector<std::vector<float>>& x, bool avg) {
  const std::size_t n = x.size();
  const std::size_t count = x[0].size();
  std::vector<float> out(count);
  const std::size_t base = count / n, rem = count % n;
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t start = base * k + std::min(k, rem);
    const std::size_t size = base + (k < rem ? 1 : 0);
    for (std::size_t i = start; i < start + size; ++i) {
      float s = x[k][i];
      for (std::size_t j = 1; j < n; ++j) s = s + x[(k + j) % n][i];
      out[i] = avg ? s / static_cast<float>(n) : s;
    }
  }
  return out;
}

std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

class Ring : public ::testing::TestWithParam<std::uint32_t> {};

TEST_P(Ring, SumIsExactAndBitIdenticalOnEveryRank) {
  const std::uint32_t n = GetParam();
  // Sizes: empty, fewer elements than ranks, one chunk, many chunks of a
  // small chunk size, and a size that does not divide evenly.
  for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{1000}, std::size_t{70001}}) {
    const auto out = run_world(
        n,
        [&](std::uint32_t r, config& c, std::optional<listener>& l) {
          communicator comm(c, std::move(l));
          auto ints = integers(r, count);
          comm.allreduce(ints);
          auto v = input(r, count);
          comm.allreduce(v);
          auto all = ints;
          all.insert(all.end(), v.begin(), v.end());
          return to_bytes(all);
        },
        [](std::uint32_t, config& c) { c.chunk_bytes = 4096; });
    expect_all_ok(out);
    std::vector<std::vector<float>> ints(n), xs(n);
    for (std::uint32_t r = 0; r < n; ++r) {
      ints[r] = integers(r, count);
      xs[r] = input(r, count);
    }
    auto expected = ring_reference(ints, false);
    for (std::size_t i = 0; i < count; ++i) {
      float exact = 0;
      for (std::uint32_t r = 0; r < n; ++r) exact += ints[r][i];
      ASSERT_EQ(expected[i], exact);
    }
    const auto ref = ring_reference(xs, false);
    expected.insert(expected.end(), ref.begin(), ref.end());
    for (std::uint32_t r = 0; r < n; ++r) {
      EXPECT_EQ(bits(from_bytes<float>(out[r].bytes)), bits(expected)) << "rank " << r << ", count " << count;
    }
  }
}

TEST_P(Ring, AverageDividesTheRingSum) {
  const std::uint32_t n = GetParam();
  constexpr std::size_t count = 12345;
  const auto out = run_world(n, [&](std::uint32_t r, config& c, std::optional<listener>& l) {
    communicator comm(c, std::move(l));
    auto v = input(r, count, 1);
    comm.allreduce(v, {.op = reduce_op::avg});
    return to_bytes(v);
  });
  expect_all_ok(out);
  std::vector<std::vector<float>> xs(n);
  for (std::uint32_t r = 0; r < n; ++r) xs[r] = input(r, count, 1);
  const auto expected = ring_reference(xs, true);
  for (std::uint32_t r = 0; r < n; ++r) EXPECT_EQ(bits(from_bytes<float>(out[r].bytes)), bits(expected));
}

TEST_P(Ring, BroadcastAllgatherBarrierAndAsync) {
  const std::uint32_t n = GetParam();
  const auto out = run_world(n, [&](std::uint32_t r, config& c, std::optional<listener>& l) {
    communicator comm(c, std::move(l));
    std::vector<float> b(30000, 0.0f);
    if (r == n - 1) b = input(99, b.size());
    comm.broadcast(b, n - 1);
    std::vector<std::byte> raw(1001, std::byte{0});
    if (r == 0) {
      for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = std::byte(i * 7);
    }
    comm.broadcast(raw, 0);
    comm.barrier();
    const auto ranks = comm.allgather(static_cast<std::uint64_t>(r) << 40);
    const auto halves = comm.allgather(static_cast<double>(r) + 0.5);
    // Three queued allreduces and a queued broadcast, overlapping "compute".
    auto a = integers(r, 5000), b2 = integers(r + 10, 7000), d = input(r, 100);
    std::vector<float> e(64, static_cast<float>(r));
    auto w1 = comm.start_allreduce(a);
    auto w2 = comm.start_allreduce(b2, {.op = reduce_op::avg});
    auto w3 = comm.start_broadcast(e, 0);
    auto w4 = comm.start_allreduce(d);
    w4.wait();
    w1.wait();
    w2.wait();
    w3.wait();
    EXPECT_TRUE(w1.done());
    std::vector<float> all = b;
    for (std::byte x : raw) all.push_back(static_cast<float>(x));
    for (auto x : ranks) all.push_back(static_cast<float>(x >> 40));
    for (auto x : halves) all.push_back(static_cast<float>(x));
    all.insert(all.end(), a.begin(), a.end());
    all.insert(all.end(), b2.begin(), b2.end());
    all.insert(all.end(), e.begin(), e.end());
    all.insert(all.end(), d.begin(), d.end());
    return to_bytes(all);
  });
  expect_all_ok(out);
  std::vector<float> expected = input(99, 30000);
  for (std::size_t i = 0; i < 1001; ++i) expected.push_back(static_cast<float>(static_cast<std::uint8_t>(i * 7)));
  for (std::uint32_t r = 0; r < n; ++r) expected.push_back(static_cast<float>(r));
  for (std::uint32_t r = 0; r < n; ++r) expected.push_back(static_cast<float>(r) + 0.5f);
  std::vector<std::vector<float>> a(n), b(n), d(n);
  for (std::uint32_t r = 0; r < n; ++r) {
    a[r] = integers(r, 5000);
    b[r] = integers(r + 10, 7000);
    d[r] = input(r, 100);
  }
  for (const auto& part : {ring_reference(a, false), ring_reference(b, true)}) {
    expected.insert(expected.end(), part.begin(), part.end());
  }
  expected.insert(expected.end(), 64, 0.0f);
  const auto dd = ring_reference(d, false);
  expected.insert(expected.end(), dd.begin(), dd.end());
  for (std::uint32_t r = 0; r < n; ++r) EXPECT_EQ(bits(from_bytes<float>(out[r].bytes)), bits(expected)) << r;
}

// Broadcast and allgather of every element type, with their queued forms:
// multi-byte values arrive in the receiver's order, f16/bf16 patterns and
// NaN payloads bit for bit, and a queued barrier keeps call order.
TEST_P(Ring, TypedCollectivesAndQueuedForms) {
  const std::uint32_t n = GetParam();
  const auto out = run_world(n, [&](std::uint32_t r, config& c, std::optional<listener>& l) {
    c.chunk_bytes = 64;  // many frames per buffer
    communicator comm(c, std::move(l));
    const std::uint32_t root = n / 2;
    std::vector<std::int64_t> big(37, 0);
    std::vector<double> wide(29, 0.0);
    std::vector<bf16> half(41, bf16{0});
    std::vector<f16> f16s(3, f16{0});
    if (r == root) {
      for (std::size_t i = 0; i < big.size(); ++i) big[i] = -static_cast<std::int64_t>(i) << 40;
      for (std::size_t i = 0; i < wide.size(); ++i) wide[i] = std::bit_cast<double>(0x7FF0000000000001ull + i);
      for (std::size_t i = 0; i < half.size(); ++i) half[i] = bf16{static_cast<std::uint16_t>(0x7F81 + i)};
      f16s = {f16{0x8000}, f16{0x0001}, f16{0x7C01}};
    }
    comm.broadcast(big, root);
    auto wb = comm.start_broadcast(wide, root);
    comm.broadcast(std::span(half), root);
    auto wf = comm.start_broadcast(f16s, root);
    // Each rank contributes 5 i16 values; all ranks end with every rank's.
    std::vector<std::int16_t> mine(5);
    for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<std::int16_t>(-1000 * static_cast<int>(r) - static_cast<int>(i));
    std::vector<std::int16_t> gathered(5 * n);
    auto wg = comm.start_allgather(mine, gathered);
    auto wbar = comm.start_barrier();
    std::vector<std::uint32_t> ids(n);
    comm.allgather(std::span<const std::uint32_t>(&r, 1), ids);
    wbar.wait();
    wg.wait();
    wf.wait();
    wb.wait();
    std::vector<std::byte> all;
    for (const auto part : {std::as_bytes(std::span(big)), std::as_bytes(std::span(wide)),
                            std::as_bytes(std::span(half)), std::as_bytes(std::span(f16s)),
                            std::as_bytes(std::span(gathered)), std::as_bytes(std::span(ids))}) {
      all.insert(all.end(), part.begin(), part.end());
    }
    return all;
  });
  expect_all_ok(out);
  for (std::uint32_t r = 1; r < n; ++r) EXPECT_EQ(out[r].bytes, out[0].bytes) << r;
  std::size_t at = 0;
  auto take = [&](auto* p, std::size_t count) {
    std::memcpy(p, out[0].bytes.data() + at, count * sizeof *p);
    at += count * sizeof *p;
  };
  std::vector<std::int64_t> big(37);
  take(big.data(), big.size());
  for (std::size_t i = 0; i < big.size(); ++i) EXPECT_EQ(big[i], -static_cast<std::int64_t>(i) << 40);
  std::vector<double> wide(29);
  take(wide.data(), wide.size());
  for (std::size_t i = 0; i < wide.size(); ++i) EXPECT_EQ(std::bit_cast<std::uint64_t>(wide[i]), 0x7FF0000000000001ull + i);
  std::vector<bf16> half(41);
  take(half.data(), half.size());
  for (std::size_t i = 0; i < half.size(); ++i) EXPECT_EQ(half[i].bits, 0x7F81 + i);
  std::vector<f16> f16s(3);
  take(f16s.data(), 3);
  EXPECT_EQ(f16s[0].bits, 0x8000);
  EXPECT_EQ(f16s[2].bits, 0x7C01);
  std::vector<std::int16_t> gathered(5 * n);
  take(gathered.data(), gathered.size());
  for (std::uint32_t r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(gathered[5 * r + i], -1000 * static_cast<int>(r) - static_cast<int>(i));
  }
  std::vector<std::uint32_t> ids(n);
  take(ids.data(), n);
  for (std::uint32_t r = 0; r < n; ++r) EXPECT_EQ(ids[r], r);
}

// One call: every element within the rounding of each hop (n - 1 partial
// sums and the final value, each off by at most half an ulp of 16 bits).
// Many calls with error feedback: the mean of the results converges to the
// exact sum, which plain rounding's bias prevents.
TEST_P(Ring, CompressionBoundsAndErrorFeedbackConvergence) {
  const std::uint32_t n = GetParam();
  constexpr std::size_t count = 4099;
  constexpr int calls = 64;
  for (const compression comp : {compression::bf16, compression::f16}) {
    const auto out = run_world(n, [&](std::uint32_t r, config& c, std::optional<listener>& l) {
      communicator comm(c, std::move(l));
      std::vector<float> x(count);
      for (std::size_t i = 0; i < count; ++i) x[i] = 1.0f + static_cast<float>((i * 13 + r * 5) % 1000) / 3000.0f;
      std::vector<float> once = x;
      comm.allreduce(once, {.comp = comp});
      error_feedback ef(count);
      std::vector<double> mean_fb(count, 0.0), mean_plain(count, 0.0);
      for (int k = 0; k < calls; ++k) {
        auto y = x;
        comm.allreduce(y, {.comp = comp, .feedback = &ef});
        auto z = x;
        comm.allreduce(z, {.comp = comp});
        for (std::size_t i = 0; i < count; ++i) {
          mean_fb[i] += y[i] / calls;
          mean_plain[i] += z[i] / calls;
        }
      }
      std::vector<float> all = once;
      for (double m : mean_fb) all.push_back(static_cast<float>(m));
      for (double m : mean_plain) all.push_back(static_cast<float>(m));
      return to_bytes(all);
    });
    expect_all_ok(out);
    const double ulp = comp == compression::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    double err_fb = 0, err_plain = 0;
    for (std::size_t i = 0; i < count; ++i) {
      double exact = 0;
      for (std::uint32_t r = 0; r < n; ++r) exact += 1.0 + static_cast<double>(static_cast<float>((i * 13 + r * 5) % 1000) / 3000.0f);
      const auto v = from_bytes<float>(out[0].bytes);
      // Each of n roundings is at most half an ulp of a value below 2n.
      EXPECT_LE(std::abs(v[i] - exact), n * 0.5 * ulp * 2 * n) << i;
      err_fb += std::abs(v[count + i] - exact);
      err_plain += std::abs(v[2 * count + i] - exact);
    }
    err_fb /= count;
    err_plain /= count;
    EXPECT_LT(err_fb, err_plain / 4) << "feedback " << err_fb << " plain " << err_plain;
    for (std::uint32_t r = 1; r < n; ++r) EXPECT_EQ(out[r].bytes, out[0].bytes) << "rank " << r;
  }
}

// The ring's order for any op, with the kernels themselves (reduce_test
// checks them against a scalar reference): block k starts from the values
// of place k, and each following place combines its own values (first
// operand) with what it received (second).
std::vector<std::byte> typed_ring_reference(const std::vector<std::vector<std::byte>>& x, codec::dtype t, reduce_op op) {
  const std::size_t n = x.size();
  const std::size_t w = codec::size_of(t);
  const std::size_t count = x[0].size() / w;
  std::vector<std::byte> out(x[0].size());
  const std::size_t base = count / n, rem = count % n;
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t start = base * k + std::min(k, rem);
    const std::size_t size = base + (k < rem ? 1 : 0);
    std::byte* r = out.data() + start * w;
    std::memcpy(r, x[k].data() + start * w, size * w);
    for (std::size_t j = 1; j < n; ++j) {
      detail::reduce(op, t, r, x[(k + j) % n].data() + start * w, r, wire::host_order, size);
    }
    if (op == reduce_op::avg) detail::divide(t, r, size, static_cast<std::uint32_t>(n));
  }
  return out;
}

TEST_P(Ring, EveryOpAndDtypeIsTheRingOrderFold) {
  const std::uint32_t n = GetParam();
  constexpr std::size_t count = 777;
  const auto cases = test::reducible_cases();
  const auto out = run_world(
      n,
      [&](std::uint32_t r, config& c, std::optional<listener>& l) {
        communicator comm(c, std::move(l));
        std::vector<std::byte> all;
        for (const auto& [t, op] : cases) {
          auto v = typed_input(r, t, count);
          comm.allreduce_bytes(t, v, {.op = op});
          all.insert(all.end(), v.begin(), v.end());
        }
        // The typed front door: a vector of int32 and one of bool.
        std::vector<std::int32_t> ints{static_cast<std::int32_t>(r) - 1, 5};
        comm.allreduce(ints, {.op = reduce_op::min});
        bool flags[2] = {r == 0, true};
        comm.allreduce(flags, {.op = reduce_op::band});
        const auto tail = to_bytes(ints);
        all.insert(all.end(), tail.begin(), tail.end());
        all.push_back(std::byte{flags[0]});
        all.push_back(std::byte{flags[1]});
        return all;
      },
      [](std::uint32_t, config& c) { c.chunk_bytes = 512; });
  expect_all_ok(out);
  std::size_t at = 0;
  for (const auto& [t, op] : cases) {
    std::vector<std::vector<std::byte>> xs(n);
    for (std::uint32_t r = 0; r < n; ++r) xs[r] = typed_input(r, t, count);
    const auto want = typed_ring_reference(xs, t, op);
    for (std::uint32_t r = 0; r < n; ++r) {
      const std::vector<std::byte> got(out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at),
                                       out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at + want.size()));
      EXPECT_EQ(got, want) << codec::name(t) << " " << name(op) << ", rank " << r;
    }
    at += want.size();
  }
  for (std::uint32_t r = 0; r < n; ++r) {
    const auto ints = from_bytes<std::int32_t>(std::vector<std::byte>(out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at), out[r].bytes.begin() + static_cast<std::ptrdiff_t>(at + 8)));
    EXPECT_EQ(ints, (std::vector<std::int32_t>{-1, 5}));
    EXPECT_EQ(out[r].bytes[at + 8], std::byte{0});
    EXPECT_EQ(out[r].bytes[at + 9], std::byte{1});
  }
}

// reduce_scatter's piece for the rank at place q is the allreduce's block
// q+1, bit for bit, when the pieces are laid out as those blocks; and uneven
// pieces (some empty) with other ops follow the same order.
TEST_P(Ring, ReduceScatterGivesTheAllreducesBlocks) {
  const std::uint32_t n = GetParam();
  constexpr std::size_t count = 1001;
  const std::size_t base = count / n, rem = count % n;
  const auto block_start = [&](std::size_t k) { return base * k + std::min(k, rem); };
  const auto block_size = [&](std::size_t k) { return base + (k < rem ? 1 : 0); };
  // Rank q's piece is block q+1: the input rotated left by block 0.
  std::vector<std::size_t> counts(n);
  for (std::size_t q = 0; q < n; ++q) counts[q] = block_size((q + 1) % n);
  const auto rotated = [&](const std::vector<float>& v) {
    std::vector<float> r(v.begin() + static_cast<std::ptrdiff_t>(block_size(0)), v.end());
    r.insert(r.end(), v.begin(), v.begin() + static_cast<std::ptrdiff_t>(block_size(0)));
    return r;
  };
  const std::vector<std::size_t> uneven = [&] {
    std::vector<std::size_t> c(n);
    for (std::size_t q = 0; q < n; ++q) c[q] = q == 1 ? 0 : 37 * q + 5;
    return c;
  }();
  const auto out = run_world(
      n,
      [&](std::uint32_t r, config& c, std::optional<listener>& l) {
        communicator comm(c, std::move(l));
        auto all = input(r, count, 9);
        const auto in = rotated(all);
        comm.allreduce(all, {.op = reduce_op::avg});
        std::vector<float> piece(counts[r]);
        comm.reduce_scatter(in, counts, piece, {.op = reduce_op::avg});
        // Uneven pieces of int64 products, with the start_ form.
        std::size_t total = 0;
        for (const std::size_t k : uneven) total += k;
        std::vector<std::int64_t> ints(total);
        for (std::size_t i = 0; i < total; ++i) ints[i] = static_cast<std::int64_t>(i % 5) + r - 1;
        std::vector<std::int64_t> mine(uneven[r]);
        comm.start_reduce_scatter_bytes(codec::dtype::i64, std::as_bytes(std::span(ints)), uneven,
                                        std::as_writable_bytes(std::span(mine)), {.op = reduce_op::product})
            .wait();
        const std::size_t b = (r + 1) % n;
        std::vector<float> block(all.begin() + static_cast<std::ptrdiff_t>(block_start(b)),
                                 all.begin() + static_cast<std::ptrdiff_t>(block_start(b) + block_size(b)));
        auto bytes = to_bytes(block);
        const auto p = to_bytes(piece);
        bytes.insert(bytes.end(), p.begin(), p.end());
        const auto q = to_bytes(mine);
        bytes.insert(bytes.end(), q.begin(), q.end());
        return bytes;
      },
      [](std::uint32_t, config& c) { c.chunk_bytes = 64; });
  expect_all_ok(out);
  std::size_t before = 0;
  for (std::uint32_t r = 0; r < n; ++r) {
    const std::size_t half = counts[r] * 4;
    ASSERT_EQ(out[r].bytes.size(), 2 * half + uneven[r] * 8) << "rank " << r;
    EXPECT_TRUE(std::equal(out[r].bytes.begin(), out[r].bytes.begin() + static_cast<std::ptrdiff_t>(half),
                           out[r].bytes.begin() + static_cast<std::ptrdiff_t>(half)))
        << "rank " << r << ": reduce_scatter's piece differs from the allreduce's block";
    const auto got = from_bytes<std::int64_t>(
        std::vector<std::byte>(out[r].bytes.begin() + static_cast<std::ptrdiff_t>(2 * half), out[r].bytes.end()));
    for (std::size_t i = 0; i < uneven[r]; ++i) {
      std::int64_t want = 1;
      for (std::uint32_t k = 0; k < n; ++k) want *= static_cast<std::int64_t>((before + i) % 5) + k - 1;
      EXPECT_EQ(got[i], want) << "rank " << r << ", element " << i;
    }
    before += uneven[r];
  }
}

// ZeRO's halves: the reduce-scatter half leaves this rank's owned block
// (block p+1) with the allreduce's bits, f32 and compressed (with the
// allreduce's residual), and the all-gather half spreads the owned blocks
// so that every rank ends with the whole allreduce.
TEST_P(Ring, HalvesOfTheAllreduceAreTheAllreduce) {
  const std::uint32_t n = GetParam();
  constexpr std::size_t count = 1001;
  const auto out = run_world(
      n,
      [&](std::uint32_t r, config& c, std::optional<listener>& l) {
        communicator comm(c, std::move(l));
        const auto all = input(r, count, 11);
        const auto [first, size] = comm.owned_block(count);
        const auto owned = [&](const std::vector<float>& v) {
          return bits(std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(first),
                                         v.begin() + static_cast<std::ptrdiff_t>(first + size)));
        };
        std::vector<std::byte> verdict;
        const auto check = [&](bool ok) { verdict.push_back(static_cast<std::byte>(ok)); };
        check(comm.ring_allreduce_for(count * 4, compression::none));
        check(first == [&] {  // block p+1 of the ring (place = rank here)
          const std::size_t k = (r + 1) % n, base = count / n, rem = count % n;
          return base * k + std::min(k, rem);
        }());
        // f32, averaged.
        auto whole = all;
        comm.allreduce(whole, {.op = reduce_op::avg});
        auto half = all;
        comm.start_reduce_scatter_owned(half, {.op = reduce_op::avg}).wait();
        check(owned(half) == owned(whole));
        // The second half fills in every other block.
        for (std::size_t i = 0; i < count; ++i) {
          if (i < first || i >= first + size) half[i] = std::numeric_limits<float>::quiet_NaN();
        }
        comm.start_allgather_owned(half).wait();
        check(bits(half) == bits(whole));
        // bf16 with error feedback: the same block, the same residual.
        error_feedback ef_whole(count), ef_half(count);
        auto cw = all, ch = all;
        comm.allreduce(cw, {.op = reduce_op::avg, .comp = compression::bf16, .feedback = &ef_whole});
        comm.start_reduce_scatter_owned(ch, {.op = reduce_op::avg, .comp = compression::bf16, .feedback = &ef_half})
            .wait();
        check(owned(ch) == owned(cw));
        check(bits(std::vector<float>(ef_half.residual().begin(), ef_half.residual().end())) ==
              bits(std::vector<float>(ef_whole.residual().begin(), ef_whole.residual().end())));
        return verdict;
      },
      [](std::uint32_t, config& c) { c.chunk_bytes = 64; });
  expect_all_ok(out);
  const std::vector<std::byte> all_true(6, std::byte{1});
  for (std::uint32_t r = 0; r < n; ++r) EXPECT_EQ(out[r].bytes, all_true) << "rank " << r;
}

TEST_P(Ring, OpsATypeDoesNotTakeAreRefusedAndSoIsABadBool) {
  const std::uint32_t n = GetParam();
  const auto out = run_world(n, [&](std::uint32_t, config& c, std::optional<listener>& l) {
    communicator comm(c, std::move(l));
    std::vector<std::string> texts;
    // Refused on every rank before any frame: the communicator stays usable.
    const auto refused = [&](auto&& call) {
      try {
        call();
        texts.push_back("no error");
      } catch (const comm_error& e) {
        texts.push_back(std::string(name(e.code())) + ": " + e.what());
      }
    };
    std::vector<f8_e4m3> fp8(4);
    refused([&] { comm.allreduce(fp8); });
    std::vector<float> f(4);
    refused([&] { comm.allreduce(f, {.op = reduce_op::bxor}); });
    std::vector<std::int32_t> i(4);
    refused([&] { comm.allreduce(i, {.comp = compression::bf16}); });
    refused([&] { comm.allreduce(f, {.op = reduce_op::max, .comp = compression::f16}); });
    // A byte no bool holds, in this rank's own buffer: refused before
    // anything is sent (a peer's is refused on receipt: failure_test).
    std::vector<std::uint8_t> flags(16, 1);
    flags[9] = 2;
    refused([&] { comm.allreduce_bytes(codec::dtype::boolean, std::as_writable_bytes(std::span(flags)), {}); });
    std::string all;
    for (const auto& t : texts) all += t + "\n";
    return std::vector<std::byte>(reinterpret_cast<const std::byte*>(all.data()),
                                  reinterpret_cast<const std::byte*>(all.data() + all.size()));
  });
  expect_all_ok(out);
  for (std::uint32_t r = 0; r < n; ++r) {
    const std::string text(reinterpret_cast<const char*>(out[r].bytes.data()), out[r].bytes.size());
    EXPECT_NE(text.find("unsupported: rank " + std::to_string(r) + ": allreduce sum is not defined on F8_E4M3"),
              std::string::npos) << text;
    EXPECT_NE(text.find("allreduce bxor is not defined on F32"), std::string::npos) << text;
    EXPECT_NE(text.find("bad_argument: rank " + std::to_string(r) + ": allreduce compression bf16 applies to F32 values, not I32"),
              std::string::npos) << text;
    EXPECT_NE(text.find("allreduce compression f16 applies to sum and avg, not max"), std::string::npos) << text;
    EXPECT_NE(text.find("bad_argument: rank " + std::to_string(r) + ": allreduce of bools: element 9 holds the byte 2"),
              std::string::npos) << text;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, Ring, ::testing::Values(2u, 3u, 4u), [](const auto& p) {
  return std::to_string(p.param) + "ranks";
});

}  // namespace
}  // namespace ferry::comm
