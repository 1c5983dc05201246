// ferry/comm/communicator.h: collectives over a ring of TCP links.
//
//   auto comm = ferry::comm::communicator(ferry::comm::config::from_env());
//   comm.allreduce(grads, {.op = reduce_op::avg});          // every rank
//   auto w = comm.start_allreduce(bucket, {.comp = compression::bf16, .feedback = &ef});
//   ... compute ...
//   w.wait();
//
// Allreduce is a ring: reduce-scatter, then all-gather, each of the n
// segments cut into chunks of config::chunk_bytes so that sending,
// receiving and adding overlap. Segment k's sum is formed in one fixed
// order, rank k's value first, then rank k+1's, ... (floating-point
// addition of two operands is commutative, so each step is exact to
// specify), and then copied to every rank: all ranks end with the same
// bits, whatever their architecture or timing. Average divides the sum by
// n on the segment's owner before it is copied.
//
// Every rank must call the same collectives in the same order with buffers
// of the same size; a frame from another collective is an error
// (sequence_mismatch), not mixed in. Collectives run one at a time in call
// order; the start_* forms queue them on the communicator's worker thread.
//
// Failures throw comm_error. A rank that detects one (a closed connection,
// a CRC error, a timeout) tells both neighbours with an ABORT message that
// travels around the ring, so every rank fails the collective naming the
// same culprit; the communicator is then broken and every later call throws
// `aborted` with the first error's text. A buffer under a failed
// collective holds unspecified values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "ferry/codec/dtype.h"
#include "ferry/comm/config.h"
#include "ferry/comm/error.h"
#include "ferry/comm/rendezvous.h"

namespace ferry::comm {

enum class reduce_op : std::uint8_t { sum, avg };

/// How values travel: as f32, or rounded to 16 bits (half the bytes).
enum class compression : std::uint8_t { none, bf16, f16 };

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

/// The handle of a queued collective.
class work {
 public:
  struct state;
  work() = default;
  explicit work(std::shared_ptr<state> s) : state_(std::move(s)) {}
  /// Blocks until the collective ends; rethrows its comm_error.
  void wait();
  /// True once the collective ended (successfully or not).
  [[nodiscard]] bool done() const;

 private:
  std::shared_ptr<state> state_;
};

class communicator {
 public:
  /// Forms the ring (rendezvous.h); rank 0 may pass its pre-bound listener.
  explicit communicator(const comm::config& c, std::optional<listener> rank0 = std::nullopt);
  /// config::from_env(), then the above.
  static communicator from_env();
  communicator(communicator&&) noexcept;
  communicator& operator=(communicator&&) noexcept;
  /// Finishes queued collectives, then closes the links.
  ~communicator();

  [[nodiscard]] std::uint32_t rank() const noexcept;
  [[nodiscard]] std::uint32_t world_size() const noexcept;
  [[nodiscard]] const comm::config& config() const noexcept;
  /// What the neighbours said about themselves at the handshake.
  [[nodiscard]] const hello& prev_peer() const noexcept;
  [[nodiscard]] const hello& next_peer() const noexcept;

  /// Sum or average of `data` over all ranks, in place, on every rank.
  void allreduce(std::span<float> data, const allreduce_options& o = {});
  /// The same, queued; `data` (and o.feedback) must outlive the wait.
  work start_allreduce(std::span<float> data, const allreduce_options& o = {});

  /// Copies `root`'s buffer to every rank (same size everywhere). Values
  /// of a multi-byte dtype arrive in the receiver's byte order.
  void broadcast(std::span<float> data, std::uint32_t root);
  void broadcast(std::span<std::byte> data, std::uint32_t root);
  work start_broadcast(std::span<float> data, std::uint32_t root);

  /// Returns when every rank has called barrier().
  void barrier();

  /// Every rank's `value`, indexed by rank, in this host's byte order.
  template <class T>
    requires std::is_arithmetic_v<T>
  std::vector<T> allgather(T value) {
    std::vector<T> out(world_size());
    allgather_elements(codec::dtype_of<T>, &value, 1, out.data());
    return out;
  }
  /// Each rank contributes `count` elements of `type` at `mine`; `out`
  /// receives world_size() * count elements, rank r's at r * count.
  void allgather_elements(codec::dtype type, const void* mine, std::size_t count, void* out);

  struct impl;  // communicator.cpp

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace ferry::comm
