#include "ferry/comm/communicator.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "ferry/comm/detail/all_to_all.h"
#include "ferry/comm/detail/communicator_impl.h"
#include "ferry/comm/detail/kernels.h"
#include "ferry/comm/detail/plan_checks.h"
#include "ferry/comm/detail/reduce.h"
#include "ferry/comm/detail/ring_plans.h"
#include "ferry/comm/detail/tree_allreduce.h"
#include "ferry/comm/frame.h"
#include "ferry/wire/bulk.h"

namespace ferry::comm {

using detail::rank_name;

using detail::check_bools;
using detail::check_own_bools;
using detail::expect_header;
using detail::frame_count;
using detail::rx_staging;
using detail::copy_plan;
using detail::ring_plan;
using detail::scatter_plan;

// What allreduce and its halves refuse, on every rank alike.
void communicator::impl::check_allreduce(codec::dtype type, std::span<const std::byte> data, const allreduce_options& o) {
  const std::size_t width = codec::size_of(type);
  if (!detail::reducible(o.op, type)) {
    link.fail(comm_errc::unsupported, std::nullopt,
              "allreduce " + std::string(name(o.op)) + " is not defined on " + std::string(codec::name(type)) +
                  " (band, bor and bxor take integers and bool, avg no bool, complex only sum and avg, FP8 none)");
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
}

void communicator::impl::allreduce(codec::dtype type, std::span<std::byte> data, const allreduce_options& o) {
  check_allreduce(type, data, o);
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

// ZeRO's halves: the ring allreduce's two halves as plans of their own
// (ring_plans.h), whatever the algorithm choice. With one rank the first
// is the allreduce itself (so compression rounds as it does) and the
// second has nothing to do.
void communicator::impl::reduce_scatter_owned(codec::dtype type, std::span<std::byte> data,
                                              const allreduce_options& o) {
  check_allreduce(type, data, o);
  if (link.size() == 1) {
    allreduce(type, data, o);
    return;
  }
  ring_plan p(link, staging, type, data, o, detail::ring_half::scatter);
  link.run(p, [&] {
    p.start();
  });
}

void communicator::impl::allgather_owned(codec::dtype type, std::span<std::byte> data) {
  if (data.size() % codec::size_of(type) != 0) {
    link.fail(errc::size_mismatch, std::nullopt, "allgather_owned buffer is not a whole number of elements");
  }
  if (link.size() == 1) return;
  ring_plan p(link, staging, type, data, {}, detail::ring_half::gather);
  link.run(p, [&] {
    p.start();
  });
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
  return impl_->leaders.size() == 1 ? algorithm::ring : impl_->hosts_algorithm_for(bytes, codec::dtype::u8);
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

work communicator::start_reduce_scatter_owned_bytes(codec::dtype type, std::span<std::byte> data,
                                                    const allreduce_options& o) {
  auto* p = impl_.get();
  return work(impl_->worker.submit([p, type, data, o] { p->reduce_scatter_owned(type, data, o); }));
}

work communicator::start_allgather_owned_bytes(codec::dtype type, std::span<std::byte> data) {
  auto* p = impl_.get();
  return work(impl_->worker.submit([p, type, data] { p->allgather_owned(type, data); }));
}

std::pair<std::size_t, std::size_t> communicator::owned_block(std::size_t count) const noexcept {
  const std::size_t n = impl_->link.size();
  if (n == 1) return {0, count};
  const detail::chunking ch(count, n, 1);
  const std::size_t k = (impl_->link.position() + 1) % n;
  return {ch.block_start(k), ch.block_size(k)};
}

bool communicator::ring_allreduce_for(std::size_t bytes, compression comp) const {
  if (comp != compression::none) return true;
  return !impl_->grouped() && impl_->algorithm_for(bytes) == algorithm::ring;
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
