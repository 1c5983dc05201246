// ferry/comm/communicator.h: collectives over TCP links between ranks.
//
//   auto comm = ferry::comm::communicator::from_env();
//   comm.allreduce(grads, {.op = reduce_op::avg});          // every rank
//   auto w = comm.start_allreduce(bucket, {.comp = compression::bf16, .feedback = &ef});
//   ... compute ...
//   w.wait();
//
// Allreduce is a ring: reduce-scatter, then all-gather, each of the n
// segments cut into chunks of config::chunk_bytes so that sending,
// receiving and combining overlap. Segment k's result is formed in one
// fixed order, the value of the rank at place k on the ring first, then the
// one at place k+1's, ... (places: config.h's ring_order; each step is one
// operation of detail/reduce.h's kernels, which also fix what IEEE leaves
// to the CPU, such as which NaN survives), and then copied to every rank:
// all ranks end with the same bits, whatever their architecture or timing.
// Average divides the sum by n on the segment's owner before it is copied.
// With config::algorithm, allreduce may instead run recursive doubling or
// Rabenseifner's halving and doubling over a full mesh of links (or pick
// per call by comm/cost_model.h): each combines in a tree fixed by ranks
// alone, so the same holds (docs/comm-protocol.md, section 5).
//
// Every rank must call the same collectives in the same order with buffers
// of the same size; a frame from another collective is an error
// (sequence_mismatch), not mixed in. Collectives run one at a time in call
// order; the start_* forms queue them on the communicator's worker thread.
//
// Every collective has a start_* form that returns a `work` handle;
// buffers must outlive its wait().
//
// Failures throw comm_error. A rank that detects one (a closed connection,
// a CRC error, a timeout) tells both neighbours with an ABORT message that
// travels around the ring, so every rank fails the collective naming the
// same culprit; the communicator is then broken and every later call throws
// `aborted` with the first error's text. A buffer under a failed
// collective holds unspecified values.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <ranges>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/base/float16.h"
#include "ferry/codec/dtype.h"
#include "ferry/comm/config.h"
#include "ferry/comm/error.h"
#include "ferry/comm/peer.h"

namespace ferry::comm {

/// How values travel: as f32, or rounded to 16 bits (half the bytes).
enum class compression : std::uint8_t { none, bf16, f16 };

/// "none", "bf16" or "f16": ferry-train's --compress values, the names
/// ferry.distributed's hooks pass and ferry-train's summary records.
[[nodiscard]] constexpr std::string_view name(compression c) noexcept {
  switch (c) {
    case compression::none: break;
    case compression::bf16: return "bf16";
    case compression::f16: return "f16";
  }
  return "none";
}

/// Every compression, for lists of the accepted names.
inline constexpr compression all_compressions[] = {compression::none, compression::bf16, compression::f16};

/// The compression name() gives `s`; nullopt for any other text.
[[nodiscard]] constexpr std::optional<compression> compression_from_name(std::string_view s) noexcept {
  for (const compression c : all_compressions) {
    if (name(c) == s) return c;
  }
  return std::nullopt;
}

/// The rounding residual of a compressed allreduce, kept between calls for
/// one buffer (one gradient bucket): each call adds it to what this rank
/// sends and keeps what the rounding lost, so over many calls nothing is
/// lost for good. One per buffer; the size must match the buffer's.
class error_feedback {
 public:
  explicit error_feedback(std::size_t count = 0) : residual_(count, 0.0f) {}
  [[nodiscard]] std::span<float> residual() noexcept { return residual_; }
  [[nodiscard]] std::span<const float> residual() const noexcept { return residual_; }
  void reset() noexcept { std::fill(residual_.begin(), residual_.end(), 0.0f); }

 private:
  std::vector<float> residual_;
};

struct allreduce_options {
  reduce_op op = reduce_op::sum;
  compression comp = compression::none;
  /// With comp other than none: the residual to use and update, or null for
  /// plain rounding. Its size must equal the buffer's.
  error_feedback* feedback = nullptr;
};

/// in-place `acc` = o(acc, in), element by element, for host-order
/// elements of `type` (the same number in each), by the rules every
/// collective follows (NaNs, signed zeros, wrapping: docs/comm-protocol.md):
/// what a caller holding several buffers per rank folds before one
/// allreduce. `in` may alias `acc`. avg combines as sum (the caller
/// divides). Throws comm_error: unsupported for an op the type does not
/// take, size_mismatch for spans of different sizes or partial elements.
void combine(reduce_op o, codec::dtype type, std::span<std::byte> acc, std::span<const std::byte> in);

/// Element types broadcast and allgather move: every dtype of codec/ with a
/// C++ type (integers, bool, float, double, f16, bf16, FP8), and std::byte.
/// Multi-byte values arrive in the receiver's byte order.
template <class T>
concept element = std::same_as<T, std::byte> || float_pattern<T> ||
                  (std::is_arithmetic_v<T> && sizeof(T) <= 8 && !std::same_as<T, long double>);

/// The dtype an element travels as. `char` is u8 whatever its signedness
/// (signed on x86, unsigned on ARM and s390x), so mixed rings agree.
template <element T>
inline constexpr codec::dtype element_dtype = [] {
  if constexpr (std::is_same_v<T, std::byte> || std::is_same_v<T, char>) {
    return codec::dtype::u8;
  } else {
    return codec::dtype_of<T>;
  }
}();

/// The handle of a queued collective.
class work {
 public:
  struct state;  // comm/detail/worker.h
  work() = default;
  explicit work(std::shared_ptr<state> s) : state_(std::move(s)) {}
  /// Blocks until the collective ends; rethrows its comm_error.
  void wait();
  /// True once the collective ended (successfully or not).
  [[nodiscard]] bool done() const;

 private:
  std::shared_ptr<state> state_;
};

namespace detail {
struct listener_access;
}

/// Rank 0's rendezvous socket, bound before the others join. Binding it
/// first lets a launcher (or a test) learn the port when MASTER_PORT is 0.
class listener {
 public:
  /// Binds MASTER_ADDR:MASTER_PORT of `c`. Throws comm_error (connect_failed).
  explicit listener(const comm::config& c);
  listener(listener&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  listener& operator=(listener&& o) noexcept;
  listener(const listener&) = delete;
  listener& operator=(const listener&) = delete;
  ~listener();
  [[nodiscard]] std::uint16_t port() const;

 private:
  friend struct detail::listener_access;
  int fd_ = -1;
};

class communicator {
 public:
  /// Forms the ring (rendezvous); rank 0 may pass its pre-bound listener.
  /// Throws comm_error; a config that fails validate() throws the
  /// ferry::exception of that error (bad_config).
  explicit communicator(const comm::config& c, std::optional<listener> rank0 = std::nullopt);
  /// config::from_env(), then the above. A bad environment throws the
  /// ferry::exception of config::from_env()'s error, not a comm_error.
  static communicator from_env();
  communicator(communicator&&) noexcept;
  communicator& operator=(communicator&&) noexcept;
  /// Finishes queued collectives, then closes the links.
  ~communicator();

  [[nodiscard]] std::uint32_t rank() const noexcept;
  [[nodiscard]] std::uint32_t world_size() const noexcept;
  [[nodiscard]] const comm::config& config() const noexcept;
  /// The algorithm an uncompressed allreduce of `bytes` runs over the
  /// network: the configured one, or with auto the cost model's choice
  /// (comm/cost_model.h) for rank 0's link costs. Where host groups formed
  /// (host_ranks()) and span several hosts, the one that runs between them
  /// (a tree: the ring becomes Rabenseifner, auto the faster tree): among
  /// the leaders, or, for long buffers where every host has the same
  /// number of ranks, among each rank's peers over its share of the first
  /// chunk (the striped allreduce, docs/comm-protocol.md section 8; with
  /// auto, a short last chunk may take the other tree); on one
  /// host, which needs no network, the ring. Compressed allreduces and the
  /// other collectives take the ring.
  [[nodiscard]] comm::algorithm algorithm_for(std::size_t bytes) const;
  /// The link costs the cost model uses: with auto rank 0's config().link,
  /// which every rank received at the start; otherwise this rank's own.
  [[nodiscard]] const link_cost& link_costs() const noexcept;
  /// The ranks whose allreduce values meet in this rank's shared-memory
  /// segment (ascending, this rank among them), or this rank alone. Ranks
  /// of one host (same boot, network, IPC and PID namespaces, /dev/shm,
  /// user, architecture and FERRY_HOST_ID; FERRY_SHARED_MEMORY not off)
  /// form such a group at the
  /// start; uncompressed allreduce then combines in the segment, and
  /// between hosts only each group's lowest rank uses the network
  /// (docs/comm-protocol.md, section 8). A group whose segment could not be
  /// made or checked falls back to TCP (one line on stderr says why).
  [[nodiscard]] std::span<const std::uint32_t> host_ranks() const noexcept;
  /// What the neighbours said about themselves at the handshake.
  [[nodiscard]] const hello& prev_peer() const noexcept;
  [[nodiscard]] const hello& next_peer() const noexcept;

  /// `data` combined over all ranks by o.op, in place, on every rank; every
  /// rank ends with the same bits, whatever its architecture. `data` is any
  /// contiguous range of elements (a std::span, a std::vector, ...) of a
  /// type o.op is defined on: sum, avg, min, max and product on numbers,
  /// band, bor and bxor on integers and bool (the rules for NaNs, signed
  /// zeros and overflow: docs/comm-protocol.md). Compression (o.comp)
  /// applies to sums and averages of f32 values (aligned as floats). Throws comm_error: unsupported for
  /// an op the type does not take, bad_argument for compression elsewhere.
  template <std::ranges::contiguous_range R>
    requires element<std::ranges::range_value_t<R>>
  void allreduce(R&& data, const allreduce_options& o = {}) {
    allreduce_bytes(element_dtype<std::ranges::range_value_t<R>>, std::as_writable_bytes(std::span(data)), o);
  }
  /// The same, queued; `data` (and o.feedback) must outlive the wait.
  template <std::ranges::contiguous_range R>
    requires element<std::ranges::range_value_t<R>>
  work start_allreduce(R&& data, const allreduce_options& o = {}) {
    return start_allreduce_bytes(element_dtype<std::ranges::range_value_t<R>>,
                                 std::as_writable_bytes(std::span(data)), o);
  }
  /// allreduce of host-order bytes holding elements of `type`, for callers
  /// that know the type only at run time (the torch backend).
  void allreduce_bytes(codec::dtype type, std::span<std::byte> data, const allreduce_options& o = {});
  work start_allreduce_bytes(codec::dtype type, std::span<std::byte> data, const allreduce_options& o = {});

  /// Combines every rank's `in` by o.op, as allreduce does, and leaves on
  /// each rank only its piece: `in` holds world_size() pieces in rank
  /// order, rank r's of counts[r] elements (every rank passes the same
  /// counts), and `out` receives this rank's piece, counts[rank()]
  /// elements. `in` is not changed and may not overlap `out`. The piece of
  /// the rank at ring place q is combined starting from place q+1's values
  /// and ending with its own: the order of the allreduce's block q+1, which
  /// the ring completes at place q (docs/comm-protocol.md). No compression.
  template <std::ranges::contiguous_range In, std::ranges::contiguous_range Out>
    requires element<std::ranges::range_value_t<In>> &&
             std::same_as<std::ranges::range_value_t<In>, std::ranges::range_value_t<Out>>
  void reduce_scatter(const In& in, std::span<const std::size_t> counts, Out&& out, const allreduce_options& o = {}) {
    reduce_scatter_bytes(element_dtype<std::ranges::range_value_t<In>>, std::as_bytes(std::span(in)), counts,
                         std::as_writable_bytes(std::span(out)), o);
  }
  /// The same with equal pieces: `in` holds world_size() * size(out).
  template <std::ranges::contiguous_range In, std::ranges::contiguous_range Out>
    requires element<std::ranges::range_value_t<In>> &&
             std::same_as<std::ranges::range_value_t<In>, std::ranges::range_value_t<Out>>
  void reduce_scatter(const In& in, Out&& out, const allreduce_options& o = {}) {
    const std::vector<std::size_t> counts(world_size(), std::ranges::size(out));
    reduce_scatter(in, counts, out, o);
  }
  /// reduce_scatter of host-order bytes holding elements of `type`.
  void reduce_scatter_bytes(codec::dtype type, std::span<const std::byte> in, std::span<const std::size_t> counts,
                            std::span<std::byte> out, const allreduce_options& o = {});
  /// The same, queued; `in` and `out` must outlive the wait.
  work start_reduce_scatter_bytes(codec::dtype type, std::span<const std::byte> in, std::vector<std::size_t> counts,
                                  std::span<std::byte> out, const allreduce_options& o = {});

  /// ZeRO's halves of an allreduce. On the ring an allreduce of n elements
  /// is a reduce-scatter, after which each rank holds one block of the
  /// result complete (owned_block(n)), and an all-gather of those blocks.
  /// start_reduce_scatter_owned runs the first half over `data` (options
  /// as allreduce's, compression and error feedback included): afterwards
  /// data's owned block holds the bits an allreduce of `data` by the ring
  /// would leave there on every rank, and the residual what it would
  /// leave; the rest of `data` is scratch. start_allgather_owned runs the
  /// second half, uncompressed: every rank's owned block of `data` to
  /// every rank. Both take the ring whatever algorithm_for() says;
  /// ring_allreduce_for() tells whether an allreduce of those bytes would
  /// run the ring too, and so match these halves bit for bit.
  template <std::ranges::contiguous_range R>
    requires element<std::ranges::range_value_t<R>>
  work start_reduce_scatter_owned(R&& data, const allreduce_options& o = {}) {
    return start_reduce_scatter_owned_bytes(element_dtype<std::ranges::range_value_t<R>>,
                                            std::as_writable_bytes(std::span(data)), o);
  }
  work start_reduce_scatter_owned_bytes(codec::dtype type, std::span<std::byte> data, const allreduce_options& o = {});
  template <std::ranges::contiguous_range R>
    requires element<std::ranges::range_value_t<R>>
  work start_allgather_owned(R&& data) {
    return start_allgather_owned_bytes(element_dtype<std::ranges::range_value_t<R>>,
                                       std::as_writable_bytes(std::span(data)));
  }
  work start_allgather_owned_bytes(codec::dtype type, std::span<std::byte> data);
  /// The elements [first, first + size) of an allreduce of `count`
  /// elements that this rank completes in the reduce-scatter half: block
  /// p+1 of the ring's n blocks (sizes differing by at most one, the larger
  /// first), p this rank's place on the ring. Everything with one rank.
  [[nodiscard]] std::pair<std::size_t, std::size_t> owned_block(std::size_t count) const noexcept;
  /// Whether an allreduce of `bytes` with compression `comp` runs the flat
  /// ring (algorithm_for() says ring, and no host groups take it over):
  /// then its result equals the two halves' bit for bit.
  [[nodiscard]] bool ring_allreduce_for(std::size_t bytes, compression comp) const;

  /// Copies `root`'s buffer to every rank (same size everywhere). `data`
  /// is any contiguous range of elements: a std::span, a std::vector, ...
  template <std::ranges::contiguous_range R>
    requires element<std::ranges::range_value_t<R>>
  void broadcast(R&& data, std::uint32_t root) {
    broadcast_bytes(element_dtype<std::ranges::range_value_t<R>>, std::as_writable_bytes(std::span(data)), root);
  }
  template <std::ranges::contiguous_range R>
    requires element<std::ranges::range_value_t<R>>
  work start_broadcast(R&& data, std::uint32_t root) {
    return start_broadcast_bytes(element_dtype<std::ranges::range_value_t<R>>,
                                 std::as_writable_bytes(std::span(data)), root);
  }

  /// Every rank's `mine` (the same size on every rank), indexed by rank:
  /// `out` holds world_size() * size(mine) elements of the same type, rank
  /// r's at r * size(mine). `mine` may not overlap `out`.
  template <std::ranges::contiguous_range In, std::ranges::contiguous_range Out>
    requires element<std::ranges::range_value_t<In>> &&
             std::same_as<std::ranges::range_value_t<In>, std::ranges::range_value_t<Out>>
  void allgather(const In& mine, Out&& out) {
    allgather_bytes(element_dtype<std::ranges::range_value_t<In>>, std::as_bytes(std::span(mine)),
                    std::as_writable_bytes(std::span(out)));
  }
  template <std::ranges::contiguous_range In, std::ranges::contiguous_range Out>
    requires element<std::ranges::range_value_t<In>> &&
             std::same_as<std::ranges::range_value_t<In>, std::ranges::range_value_t<Out>>
  work start_allgather(const In& mine, Out&& out) {
    return start_allgather_bytes(element_dtype<std::ranges::range_value_t<In>>, std::as_bytes(std::span(mine)),
                                 std::as_writable_bytes(std::span(out)));
  }
  /// Every rank's `value`, indexed by rank.
  template <element T>
  std::vector<T> allgather(T value) {
    std::vector<T> out(world_size());
    allgather(std::span<const T>(&value, 1), out);
    return out;
  }

  /// Every rank sends every rank a piece of its own: `in` holds
  /// world_size() pieces in rank order, rank r's of send_counts[r]
  /// elements, and `out` receives each rank's piece for this rank in rank
  /// order, rank r's of recv_counts[r] elements (what rank r passed as
  /// send_counts[this rank]). Elements arrive in this rank's byte order;
  /// each piece goes straight from its sender to its receiver (in worlds
  /// of four or more, over the mesh). `in` and `out` may not overlap.
  /// Throws comm_error: size_mismatch for counts that do not add up to
  /// the buffers, or that disagree with a sender's.
  void all_to_all_bytes(codec::dtype type, std::span<const std::byte> in, std::span<const std::size_t> send_counts,
                        std::span<std::byte> out, std::span<const std::size_t> recv_counts);
  /// The same, queued; `in` and `out` must outlive the wait.
  work start_all_to_all_bytes(codec::dtype type, std::span<const std::byte> in, std::vector<std::size_t> send_counts,
                              std::span<std::byte> out, std::vector<std::size_t> recv_counts);
  /// all_to_all with equal pieces: `in` and `out` hold world_size() pieces
  /// of the same size.
  template <std::ranges::contiguous_range In, std::ranges::contiguous_range Out>
    requires element<std::ranges::range_value_t<In>> &&
             std::same_as<std::ranges::range_value_t<In>, std::ranges::range_value_t<Out>>
  void all_to_all(const In& in, Out&& out) {
    const std::vector<std::size_t> counts(world_size(), std::ranges::size(in) / world_size());
    all_to_all_bytes(element_dtype<std::ranges::range_value_t<In>>, std::as_bytes(std::span(in)), counts,
                     std::as_writable_bytes(std::span(out)), counts);
  }

  /// Returns when every rank has called barrier().
  void barrier();
  work start_barrier();

  // ------------------------------------------------------ point to point
  //
  // A message goes from one rank to another over the connection between
  // them (every rank has one to every other in worlds of four or more: the
  // mesh). Messages from one rank with one tag are received in the order
  // they were sent; a receive takes the first message that matches its
  // sender (or any sender) and tag, and must be of the message's dtype and
  // size (else it fails with bad_argument or size_mismatch, and the
  // message is dropped). Elements arrive in the receiver's byte order.
  // Messages that come before their receive are read into a mailbox while
  // the receiver is inside any call or has a receive posted (up to
  // detail::mailbox_limit bytes; docs/comm-protocol.md, section 5). A send
  // returns once its message is on the wire, and fails with timed_out,
  // breaking the communicator, if the receiver takes nothing of it within
  // config::timeout; a receive that no message matches within
  // config::timeout fails with timed_out and the communicator stays
  // usable. Sends and receives queue with the collectives, in call
  // order, but a receive does not hold up what is queued after it: a rank
  // may post a receive, then send. A failure on a connection breaks the
  // communicator, as a failed collective does.

  /// Sends `data` to rank `peer` (not this rank) with `tag`.
  template <std::ranges::contiguous_range R>
    requires element<std::ranges::range_value_t<R>>
  void send(const R& data, std::uint32_t peer, std::int64_t tag = 0) {
    send_bytes(element_dtype<std::ranges::range_value_t<R>>, std::as_bytes(std::span(data)), peer, tag);
  }
  /// Receives into `data` a message with `tag` from `peer`, or from any
  /// rank when `peer` is nullopt; returns the sender.
  template <std::ranges::contiguous_range R>
    requires element<std::ranges::range_value_t<R>>
  std::uint32_t recv(R&& data, std::optional<std::uint32_t> peer, std::int64_t tag = 0) {
    return recv_bytes(element_dtype<std::ranges::range_value_t<R>>, std::as_writable_bytes(std::span(data)), peer,
                      tag);
  }
  void send_bytes(codec::dtype type, std::span<const std::byte> data, std::uint32_t peer, std::int64_t tag);
  /// The send, queued; `data` must outlive the wait.
  work start_send_bytes(codec::dtype type, std::span<const std::byte> data, std::uint32_t peer, std::int64_t tag);
  std::uint32_t recv_bytes(codec::dtype type, std::span<std::byte> data, std::optional<std::uint32_t> peer,
                           std::int64_t tag);
  /// The receive, posted in call order; once the work is done, `*source`
  /// (when not null) holds the sender. `data` and `source` must outlive
  /// the wait.
  work start_recv_bytes(codec::dtype type, std::span<std::byte> data, std::optional<std::uint32_t> peer,
                        std::int64_t tag, std::uint32_t* source = nullptr);

 private:
  struct impl;
  void broadcast_bytes(codec::dtype type, std::span<std::byte> data, std::uint32_t root);
  work start_broadcast_bytes(codec::dtype type, std::span<std::byte> data, std::uint32_t root);
  void allgather_bytes(codec::dtype type, std::span<const std::byte> mine, std::span<std::byte> out);
  work start_allgather_bytes(codec::dtype type, std::span<const std::byte> mine, std::span<std::byte> out);

  std::unique_ptr<impl> impl_;
};

}  // namespace ferry::comm
