// ferry/comm/detail/ring_plans.h: the ring's collectives as plans of the
// link (INTERNAL to comm/): the allreduce (whole, or either half: ZeRO's
// reduce-scatter and allgather of an allreduce-shaped buffer), the
// reduce-scatter with pieces of any size, and the copy pipeline of
// broadcast and allgather. docs/comm-protocol.md describes their frames.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "ferry/comm/communicator.h"
#include "ferry/comm/detail/kernels.h"
#include "ferry/comm/detail/link.h"
#include "ferry/comm/detail/plan_checks.h"
#include "ferry/comm/detail/reduce.h"
#include "ferry/comm/frame.h"
#include "ferry/wire/bulk.h"

namespace ferry::comm::detail {

// The chunks of a ring collective: `total` elements cut into n blocks
// (sizes differing by at most one, the larger first), each cut into m
// chunks of at most `grain` elements; m is the same for every block, so
// every rank computes the same frame sequence.
struct chunking {
  std::size_t total = 0;
  std::size_t n = 1;
  std::size_t grain = 1;
  std::size_t base = 0;
  std::size_t rem = 0;
  std::size_t m = 1;

  chunking(std::size_t total_, std::size_t n_, std::size_t grain_)
      : total(total_), n(n_), grain(grain_), base(total_ / n_), rem(total_ % n_) {
    const std::size_t largest = base + (rem != 0 ? 1 : 0);
    m = std::max<std::size_t>(1, (largest + grain - 1) / grain);
  }
  [[nodiscard]] std::size_t block_start(std::size_t k) const { return base * k + std::min(k, rem); }
  [[nodiscard]] std::size_t block_size(std::size_t k) const { return base + (k < rem ? 1 : 0); }
  // Offset and length of chunk c of block k. Requires grain >= 1.
  [[nodiscard]] std::pair<std::size_t, std::size_t> chunk(std::size_t k, std::size_t c) const {
    const std::size_t size = block_size(k);
    const std::size_t from = std::min(size, c * grain);
    return {block_start(k) + from, std::min(grain, size - from)};
  }
};

inline encoding encoding_of(compression c) {
  switch (c) {
    case compression::bf16: return encoding::bf16;
    case compression::f16: return encoding::f16;
    case compression::none: break;
  }
  return encoding::raw;
}

inline std::size_t mod(std::int64_t k, std::uint32_t n) {
  const auto ranks = static_cast<std::int64_t>(n);
  return static_cast<std::size_t>(((k % ranks) + ranks) % ranks);
}

// Ring allreduce, at place p on the ring. Stage t < n-1 (reduce-scatter):
// send block (p - t), receive block (p - t - 1) and combine it with this
// rank's own values (detail::reduce: own values first, the received
// partial result second). Stage n-1+u (all-gather): send block (p + 1 - u),
// receive block (p - u) and copy it. Chunk c of stage t+1 is sent as soon
// as chunk c of stage t is in. Each block is combined along the ring ending
// at its owner, who divides it (avg) and sends it on: every rank ends with
// the owner's bits.
//
// Compressed (bf16, f16), every value is rounded once where it is produced
// and goes out from a scratch slot of the link: the received chunk is
// widened, added, averaged, error-corrected and rounded in one pass
// (detail::compress), and an all-gather chunk is received into a slot and
// forwarded from it as it came.
// Which stages of the ring allreduce a plan runs: all of them, the
// reduce-scatter (stages 0..n-2: afterwards place p holds block p+1
// complete, the owner's bits), or the all-gather (stages n-1..2n-3:
// place p starts by sending its block p+1, uncompressed).
enum class ring_half { both, scatter, gather };

struct ring_plan final : detail::plan {
  detail::link& l;
  codec::dtype type;
  std::size_t width;
  std::span<std::byte> bytes;
  std::span<float> data;  // compressed (f32 only): the same buffer as floats
  allreduce_options o;
  encoding enc;
  chunking ch;
  std::size_t stages;     // of the whole allreduce: 2(n-1)
  std::size_t first = 0;  // the stages this plan runs: [first, last)
  std::size_t last;
  std::vector<std::byte>& rx;
  int rx_slot = -1;  // compressed all-gather: the slot the chunk arrives in

  ring_plan(detail::link& l_, rx_staging& st, codec::dtype t, std::span<std::byte> d, const allreduce_options& o_,
            ring_half half = ring_half::both);

  [[nodiscard]] std::span<std::byte> region_bytes(std::size_t off, std::size_t len) const {
    return bytes.subspan(off * width, len * width);
  }

  // Blocks are numbered by place on the ring (link::position()).
  [[nodiscard]] std::size_t send_block(std::size_t t) const {
    const auto r = static_cast<std::int64_t>(l.position());
    const auto st = static_cast<std::int64_t>(t);
    return t + 1 < l.size() ? mod(r - st, l.size()) : mod(r + 1 - (st - (l.size() - 1)), l.size());
  }
  [[nodiscard]] std::size_t recv_block(std::size_t t) const {
    const auto r = static_cast<std::int64_t>(l.position());
    const auto st = static_cast<std::int64_t>(t);
    return t + 1 < l.size() ? mod(r - st - 1, l.size()) : mod(r - (st - (l.size() - 1)), l.size());
  }
  [[nodiscard]] std::span<float> residual(std::size_t off, std::size_t len) const {
    return o.feedback != nullptr ? o.feedback->residual().subspan(off, len) : std::span<float>();
  }

  // The header of chunk `chunk` of stage t, `count` elements (chunks count
  // from this plan's first stage).
  [[nodiscard]] frame_header header(std::size_t t, std::size_t chunk, std::size_t count) const {
    frame_header h;
    h.type = enc == encoding::raw ? type : codec::dtype::f32;
    h.enc = enc;
    h.chunk = static_cast<std::uint32_t>((t - first) * ch.m + chunk);
    h.count = static_cast<std::uint32_t>(count);
    return h;
  }

  // Queues chunk `chunk` of stage t: `payload` (in the host's order), held
  // in scratch slot `slot` if not -1.
  void send(std::size_t t, std::size_t chunk, std::span<const std::byte> payload, int slot = -1) {
    l.send(header(t, chunk, payload.size() / (enc == encoding::raw ? width : 2)), payload, slot);
  }

  // Rounds a chunk into a fresh scratch slot: the payload and its slot.
  std::pair<std::span<const std::byte>, int> compressed(detail::compress_step step) {
    const int slot = l.acquire_scratch();
    const auto out = std::as_writable_bytes(l.scratch(slot)).first(2 * step.n);
    step.enc = enc;
    step.out = out.data();
    detail::compress(step);
    return {out, slot};
  }

  // Rounds a chunk and queues it as stage t's.
  void send_compressed(std::size_t t, std::size_t chunk, const detail::compress_step& step) {
    const auto [payload, slot] = compressed(step);
    send(t, chunk, payload, slot);
  }

  // Queues the first stage: stage 0, or the all-gather half's first,
  // which sends this rank's completed block as it is.
  void start() {
    for (std::size_t chunk = 0; chunk < ch.m; ++chunk) {
      if (first == 0) {
        start(chunk);
      } else {
        const auto [off, len] = ch.chunk(send_block(first), chunk);
        send(first, chunk, region_bytes(off, len));
      }
    }
  }

  // Stage 0's chunk `chunk`: this rank's own values; compressed, rounded
  // only when the socket is about to take it (produce()).
  void start(std::size_t chunk) {
    const auto [off, len] = ch.chunk(send_block(0), chunk);
    if (enc == encoding::raw) {
      send(0, chunk, region_bytes(off, len));
      return;
    }
    l.send_later(header(0, chunk, len), 2 * len);
  }

  std::pair<std::span<const std::byte>, int> produce(const frame_header& h) override {
    const auto [off, len] = ch.chunk(send_block(0), h.chunk);  // stage 0's chunks only
    detail::compress_step step;
    step.n = len;
    step.a = data.data() + off;
    step.residual = residual(off, len).data();
    return compressed(step);
  }

  std::span<std::byte> on_header(std::size_t, const frame_header& h, std::uint32_t index) override {
    const std::size_t t = first + index / ch.m;
    const auto [off, len] = ch.chunk(recv_block(t), index % ch.m);
    expect_header(l, l.prev(), h, enc == encoding::raw ? type : codec::dtype::f32, enc, len, "allreduce");
    const bool gather = t + 1 >= l.size();
    if (gather && enc == encoding::raw && h.order == wire::host_order) {
      return region_bytes(off, len);  // straight into place
    }
    if (gather && enc != encoding::raw) {
      rx_slot = l.acquire_scratch();
      return std::as_writable_bytes(l.scratch(rx_slot)).first(2 * len);
    }
    return std::span(rx).first(len * wire_element_size(h));
  }

  void on_frame(std::size_t, const frame_header& h, std::uint32_t index, std::span<std::byte> payload) override {
    const std::size_t t = first + index / ch.m;
    const std::size_t chunk = index % ch.m;
    const auto [off, len] = ch.chunk(recv_block(t), chunk);
    const bool scatter = t + 1 < l.size();
    const bool last_scatter = t + 2 == l.size();  // the block is complete here
    if (enc != encoding::raw) {
      const auto region = data.subspan(off, len);
      const float divisor = o.op == reduce_op::avg ? static_cast<float>(l.size()) : 0.0f;
      if (scatter) {
        // The sum goes straight out, rounded; only the owner of the block
        // keeps it, exactly as sent, so every rank ends equal.
        detail::compress_step step;
        step.n = len;
        step.a = region.data();
        step.received = payload.data();
        step.received_order = h.order;
        step.divisor = last_scatter ? divisor : 0.0f;
        step.residual = residual(off, len).data();
        step.back = last_scatter ? region.data() : nullptr;
        if (t + 1 < last) {
          send_compressed(t + 1, chunk, step);
        } else {  // the reduce-scatter half ends here: the block kept, nothing sent
          l.release_scratch(compressed(step).second);
        }
        return;
      }
      detail::widen(h.enc, h.order, payload.data(), region.data(), len);
      const int slot = std::exchange(rx_slot, -1);
      if (t + 1 == last) {
        l.release_scratch(slot);
      } else if (h.order == wire::host_order) {
        send(t + 1, chunk, payload, slot);  // forwarded as it came
      } else {
        l.release_scratch(slot);
        detail::compress_step step;  // already representable: rounds exactly
        step.n = len;
        step.a = region.data();
        send_compressed(t + 1, chunk, step);
      }
      return;
    }
    if (type == codec::dtype::boolean) check_bools(l, l.prev(), payload, "allreduce");
    const auto region = region_bytes(off, len);
    if (scatter) {
      if (!last_scatter) {  // a partial result, only passed on
        const int slot = l.acquire_scratch();
        const auto partial = std::as_writable_bytes(l.scratch(slot)).first(len * width);
        detail::reduce(o.op, type, partial.data(), region.data(), payload.data(), h.order, len);
        send(t + 1, chunk, partial, slot);
        return;
      }
      detail::reduce(o.op, type, region.data(), region.data(), payload.data(), h.order, len);
      if (o.op == reduce_op::avg) detail::divide(type, region.data(), len, l.size());
      if (t + 1 < last) send(t + 1, chunk, region);
    } else {  // all-gather
      if (payload.data() != region.data()) {
        wire::convert(payload, h.order, region, wire::host_order, codec::order_width(type));
      }
      if (t + 1 < last) send(t + 1, chunk, region);
    }
  }
};

inline ring_plan::ring_plan(detail::link& l_, rx_staging& st, codec::dtype t, std::span<std::byte> d,
                            const allreduce_options& o_, ring_half half)
    : l(l_),
      type(t),
      width(codec::size_of(t)),
      bytes(d),
      o(o_),
      enc(encoding_of(o_.comp)),
      ch(d.size() / width, l_.size(), l_.elements_per_frame(enc == encoding::raw ? width : 2)),
      stages(2 * (std::size_t{l_.size()} - 1)),
      first(half == ring_half::gather ? l_.size() - 1 : 0),
      last(half == ring_half::scatter ? l_.size() - 1 : stages),
      rx(st.rx) {
  // (The caller passed f32 values: the bytes are aligned as floats.)
  if (enc != encoding::raw) data = std::span(static_cast<float*>(static_cast<void*>(d.data())), d.size() / sizeof(float));
  name = half == ring_half::both      ? "allreduce"
         : half == ring_half::scatter ? "allreduce's reduce-scatter half"
                                      : "allreduce's all-gather half";
  sends = frame_count(l, (last - first) * ch.m);
  expected = l.only_from(detail::link::prev_channel, static_cast<std::uint32_t>(sends));
  // A received chunk in the staging: as wide as its elements travel (f32
  // values compressed to 16 bits arrive in scratch slots instead).
  const std::size_t chunk = std::min(ch.grain, ch.base + 1) * width;
  if (rx.size() < chunk) rx.resize(chunk);
}

// Reduce-scatter, at place p on the ring: the first half of the ring
// allreduce with pieces of any size. The piece of the rank at place q is
// block q; stage t (of n-1) sends block (p - t - 1) and receives block
// (p - t - 2), combining it with this rank's own values (own first); at
// stage n-2 a rank receives its own block, combines it into `out` and, for
// an average, divides. Block q is so combined starting from the values of
// place q+1 and ending with q's own: the order in which the allreduce
// combines its block q+1, which it completes at place q.
struct scatter_plan final : detail::plan {
  detail::link& l;
  codec::dtype type;
  std::size_t width;
  std::span<const std::byte> in;
  std::span<std::byte> out;
  reduce_op op;
  std::vector<std::size_t> start, size;  // of each place's block, in elements of `in`
  std::size_t grain;
  std::size_t m = 1;  // chunks per block, the same for all
  std::vector<std::byte>& rx;

  scatter_plan(detail::link& l_, rx_staging& st, codec::dtype t, std::span<const std::byte> in_,
               std::span<const std::size_t> counts, std::span<std::byte> out_, reduce_op op_)
      : l(l_), type(t), width(codec::size_of(t)), in(in_), out(out_), op(op_),
        grain(l_.elements_per_frame(codec::size_of(t))), rx(st.rx) {
    std::vector<std::size_t> rank_start(counts.size() + 1, 0);
    for (std::size_t r = 0; r < counts.size(); ++r) rank_start[r + 1] = rank_start[r] + counts[r];
    for (std::size_t q = 0; q < l.size(); ++q) {
      const std::uint32_t r = l.rank_at(q);
      start.push_back(rank_start[r]);
      size.push_back(counts[r]);
      m = std::max(m, (counts[r] + grain - 1) / grain);
    }
    name = "reduce_scatter";
    sends = frame_count(l, (std::size_t{l.size()} - 1) * m);
    expected = l.only_from(detail::link::prev_channel, static_cast<std::uint32_t>(sends));
    if (rx.size() < grain * width) rx.resize(grain * width);
  }

  [[nodiscard]] std::size_t block(std::size_t shift, std::size_t t) const {
    return mod(static_cast<std::int64_t>(l.position()) - static_cast<std::int64_t>(t + shift), l.size());
  }
  // Offset (in elements of `in`) and length of chunk c of block q.
  [[nodiscard]] std::pair<std::size_t, std::size_t> chunk(std::size_t q, std::size_t c) const {
    const std::size_t from = std::min(size[q], c * grain);
    return {start[q] + from, std::min(grain, size[q] - from)};
  }

  void send(std::size_t t, std::size_t c, std::span<const std::byte> payload, int slot = -1) {
    frame_header h;
    h.type = type;
    h.chunk = static_cast<std::uint32_t>(t * m + c);
    h.count = static_cast<std::uint32_t>(payload.size() / width);
    l.send(h, payload, slot);
  }
  void begin() {
    for (std::size_t c = 0; c < m; ++c) {
      const auto [off, len] = chunk(block(1, 0), c);
      send(0, c, in.subspan(off * width, len * width));
    }
  }
  std::span<std::byte> on_header(std::size_t, const frame_header& h, std::uint32_t index) override {
    const auto [off, len] = chunk(block(2, index / m), index % m);
    expect_header(l, l.prev(), h, type, encoding::raw, len, name);
    return std::span(rx).first(len * width);
  }
  void on_frame(std::size_t, const frame_header& h, std::uint32_t index, std::span<std::byte> payload) override {
    const std::size_t t = index / m;
    const std::size_t c = index % m;
    const std::size_t q = block(2, t);
    const auto [off, len] = chunk(q, c);
    if (type == codec::dtype::boolean) check_bools(l, l.prev(), payload, name);
    const std::byte* own = in.data() + off * width;
    if (t + 2 < l.size()) {  // a partial result, passed on
      const int slot = l.acquire_scratch();
      const auto partial = std::as_writable_bytes(l.scratch(slot)).first(len * width);
      detail::reduce(op, type, partial.data(), own, payload.data(), h.order, len);
      send(t + 1, c, partial, slot);
      return;
    }
    std::byte* mine = out.data() + (off - start[q]) * width;  // q is this rank's place
    detail::reduce(op, type, mine, own, payload.data(), h.order, len);
    if (op == reduce_op::avg) detail::divide(type, mine, len, l.size());
  }
};

// The copy pipeline of broadcast and allgather: values move around the
// ring unchanged, chunk by chunk, each received chunk landing in place and
// (if the rule says so) forwarded at once. The two differ only in which
// block a stage carries and when a rank forwards:
// - broadcast: one block, one stage; every rank but the root receives it,
//   and forwards it unless its successor is the root;
// - allgather: n blocks, n-1 stages; at place p, stage t sends the block of
//   the rank at place (p - t), receives that of place (p - t - 1), and
//   forwards it while t + 2 < n.
struct copy_plan final : detail::plan {
  detail::link& l;
  std::span<std::byte> data;
  codec::dtype type;
  std::size_t width;
  chunking ch;
  bool gather;  // false: broadcast
  bool forward = false;

  copy_plan(detail::link& l_, codec::dtype t, std::span<std::byte> d, std::size_t blocks, bool gather_)
      : l(l_), data(d), type(t), width(codec::size_of(t)),
        ch(d.size() / codec::size_of(t), blocks, l_.elements_per_frame(codec::size_of(t))),
        gather(gather_) {
    name = gather ? "allgather" : "broadcast";
  }

  // The block that frames of stage t carry, on the sending and the
  // receiving side: allgather's block k is rank k's, and stage t carries
  // the block of the rank t places back on the ring.
  [[nodiscard]] std::size_t sent_block(std::size_t t) const {
    return gather ? l.rank_at(mod(static_cast<std::int64_t>(l.position()) - static_cast<std::int64_t>(t), l.size())) : 0;
  }
  [[nodiscard]] std::size_t received_block(std::size_t t) const { return gather ? sent_block(t + 1) : 0; }
  // The stage at which a chunk received in stage t is passed on, if any.
  [[nodiscard]] std::optional<std::size_t> forward_stage(std::size_t t) const {
    if (gather) return t + 2 < l.size() ? std::optional(t + 1) : std::nullopt;
    return forward ? std::optional<std::size_t>(0) : std::nullopt;
  }

  void send(std::size_t t, std::size_t chunk) {
    const auto [off, len] = ch.chunk(sent_block(t), chunk);
    frame_header h;
    h.type = type;
    h.chunk = static_cast<std::uint32_t>(t * ch.m + chunk);
    h.count = static_cast<std::uint32_t>(len);
    l.send(h, data.subspan(off * width, len * width));
  }
  std::span<std::byte> on_header(std::size_t, const frame_header& h, std::uint32_t index) override {
    const auto [off, len] = ch.chunk(received_block(index / ch.m), index % ch.m);
    expect_header(l, l.prev(), h, type, encoding::raw, len, name);
    return data.subspan(off * width, len * width);
  }
  void on_frame(std::size_t, const frame_header& h, std::uint32_t index, std::span<std::byte> payload) override {
    if (type == codec::dtype::boolean) check_bools(l, l.prev(), payload, name);
    payload_to_host(h, payload);
    if (const auto next = forward_stage(index / ch.m)) send(*next, index % ch.m);
  }
};

}  // namespace ferry::comm::detail
