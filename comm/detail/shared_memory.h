// ferry/comm/detail/shared_memory.h: INTERNAL. Ranks of one host (same
// machine, boot, network namespace, /dev/shm, user and architecture: see
// host_key()) share one POSIX shared-memory segment per host and combine
// their values in it instead of sending them through TCP loopback.
// docs/comm-protocol.md, section 8, is the specification. Not part of the
// API.
//
// SETUP (communicator's constructor, over the already authenticated ring):
//   1. every rank allgathers its 32-byte host key; ranks with equal keys
//      form a host group, its lowest rank the group's leader;
//   2. each leader of a group of two or more creates a segment named
//      "/ferry-" + 32 random hex digits (shm_open O_CREAT|O_EXCL, mode
//      0600), reserves its bytes (posix_fallocate) and writes a random
//      16-byte nonce into its header; the names and nonces are allgathered
//      (sealed or encrypted like every frame under FERRY_AUTH);
//   3. each member opens its leader's segment and checks it: owned by this
//      user, mode 0600, the size and nonce the leader announced; every rank
//      allgathers whether it succeeded, and a group with a failure anywhere
//      falls back to TCP (all ranks agree, from the same bytes);
//   4. after that allgather (every member has opened it), each leader
//      unlinks the name: the segment lives on only in its group's mappings.
//
// SEGMENT LAYOUT (host byte order; one machine reads it):
//   offset  size
//   0       8     magic "FERRYSHM"
//   8       16    nonce (from the leader, checked by every member)
//   24      4     members (u32)
//   28      4     reserved (0)
//   32      8     slot_bytes (u64)
//   64      4     arrived: members at the current barrier (atomic u32)
//   128     4     generation: barriers completed (atomic u32, futex word)
//   132     4     failed: 0; 1 while the first member to give up writes
//                 the error fields; then bit 31 set, bits 16-23
//                 the reason (1 timed out, 2 a member ended, 3 other) and
//                 bits 0-15 the member it names (atomic u32, first reason kept)
//   136     4     error code: with reason 3, the comm_error that made the
//                 member give up (its leader's failure over TCP), else 0
//   140     4     the rank that error names, or 0xFFFFFFFF
//   256     4 x members: each member's pid (i32; a member whose process
//                 ended is noticed by the others while they wait)
//   256+4L  4 x members: barriers each member has arrived at (atomic u32;
//                 a member that times out names the first one behind it)
//   A       2 x 16 x members, A the first multiple of 16 after those: two
//                 banks (by the parity of the collective's number) of each
//                 member's announcement of the collective it runs: u64
//                 bytes, u32 kind (0 allreduce, 1 reduce to the leader, 2
//                 broadcast from it, 3 reduce-scatter, 4 allgather), u16
//                 dtype code, u16 op; checked
//                 against member 0's after the first barrier
//   D       3 x members x slot_bytes: three banks of one slot per member, D
//           the first multiple of 4096 after the announcements
//
// ROUNDS: a collective moves its data in rounds of up to slot_bytes per
// member, pipelined: allreduce copies round k in, combines round k-1 and
// copies round k-2 out between two barriers (one barrier per round, not
// three). Round k (counted across collectives) uses bank k mod 3.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ferry/codec/dtype.h"
#include "ferry/comm/options.h"

namespace ferry::comm::detail {

/// SHA-256 over what makes two processes able to share a segment and
/// compute the same bits: the boot id, the network, IPC and PID
/// namespaces, /dev/shm's device and inode, the effective uid and the
/// architecture (ranks of one host under qemu-user stay apart). Ranks in
/// different network namespaces count as different hosts, so a simulated
/// cluster (scripts/netns-cluster) keeps its nodes apart. `host_id`
/// (config::host_id) is mixed in.
[[nodiscard]] std::array<std::byte, 32> host_key(const std::string& host_id);

/// A segment's name and nonce as the leader announces them (step 2).
struct segment_id {
  std::array<char, 40> name{};  // NUL-terminated
  std::array<std::byte, 16> nonce{};
};

/// The segment as one member maps it, and the rounds over it.
class shared_segment {
 public:
  /// The leader's side (step 2): throws std::system_error if the segment
  /// cannot be made (no /dev/shm, no room).
  static std::unique_ptr<shared_segment> create(std::uint32_t members, std::size_t slot_bytes, segment_id& id);
  /// A member's side (step 3): throws std::runtime_error naming the check
  /// that failed.
  static std::unique_ptr<shared_segment> open(const segment_id& id, std::uint32_t members, std::size_t slot_bytes,
                                              std::uint32_t me);
  ~shared_segment();
  shared_segment(const shared_segment&) = delete;
  shared_segment& operator=(const shared_segment&) = delete;

  /// Removes the name (the leader, step 4); the mappings stay.
  void unlink() noexcept;

  [[nodiscard]] std::uint32_t members() const noexcept { return members_; }
  [[nodiscard]] std::uint32_t me() const noexcept { return me_; }
  [[nodiscard]] std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  /// Banks of slots: a round's bank is its number mod 3.
  static constexpr std::size_t banks = 3;
  /// Member m's slot in round `round`'s bank.
  [[nodiscard]] std::byte* slot(std::uint64_t round, std::uint32_t m) const noexcept;
  enum class wait_status : std::uint8_t { ok, timed_out, ended, gave_up };
  struct wait_result {
    wait_status status = wait_status::ok;
    std::uint32_t member = 0;  // ended: the member whose process ended; timed_out: the one waited for;
                               // gave_up: the one that gave up
    std::uint16_t code = 0;    // gave_up with a comm_error: its code (0 none)
    std::uint32_t rank = ~std::uint32_t{0};  // and the rank it named, if any
  };
  /// Waits until every member has arrived at this barrier, up to `timeout`
  /// without one. Fails if it runs out, if a member's process ended (looked
  /// at every 100 ms while waiting) or if a member gave up; on the first
  /// two this member gives up itself, so the others stop waiting too, and
  /// all report the first member's reason.
  /// `patient`: no timeout, only the liveness of the others (a wait that
  /// spans another step with its own timeouts).
  [[nodiscard]] wait_result barrier(std::chrono::milliseconds timeout, bool patient = false);
  /// Marks the segment failed and wakes every member; the first reason
  /// given (a member that ended or was waited for) is what every member's
  /// barrier then returns (gave_up without one).
  void give_up(wait_status why = wait_status::gave_up, std::uint32_t member = 0, std::uint16_t code = 0,
               std::uint32_t rank = ~std::uint32_t{0}) noexcept;

  /// What a member says it runs, checked against member 0's.
  struct announcement {
    std::uint64_t bytes = 0;
    std::uint32_t kind = 0;
    std::uint16_t type = 0;
    std::uint16_t op = 0;
  };
  /// Announces this member's next collective; returns its first round's
  /// number (rounds are counted across collectives).
  std::uint64_t begin_collective(const announcement& a) noexcept;
  /// The announcement of member m for the current collective.
  [[nodiscard]] announcement announced(std::uint32_t m) const noexcept;
  /// The collective took `rounds` rounds.
  void end_collective(std::uint64_t rounds) noexcept;

 private:
  struct header;
  shared_segment(void* base, std::size_t bytes, std::uint32_t members, std::size_t slot_bytes, std::uint32_t me,
                 std::string name);
  [[nodiscard]] header& head() const noexcept;
  [[nodiscard]] std::int32_t* pids() const noexcept;
  [[nodiscard]] std::atomic<std::uint32_t>* arrivals() const noexcept;

  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  std::uint32_t members_ = 0;
  std::size_t slot_bytes_ = 0;
  std::uint32_t me_ = 0;
  std::uint64_t round_ = 0;        // rounds of all collectives so far
  std::uint64_t collectives_ = 0;  // collectives so far
  std::string name_;  // until unlinked (the leader)
};

/// Bytes per member slot for a group of `members`: 1 MiB (rounds that
/// large keep the barriers few: 4 ranks on 2 cores, 64 MB, took 37 ms
/// against 56 ms with 256 KiB rounds and 77 ms with 64 KiB), less for
/// groups above 10 so that a segment stays within 32 MiB (a container's
/// /dev/shm is often 64 MiB), never below 64 KiB.
[[nodiscard]] constexpr std::size_t shared_slot_bytes(std::uint32_t members) noexcept {
  const std::size_t fit = (std::size_t{32} << 20) / (3 * std::size_t{members}) / 4096 * 4096;
  return std::clamp(fit, std::size_t{64} << 10, std::size_t{1} << 20);
}

/// The ways a host group's rounds combine values; each throws comm_error
/// (timed_out or aborted) when a barrier fails. `op` is never avg here:
/// callers sum and divide.
struct host_rounds {
  shared_segment& seg;
  std::chrono::milliseconds timeout;
  std::uint32_t rank;                      // for messages
  std::span<const std::uint32_t> ranks;    // the group's ranks by member index

  /// Allreduce within the group: every member ends with op over the
  /// members' `data`, each element combined by one member in member order
  /// (0, 1, ..., L-1), so every member holds the same bits. With `divisor`
  /// > 1 (avg) each element is divided by it where it is combined.
  void allreduce(reduce_op op, codec::dtype type, std::span<std::byte> data, std::uint32_t divisor) const;
  /// The same, but only member 0 (the leader) receives the result.
  void reduce_to_leader(reduce_op op, codec::dtype type, std::span<std::byte> data) const;
  /// The leader's `data` to every member.
  void broadcast_from_leader(std::span<std::byte> data) const;

  /// The halves of allreduce, for the striped allreduce over several hosts
  /// (hosts.cpp). reduce_scatter: member m ends with op over the
  /// members' `data` on its share of every round (the elements it combines:
  /// count*m/L up to count*(m+1)/L of the round's count), the shares one
  /// after another in `share`, which holds share_bytes(type, data.size()).
  void reduce_scatter(reduce_op op, codec::dtype type, std::span<const std::byte> data,
                      std::span<std::byte> share) const;
  /// The inverse: every member's `share` (as reduce_scatter left it) into
  /// its place in every member's `data`. Members wait for the first round
  /// as long as the others live (each comes from its own network step).
  void allgather(codec::dtype type, std::span<const std::byte> share, std::span<std::byte> data) const;
  /// Bytes of this member's share of a collective of `bytes`.
  [[nodiscard]] std::size_t share_bytes(codec::dtype type, std::size_t bytes) const;

 private:
  void wait(bool patient = false) const;
  void agree() const;
  template <class F>
  void pipeline(std::uint32_t kind, codec::dtype type, reduce_op op, std::size_t bytes, int stages, F&& stage,
                bool patient_start = false) const;
  void combine(std::uint64_t r, reduce_op op, codec::dtype type, std::size_t bytes, std::uint32_t divisor) const;
  // This member's elements of a round of `count`: [first, second).
  [[nodiscard]] std::pair<std::size_t, std::size_t> share_of(std::size_t count) const noexcept {
    return {count * seg.me() / seg.members(), count * (seg.me() + 1) / seg.members()};
  }
};

}  // namespace ferry::comm::detail
