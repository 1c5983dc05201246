// ferry_ring_node: one rank of the mixed-architecture ring test.
//
//   ferry_ring_node RANK WORLD PORT OUT      (FERRY_SECRET in the environment,
//                                             FERRY_AUTH, FERRY_ALGORITHM,
//                                             FERRY_SHARED_MEMORY and
//                                             FERRY_HOST_ID too if set)
//
// Rank 0 with PORT 0 binds an ephemeral port on 127.0.0.1 and prints
// "port N" first. Every rank runs the same collectives on inputs that are a
// pure function of (rank, index), so they are the same on every
// architecture, and writes everything it ends with to OUT (and its
// error-feedback residual and its reduce_scatter pieces, which are per
// rank, to OUT.residual) in
// little-endian byte order, so outputs from different hosts compare byte
// for byte.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/comm/communicator.h"
#include "ferry/comm/detail/reduce.h"
#include "ferry/wire/bulk.h"
#include "ferry/wire/byte_order.h"
#include "typed_input.h"

namespace {

using namespace ferry;

using comm::test::splitmix;
using comm::test::typed_input;

// Finite floats of many magnitudes, with signed zeros and subnormals.
float value(std::uint32_t rank, std::size_t i, std::uint32_t salt) {
  const std::uint64_t h = splitmix((std::uint64_t{rank} << 48) ^ (std::uint64_t{salt} << 40) ^ i);
  if (i % 89 == 3) return -0.0f;
  std::uint32_t bits = static_cast<std::uint32_t>(h) & 0x807FFFFFu;   // sign and mantissa
  bits |= static_cast<std::uint32_t>(97 + (h >> 32) % 60) << 23;       // exponents 2^-30 .. 2^29
  if (i % 101 == 7) bits &= 0x807FFFFFu;                                 // subnormal
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::vector<float> input(std::uint32_t rank, std::size_t count, std::uint32_t salt) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = value(rank, i, salt);
  return v;
}

void append_le(std::vector<unsigned char>& out, const std::vector<float>& v) {
  for (float f : v) {
    unsigned char b[4];
    wire::store<float>(f, reinterpret_cast<std::byte*>(b), wire::byte_order::little);
    out.insert(out.end(), b, b + 4);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: ferry_ring_node RANK WORLD PORT OUT\n";
    return 2;
  }
  try {
    comm::config c;
    c.rank = static_cast<std::uint32_t>(std::stoul(argv[1]));
    c.world_size = static_cast<std::uint32_t>(std::stoul(argv[2]));
    c.master_port = static_cast<std::uint16_t>(std::stoul(argv[3]));
    c.master_addr = "127.0.0.1";
    c.secret = std::getenv("FERRY_SECRET") ? std::getenv("FERRY_SECRET") : "";
    if (const char* a = std::getenv("FERRY_AUTH")) {
      for (const auto mode : {comm::frame_auth::none, comm::frame_auth::frames, comm::frame_auth::encrypt}) {
        if (comm::name(mode) == a) c.auth = mode;
      }
    }
    // The ring unless asked (auto, the library's default, would mix them).
    c.algorithm = comm::algorithm::ring;
    if (const char* a = std::getenv("FERRY_ALGORITHM")) c.algorithm = comm::algorithm_from_name(a).value();
    // Off unless asked: the mixed ring's runs compare TCP algorithms' bits.
    const char* shm = std::getenv("FERRY_SHARED_MEMORY");
    c.shared_memory = shm != nullptr && std::string_view(shm) == "on";
    if (const char* h = std::getenv("FERRY_HOST_ID")) c.host_id = h;
    c.chunk_bytes = 16 * 1024;  // many chunks per block
    c.timeout = std::chrono::seconds(120);
    std::optional<comm::listener> l;
    if (c.rank == 0) {
      l.emplace(c);
      std::cout << "port " << l->port() << std::endl;
    }
    comm::communicator comm(c, std::move(l));
    std::vector<unsigned char> out;
    const std::size_t count = 50'003;
    auto sum = input(c.rank, count, 1);
    comm.allreduce(sum);
    append_le(out, sum);
    auto avg = input(c.rank, count, 2);
    comm.allreduce(avg, {.op = comm::reduce_op::avg});
    append_le(out, avg);
    // Long enough to be striped where hosts of equal size share segments
    // (three chunks at two ranks per host).
    if (c.shared_memory) {
      auto big = input(c.rank, 600'007, 5);
      comm.allreduce(big, {.op = comm::reduce_op::avg});
      append_le(out, big);
    }
    comm::error_feedback ef(count);
    for (int k = 0; k < 3; ++k) {
      auto q = input(c.rank, count, 3);
      comm.allreduce(q, {.comp = comm::compression::bf16, .feedback = &ef});
      append_le(out, q);
    }
    std::vector<unsigned char> residual;
    append_le(residual, std::vector<float>(ef.residual().begin(), ef.residual().end()));
    auto h = input(c.rank, count, 4);
    comm.allreduce(h, {.op = comm::reduce_op::avg, .comp = comm::compression::f16});
    append_le(out, h);
    // Every op on every dtype it takes: the NaNs, infinities and signed
    // zeros meet across architectures, and the kernels' rules decide.
    for (const codec::dtype t : codec::all_dtypes) {
      for (const comm::reduce_op op : comm::all_reduce_ops) {
        if (!comm::detail::reducible(op, t)) continue;
        auto v = typed_input(c.rank, t, 1001);
        comm.allreduce_bytes(t, v, {.op = op});
        std::vector<std::byte> le(v.size());
        wire::convert(v, wire::host_order, le, wire::byte_order::little, codec::order_width(t));
        for (const std::byte x : le) out.push_back(std::to_integer<unsigned char>(x));
      }
    }
    // reduce_scatter: uneven pieces (one empty), the other byte orders'
    // frames. Each rank's piece is its own: it goes with the residual.
    for (const codec::dtype t : {codec::dtype::f32, codec::dtype::i16, codec::dtype::bf16, codec::dtype::f64}) {
      std::vector<std::size_t> counts(c.world_size);
      std::size_t total = 0;
      for (std::size_t r = 0; r < counts.size(); ++r) total += counts[r] = r == 1 ? 0 : 300 + 17 * r;
      const auto in = typed_input(c.rank, t, total);
      std::vector<std::byte> piece(counts[c.rank] * codec::size_of(t));
      comm.reduce_scatter_bytes(t, in, counts, piece, {.op = comm::reduce_op::max});
      std::vector<std::byte> le(piece.size());
      wire::convert(piece, wire::host_order, le, wire::byte_order::little, codec::order_width(t));
      for (const std::byte x : le) residual.push_back(std::to_integer<unsigned char>(x));
    }
    auto b = input(c.rank, 3000, 5);
    comm.broadcast(b, c.world_size - 1);
    append_le(out, b);
    const auto ranks = comm.allgather(static_cast<double>(c.rank) * 1.25);
    append_le(out, std::vector<float>(ranks.begin(), ranks.end()));
    // all_to_all and point-to-point messages: what each rank receives is
    // a pure function of sender and receiver, checked here (multi-byte
    // values arrive converted from the sender's byte order).
    const std::uint32_t n = c.world_size;
    for (const codec::dtype t : {codec::dtype::f64, codec::dtype::f16, codec::dtype::i32, codec::dtype::boolean}) {
      const std::size_t width = codec::size_of(t);
      std::vector<std::size_t> send(n), recv(n);
      std::vector<std::byte> in, expect;
      for (std::uint32_t k = 0; k < n; ++k) {
        send[k] = 100 + 37 * ((c.rank + k) % 3);
        recv[k] = 100 + 37 * ((k + c.rank) % 3);
        const auto mine = typed_input(c.rank * n + k, t, send[k]);
        const auto theirs = typed_input(k * n + c.rank, t, recv[k]);
        in.insert(in.end(), mine.begin(), mine.end());
        expect.insert(expect.end(), theirs.begin(), theirs.end());
      }
      std::vector<std::byte> got(expect.size());
      comm.all_to_all_bytes(t, in, send, got, recv);
      if (got != expect) throw std::runtime_error("all_to_all of " + std::string(codec::name(t)) + " differs");
      const std::uint32_t to = (c.rank + 1) % n, from = (c.rank + n - 1) % n;
      std::vector<std::byte> msg(777 * width);
      comm::work rx = comm.start_recv_bytes(t, msg, std::nullopt, codec::code(t));
      comm.send_bytes(t, typed_input(1000 + c.rank, t, 777), to, codec::code(t));
      rx.wait();
      if (msg != typed_input(1000 + from, t, 777)) {
        throw std::runtime_error("a message of " + std::string(codec::name(t)) + " from rank " + std::to_string(from) +
                                 " differs");
      }
    }
    comm.barrier();
    // The residual and the pieces differ per rank by design; everything
    // else must not.
    auto save = [](const std::string& path, const std::vector<unsigned char>& bytes) {
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    };
    save(argv[4], out);
    save(std::string(argv[4]) + ".residual", residual);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "rank " << argv[1] << ": " << e.what() << "\n";
    return 1;
  }
}
