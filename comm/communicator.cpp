#include "ferry/comm/communicator.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <utility>

#include "ferry/comm/detail/all_to_all.h"
#include "ferry/comm/detail/kernels.h"
#include "ferry/comm/detail/link.h"
#include "ferry/comm/detail/receives.h"
#include "ferry/comm/detail/plan_checks.h"
#include "ferry/comm/detail/reduce.h"
#include "ferry/comm/detail/shared_memory.h"
#include "ferry/comm/detail/tree_allreduce.h"
#include "ferry/comm/detail/worker.h"
#include "ferry/comm/frame.h"
#include "ferry/wire/bulk.h"

namespace ferry::comm {

using detail::rank_name;

using detail::check_bools;
using detail::check_own_bools;
using detail::expect_header;
using detail::frame_count;
using detail::rx_staging;

// The worker is declared last so it is destroyed first: queued collectives
// finish while the link still exists.
struct communicator::impl {
  detail::link link;
  rx_staging staging;
  link_cost cost;  // rank 0's, with algorithm auto
  // Host groups (join_hosts()): ranks sharing a shared-memory segment.
  std::vector<std::uint32_t> leaders;  // ascending: each group's lowest rank (every rank when no group formed)
  std::vector<std::uint32_t> group;    // this rank's group, ascending (this rank alone without a segment)
  std::unique_ptr<detail::shared_segment> segment;
  detail::receives receives{link};
  detail::worker worker;

  impl(const comm::config& c, std::optional<listener> l) : link(c, std::move(l)), cost(c.link) {
    worker.set_progress([this](bool may_wait) { return receives.progress(may_wait); });
  }
  ~impl() {
    worker.stop();
    receives.fail_all(std::make_exception_ptr(
        comm_error(comm_errc::aborted, std::nullopt, detail::rank_name(link.rank()) + ": the communicator closed")));
  }

  // The configured algorithm, or with auto the cost model's choice, for
  // the whole world.
  [[nodiscard]] algorithm algorithm_for(std::size_t bytes) const {
    const algorithm a = link.config().algorithm;
    return a == algorithm::automatic ? choose(link.size(), bytes, cost) : a;
  }
  // What the hosts' leaders run: no ring joins them, so the ring becomes
  // Rabenseifner (the same bytes on each leader's link) and auto the faster
  // tree for their number.
  [[nodiscard]] algorithm leaders_algorithm_for(std::size_t bytes) const {
    const algorithm a = link.config().algorithm;
    if (a == algorithm::automatic) return choose_tree(static_cast<std::uint32_t>(leaders.size()), bytes, cost);
    return a == algorithm::ring ? algorithm::rabenseifner : a;
  }
  // Whether uncompressed allreduce goes through host groups.
  [[nodiscard]] bool grouped() const noexcept { return leaders.size() < link.size(); }

  void allreduce(codec::dtype type, std::span<std::byte> data, const allreduce_options& o);
  void host_allreduce(codec::dtype type, std::span<std::byte> data, reduce_op op);
  void join_hosts();
  void reduce_scatter(codec::dtype type, std::span<const std::byte> in, std::span<const std::size_t> counts,
                      std::span<std::byte> out, const allreduce_options& o);
  void broadcast(codec::dtype type, std::span<std::byte> data, std::uint32_t root);
  void allgather(codec::dtype type, std::span<const std::byte> mine, std::span<std::byte> out);
  void barrier();
  void check_ring();
};

namespace {

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

encoding encoding_of(compression c) {
  switch (c) {
    case compression::bf16: return encoding::bf16;
    case compression::f16: return encoding::f16;
    case compression::none: break;
  }
  return encoding::raw;
}

std::size_t mod(std::int64_t k, std::uint32_t n) {
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
struct ring_plan final : detail::plan {
  detail::link& l;
  codec::dtype type;
  std::size_t width;
  std::span<std::byte> bytes;
  std::span<float> data;  // compressed (f32 only): the same buffer as floats
  allreduce_options o;
  encoding enc;
  chunking ch;
  std::size_t stages;
  std::vector<std::byte>& rx;
  int rx_slot = -1;  // compressed all-gather: the slot the chunk arrives in

  ring_plan(detail::link& l_, rx_staging& st, codec::dtype t, std::span<std::byte> d, const allreduce_options& o_);

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

  // The header of chunk `chunk` of stage t, `count` elements.
  [[nodiscard]] frame_header header(std::size_t t, std::size_t chunk, std::size_t count) const {
    frame_header h;
    h.type = enc == encoding::raw ? type : codec::dtype::f32;
    h.enc = enc;
    h.chunk = static_cast<std::uint32_t>(t * ch.m + chunk);
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

  // Queues stage 0.
  void start() {
    for (std::size_t chunk = 0; chunk < ch.m; ++chunk) start(chunk);
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
    const std::size_t t = index / ch.m;
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
    const std::size_t t = index / ch.m;
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
        send_compressed(t + 1, chunk, step);
        return;
      }
      detail::widen(h.enc, h.order, payload.data(), region.data(), len);
      const int slot = std::exchange(rx_slot, -1);
      if (t + 1 == stages) {
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
      send(t + 1, chunk, region);
    } else {  // all-gather
      if (payload.data() != region.data()) {
        wire::convert(payload, h.order, region, wire::host_order, width);
      }
      if (t + 1 < stages) send(t + 1, chunk, region);
    }
  }
};

ring_plan::ring_plan(detail::link& l_, rx_staging& st, codec::dtype t, std::span<std::byte> d,
                     const allreduce_options& o_)
    : l(l_),
      type(t),
      width(codec::size_of(t)),
      bytes(d),
      o(o_),
      enc(encoding_of(o_.comp)),
      ch(d.size() / width, l_.size(), l_.elements_per_frame(enc == encoding::raw ? width : 2)),
      stages(2 * (std::size_t{l_.size()} - 1)),
      rx(st.rx) {
  // (The caller passed f32 values: the bytes are aligned as floats.)
  if (enc != encoding::raw) data = std::span(static_cast<float*>(static_cast<void*>(d.data())), d.size() / sizeof(float));
  name = "allreduce";
  sends = frame_count(l, stages * ch.m);
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

}  // namespace

void communicator::impl::allreduce(codec::dtype type, std::span<std::byte> data, const allreduce_options& o) {
  const std::size_t width = codec::size_of(type);
  if (!detail::reducible(o.op, type)) {
    link.fail(comm_errc::unsupported, std::nullopt,
              "allreduce " + std::string(name(o.op)) + " is not defined on " + std::string(codec::name(type)) +
                  " (band, bor and bxor take integers and bool, avg no bool, FP8 none)");
  }
  if (data.size() % width != 0) {
    link.fail(errc::size_mismatch, std::nullopt, "allreduce buffer is not a whole number of elements");
  }
  if (o.comp != compression::none && type != codec::dtype::f32) {
    link.fail(comm_errc::bad_argument, std::nullopt,
              "allreduce compression " + std::string(name(o.comp)) + " applies to F32 values, not " +
                  std::string(codec::name(type)));
  }
  if (o.comp != compression::none && (o.op == reduce_op::min || o.op == reduce_op::max || o.op == reduce_op::product)) {
    link.fail(comm_errc::bad_argument, std::nullopt,
              "allreduce compression " + std::string(name(o.comp)) + " applies to sum and avg, not " +
                  std::string(name(o.op)));
  }
  check_own_bools(link, type, data, "allreduce");
  const std::size_t count = data.size() / width;
  if (o.comp != compression::none && o.feedback != nullptr && o.feedback->residual().size() != count) {
    link.fail(errc::size_mismatch, std::nullopt,
              "error_feedback holds " + std::to_string(o.feedback->residual().size()) + " values for a buffer of " +
                  std::to_string(count));
  }
  if (o.comp == compression::none && grouped()) {
    host_allreduce(type, data, o.op);
    return;
  }
  const algorithm a = o.comp == compression::none ? algorithm_for(data.size()) : algorithm::ring;
  if (a != algorithm::ring) {
    detail::tree_allreduce(link, staging, a, type, data, o.op);
    return;
  }
  ring_plan p(link, staging, type, data, o);
  link.run(p, [&] {
    p.start();
  });
}

// With host groups: one group (every rank on one host) combines in its
// segment alone; otherwise each group reduces to its leader there, the
// leaders combine over the network (a tree algorithm over the leaders:
// leaders_algorithm_for), and
// each leader returns the result to its group. Avg sums and divides once,
// by the world size, where the last combining happens. Every element's
// order of combination is fixed by ranks and groups alone.
void communicator::impl::host_allreduce(codec::dtype type, std::span<std::byte> data, reduce_op op) {
  const reduce_op sum_op = op == reduce_op::avg ? reduce_op::sum : op;
  const std::uint32_t divisor = op == reduce_op::avg ? link.size() : 1;
  link.guarded([&] {
    std::optional<detail::host_rounds> rounds;
    if (segment) rounds.emplace(detail::host_rounds{*segment, link.config().timeout, link.rank(), group});
    try {
      if (leaders.size() == 1) {
        rounds->allreduce(sum_op, type, data, divisor);
        return;
      }
      if (rounds) rounds->reduce_to_leader(sum_op, type, data);
      if (group.front() == link.rank()) {
        detail::tree_allreduce(link, staging, leaders_algorithm_for(data.size()), type, data, sum_op, leaders);
        if (divisor > 1) detail::divide(type, data.data(), data.size() / codec::size_of(type), divisor);
      } else {
        link.skip_collective();
      }
      if (rounds) rounds->broadcast_from_leader(data);
    } catch (const comm_error& e) {  // the group's other ranks stop waiting, and say why
      if (segment) {
        segment->give_up(detail::shared_segment::wait_status::gave_up, segment->me(), e.code().value(),
                         e.peer().value_or(~std::uint32_t{0}));
      }
      throw;
    } catch (...) {
      if (segment) segment->give_up(detail::shared_segment::wait_status::gave_up, segment->me());
      throw;
    }
  });
}

// The setup of docs/comm-protocol.md section 8 (shared_memory.h's SETUP):
// three allgathers over the ring, at the communicator's start.
void communicator::impl::join_hosts() {
  const std::uint32_t n = link.size(), me = link.rank();
  std::vector<std::uint32_t> leader(n);
  for (std::uint32_t r = 0; r < n; ++r) leader[r] = r;
  const auto settle = [&] {
    leaders.clear();
    group.clear();
    for (std::uint32_t r = 0; r < n; ++r) {
      if (leader[r] == r) leaders.push_back(r);
      if (leader[r] == leader[me]) group.push_back(r);
    }
  };
  settle();
  if (n == 1) return;
  // 1. Host keys: byte 0 says whether the rank takes part.
  constexpr std::size_t key_bytes = 33;
  std::array<std::byte, key_bytes> key{};
  if (link.config().shared_memory) {
    key[0] = std::byte{1};
    const auto digest = detail::host_key(link.config().host_id);
    std::memcpy(key.data() + 1, digest.data(), digest.size());
  }
  std::vector<std::byte> keys(key_bytes * n);
  allgather(codec::dtype::u8, key, keys);
  const auto key_of = [&](std::uint32_t r) { return std::span(keys).subspan(key_bytes * r, key_bytes); };
  for (std::uint32_t r = 0; r < n; ++r) {
    if (key_of(r)[0] != std::byte{1}) continue;
    for (std::uint32_t q = 0; q < r; ++q) {
      if (std::ranges::equal(key_of(q), key_of(r))) {
        leader[r] = q;
        break;
      }
    }
  }
  settle();
  if (leaders.size() == n) return;
  // 2. Each leader makes its group's segment and announces it.
  const auto members = static_cast<std::uint32_t>(group.size());
  const auto index = static_cast<std::uint32_t>(std::ranges::find(group, me) - group.begin());
  std::string why;
  detail::segment_id id{};
  if (members > 1 && index == 0) {
    try {
      segment = detail::shared_segment::create(members, detail::shared_slot_bytes(members), id);
    } catch (const std::exception& e) {
      why = e.what();
      id = {};
    }
  }
  constexpr std::size_t id_bytes = sizeof(id.name) + sizeof(id.nonce);
  std::array<std::byte, id_bytes> mine{};
  std::memcpy(mine.data(), id.name.data(), sizeof(id.name));
  std::memcpy(mine.data() + sizeof(id.name), id.nonce.data(), sizeof(id.nonce));
  std::vector<std::byte> ids(id_bytes * n);
  allgather(codec::dtype::u8, mine, ids);
  // 3. Members open their leader's and check it; all learn who could.
  if (members > 1 && index > 0) {
    detail::segment_id theirs{};
    std::memcpy(theirs.name.data(), ids.data() + id_bytes * group.front(), sizeof(theirs.name));
    std::memcpy(theirs.nonce.data(), ids.data() + id_bytes * group.front() + sizeof(theirs.name), sizeof(theirs.nonce));
    try {
      segment = detail::shared_segment::open(theirs, members, detail::shared_slot_bytes(members), index);
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  const std::uint8_t ok = members == 1 || segment ? 1 : 0;
  std::vector<std::uint8_t> oks(n);
  allgather(codec::dtype::u8, std::as_bytes(std::span(&ok, 1)), std::as_writable_bytes(std::span(oks)));
  // 4. The name goes; the mappings stay.
  if (segment) segment->unlink();
  std::vector<bool> failed(n, false);
  for (std::uint32_t r = 0; r < n; ++r) failed[leader[r]] = failed[leader[r]] || oks[r] == 0;
  if (failed[leader[me]]) {
    segment.reset();
    if (!why.empty()) std::fprintf(stderr, "ferry: rank %u: %s; this host's ranks use TCP\n", me, why.c_str());
  }
  for (std::uint32_t r = 0; r < n; ++r) {
    if (failed[leader[r]]) leader[r] = r;
  }
  settle();
}

void communicator::impl::reduce_scatter(codec::dtype type, std::span<const std::byte> in,
                                        std::span<const std::size_t> counts, std::span<std::byte> out,
                                        const allreduce_options& o) {
  const std::size_t width = codec::size_of(type);
  if (!detail::reducible(o.op, type)) {
    link.fail(comm_errc::unsupported, std::nullopt,
              "reduce_scatter " + std::string(name(o.op)) + " is not defined on " + std::string(codec::name(type)));
  }
  if (o.comp != compression::none) {
    link.fail(comm_errc::bad_argument, std::nullopt, "reduce_scatter takes no compression");
  }
  std::size_t total = 0;
  for (const std::size_t c : counts) total += c;
  if (counts.size() != link.size() || in.size() != total * width || out.size() != counts[link.rank()] * width) {
    link.fail(errc::size_mismatch, std::nullopt,
              "reduce_scatter of " + std::to_string(in.size()) + " bytes into " + std::to_string(out.size()) +
                  " with " + std::to_string(counts.size()) + " piece sizes for " + std::to_string(link.size()) +
                  " ranks: the pieces must add up to the input and this rank's to the output");
  }
  check_own_bools(link, type, in, "reduce_scatter");
  if (link.size() == 1) {
    if (!out.empty()) std::memcpy(out.data(), in.data(), out.size());
    return;
  }
  scatter_plan p(link, staging, type, in, counts, out, o.op);
  link.run(p, [&] {
    p.begin();
  });
}

void communicator::impl::broadcast(codec::dtype type, std::span<std::byte> data, std::uint32_t root) {
  if (root >= link.size()) {
    link.fail(comm_errc::bad_config, std::nullopt, "broadcast root " + std::to_string(root) + " is not a rank");
  }
  if (data.size() % codec::size_of(type) != 0) {
    link.fail(errc::size_mismatch, std::nullopt, "broadcast buffer is not a whole number of elements");
  }
  copy_plan p(link, type, data, 1, false);
  p.forward = link.next() != root;
  const std::uint32_t frames = frame_count(link, p.ch.m);  // on every rank, the root too
  p.expected = link.only_from(detail::link::prev_channel, link.rank() == root ? 0 : frames);
  p.sends = p.forward ? p.ch.m : 0;
  link.run(p, [&] {
    if (link.rank() == root) {
      for (std::size_t chunk = 0; chunk < p.ch.m; ++chunk) p.send(0, chunk);
    }
  });
}

void communicator::impl::allgather(codec::dtype type, std::span<const std::byte> mine, std::span<std::byte> out) {
  const std::size_t n = link.size();
  if (mine.size() % codec::size_of(type) != 0 || out.size() != n * mine.size()) {
    link.fail(errc::size_mismatch, std::nullopt,
              "allgather of " + std::to_string(mine.size()) + " bytes per rank into " + std::to_string(out.size()) +
                  " bytes for " + std::to_string(n) + " ranks");
  }
  if (!mine.empty()) std::memcpy(out.data() + link.rank() * mine.size(), mine.data(), mine.size());
  copy_plan p(link, type, out, n, true);
  p.sends = frame_count(link, (n - 1) * p.ch.m);
  p.expected = link.only_from(detail::link::prev_channel, static_cast<std::uint32_t>(p.sends));
  link.run(p, [&] {
    for (std::size_t chunk = 0; chunk < p.ch.m; ++chunk) p.send(0, chunk);
  });
}

void communicator::impl::barrier() {
  const std::uint32_t me = link.rank();
  std::vector<std::uint32_t> all(link.size());
  allgather(codec::dtype::u32, std::as_bytes(std::span(&me, 1)), std::as_writable_bytes(std::span(all)));
  for (std::uint32_t r = 0; r < all.size(); ++r) {
    if (all[r] != r) {
      link.fail(comm_errc::protocol_error, r,
                "barrier saw rank " + std::to_string(r) + " report itself as " + std::to_string(all[r]));
    }
  }
}

// With authenticated frames, the world's first collective checks that every
// rank derived the same ring from rank 0's TABLE, which travels before any
// frame key is in use: rank 0 broadcasts the SHA-256 of its ring (the ranks
// by place, u32 little-endian) and every rank compares it with its own.
// Without it, a TABLE altered on the path could move a rank to another
// place between the same neighbours, and its blocks would be summed in the
// wrong places.
void communicator::impl::check_ring() {
  std::vector<std::byte> ring(4 * link.size());
  for (std::uint32_t p = 0; p < link.size(); ++p) {
    wire::store<std::uint32_t>(link.rank_at(p), ring.data() + 4 * p, wire::byte_order::little);
  }
  std::array<std::byte, 32> mine{};
  unsigned int length = 0;
  if (EVP_Digest(ring.data(), ring.size(), reinterpret_cast<unsigned char*>(mine.data()), &length, EVP_sha256(),
                 nullptr) != 1) {
    link.fail(comm_errc::auth_failed, std::nullopt, "OpenSSL could not compute SHA-256");
  }
  std::array<std::byte, 32> rank0 = mine;
  broadcast(codec::dtype::u8, rank0, 0);
  if (rank0 != mine) {
    link.fail(comm_errc::config_mismatch, 0,
              "this rank's ring differs from rank 0's: the rendezvous TABLE was altered on the way");
  }
}

void combine(reduce_op o, codec::dtype type, std::span<std::byte> acc, std::span<const std::byte> in) {
  const std::size_t width = codec::size_of(type);
  if (!detail::reducible(o, type)) {
    throw comm_error(comm_errc::unsupported, std::nullopt,
                     "combine " + std::string(name(o)) + " is not defined on " + std::string(codec::name(type)));
  }
  if (acc.size() != in.size() || acc.size() % width != 0) {
    throw comm_error(errc::size_mismatch, std::nullopt,
                     "combine of " + std::to_string(in.size()) + " bytes into " + std::to_string(acc.size()) +
                         " bytes of " + std::string(codec::name(type)));
  }
  const reduce_op op = o == reduce_op::avg ? reduce_op::sum : o;
  detail::reduce(op, type, acc.data(), acc.data(), in.data(), wire::host_order, acc.size() / width);
}

// ---------------------------------------------------------------------------
// communicator

communicator::communicator(const comm::config& c, std::optional<listener> rank0) {
  c.validate().value();  // a bad config throws its ferry::exception
  impl_ = std::make_unique<impl>(c, std::move(rank0));
  if (c.auth != frame_auth::none && c.world_size > 1) impl_->check_ring();
  if (c.algorithm == algorithm::automatic && c.world_size > 1) {
    // Every rank must make the same choice: rank 0's link costs are all's.
    std::array<double, 3> cost{c.link.alpha_s, c.link.beta_s_per_byte, c.link.gamma_s_per_byte};
    impl_->broadcast(codec::dtype::f64, std::as_writable_bytes(std::span(cost)), 0);
    impl_->cost = link_cost{cost[0], cost[1], cost[2]};
  }
  impl_->join_hosts();
  if (c.world_size >= 4) {
    // The mesh (the tree algorithms' links, and point-to-point messages'
    // between ranks that are not ring neighbours) forms once every rank has
    // its ring links: after a collective over the ring.
    impl_->barrier();
    impl_->link.form_mesh();
  }
}

communicator communicator::from_env() { return communicator(config::from_env().value()); }

communicator::communicator(communicator&&) noexcept = default;
communicator& communicator::operator=(communicator&&) noexcept = default;
communicator::~communicator() = default;

std::uint32_t communicator::rank() const noexcept { return impl_->link.rank(); }
std::uint32_t communicator::world_size() const noexcept { return impl_->link.size(); }
const config& communicator::config() const noexcept { return impl_->link.config(); }
algorithm communicator::algorithm_for(std::size_t bytes) const {
  if (!impl_->grouped()) return impl_->algorithm_for(bytes);
  // One host: no network step (the ring stands for "none").
  return impl_->leaders.size() == 1 ? algorithm::ring : impl_->leaders_algorithm_for(bytes);
}
const link_cost& communicator::link_costs() const noexcept { return impl_->cost; }
std::span<const std::uint32_t> communicator::host_ranks() const noexcept { return impl_->group; }
const hello& communicator::prev_peer() const noexcept { return impl_->link.prev_hello(); }
const hello& communicator::next_peer() const noexcept { return impl_->link.next_hello(); }

void communicator::allreduce_bytes(codec::dtype type, std::span<std::byte> data, const allreduce_options& o) {
  impl_->worker.run_inline([&] { impl_->allreduce(type, data, o); });
}

work communicator::start_allreduce_bytes(codec::dtype type, std::span<std::byte> data, const allreduce_options& o) {
  impl* p = impl_.get();
  return work(p->worker.submit([p, type, data, o] { p->allreduce(type, data, o); }));
}

void communicator::reduce_scatter_bytes(codec::dtype type, std::span<const std::byte> in,
                                        std::span<const std::size_t> counts, std::span<std::byte> out,
                                        const allreduce_options& o) {
  impl_->worker.run_inline([&] { impl_->reduce_scatter(type, in, counts, out, o); });
}

work communicator::start_reduce_scatter_bytes(codec::dtype type, std::span<const std::byte> in,
                                              std::vector<std::size_t> counts, std::span<std::byte> out,
                                              const allreduce_options& o) {
  impl* p = impl_.get();
  return work(p->worker.submit(
      [p, type, in, counts = std::move(counts), out, o] { p->reduce_scatter(type, in, counts, out, o); }));
}

void communicator::broadcast_bytes(codec::dtype type, std::span<std::byte> data, std::uint32_t root) {
  impl_->worker.run_inline([&] { impl_->broadcast(type, data, root); });
}

work communicator::start_broadcast_bytes(codec::dtype type, std::span<std::byte> data, std::uint32_t root) {
  impl* p = impl_.get();
  return work(p->worker.submit([p, type, data, root] { p->broadcast(type, data, root); }));
}

void communicator::allgather_bytes(codec::dtype type, std::span<const std::byte> mine, std::span<std::byte> out) {
  impl_->worker.run_inline([&] { impl_->allgather(type, mine, out); });
}

work communicator::start_allgather_bytes(codec::dtype type, std::span<const std::byte> mine,
                                         std::span<std::byte> out) {
  impl* p = impl_.get();
  return work(p->worker.submit([p, type, mine, out] { p->allgather(type, mine, out); }));
}

void communicator::barrier() {
  impl_->worker.run_inline([&] { impl_->barrier(); });
}

work communicator::start_barrier() {
  impl* p = impl_.get();
  return work(p->worker.submit([p] { p->barrier(); }));
}

void communicator::all_to_all_bytes(codec::dtype type, std::span<const std::byte> in,
                                    std::span<const std::size_t> send_counts, std::span<std::byte> out,
                                    std::span<const std::size_t> recv_counts) {
  impl_->worker.run_inline([&] { detail::all_to_all(impl_->link, type, in, send_counts, out, recv_counts); });
}

work communicator::start_all_to_all_bytes(codec::dtype type, std::span<const std::byte> in,
                                          std::vector<std::size_t> send_counts, std::span<std::byte> out,
                                          std::vector<std::size_t> recv_counts) {
  impl* p = impl_.get();
  return work(p->worker.submit([p, type, in, send_counts = std::move(send_counts), out,
                                recv_counts = std::move(recv_counts)] {
    detail::all_to_all(p->link, type, in, send_counts, out, recv_counts);
  }));
}

void communicator::send_bytes(codec::dtype type, std::span<const std::byte> data, std::uint32_t peer,
                              std::int64_t tag) {
  impl_->worker.run_inline([&] { impl_->link.send_message(peer, tag, type, data); });
}

work communicator::start_send_bytes(codec::dtype type, std::span<const std::byte> data, std::uint32_t peer,
                                    std::int64_t tag) {
  impl* p = impl_.get();
  return work(p->worker.submit([p, type, data, peer, tag] { p->link.send_message(peer, tag, type, data); }));
}

std::uint32_t communicator::recv_bytes(codec::dtype type, std::span<std::byte> data,
                                       std::optional<std::uint32_t> peer, std::int64_t tag) {
  std::uint32_t source = 0;
  start_recv_bytes(type, data, peer, tag, &source).wait();
  return source;
}

work communicator::start_recv_bytes(codec::dtype type, std::span<std::byte> data, std::optional<std::uint32_t> peer,
                                    std::int64_t tag, std::uint32_t* source) {
  impl* p = impl_.get();
  return work(p->worker.submit_deferred([p, type, data, peer, tag, source](const std::shared_ptr<work::state>& st) {
    p->receives.post(detail::receive{.type = type, .data = data, .peer = peer, .tag = tag, .source = source, .state = st});
  }));
}

}  // namespace ferry::comm
