// ferry/comm/detail/link.h: INTERNAL. A rank's connections to its peers
// (channels) and the pump that moves one collective's frames over them:
// frames out (gathered straight from their buffers), frames in (through
// each channel's frame_decoder, payloads straight into place), and ABORT
// messages to every peer when a collective fails. With config::auth, every
// message is sealed with its direction's key and counter (frame.h's
// AUTHENTICATION): frames lazily, a little ahead of the socket, so sealing
// overlaps sending and encrypt mode needs only a few ciphertext buffers.
//
// Channel 0 (prev_channel) is the ring's link from the previous rank,
// channel 1 (next_channel) the one to the next rank: the ring's collectives
// send frames from place p to p+1 only, and ABORTs both ways. In worlds
// of four or more, form_mesh() adds a channel to every other rank; the
// other algorithms, all_to_all and messages send frames both ways on any
// channel. A plan names the channel
// of every frame it sends and is told the channel of every frame it
// receives. Between collectives, the link also carries point-to-point
// messages (send_message(), poll_messages(): link_messages.cpp), whose
// frames may arrive among a collective's and wait in a mailbox until a
// receive takes them. Not part of the API.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
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
#include "ferry/comm/detail/fail.h"
#include "ferry/comm/frame.h"

namespace ferry::comm::detail {

/// One collective as the link sees it: which frames arrive, where their
/// payloads go and what happens once each is in. Its callbacks may throw
/// comm_error.
struct plan {
  virtual ~plan() = default;
  /// Validates an incoming header that arrived on channel `from` (index =
  /// its position among this collective's frames on that channel) and
  /// says where its payload goes.
  virtual std::span<std::byte> on_header(std::size_t from, const frame_header& h, std::uint32_t index) = 0;
  /// The payload arrived and its CRC or tag is right.
  virtual void on_frame(std::size_t from, const frame_header& h, std::uint32_t index, std::span<std::byte> payload) = 0;
  /// Makes the payload of a frame queued with link::send_later(), just
  /// before the frame is sealed and sent: the payload (h.count elements)
  /// and the scratch slot holding it (-1 for none).
  virtual std::pair<std::span<const std::byte>, int> produce(const frame_header& h) {
    (void)h;
    return {{}, -1};  // a plan that calls send_later() overrides this
  }
  /// Whether frame `index` of channel `from` may be read now. A frame not
  /// yet accepted stays in the socket (nothing of it is read, its header
  /// neither) until the plan's progress on other channels accepts it.
  [[nodiscard]] virtual bool accepts(std::size_t from, std::uint32_t index) const {
    (void)from;
    (void)index;
    return true;
  }
  /// Frames to receive on each channel (indexed like the link's channels;
  /// missing entries are none).
  std::vector<std::uint32_t> expected;
  std::size_t sends = 0;  ///< frames to send, on all channels together
  const char* name = "";
};

/// A point-to-point message read before a receive took it: its elements
/// in the sender's byte order.
struct message {
  std::uint32_t peer = 0;
  std::int64_t tag = 0;
  codec::dtype type = codec::dtype::u8;
  wire::byte_order order = wire::host_order;
  std::uint64_t elements = 0;
  std::vector<std::byte> bytes;
};

/// Messages stop being read ahead of receives once the mailbox holds this
/// many bytes (the senders then wait in their sockets); the message being
/// read is finished first.
inline constexpr std::size_t mailbox_limit = std::size_t{256} << 20;

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
    return ring_.empty() ? 0 : ring_[position];
  }
  [[nodiscard]] std::uint32_t prev() const noexcept { return prev_; }
  [[nodiscard]] std::uint32_t next() const noexcept { return next_; }
  [[nodiscard]] const hello& prev_hello() const noexcept { return prev_hello_; }
  [[nodiscard]] const hello& next_hello() const noexcept { return next_hello_; }

  /// The channels: frames from the previous rank arrive on prev_channel,
  /// frames to the next rank leave on next_channel.
  static constexpr std::size_t prev_channel = 0;
  static constexpr std::size_t next_channel = 1;
  [[nodiscard]] std::size_t channel_count() const noexcept { return channels_.size(); }
  /// Connects to every rank that is not a ring neighbour (form_mesh()),
  /// once: call it only when every rank has its ring links (after a
  /// collective over the ring) and every rank calls it.
  void form_mesh();
  /// The channel that carries this rank's frames to `peer`, and the one
  /// that carries the peer's frames here: the same connection, except in a
  /// world of two, where the ring's two connections join the same ranks and
  /// each rank sends on the one it opened. Requires form_mesh() for a peer
  /// that is not a ring neighbour.
  [[nodiscard]] std::size_t send_channel(std::uint32_t peer) const noexcept;
  [[nodiscard]] std::size_t recv_channel(std::uint32_t peer) const noexcept;
  /// The rank at the other end of channel `c`.
  [[nodiscard]] std::uint32_t peer_of(std::size_t c) const noexcept { return channels_[c].peer; }
  /// Elements of `width` bytes in one frame's payload: chunk_bytes' worth,
  /// at least one. Every collective and message cuts its data by it.
  [[nodiscard]] std::size_t elements_per_frame(std::size_t width) const noexcept {
    return std::max<std::size_t>(1, cfg_.chunk_bytes / width);
  }
  /// A plan's `expected` with `frames` on channel `c` and none elsewhere.
  [[nodiscard]] std::vector<std::uint32_t> only_from(std::size_t c, std::uint32_t frames) const;

  /// Runs one collective: `start` queues its first frames, then the pump
  /// runs until `p` has every frame and every queued frame is sent. On a
  /// failure it tells every peer (ABORT), closes the links and rethrows;
  /// every later run() throws `aborted` with the first error.
  void run(plan& p, const std::function<void()>& start);

  /// Queues a frame of the running collective on channel `to` (sender,
  /// sequence and byte order are filled in). The payload must stay valid
  /// until it is sent; `slot`, a scratch buffer holding it, is released
  /// once it is.
  void send(std::size_t to, frame_header h, std::span<const std::byte> payload, int slot = -1);
  /// The same to the next rank on the ring.
  void send(frame_header h, std::span<const std::byte> payload, int slot = -1) {
    send(next_channel, h, payload, slot);
  }
  /// Queues a frame to the next rank whose payload (`bytes` long) the plan
  /// makes only when the frame comes within the seal window of the socket
  /// (plan::produce): the work and the scratch slot it needs stay a little
  /// ahead of the wire instead of a whole stage ahead.
  void send_later(frame_header h, std::size_t bytes);

  /// Buffers of chunk_bytes for payloads in flight that are not in the
  /// user's buffer: f32 partial sums (so a frame that only passes one on
  /// never writes the cache-cold user buffer) and rounded 16-bit chunks.
  /// All are free again when a collective starts.
  int acquire_scratch();
  void release_scratch(int slot) { scratch_free_.push_back(slot); }
  [[nodiscard]] std::span<float> scratch(int slot) { return scratch_[static_cast<std::size_t>(slot)]; }

  /// Sends `data`, elements of `type` in host order, to `peer` as one
  /// point-to-point message with `tag` (frame.h's POINT TO POINT), between
  /// collectives; returns once it is on the wire. Messages arriving
  /// meanwhile go to the mailbox, so two ranks sending to each other at
  /// once both finish. Failures break the link as run()'s do.
  void send_message(std::uint32_t peer, std::int64_t tag, codec::dtype type, std::span<const std::byte> data);
  /// Reads arriving messages into the mailbox, waiting up to `wait` for
  /// bytes; true if one or more completed. A frame of a collective that
  /// this rank has not started yet stays in its socket (and messages
  /// behind it too). Failures break the link as run()'s do.
  bool poll_messages(std::chrono::milliseconds wait);
  /// Complete messages in arrival order; receives take them out.
  [[nodiscard]] std::deque<message>& mailbox() noexcept { return mailbox_; }
  /// Takes mailbox()[i] out.
  message take_message(std::size_t i);
  /// Whether `peer` closed its end between collectives (it will send no
  /// more messages).
  [[nodiscard]] bool peer_closed(std::uint32_t peer) const noexcept;
  /// Throws the error that broke the link, if one did.
  void check_usable() const;
  /// Runs f(), a collective's step outside run() (the shared-memory
  /// rounds, say); a failure breaks the link as run()'s do: ABORTs to
  /// every peer, links closed, the error kept for every later call.
  template <class F>
  auto guarded(F&& f) {
    check_usable();
    try {
      return f();
    } catch (const comm_error& e) {
      running_ = nullptr;
      if (!broken_) {  // not already broken by a run() inside f
        broken_ = e;
        abort_links(e);
      }
      throw;
    } catch (const std::exception& e) {
      // Out of memory, say: frames still queued are expected by peers;
      // nothing can go on.
      running_ = nullptr;
      if (!broken_) {
        broken_ = comm_error(comm_errc::aborted, std::nullopt, rank_name(rank_) + ": " + e.what());
        abort_links(*broken_);
      }
      throw;
    }
  }
  /// Counts a collective this rank takes no part in over the links (the
  /// hosts' leaders' step of a hierarchical allreduce), so that its
  /// sequence numbers stay the world's.
  void skip_collective() {
    check_usable();
    ++sequence_;
  }

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
  // One connection to one peer. Frames and ABORTs from the peer go through
  // `decoder`; this rank's frames wait in `sendq`. Authenticated, each
  // direction has its key and message counter: `seal` and `counter` for
  // what this rank sends, the decoder's for what it receives.
  struct channel {
    std::uint32_t peer = 0;
    socket sock;
    frame_decoder decoder{0};
    std::optional<frame_cipher> seal;
    std::uint64_t counter = 0;  // messages sealed for the peer
    std::deque<out_frame> sendq;
    bool frames_in = true;      // false: the ring's collectives send nothing here (ABORTs, all_to_all and messages may come)
    std::uint32_t expected = 0;  // the running collective's frames from the peer
    std::uint32_t received = 0;
    bool watch = true;  // false once an idle peer closed after its part
    // Point-to-point messages (link_messages.cpp).
    std::uint64_t messages_out = 0;  // messages sent
    std::uint64_t messages_in = 0;   // messages received whole
    std::optional<message> incoming;  // the one being read
    std::uint32_t incoming_frames = 0;  // its data frames, and those read
    std::uint32_t incoming_read = 0;
    std::array<std::byte, 24> envelope{};
    bool head_blocked = false;  // a later collective's frame waits at the head
    bool closed = false;        // the peer closed its end between collectives
  };
  class receiver;
  class message_reader;
  enum class head { nothing, closed, abort, message, collective };

  [[noreturn]] void fail_from_abort(const abort_message& a, std::uint32_t from);
  [[nodiscard]] std::string inbound(const channel& c) const;  // "link from rank P to rank R"
  void seal_ahead(channel& c);
  void queue(std::size_t to, frame_header h, const std::byte* payload, std::size_t size, int slot, bool produced);
  void seal_frame(channel& c, out_frame& f);
  void abort_links(const comm_error& e) noexcept;
  bool try_send(channel& c);
  bool try_recv(plan& p, channel& c, receiver& r);
  bool check_idle(channel& c, receiver& r, bool sending_done);
  void find_abort(channel& c);
  void pump(plan& p);
  // Point-to-point (link_messages.cpp).
  std::span<std::byte> message_header(channel& c, const frame_header& h);
  void message_frame(channel& c, const frame_header& h);
  head peek_head(channel& c);
  bool read_messages(channel& c);

  comm::config cfg_;
  ring_links rendezvous_;            // the table and listener, until form_mesh()
  std::vector<std::uint32_t> ring_;  // the ranks by place; empty when n == 1
  std::vector<std::size_t> mesh_;    // the channel to each rank, once form_mesh() ran
  hello prev_hello_;
  hello next_hello_;
  std::uint32_t rank_ = 0;
  std::uint32_t n_ = 1;
  std::uint32_t position_ = 0;
  std::uint32_t prev_ = 0;
  std::uint32_t next_ = 0;
  std::uint64_t sequence_ = 0;
  std::optional<comm_error> broken_;
  std::vector<channel> channels_;  // none when n == 1

  std::size_t queued_ = 0;
  plan* running_ = nullptr;  // the collective run() is running
  // Ciphertext buffers (encrypt mode), reused across collectives.
  std::vector<std::vector<std::byte>> cipher_bufs_;
  std::vector<int> cipher_free_;
  std::optional<abort_message> abort_seen_;
  std::optional<std::uint32_t> waiting_on_;  // the peer the pump waits for

  std::deque<message> mailbox_;
  std::size_t mailbox_bytes_ = 0;

  std::vector<std::vector<float>> scratch_;
  std::vector<int> scratch_free_;
};

}  // namespace ferry::comm::detail
