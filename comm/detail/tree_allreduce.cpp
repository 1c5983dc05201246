#include "ferry/comm/detail/tree_allreduce.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "ferry/comm/detail/reduce.h"
#include "ferry/wire/bulk.h"

namespace ferry::comm::detail {
namespace {

// Both algorithms number the ranks alike (Thakur, Rabenseifner and Gropp,
// 2005), by their index in the group (every rank, or the hosts' leaders). With p2 the largest power of two <= n and rem = n - p2, each even
// rank r < 2 rem is folded: it sends its whole buffer to r + 1 first and
// gets the result from it last. The other p2 ranks take numbers v: r / 2
// below 2 rem, r - rem above; r + 1 combines r's values first.
struct numbering {
  std::vector<std::uint32_t> ranks;  // the group's ranks by index
  std::uint32_t n = 1;
  std::uint32_t p2 = 1;
  std::uint32_t rem = 0;
  std::optional<std::uint32_t> host;    // folded: r + 1, which combines for this rank
  std::optional<std::uint32_t> folded;  // r - 1, whose values this rank combines first
  std::uint32_t v = 0;                  // this rank's number, unless folded

  numbering(const link& l, std::span<const std::uint32_t> group) : ranks(group.begin(), group.end()) {
    if (ranks.empty()) {
      for (std::uint32_t q = 0; q < l.size(); ++q) ranks.push_back(q);
    }
    n = static_cast<std::uint32_t>(ranks.size());
    const auto r = static_cast<std::uint32_t>(std::find(ranks.begin(), ranks.end(), l.rank()) - ranks.begin());
    while (p2 * 2 <= n) p2 *= 2;
    rem = n - p2;
    if (r < 2 * rem && r % 2 == 0) {
      host = ranks[r + 1];
      return;
    }
    if (r < 2 * rem) folded = ranks[r - 1];
    v = r < 2 * rem ? r / 2 : r - rem;
  }
  [[nodiscard]] std::uint32_t rank_of(std::uint32_t number) const {
    return ranks[number < rem ? 2 * number + 1 : number + rem];
  }
};

// mine = op(peer's, mine) if peer_first, else op(mine, peer's), the peer's
// values arriving in `order` (converted in place where they come first).
void combine_into(reduce_op op, codec::dtype type, std::span<std::byte> mine, std::span<std::byte> payload,
                  wire::byte_order order, bool peer_first) {
  const std::size_t width = codec::size_of(type);
  const std::size_t n = mine.size() / width;
  if (peer_first) {
    if (order != wire::host_order) wire::convert_in_place(payload, codec::order_width(type), order, wire::host_order);
    reduce(op, type, mine.data(), payload.data(), mine.data(), wire::host_order, n);
  } else {
    reduce(op, type, mine.data(), mine.data(), payload.data(), order, n);
  }
}

// A received chunk of up to `bytes` for every channel that expects frames.
void size_staging(const link& l, rx_staging& st, const std::vector<std::uint32_t>& expected, std::size_t bytes) {
  st.per_channel.resize(std::max(st.per_channel.size(), l.channel_count()));
  for (std::size_t ch = 0; ch < l.channel_count(); ++ch) {
    if (expected[ch] > 0 && st.per_channel[ch].size() < bytes) st.per_channel[ch].resize(bytes);
  }
}

// Piece c of a range of `len` elements cut into pieces of `grain`: its
// offset in the range and its length.
std::pair<std::size_t, std::size_t> piece(std::size_t len, std::size_t grain, std::size_t c) {
  const std::size_t from = std::min(len, c * grain);
  return {from, std::min(grain, len - from)};
}
std::size_t pieces(std::size_t len, std::size_t grain) { return std::max<std::size_t>(1, (len + grain - 1) / grain); }

// Recursive doubling. In step k of lg p2, number v exchanges its whole
// buffer with number v xor 2^k; both combine the two, the lower number's
// values first, so they compute the same bits, and after the last step
// every number holds op over all ranks in one tree fixed by ranks alone
// (avg divides there, on each alike); the fold returns it to the folded
// ranks. The buffer moves in chunks of chunk_bytes: chunk c of step k+1
// leaves as soon as chunk c of step k is combined, and a partner's chunk c
// of step k+1 is read only then (accepts()). Each connection carries one
// phase of this collective per direction, so a frame's chunk number is c.
// A chunk that is combined again after it is sent goes out as a copy (a
// scratch slot of the link): for the short messages this algorithm is for,
// a copy is cheaper than holding the partner's chunk back.
struct doubling_plan final : plan {
  link& l;
  codec::dtype type;
  std::size_t width;
  std::span<std::byte> bytes;
  reduce_op op;
  std::size_t grain;
  std::size_t count;
  std::size_t m = 1;  // chunks
  numbering num;
  std::vector<std::uint32_t> partners;  // the rank of each step's partner
  std::vector<bool> partner_lower;      // each step's partner has the lower number
  std::vector<int> step_of;             // per channel: the step whose frames arrive there; -1 the fold
  std::vector<std::uint32_t> done;      // per chunk: the steps (and fold) combined into it
  std::vector<std::vector<std::byte>>& rx;

  doubling_plan(link& l_, rx_staging& st, codec::dtype t, std::span<std::byte> d, reduce_op op_,
                std::span<const std::uint32_t> group)
      : l(l_), type(t), width(codec::size_of(t)), bytes(d), op(op_),
        grain(l_.elements_per_frame(codec::size_of(t))), count(d.size() / width),
        num(l_, group), rx(st.per_channel) {
    name = "allreduce";
    m = pieces(count, grain);
    const auto frames = frame_count(l, m);
    expected.assign(l.channel_count(), 0);
    step_of.assign(l.channel_count(), -2);
    const auto expect = [&](std::uint32_t peer, int step) {
      expected[l.recv_channel(peer)] = frames;
      step_of[l.recv_channel(peer)] = step;
    };
    if (num.host) {  // sends once, receives the result
      expect(*num.host, -1);
      sends = m;
    } else {
      if (num.folded) {
        expect(*num.folded, -1);
        sends += m;
      }
      for (std::uint32_t bit = 1; bit < num.p2; bit *= 2) {
        const std::uint32_t w = num.v ^ bit;
        partners.push_back(num.rank_of(w));
        partner_lower.push_back(w < num.v);
        expect(num.rank_of(w), static_cast<int>(partners.size() - 1));
        sends += m;
      }
    }
    done.assign(m, 0);
    size_staging(l, st, expected, grain * width);
  }

  // A partner's chunk of step k is read once this rank's chunk has been
  // through the steps before (and the fold).
  [[nodiscard]] bool accepts(std::size_t from, std::uint32_t index) const override {
    const int step = step_of[from];
    return step < 0 || done[index] >= static_cast<std::uint32_t>(step) + (num.folded ? 1U : 0U);
  }

  [[nodiscard]] std::span<std::byte> region(std::size_t c) const {
    const auto [off, len] = piece(count, grain, c);
    return bytes.subspan(off * width, len * width);
  }
  // Queues chunk c to `peer`; a copy unless `stable` (those bytes do not
  // change before it is sent).
  void send(std::uint32_t peer, std::size_t c, bool stable) {
    const auto values = region(c);
    frame_header h;
    h.type = type;
    h.chunk = static_cast<std::uint32_t>(c);
    h.count = static_cast<std::uint32_t>(values.size() / width);
    if (stable) {
      l.send(l.send_channel(peer), h, values);
      return;
    }
    const int slot = l.acquire_scratch();
    const auto copy = std::as_writable_bytes(l.scratch(slot)).first(values.size());
    if (!copy.empty()) std::memcpy(copy.data(), values.data(), values.size());
    l.send(l.send_channel(peer), h, copy, slot);
  }
  // Chunk c has been combined through step k - 1 (k = 0: only this rank's
  // and the fold's values): on to step k, or finished: averaged, and
  // returned to the folded rank (final bytes: no copy).
  void advance(std::size_t k, std::size_t c) {
    if (k < partners.size()) {
      send(partners[k], c, false);
      return;
    }
    const auto values = region(c);
    if (op == reduce_op::avg) divide(type, values.data(), values.size() / width, num.n);
    if (num.folded) send(*num.folded, c, true);
  }
  void begin() {
    for (std::size_t c = 0; c < m; ++c) {
      if (num.host) {
        send(*num.host, c, true);  // replaced only by the result, after the host has it all
      } else if (!num.folded) {
        advance(0, c);
      }
    }
  }

  std::span<std::byte> on_header(std::size_t from, const frame_header& h, std::uint32_t index) override {
    const auto [off, len] = piece(count, grain, index);
    expect_header(l, l.peer_of(from), h, type, encoding::raw, len, name);
    if (num.host && h.order == wire::host_order) return region(index);  // the result, into place
    return std::span(rx[from]).first(len * width);
  }
  void on_frame(std::size_t from, const frame_header& h, std::uint32_t index, std::span<std::byte> payload) override {
    if (type == codec::dtype::boolean) check_bools(l, l.peer_of(from), payload, name);
    const auto mine = region(index);
    if (num.host) {  // the result
      if (payload.data() != mine.data()) wire::convert(payload, h.order, mine, wire::host_order, codec::order_width(type));
      return;
    }
    const int step = step_of[from];
    combine_into(op, type, mine, payload, h.order, step < 0 || partner_lower[static_cast<std::size_t>(step)]);
    ++done[index];
    advance(static_cast<std::size_t>(step + 1), index);
  }
};

// Rabenseifner's allreduce: the fold, then over the p2 numbers a
// reduce-scatter by recursive halving and an allgather by recursive
// doubling. The buffer is cut into p2 blocks (sizes as the ring's). In
// halving step k (distance d = p2/2, p2/4, ..., 1) number v holds a range
// of 2d blocks; it keeps the half its bit d selects (lower if clear),
// sends the other half to v xor d, and combines what it receives into its
// half, the lower number's values first. Number v ends owning block v,
// complete (averaged there); the allgather steps (d = 1, 2, ..., p2/2) then
// swap ranges with the same partners until every rank holds all blocks.
// Stages run one after another: a stage's frames are read once the stage
// before is complete (accepts()), and its sends leave then, straight from
// the buffer (a rank never writes a range it sends); each range is cut
// into max(1, ceil(len / C)) frames. Bandwidth as the ring's, 2 lg p
// latencies instead of 2(p-1).
struct halving_plan final : plan {
  struct stage {
    enum class kind : std::uint8_t { fold_in, fold_out, halve, gather, result } what;
    std::uint32_t peer = 0;
    std::size_t send_off = 0, send_len = 0;  // elements this rank sends
    std::size_t recv_off = 0, recv_len = 0;  // elements it receives
    bool peer_first = false;                  // combine the peer's values first
    std::size_t recv_channel = 0;
    std::uint32_t first_index = 0;  // of its frames on recv_channel
    [[nodiscard]] bool sends() const { return what != kind::fold_in && what != kind::result; }
    [[nodiscard]] bool receives() const { return what != kind::fold_out; }
    [[nodiscard]] bool copies() const { return what == kind::gather || what == kind::result; }
  };
  link& l;
  codec::dtype type;
  std::size_t width;
  std::span<std::byte> bytes;
  reduce_op op;
  std::size_t grain;
  std::vector<stage> stages;
  std::size_t current = 0;  // the stage running
  std::uint32_t got = 0;    // its frames in
  std::optional<std::pair<std::size_t, std::size_t>> own;  // the block this rank completes (avg divides it)
  std::vector<std::uint32_t> sent_on;                      // per channel: frames sent on it
  std::vector<std::vector<std::byte>>& rx;

  std::uint32_t members = 1;

  halving_plan(link& l_, rx_staging& st, codec::dtype t, std::span<std::byte> d, reduce_op op_,
               std::span<const std::uint32_t> group)
      : l(l_), type(t), width(codec::size_of(t)), bytes(d), op(op_),
        grain(l_.elements_per_frame(codec::size_of(t))), rx(st.per_channel) {
    name = "allreduce";
    const std::size_t count = d.size() / width;
    const numbering num(l, group);
    members = num.n;
    const std::size_t p2 = num.p2;
    const std::size_t base = count / p2, extra = count % p2;
    const auto block_start = [&](std::size_t k) { return base * k + std::min(k, extra); };
    // Blocks [first, first + span) as an element range.
    const auto range = [&](std::size_t first, std::size_t span) {
      return std::pair{block_start(first), block_start(first + span) - block_start(first)};
    };
    using kind = stage::kind;
    if (num.host) {
      stages.push_back({kind::fold_out, *num.host, 0, count, 0, 0, false});
      stages.push_back({kind::result, *num.host, 0, 0, 0, count, false});
    } else {
      const std::uint32_t v = num.v;
      if (num.folded) stages.push_back({kind::fold_in, *num.folded, 0, 0, 0, count, true});
      std::size_t lo = 0;  // this number's range of blocks: [lo, lo + 2 dist)
      for (std::uint32_t dist = num.p2 / 2; dist >= 1; dist /= 2) {
        const std::uint32_t w = v ^ dist;
        const std::size_t keep = (v & dist) != 0 ? lo + dist : lo;
        const std::size_t give = (v & dist) != 0 ? lo : lo + dist;
        const auto [send_off, send_len] = range(give, dist);
        const auto [recv_off, recv_len] = range(keep, dist);
        stages.push_back({kind::halve, num.rank_of(w), send_off, send_len, recv_off, recv_len, w < v});
        lo = keep;
      }
      own = range(v, 1);
      std::size_t have = v;  // this number's range after the halving: [have, have + dist)
      for (std::uint32_t dist = 1; dist < num.p2; dist *= 2) {
        const std::uint32_t w = v ^ dist;
        const std::size_t theirs = have ^ dist;  // the partner's range, as aligned as this one
        const auto [send_off, send_len] = range(have, dist);
        const auto [recv_off, recv_len] = range(theirs, dist);
        stages.push_back({kind::gather, num.rank_of(w), send_off, send_len, recv_off, recv_len, false});
        have = std::min(have, theirs);
      }
      if (num.folded) stages.push_back({kind::fold_out, *num.folded, 0, count, 0, 0, false});
    }
    std::vector<std::size_t> in(l.channel_count(), 0);
    std::size_t out = 0;
    for (stage& s : stages) {
      if (s.receives()) {
        s.recv_channel = l.recv_channel(s.peer);
        s.first_index = frame_count(l, in[s.recv_channel]);
        in[s.recv_channel] += pieces(s.recv_len, grain);
      }
      if (s.sends()) out += pieces(s.send_len, grain);
    }
    expected.assign(l.channel_count(), 0);
    for (std::size_t ch = 0; ch < in.size(); ++ch) expected[ch] = frame_count(l, in[ch]);
    sends = frame_count(l, out);
    sent_on.assign(l.channel_count(), 0);
    size_staging(l, st, expected, grain * width);
  }

  // The stage that frame `index` of channel `from` belongs to.
  [[nodiscard]] std::size_t stage_of(std::size_t from, std::uint32_t index) const {
    for (std::size_t i = stages.size(); i-- > 0;) {
      if (stages[i].receives() && stages[i].recv_channel == from && stages[i].first_index <= index) return i;
    }
    return 0;
  }
  [[nodiscard]] bool accepts(std::size_t from, std::uint32_t index) const override {
    return stage_of(from, index) <= current;
  }

  // Queues the current stage's sends, and those of every following stage
  // that receives nothing (the return to a folded rank).
  void start_stage() {
    for (; current < stages.size(); ++current) {
      const stage& s = stages[current];
      got = 0;
      if (s.sends()) {
        const std::size_t ch = l.send_channel(s.peer);
        for (std::size_t c = 0; c < pieces(s.send_len, grain); ++c) {
          const auto [off, len] = piece(s.send_len, grain, c);
          frame_header h;
          h.type = type;
          h.chunk = sent_on[ch]++;  // frames on a connection are numbered across its stages
          h.count = static_cast<std::uint32_t>(len);
          l.send(ch, h, bytes.subspan((s.send_off + off) * width, len * width));
        }
      }
      if (s.receives()) return;
    }
  }
  void begin() { start_stage(); }

  // Frame `index` of channel `from` (of the current stage, which accepts()
  // makes sure of): where its values go in this rank's buffer.
  [[nodiscard]] std::span<std::byte> target(std::uint32_t index) const {
    const stage& s = stages[current];
    const auto [off, len] = piece(s.recv_len, grain, index - s.first_index);
    return bytes.subspan((s.recv_off + off) * width, len * width);
  }

  std::span<std::byte> on_header(std::size_t from, const frame_header& h, std::uint32_t index) override {
    const auto mine = target(index);
    expect_header(l, l.peer_of(from), h, type, encoding::raw, mine.size() / width, name);
    if (stages[current].copies() && h.order == wire::host_order) return mine;
    return std::span(rx[from]).first(mine.size());
  }
  void on_frame(std::size_t from, const frame_header& h, std::uint32_t index, std::span<std::byte> payload) override {
    if (type == codec::dtype::boolean) check_bools(l, l.peer_of(from), payload, name);
    const stage& s = stages[current];
    const auto mine = target(index);
    if (s.copies()) {
      if (payload.data() != mine.data()) wire::convert(payload, h.order, mine, wire::host_order, codec::order_width(type));
    } else {
      combine_into(op, type, mine, payload, h.order, s.peer_first);
    }
    if (++got < pieces(s.recv_len, grain)) return;
    // The stage is complete; after the last halving, this rank's block is.
    const bool halved = s.what == stage::kind::halve && stages[current + 1].what != stage::kind::halve;
    if (halved && op == reduce_op::avg) divide(type, bytes.data() + own->first * width, own->second, members);
    ++current;
    start_stage();
  }
};

}  // namespace

void tree_allreduce(link& l, rx_staging& staging, algorithm a, codec::dtype type, std::span<std::byte> data,
                    reduce_op op, std::span<const std::uint32_t> group) {
  if (a == algorithm::rabenseifner) {
    halving_plan p(l, staging, type, data, op, group);
    l.run(p, [&] {
      p.begin();
    });
    return;
  }
  doubling_plan p(l, staging, type, data, op, group);
  l.run(p, [&] {
    p.begin();
  });
}

}  // namespace ferry::comm::detail
