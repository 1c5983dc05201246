#include "ferry/comm/detail/link.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace ferry::comm::detail {

namespace {

// How far ahead of the socket frames are made (plan::produce) and sealed
// (CRC, or MAC in the authenticated modes): two default chunks, so the
// bytes the CRC or MAC pulled into cache are still there when the kernel
// copies them (authenticated, loopback, 64 MB: 1.6x the plain time at
// 512 KiB, 1.8x at 64 KiB and at 4 MiB).
constexpr std::size_t seal_window = std::size_t{1} << 19;

// Scratch slots kept from one collective to the next (of chunk_bytes each).
constexpr std::size_t kept_scratch_slots = 16;

}  // namespace

// Hands a channel's frames to the running plan, checking that each is the
// next one of this collective from that channel's peer. On an
// authenticated link that check waits for the tag: a frame out of order
// there is one replayed, reordered or injected on the path (forged_frame,
// from the tag) unless its tag verifies, and only then a rank out of step.
class link::receiver final : public frame_sink {
 public:
  receiver(link& l, plan& p) : l_(l), p_(p), authenticated_(l.cfg_.auth != frame_auth::none) {}

  // The channel whose bytes go to the decoder next.
  void from(std::size_t c) { c_ = c; }

  result<std::span<std::byte>> on_header(const frame_header& h) override {
    channel& c = l_.channels_[c_];
    if (h.p2p) return l_.message_header(c, h);  // a message among the frames
    if (c.received >= c.expected) {
      l_.fail(comm_errc::protocol_error, c.peer,
              rank_name(c.peer) + " sent a frame that collective #" + std::to_string(l_.sequence_) + " (" +
                  p_.name + ") does not expect from it");
    }
    if (!authenticated_) check_order(h);
    return p_.on_header(c_, h, c.received);
  }

  result<void> on_frame(const frame_header& h, std::span<std::byte> payload) override {
    if (h.p2p) {
      l_.message_frame(l_.channels_[c_], h);
      return {};
    }
    if (authenticated_) check_order(h);
    const std::uint32_t index = l_.channels_[c_].received++;
    p_.on_frame(c_, h, index, payload);
    return {};
  }

  result<void> on_abort(const abort_message& a) override { l_.fail_from_abort(a, l_.channels_[c_].peer); }

 private:
  void check_order(const frame_header& h) {
    const channel& c = l_.channels_[c_];
    if (h.sender != c.peer || h.sequence != l_.sequence_ || h.chunk != c.received) {
      l_.fail(comm_errc::sequence_mismatch, c.peer,
              l_.inbound(c) + ": expected chunk " + std::to_string(c.received) + " of collective #" +
                  std::to_string(l_.sequence_) + " (" + p_.name + ") from " + rank_name(c.peer) + ", got chunk " +
                  std::to_string(h.chunk) + " of collective #" + std::to_string(h.sequence) + " from sender " +
                  std::to_string(h.sender) + ": do all ranks call the same collectives in the same order?");
    }
  }

  link& l_;
  plan& p_;
  bool authenticated_;
  std::size_t c_ = 0;
};

link::link(const comm::config& c, std::optional<listener> rank0)
    : cfg_(c), rendezvous_(form_ring(c, std::move(rank0))), rank_(c.rank), n_(c.world_size) {
  ring_links& links = rendezvous_;
  ring_ = links.ring;
  prev_hello_ = links.prev_hello;
  next_hello_ = links.next_hello;
  if (n_ < 4) rendezvous_.listener.close();  // no mesh to form: ring neighbours are every peer
  if (n_ == 1) return;
  position_ = static_cast<std::uint32_t>(std::find(ring_.begin(), ring_.end(), rank_) - ring_.begin());
  prev_ = rank_at((position_ + n_ - 1) % n_);
  next_ = rank_at((position_ + 1) % n_);
  // This rank accepted the link from the previous rank and initiated the
  // one to the next: the initiator's key seals what the initiator sends.
  channels_.resize(2);
  channel& from_prev = channels_[prev_channel];
  from_prev.peer = prev_;
  from_prev.sock = std::move(links.prev);
  channel& to_next = channels_[next_channel];
  to_next.peer = next_;
  to_next.sock = std::move(links.next);
  to_next.frames_in = c.algorithm != algorithm::ring;  // other algorithms exchange with ring neighbours too
  if (c.auth == frame_auth::none) {
    from_prev.decoder = frame_decoder(c.max_frame_bytes);
    to_next.decoder = frame_decoder(c.max_frame_bytes);
  } else {
    from_prev.decoder = frame_decoder(c.max_frame_bytes, c.auth, links.prev_keys.initiator);
    from_prev.seal.emplace(c.auth, links.prev_keys.acceptor, true);
    to_next.decoder = frame_decoder(c.max_frame_bytes, c.auth, links.next_keys.acceptor);
    to_next.seal.emplace(c.auth, links.next_keys.initiator, true);
  }
}

void link::form_mesh() {
  if (!mesh_.empty() || n_ == 1) return;
  mesh_.assign(n_, SIZE_MAX);
  for (mesh_link& m : detail::form_mesh(cfg_, rendezvous_)) {
    channel c;
    c.peer = m.peer;
    c.sock = std::move(m.s);
    // The initiator's key seals what the initiator sends.
    const frame_key& out = m.initiated ? m.keys.initiator : m.keys.acceptor;
    const frame_key& in = m.initiated ? m.keys.acceptor : m.keys.initiator;
    if (cfg_.auth == frame_auth::none) {
      c.decoder = frame_decoder(cfg_.max_frame_bytes);
    } else {
      c.decoder = frame_decoder(cfg_.max_frame_bytes, cfg_.auth, in);
      c.seal.emplace(cfg_.auth, out, true);
    }
    mesh_[m.peer] = channels_.size();
    channels_.push_back(std::move(c));
  }
}

std::size_t link::send_channel(std::uint32_t peer) const noexcept {
  if (peer == next_) return next_channel;
  if (peer == prev_) return prev_channel;
  assert(peer < mesh_.size() && mesh_[peer] != SIZE_MAX);  // form_mesh() ran
  return mesh_[peer];
}

std::size_t link::recv_channel(std::uint32_t peer) const noexcept {
  if (peer == prev_) return prev_channel;
  if (peer == next_) return next_channel;
  assert(peer < mesh_.size() && mesh_[peer] != SIZE_MAX);  // form_mesh() ran
  return mesh_[peer];
}

std::vector<std::uint32_t> link::only_from(std::size_t c, std::uint32_t frames) const {
  std::vector<std::uint32_t> v(channels_.size(), 0);
  if (c < v.size()) v[c] = frames;
  return v;
}

std::string link::inbound(const channel& c) const {
  return "link from " + rank_name(c.peer) + " to " + rank_name(rank_);
}

void link::fail(error_code code, std::optional<std::uint32_t> culprit, const std::string& what) const {
  throw comm_error(code, culprit, rank_name(rank_) + ": " + what);
}

void link::fail_from_abort(const abort_message& a, std::uint32_t from) {
  if (a.code == comm_errc::timed_out && a.culprit == rank_ && waiting_on_) {
    // Blamed for a silence while itself waiting: pass the blame on.
    abort_seen_ = abort_message{comm_errc::timed_out, rank_, waiting_on_, a.sequence};
    fail(comm_errc::timed_out, waiting_on_,
         rank_name(a.reporter) + " timed out in collective #" + std::to_string(a.sequence) +
             " waiting for this rank, which was itself waiting for " + rank_name(*waiting_on_));
  }
  abort_seen_ = a;
  std::string what = "collective #" + std::to_string(a.sequence) + " failed on " + rank_name(a.reporter) + " (" +
                     std::string(name(a.code)) + ")";
  if (a.culprit) what += ", caused by " + rank_name(*a.culprit);
  what += "; relayed by " + rank_name(from);
  fail(a.code, a.culprit, what);
}

// Best effort, bounded: tell every peer, then close the links.
void link::abort_links(const comm_error& e) noexcept {
  abort_message a;
  if (abort_seen_) {
    a = *abort_seen_;
  } else {
    a.code = e.code();
    a.reporter = rank_;
    a.culprit = e.peer();
    a.sequence = sequence_;
  }
  const auto deadline = clock::now() + std::chrono::seconds(1);
  // Peers with nothing half sent to them first: finishing a frame to a
  // peer that does not read may take the whole second.
  std::vector<channel*> order;
  for (channel& c : channels_) order.push_back(&c);
  std::stable_partition(order.begin(), order.end(),
                        [](const channel* c) { return c->sendq.empty() || c->sendq.front().sent == 0; });
  for (channel* cp : order) {
    channel& c = *cp;
    try {
      // A frame half sent must be finished first, or the ABORT would land
      // inside it. Sealed frames form a prefix of the queue, so the
      // ABORT's counter follows the last frame that reaches the wire.
      std::uint64_t counter = c.counter;
      if (!c.sendq.empty() && c.sendq.front().sealed) counter = c.sendq.front().counter;
      if (!c.sendq.empty() && c.sendq.front().sent > 0 && c.sock.valid()) {
        const out_frame& f = c.sendq.front();
        std::vector<std::byte> rest(f.total());
        std::memcpy(rest.data(), f.header.data(), frame_header_size);
        if (f.size > 0) std::memcpy(rest.data() + frame_header_size, f.payload, f.size);
        std::memcpy(rest.data() + frame_header_size + f.size, f.trailer.data(), f.trailer_size);
        send_all(c.sock, std::span(rest).subspan(f.sent), deadline, rank_name(c.peer));
        counter = f.counter + 1;
      }
      if (c.sock.valid()) {
        if (c.seal) {
          send_all(c.sock, seal_abort(a, *c.seal, counter), deadline, rank_name(c.peer));
        } else {
          send_all(c.sock, encode_abort(a), deadline, rank_name(c.peer));
        }
      }
    } catch (...) {
    }
  }
  for (channel& c : channels_) {
    c.sendq.clear();
    if (c.sock.valid()) ::shutdown(c.sock.fd(), SHUT_RDWR);
    c.sock.close();
  }
}

int link::acquire_scratch() {
  if (scratch_free_.empty()) {
    // A chunk's payload: chunk_bytes of f32 partial sums or of 16-bit
    // values (compressed sums go out rounded, never as floats).
    scratch_.emplace_back(cfg_.chunk_bytes / sizeof(float));
    return static_cast<int>(scratch_.size() - 1);
  }
  const int slot = scratch_free_.back();
  scratch_free_.pop_back();
  return slot;
}

void link::send(std::size_t to, frame_header h, std::span<const std::byte> payload, int slot) {
  queue(to, h, payload.data(), payload.size(), slot, true);
}

void link::send_later(frame_header h, std::size_t bytes) { queue(next_channel, h, nullptr, bytes, -1, false); }

void link::queue(std::size_t to, frame_header h, const std::byte* payload, std::size_t size, int slot,
                 bool produced) {
  h.order = wire::host_order;
  h.sender = rank_;
  if (!h.p2p) h.sequence = sequence_;  // a message's is its number on the connection
  out_frame f;
  f.h = h;  // made and sealed by seal_ahead(), shortly before it is sent
  f.payload = payload;
  f.size = size;
  f.slot = slot;
  f.produced = produced;
  f.trailer_size = static_cast<std::uint8_t>(trailer_size(cfg_.auth));
  channels_[to].sendq.push_back(f);
  ++queued_;
}

void link::seal_frame(channel& c, out_frame& f) {
  if (!f.produced) {
    const auto [payload, slot] = running_->produce(f.h);
    assert(payload.size() == f.size);
    f.payload = payload.data();
    f.slot = slot;
    f.produced = true;
  }
  if (!c.seal) {
    const frame_envelope e = seal(f.h, std::span(f.payload, f.size));
    std::copy(e.header.begin(), e.header.end(), f.header.begin());
    std::copy(e.trailer.begin(), e.trailer.end(), f.trailer.begin());
    f.sealed = true;
    return;
  }
  std::span<std::byte> ciphertext;
  if (c.seal->mode() == frame_auth::encrypt) {
    if (cipher_free_.empty()) {
      cipher_bufs_.emplace_back();
      cipher_free_.push_back(static_cast<int>(cipher_bufs_.size() - 1));
    }
    f.cipher_slot = cipher_free_.back();
    cipher_free_.pop_back();
    auto& buf = cipher_bufs_[static_cast<std::size_t>(f.cipher_slot)];
    if (buf.size() < f.size) buf.resize(std::max<std::size_t>(f.size, cfg_.chunk_bytes));
    ciphertext = std::span(buf).first(f.size);
  }
  const sealed_envelope e = seal(f.h, std::span(f.payload, f.size), *c.seal, c.counter, ciphertext);
  std::copy(e.header.begin(), e.header.end(), f.header.begin());
  std::copy(e.tag.begin(), e.tag.end(), f.trailer.begin());
  if (!ciphertext.empty()) f.payload = ciphertext.data();
  f.counter = c.counter++;
  f.sealed = true;
}

// Seals queued frames up to seal_window bytes ahead of what the socket has
// taken (at least the first).
void link::seal_ahead(channel& c) {
  std::size_t ahead = 0;
  for (out_frame& f : c.sendq) {
    if (ahead >= seal_window) return;
    if (!f.sealed) seal_frame(c, f);
    ahead += f.total() - f.sent;
  }
}

bool link::try_send(channel& c) {
  bool progress = false;
  while (!c.sendq.empty()) {
    seal_ahead(c);
    constexpr std::size_t max_frames = 32;
    std::array<iovec, 3 * max_frames> iov{};
    std::size_t k = 0;
    std::size_t frames = 0;
    for (auto it = c.sendq.begin(); it != c.sendq.end() && frames < max_frames && it->sealed; ++it, ++frames) {
      std::size_t skip = it->sent;
      auto add = [&](const void* p, std::size_t len) {
        if (skip >= len) {
          skip -= len;
          return;
        }
        iov[k++] = {const_cast<std::byte*>(static_cast<const std::byte*>(p)) + skip, len - skip};
        skip = 0;
      };
      add(it->header.data(), frame_header_size);
      add(it->payload, it->size);
      add(it->trailer.data(), it->trailer_size);
    }
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = k;
    const ssize_t sent = ::sendmsg(c.sock.fd(), &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return progress;
      const int err = errno;
      // The peer may have failed first and said why before closing.
      if (!c.frames_in && running_ != nullptr) {
        // (Only ABORTs can be waiting, so reading them takes nothing of a
        // later collective.)
        receiver r(*this, *running_);
        r.from(static_cast<std::size_t>(&c - channels_.data()));
        (void)check_idle(c, r, false);
      } else {
        find_abort(c);
      }
      fail(comm_errc::peer_lost, c.peer,
           "connection to " + rank_name(c.peer) + " lost while sending: " + std::strerror(err));
    }
    progress = true;
    auto left = static_cast<std::size_t>(sent);
    while (left > 0) {
      out_frame& f = c.sendq.front();
      const std::size_t take = std::min(left, f.total() - f.sent);
      f.sent += take;
      left -= take;
      if (f.sent == f.total()) {
        if (f.slot >= 0) scratch_free_.push_back(f.slot);
        if (f.cipher_slot >= 0) cipher_free_.push_back(f.cipher_slot);
        c.sendq.pop_front();
      }
    }
  }
  return progress;
}

// Reads what is there; false if nothing was.
bool link::try_recv(plan& p, channel& c, receiver& r) {
  bool progress = false;
  const auto from = static_cast<std::size_t>(&c - channels_.data());
  r.from(from);
  while (c.received < c.expected) {
    if (c.decoder.idle() && !p.accepts(from, c.received)) return progress;
    // After a payload and its CRC the next header may be read in the same
    // call, but never past this collective's last frame on the channel,
    // nor one the plan does not accept yet (nor past a message's frame).
    std::array<std::span<std::byte>, 3> bufs;
    const bool ahead = c.received + 1 < c.expected && p.accepts(from, c.received + 1) && !c.incoming;
    const std::size_t k = c.decoder.buffers(bufs, ahead);
    std::array<iovec, 3> iov{};
    for (std::size_t i = 0; i < k; ++i) iov[i] = {bufs[i].data(), bufs[i].size()};
    const ssize_t got = ::readv(c.sock.fd(), iov.data(), static_cast<int>(k));
    if (got == 0) {
      fail(comm_errc::peer_lost, c.peer, inbound(c) + ": connection from " + rank_name(c.peer) + " closed (did it die?)");
    }
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return progress;
      fail(comm_errc::peer_lost, c.peer,
           inbound(c) + ": connection from " + rank_name(c.peer) + " lost: " + std::strerror(errno));
    }
    progress = true;
    const auto s = c.decoder.advance(static_cast<std::size_t>(got), r);
    if (s) continue;
    const error_code e = s.error();
    if (e == errc::limit_exceeded) {
      fail(e, c.peer,
           inbound(c) + ": " + rank_name(c.peer) + " announced a frame larger than the negotiated maximum of " +
               std::to_string(cfg_.max_frame_bytes) + " bytes; refused before reading it");
    }
    if (e == errc::checksum_mismatch) {
      fail(e, c.peer,
           inbound(c) + ": CRC32C mismatch in chunk " + std::to_string(c.received) + " of collective #" +
               std::to_string(sequence_) + " (or in an ABORT) from " + rank_name(c.peer) +
               ": the bytes were corrupted on the way");
    }
    if (e == comm_errc::forged_frame) {
      fail(e, c.peer,
           inbound(c) + ": message #" + std::to_string(c.decoder.counter()) + " on the link (chunk " +
               std::to_string(c.received) + " of collective #" + std::to_string(sequence_) + ", " + p.name +
               ") failed authentication (FERRY_AUTH=" + std::string(comm::name(cfg_.auth)) +
               "): a frame or ABORT altered, injected, replayed, reordered or dropped on the way");
    }
    fail(e, c.peer, inbound(c) + ": malformed frame or ABORT from " + rank_name(c.peer));
  }
  return progress;
}

// Reads past whatever frames a failed peer sent to the ABORT it sent last
// (frames are checked, then dropped: the collective fails anyway) and fails
// with it. Returns if there is none: the caller reports what it saw.
void link::find_abort(channel& c) {
  struct dropping final : frame_sink {
    link& l;
    std::uint32_t peer;
    std::vector<std::byte> buf;
    dropping(link& l_, std::uint32_t p) : l(l_), peer(p) {}
    result<std::span<std::byte>> on_header(const frame_header& h) override {
      const auto size = payload_size(h);
      if (!size) return size.error();
      buf.resize(*size);
      return std::span(buf);
    }
    result<void> on_frame(const frame_header&, std::span<std::byte>) override { return {}; }
    result<void> on_abort(const abort_message& a) override { l.fail_from_abort(a, peer); }
  } sink(*this, c.peer);
  const auto deadline = clock::now() + cfg_.timeout;
  while (clock::now() < deadline) {
    std::array<std::span<std::byte>, 3> bufs;
    const std::size_t k = c.decoder.buffers(bufs, true);
    std::array<iovec, 3> iov{};
    for (std::size_t i = 0; i < k; ++i) iov[i] = {bufs[i].data(), bufs[i].size()};
    const ssize_t got = ::readv(c.sock.fd(), iov.data(), static_cast<int>(k));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0 || !c.decoder.advance(static_cast<std::size_t>(got), sink)) return;
  }
}

// Reads an ABORT from a channel that carries nothing else this collective
// (the next rank's). False once the peer, done with its part, closed.
bool link::check_idle(channel& c, receiver& r, bool sending_done) {
  for (;;) {
    if (c.decoder.idle()) {
      // Only an ABORT is read here. A frame of a later collective (all_to_all
      // sends against the ring's direction too) or a message is left for
      // what takes it, before the decoder takes it for anything.
      std::array<std::byte, 4> magic{};
      const ssize_t seen = ::recv(c.sock.fd(), magic.data(), magic.size(), MSG_PEEK);
      if (seen >= 4 && !is_abort(magic)) return false;
      if (seen > 0 && seen < 4) return true;  // not yet known
      // A peer done with its part may close; one that failed has sent its
      // ABORT first, and whoever waits for it hears of it.
      if (seen == 0 && c.frames_in) return false;
    }
    std::array<std::span<std::byte>, 3> bufs;
    c.decoder.buffers(bufs, false);  // between frames: the rest of an ABORT
    const ssize_t got = ::recv(c.sock.fd(), bufs[0].data(), bufs[0].size(), 0);
    if (got == 0 && sending_done && c.decoder.idle()) return false;
    if (got == 0) fail(comm_errc::peer_lost, c.peer, "connection to " + rank_name(c.peer) + " closed (did it die?)");
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (sending_done && c.decoder.idle()) return false;
      fail(comm_errc::peer_lost, c.peer, "connection to " + rank_name(c.peer) + " lost: " + std::strerror(errno));
    }
    const auto s = c.decoder.advance(static_cast<std::size_t>(got), r);
    if (s) continue;
    if (s.error() == comm_errc::forged_frame) {
      fail(s.error(), c.peer,
           "link from " + rank_name(rank_) + " to " + rank_name(c.peer) + ": an ABORT from " + rank_name(c.peer) +
               " failed authentication (FERRY_AUTH=" + std::string(comm::name(cfg_.auth)) +
               "): altered or injected on the way");
    }
    fail(s.error(), c.peer, rank_name(c.peer) + " sent a malformed ABORT");
  }
}

void link::pump(plan& p) {
  receiver r(*this, p);
  auto last = clock::now();
  std::vector<pollfd> fds;
  const auto receiving = [](const channel& c) { return c.received < c.expected; };
  // A connection with nothing due is watched for ABORTs: the ring's link
  // from the next rank always; with the other algorithms, every one.
  const auto watch_idle = [&](const channel& c) {
    return c.watch && (!c.frames_in || cfg_.algorithm != algorithm::ring);
  };
  // A connection with nothing due may bring messages: read, so that a
  // peer sending one while this rank waits for it here does not stall.
  const auto drains = [&](const channel& c) {
    return !receiving(c) && !c.head_blocked && !c.closed && (c.incoming || mailbox_bytes_ < mailbox_limit);
  };
  // Receiving now: frames due that the plan accepts (or one partly read).
  const auto readable_now = [&](const channel& c) {
    return receiving(c) && (!c.decoder.idle() || p.accepts(static_cast<std::size_t>(&c - channels_.data()), c.received));
  };
  for (;;) {
    bool busy = queued_ < p.sends;
    bool progress = false;
    // Sending first: what this rank has queued leaves before an error in
    // what it receives can stop it.
    for (channel& c : channels_) progress = try_send(c) || progress;
    for (channel& c : channels_) progress = (receiving(c) && try_recv(p, c, r)) || progress;
    for (const channel& c : channels_) busy = busy || receiving(c) || !c.sendq.empty();
    if (!busy) return;
    if (progress) {
      last = clock::now();
      continue;
    }
    // Whom this rank waits for: a peer whose frames are due, else one that
    // has not taken this rank's frames yet.
    const channel* waits = nullptr;
    for (const channel& c : channels_) {
      if (readable_now(c)) {
        waits = &c;
        break;
      }
    }
    const bool in = waits != nullptr;
    for (const channel& c : channels_) {
      if (waits == nullptr && !c.sendq.empty()) waits = &c;
    }
    if (waits == nullptr) waits = &channels_[next_channel];  // its frames are not queued yet
    waiting_on_ = waits->peer;
    // A channel that carries only ABORTs is watched for them; a peer that
    // is done with this collective may close its end, which is ignored
    // from then on.
    fds.resize(channels_.size());
    const std::size_t nfds = fds.size();
    for (std::size_t i = 0; i < nfds; ++i) {
      const channel& c = channels_[i];
      short events = 0;
      if (readable_now(c) || (watch_idle(c) && !receiving(c)) || drains(c)) events |= POLLIN;
      if (!c.sendq.empty()) events |= POLLOUT;
      fds[i] = {events != 0 ? c.sock.fd() : -1, events, 0};
    }
    const int rc = ::poll(fds.data(), nfds, poll_timeout(last + cfg_.timeout));
    if (rc < 0 && errno != EINTR) fail(comm_errc::peer_lost, std::nullopt, std::string("poll: ") + std::strerror(errno));
    if (rc == 0) {
      fail(comm_errc::timed_out, waiting_on_,
           "no progress for " + std::to_string(cfg_.timeout.count()) + " ms in collective #" +
               std::to_string(sequence_) + " (" + p.name + ") " + (in ? "waiting for " : "sending to ") +
               rank_name(waits->peer));
    }
    // When a peer whose frames are due has data, read it first: an error in
    // the data path names its cause, while a relayed ABORT only echoes a
    // failure that the data would have shown here.
    constexpr short readable = POLLIN | POLLHUP | POLLERR;
    bool data_ready = false;
    for (std::size_t i = 0; i < nfds; ++i) {
      data_ready = data_ready || (readable_now(channels_[i]) && (fds[i].revents & readable) != 0);
    }
    if (data_ready) continue;
    for (std::size_t i = 0; i < nfds; ++i) {
      channel& c = channels_[i];
      if (receiving(c) || (fds[i].revents & readable) == 0) continue;
      if (drains(c) && read_messages(c)) last = clock::now();  // (an ABORT fails here too)
      if (watch_idle(c) && !c.closed) {
        r.from(i);
        const bool sending_done = queued_ == p.sends && c.sendq.empty();
        c.watch = check_idle(c, r, sending_done);
      }
    }
  }
}

void link::check_usable() const {
  if (broken_) {
    throw comm_error(comm_errc::aborted, broken_->peer(),
                     rank_name(rank_) + ": communicator unusable after an earlier failure: " + broken_->what());
  }
}

void link::run(plan& p, const std::function<void()>& start) {
  check_usable();
  ++sequence_;
  queued_ = 0;
  for (std::size_t i = 0; i < channels_.size(); ++i) {
    channels_[i].received = 0;
    channels_[i].expected = i < p.expected.size() ? p.expected[i] : 0;
    channels_[i].watch = true;
    channels_[i].head_blocked = false;
  }
  scratch_free_.clear();
  for (int i = static_cast<int>(scratch_.size()) - 1; i >= 0; --i) scratch_free_.push_back(i);
  cipher_free_.clear();
  for (int i = static_cast<int>(cipher_bufs_.size()) - 1; i >= 0; --i) cipher_free_.push_back(i);
  waiting_on_.reset();
  if (n_ == 1) return;
  running_ = &p;
  guarded([&] {
    start();
    pump(p);
  });
  running_ = nullptr;
  // A collective that copied many chunks (recursive doubling of a long
  // buffer) leaves no more than a few slots behind.
  if (scratch_.size() > kept_scratch_slots) scratch_.resize(kept_scratch_slots);
}

}  // namespace ferry::comm::detail
