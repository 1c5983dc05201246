// ferry/comm/detail/link.h: INTERNAL. A rank's two ring links and the pump
// that moves one collective's frames over them: frames out to the next
// rank (gathered straight from their buffers), frames in from the previous
// one (through frame_decoder, payloads straight into place), and ABORT
// messages both ways when a collective fails. With config::auth, every
// message is sealed with its direction's key and counter (frame.h's
// AUTHENTICATION): frames lazily, a little ahead of the socket, so sealing
// overlaps sending and encrypt mode needs only a few ciphertext buffers.
// Not part of the API.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ferry/comm/communicator.h"
#include "ferry/comm/detail/rendezvous.h"
#include "ferry/comm/frame.h"

namespace ferry::comm::detail {

std::string rank_name(std::uint32_t r);

/// One collective as the link sees it: which frames arrive, where their
/// payloads go and what happens once each is in. Its callbacks may throw
/// comm_error.
struct plan {
  virtual ~plan() = default;
  /// Validates an incoming header (index = its position in this
  /// collective) and says where its payload goes.
  virtual std::span<std::byte> on_header(const frame_header& h, std::uint32_t index) = 0;
  /// The payload arrived and its CRC or tag is right.
  virtual void on_frame(const frame_header& h, std::uint32_t index, std::span<std::byte> payload) = 0;
  /// Makes the payload of a frame queued with link::send_later(), just
  /// before the frame is sealed and sent: the payload (h.count elements)
  /// and the scratch slot holding it (-1 for none).
  virtual std::pair<std::span<const std::byte>, int> produce(const frame_header& h) {
    (void)h;
    return {{}, -1};  // a plan that calls send_later() overrides this
  }
  std::uint32_t expected = 0;  ///< frames to receive
  std::size_t sends = 0;       ///< frames to send
  const char* name = "";
};

class link {
 public:
  /// Forms the ring (rendezvous.h).
  link(const comm::config& c, std::optional<listener> rank0);

  [[nodiscard]] const comm::config& config() const noexcept { return cfg_; }
  [[nodiscard]] std::uint32_t rank() const noexcept { return rank_; }
  [[nodiscard]] std::uint32_t size() const noexcept { return n_; }
  /// This rank's place on the ring (0 .. n-1; config.h's ring_order), and
  /// the rank at a place. Ring collectives number their blocks by place.
  [[nodiscard]] std::uint32_t position() const noexcept { return position_; }
  [[nodiscard]] std::uint32_t rank_at(std::size_t position) const noexcept {
    return links_.ring.empty() ? 0 : links_.ring[position];
  }
  [[nodiscard]] std::uint32_t prev() const noexcept { return prev_; }
  [[nodiscard]] std::uint32_t next() const noexcept { return next_; }
  [[nodiscard]] const hello& prev_hello() const noexcept { return links_.prev_hello; }
  [[nodiscard]] const hello& next_hello() const noexcept { return links_.next_hello; }

  /// Runs one collective: `start` queues its first frames, then the pump
  /// runs until `p` has every frame and every queued frame is sent. On a
  /// failure it tells both neighbours (ABORT), closes the links and
  /// rethrows; every later run() throws `aborted` with the first error.
  void run(plan& p, const std::function<void()>& start);

  /// Queues a frame of the running collective (sender, sequence and byte
  /// order are filled in). The payload must stay valid until it is sent;
  /// `slot`, a scratch buffer holding it, is released once it is.
  void send(frame_header h, std::span<const std::byte> payload, int slot = -1);
  /// Queues a frame whose payload (`bytes` long) the plan makes only when
  /// the frame comes within the seal window of the socket (plan::produce):
  /// the work and the scratch slot it needs stay a little ahead of the
  /// wire instead of a whole stage ahead.
  void send_later(frame_header h, std::size_t bytes);

  /// Buffers of chunk_bytes for payloads in flight that are not in the
  /// user's buffer: f32 partial sums (so a frame that only passes one on
  /// never writes the cache-cold user buffer) and rounded 16-bit chunks.
  /// All are free again when a collective starts.
  int acquire_scratch();
  void release_scratch(int slot) { scratch_free_.push_back(slot); }
  [[nodiscard]] std::span<float> scratch(int slot) { return scratch_[static_cast<std::size_t>(slot)]; }

  /// Throws comm_error, prefixing this rank's name.
  [[noreturn]] void fail(error_code code, std::optional<std::uint32_t> culprit, const std::string& what) const;

 private:
  struct out_frame {
    frame_header h;  // until sealed
    std::array<std::byte, frame_header_size> header{};
    std::array<std::byte, frame_tag_size> trailer{};  // the CRC (first 4 bytes) or the tag
    const std::byte* payload = nullptr;               // what goes on the wire: the payload or its ciphertext
    std::size_t size = 0;
    std::size_t sent = 0;
    std::uint64_t counter = 0;  // its message counter, once sealed (auth)
    int slot = -1;
    int cipher_slot = -1;
    bool sealed = false;
    bool produced = true;  // false: plan::produce() makes the payload
    std::uint8_t trailer_size = frame_trailer_size;
    [[nodiscard]] std::size_t total() const { return frame_header_size + size + trailer_size; }
  };
  class receiver;

  [[noreturn]] void fail_from_abort(const abort_message& a, std::uint32_t from);
  [[nodiscard]] std::string inbound() const;  // "link from rank P to rank R"
  void seal_ahead();
  void queue(frame_header h, const std::byte* payload, std::size_t size, int slot, bool produced);
  void seal_frame(out_frame& f);
  void abort_links(const comm_error& e) noexcept;
  bool try_send();
  bool try_recv(plan& p, receiver& r);
  bool check_upstream(bool sending_done);
  void pump(plan& p);

  comm::config cfg_;
  ring_links links_;
  std::uint32_t rank_ = 0;
  std::uint32_t n_ = 1;
  std::uint32_t position_ = 0;
  std::uint32_t prev_ = 0;
  std::uint32_t next_ = 0;
  std::uint64_t sequence_ = 0;
  std::optional<comm_error> broken_;

  frame_decoder decoder_;
  std::uint32_t received_ = 0;
  std::size_t queued_ = 0;
  plan* running_ = nullptr;  // the collective run() is running
  std::deque<out_frame> sendq_;
  // An ABORT arriving against the flow, from the next rank (and its tag).
  std::array<std::byte, sealed_abort_size> up_head_{};
  std::size_t up_got_ = 0;

  // Authenticated modes: one cipher and one counter per direction of each
  // socket (the decoder holds the fourth, for frames from the previous rank).
  std::optional<frame_cipher> seal_next_;  // frames and ABORTs to the next rank
  std::optional<frame_cipher> seal_prev_;  // ABORTs to the previous rank
  std::optional<frame_cipher> open_next_;  // ABORTs from the next rank
  std::uint64_t next_counter_ = 0;         // messages sealed for the next rank
  std::uint64_t prev_counter_ = 0;         // ABORTs sent to the previous rank
  std::uint64_t up_counter_ = 0;           // ABORTs accepted from the next rank
  // Ciphertext buffers (encrypt mode), reused across collectives.
  std::vector<std::vector<std::byte>> cipher_bufs_;
  std::vector<int> cipher_free_;
  std::optional<abort_message> abort_seen_;
  std::optional<std::uint32_t> waiting_on_;  // the neighbour the pump waits for

  std::vector<std::vector<float>> scratch_;
  std::vector<int> scratch_free_;
};

}  // namespace ferry::comm::detail
