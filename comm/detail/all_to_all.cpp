#include "ferry/comm/detail/all_to_all.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "ferry/comm/detail/plan_checks.h"
#include "ferry/wire/bulk.h"

namespace ferry::comm::detail {

namespace {

struct all_to_all_plan final : plan {
  link& l;
  codec::dtype type;
  std::size_t width;
  std::size_t grain;
  std::span<std::byte> out;
  std::vector<std::size_t> recv_at;  // element offsets into out, by rank
  std::span<const std::size_t> recv_counts;

  all_to_all_plan(link& l_, codec::dtype t, std::span<std::byte> o, std::span<const std::size_t> rc)
      : l(l_), type(t), width(codec::size_of(t)),
        grain(l_.elements_per_frame(codec::size_of(t))), out(o), recv_at(rc.size()),
        recv_counts(rc) {
    std::exclusive_scan(rc.begin(), rc.end(), recv_at.begin(), std::size_t{0});
    name = "all_to_all";
  }

  [[nodiscard]] std::size_t frames(std::size_t count) const { return std::max<std::size_t>(1, (count + grain - 1) / grain); }

  std::span<std::byte> on_header(std::size_t from, const frame_header& h, std::uint32_t index) override {
    const std::uint32_t peer = l.peer_of(from);
    const std::size_t at = std::size_t{index} * grain;
    const std::size_t count = std::min(grain, recv_counts[peer] - std::min(at, recv_counts[peer]));
    expect_header(l, peer, h, type, encoding::raw, count, name);
    return out.subspan((recv_at[peer] + at) * width, count * width);
  }

  void on_frame(std::size_t from, const frame_header& h, std::uint32_t, std::span<std::byte> payload) override {
    if (type == codec::dtype::boolean) check_bools(l, l.peer_of(from), payload, name);
    if (h.order != wire::host_order) wire::convert_in_place(payload, codec::order_width(type), h.order, wire::host_order);
  }
};

}  // namespace

void all_to_all(link& l, codec::dtype type, std::span<const std::byte> in, std::span<const std::size_t> send_counts,
                std::span<std::byte> out, std::span<const std::size_t> recv_counts) {
  const std::size_t width = codec::size_of(type);
  const std::uint32_t n = l.size(), me = l.rank();
  const auto total = [](std::span<const std::size_t> counts, std::size_t& sum) {
    sum = 0;
    for (const std::size_t c : counts) {
      if (c > SIZE_MAX - sum) return false;
      sum += c;
    }
    return true;
  };
  std::size_t sent = 0, received = 0;
  if (send_counts.size() != n || recv_counts.size() != n || !total(send_counts, sent) ||
      !total(recv_counts, received) || sent > SIZE_MAX / width || received > SIZE_MAX / width ||
      in.size() != sent * width || out.size() != received * width || send_counts[me] != recv_counts[me]) {
    l.fail(errc::size_mismatch, std::nullopt,
           "all_to_all of " + std::to_string(in.size()) + " bytes into " + std::to_string(out.size()) + " with " +
               std::to_string(send_counts.size()) + " and " + std::to_string(recv_counts.size()) +
               " piece sizes for " + std::to_string(n) +
               " ranks: the pieces must add up to each buffer, and this rank's own piece be as long both ways");
  }
  check_own_bools(l, type, in, "all_to_all");
  std::vector<std::size_t> send_at(n);
  std::exclusive_scan(send_counts.begin(), send_counts.end(), send_at.begin(), std::size_t{0});
  all_to_all_plan p(l, type, out, recv_counts);
  if (send_counts[me] > 0) {
    std::memmove(out.data() + p.recv_at[me] * width, in.data() + send_at[me] * width, send_counts[me] * width);
  }
  if (n == 1) return;
  p.expected.assign(l.channel_count(), 0);
  for (std::uint32_t r = 0; r < n; ++r) {
    if (r == me) continue;
    p.expected[l.recv_channel(r)] = frame_count(l, p.frames(recv_counts[r]));
    p.sends += p.frames(send_counts[r]);
  }
  l.run(p, [&] {
    for (std::uint32_t r = 0; r < n; ++r) {
      if (r == me) continue;
      const std::size_t to = l.send_channel(r);
      std::uint32_t index = 0;
      for (std::size_t at = 0; at == 0 || at < send_counts[r]; at += p.grain) {
        const std::size_t count = std::min(p.grain, send_counts[r] - std::min(at, send_counts[r]));
        frame_header h;
        h.type = type;
        h.chunk = index++;
        h.count = static_cast<std::uint32_t>(count);
        l.send(to, h, in.subspan((send_at[r] + at) * width, count * width));
      }
    }
  });
}

}  // namespace ferry::comm::detail
