// ferry/comm/config.h: how a rank finds its world.
//
// Environment variables (config::from_env), the torchrun conventions first:
//   MASTER_ADDR    rank 0's host name or address, IPv4 or IPv6 (default 127.0.0.1)
//   MASTER_PORT    rank 0's rendezvous port (default 29500)
//   RANK           this process's rank; fallback SLURM_PROCID
//   WORLD_SIZE     the number of ranks; fallback SLURM_NTASKS
//   FERRY_SECRET       the shared secret itself, or
//   FERRY_SECRET_FILE  a file holding it (one trailing newline is dropped)
//   FERRY_TIMEOUT      seconds any blocking step may go without progress (default 60)
//   FERRY_CHUNK_BYTES  payload bytes per frame in collectives (default 256 KiB)
//   FERRY_AUTH         how frames are protected after the handshake (default none):
//                      none     CRC32C only (catches accidents, not attacks)
//                      frames   every frame and ABORT carries a ChaCha20-Poly1305
//                               tag: one altered, injected, replayed, reordered or
//                               dropped on the path fails the collective
//                      encrypt  the same, with payloads encrypted
//                      Every rank must use the same value (checked at the handshake).
//   FERRY_RING_ORDER   where ranks sit on the ring (default node):
//                      node  ranks of one host next to each other, so each
//                            host's link carries the ring once per direction
//                            (whatever order a launcher numbers them in)
//                      rank  rank r sends to rank r+1
//                      Read on rank 0, which tells the others; a rank that
//                      sets another value fails at the rendezvous.
//   FERRY_ALGORITHM    how allreduce moves values (default auto): ring,
//                      recursive_doubling (lg p exchanges over a full mesh of
//                      links, for short messages on many ranks), rabenseifner
//                      (recursive halving and doubling: 2 lg p exchanges,
//                      the ring's bytes), or auto (per call, by the cost
//                      model: comm/cost_model.h's choose()). Every rank must
//                      use the same value (checked at the handshake).
//   FERRY_SHARED_MEMORY  on (default) or off: whether ranks of one host
//                      combine allreduce values in a shared-memory segment
//                      (comm/detail/shared_memory.h), their hosts' leaders
//                      alone using the network; this rank's own setting (a
//                      rank that says off stays out of its host's group)
//   FERRY_HOST_ID      any text, mixed into the host key: ranks of one
//                      machine with different ids form different groups
//                      (one per NUMA node, say, or simulated hosts)
//   FERRY_LINK_LATENCY_US, FERRY_LINK_GBPS
//                      the cost model's link: microseconds per message
//                      (default 50) and Gbit/s of payload (default 0.936, a
//                      1 Gbit/s Ethernet link). Every rank checks its own;
//                      with auto, rank 0's are every rank's.
//   FERRY_SEND_BUFFER  bytes of the kernel's send buffer on each ring link
//                      (SO_SNDBUF; default 256 KiB, 0 leaves the kernel's
//                      autotuning); this rank's own setting
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "ferry/comm/cost_model.h"
#include "ferry/comm/error.h"
#include "ferry/comm/options.h"

namespace ferry::comm {

/// Where ranks sit on the ring (FERRY_RING_ORDER).
enum class ring_order : std::uint8_t {
  rank = 0,  ///< rank r sends to rank (r + 1) mod n
  node = 1,  ///< grouped by host: hosts (the addresses rank 0 saw their ranks
             ///< join from) in the order of their lowest rank, each host's
             ///< ranks in rank order; rank 0 first
};

struct config {
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;
  std::string master_addr = "127.0.0.1";
  std::uint16_t master_port = 29500;  ///< 0 lets rank 0's kernel pick (see listener)
  std::string secret;                 ///< required: at least one byte
  std::chrono::milliseconds timeout{60'000};
  /// Payload bytes per frame: the pipelining grain of the ring. Every rank
  /// must use the same value (checked at the handshake).
  std::uint32_t chunk_bytes = 256 * 1024;
  /// The largest frame accepted, header and CRC included; frames announcing
  /// more are refused before anything is allocated. Same on every rank.
  std::uint32_t max_frame_bytes = 16 * 1024 * 1024;
  /// SO_SNDBUF of the ring links (0: the kernel's autotuning). A send
  /// buffer of a few chunks keeps the bytes in flight cache-warm; the
  /// kernel's autotuned one grows to megabytes that the receiver then reads
  /// from memory (4 ranks on loopback: 1.3-1.4x faster at 16 and 64 MB).
  /// 256 KiB (the kernel doubles it) holds the 1 Gbit/s link full at
  /// round trips up to about 4 ms; raise it for faster or longer links.
  std::uint32_t send_buffer_bytes = 256 * 1024;
  /// Per-frame authentication (FERRY_AUTH, frame.h's AUTHENTICATION). Same
  /// on every rank.
  frame_auth auth = frame_auth::none;
  /// Where ranks sit on the ring (FERRY_RING_ORDER). Rank 0's choice is the
  /// world's (node when it sets none); another rank that sets one must
  /// match it.
  std::optional<ring_order> order;
  /// Whether this rank joins its host's shared-memory group
  /// (FERRY_SHARED_MEMORY).
  bool shared_memory = true;
  /// Mixed into this rank's host key (FERRY_HOST_ID).
  std::string host_id;
  /// How allreduce moves values (FERRY_ALGORITHM). Same on every rank.
  comm::algorithm algorithm = comm::algorithm::automatic;
  /// The link the cost model assumes (FERRY_LINK_LATENCY_US,
  /// FERRY_LINK_GBPS). With algorithm auto, rank 0's values are every
  /// rank's (sent at the first collective).
  link_cost link;

  /// Reads the variables above. A configuration error, not a failure of
  /// communication: bad_config naming the variable that is missing or
  /// malformed (io_error with the OS's reason for an unreadable
  /// FERRY_SECRET_FILE).
  static result<config, error> from_env();
  /// The same for a launcher that knows the rank and world size otherwise
  /// (torch.distributed's creator gets them from init_process_group):
  /// RANK, WORLD_SIZE and their SLURM fallbacks are not read.
  static result<config, error> from_env(std::uint32_t rank, std::uint32_t world_size);
  /// FERRY_LINK_LATENCY_US and FERRY_LINK_GBPS (the defaults where unset);
  /// bad_config naming a malformed one.
  static result<link_cost, error> link_cost_from_env();
  /// bad_config naming the field that is out of range.
  [[nodiscard]] result<void, error> validate() const;
};

}  // namespace ferry::comm
