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

std::string rank_name(std::uint32_t r) { return "rank " + std::to_string(r); }

namespace {

// How far ahead of the socket frames are made (plan::produce) and sealed
// (CRC, or MAC in the authenticated modes): two default chunks, so the
// bytes the CRC or MAC pulled into cache are still there when the kernel
// copies them (authenticated, loopback, 64 MB: 1.6x the plain time at
// 512 KiB, 1.8x at 64 KiB and at 4 MiB).
constexpr std::size_t seal_window = std::size_t{1} << 19;

}  // namespace

// Hands the decoder's frames to the running plan, checking that each is the
// next one of this collective from the previous rank. On an authenticated
// link that check waits for the tag: a frame out of order there is one
// replayed, reordered or injected on the path (forged_frame, from the tag)
// unless its tag verifies, and only then a rank out of step.
class link::receiver final : public frame_sink {
 public:
  receiver(link& l, plan& p) : l_(l), p_(p), authenticated_(l.cfg_.auth != frame_auth::none) {}

  result<std::span<std::byte>> on_header(const frame_header& h) override {
    if (!authenticated_) check_order(h);
    return p_.on_header(h, l_.received_);
  }

  result<void> on_frame(const frame_header& h, std::span<std::byte> payload) override {
    if (authenticated_) check_order(h);
    const std::uint32_t index = l_.received_++;
    p_.on_frame(h, index, payload);
    return {};
  }

  result<void> on_abort(const abort_message& a) override { l_.fail_from_abort(a, l_.prev_); }

 private:
  void check_order(const frame_header& h) {
    if (h.sender != l_.prev_ || h.sequence != l_.sequence_ || h.chunk != l_.received_) {
      l_.fail(comm_errc::sequence_mismatch, l_.prev_,
              l_.inbound() + ": expected chunk " + std::to_string(l_.received_) + " of collective #" +
                  std::to_string(l_.sequence_) + " (" + p_.name + ") from " + rank_name(l_.prev_) + ", got chunk " +
                  std::to_string(h.chunk) + " of collective #" + std::to_string(h.sequence) + " from sender " +
                  std::to_string(h.sender) + ": do all ranks call the same collectives in the same order?");
    }
  }

  link& l_;
  plan& p_;
  bool authenticated_;
};

namespace {

frame_decoder make_decoder(const comm::config& c, const ring_links& links) {
  if (c.auth == frame_auth::none || c.world_size == 1) return frame_decoder(c.max_frame_bytes);
  return frame_decoder(c.max_frame_bytes, c.auth, links.prev_keys.initiator);
}

}  // namespace

link::link(const comm::config& c, std::optional<listener> rank0)
    : cfg_(c),
      links_(form_ring(c, std::move(rank0))),
      rank_(c.rank),
      n_(c.world_size),
      position_(static_cast<std::uint32_t>(std::find(links_.ring.begin(), links_.ring.end(), c.rank) - links_.ring.begin())),
      prev_(rank_at((position_ + n_ - 1) % n_)),
      next_(rank_at((position_ + 1) % n_)),
      decoder_(make_decoder(c, links_)) {
  if (c.auth != frame_auth::none && n_ > 1) {
    seal_next_.emplace(c.auth, links_.next_keys.initiator, true);
    seal_prev_.emplace(c.auth, links_.prev_keys.acceptor, true);
    open_next_.emplace(c.auth, links_.next_keys.acceptor, false);
  }
}

std::string link::inbound() const { return "link from " + rank_name(prev_) + " to " + rank_name(rank_); }

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

// Best effort, bounded: tell both neighbours, then close the links.
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
  try {
    // A frame half sent must be finished first, or the ABORT would land
    // inside it. Sealed frames form a prefix of the queue, so the ABORT's
    // counter follows the last frame that reaches the wire.
    std::uint64_t counter = next_counter_;
    if (!sendq_.empty() && sendq_.front().sealed) counter = sendq_.front().counter;
    if (!sendq_.empty() && sendq_.front().sent > 0 && links_.next.valid()) {
      const out_frame& f = sendq_.front();
      std::vector<std::byte> rest(f.total());
      std::memcpy(rest.data(), f.header.data(), frame_header_size);
      if (f.size > 0) std::memcpy(rest.data() + frame_header_size, f.payload, f.size);
      std::memcpy(rest.data() + frame_header_size + f.size, f.trailer.data(), f.trailer_size);
      send_all(links_.next, std::span(rest).subspan(f.sent), deadline, "next");
      counter = f.counter + 1;
    }
    if (links_.next.valid()) {
      if (seal_next_) {
        send_all(links_.next, seal_abort(a, *seal_next_, counter), deadline, "next");
      } else {
        send_all(links_.next, encode_abort(a), deadline, "next");
      }
    }
  } catch (...) {
  }
  try {
    if (links_.prev.valid()) {
      if (seal_prev_) {
        send_all(links_.prev, seal_abort(a, *seal_prev_, prev_counter_++), deadline, "prev");
      } else {
        send_all(links_.prev, encode_abort(a), deadline, "prev");
      }
    }
  } catch (...) {
  }
  sendq_.clear();
  for (socket* s : {&links_.prev, &links_.next}) {
    if (s->valid()) ::shutdown(s->fd(), SHUT_RDWR);
    s->close();
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

void link::send(frame_header h, std::span<const std::byte> payload, int slot) {
  queue(h, payload.data(), payload.size(), slot, true);
}

void link::send_later(frame_header h, std::size_t bytes) { queue(h, nullptr, bytes, -1, false); }

void link::queue(frame_header h, const std::byte* payload, std::size_t size, int slot, bool produced) {
  h.order = wire::host_order;
  h.sender = rank_;
  h.sequence = sequence_;
  out_frame f;
  f.h = h;  // made and sealed by seal_ahead(), shortly before it is sent
  f.payload = payload;
  f.size = size;
  f.slot = slot;
  f.produced = produced;
  f.trailer_size = static_cast<std::uint8_t>(trailer_size(cfg_.auth));
  sendq_.push_back(f);
  ++queued_;
}

void link::seal_frame(out_frame& f) {
  if (!f.produced) {
    const auto [payload, slot] = running_->produce(f.h);
    assert(payload.size() == f.size);
    f.payload = payload.data();
    f.slot = slot;
    f.produced = true;
  }
  if (!seal_next_) {
    const frame_envelope e = seal(f.h, std::span(f.payload, f.size));
    std::copy(e.header.begin(), e.header.end(), f.header.begin());
    std::copy(e.trailer.begin(), e.trailer.end(), f.trailer.begin());
    f.sealed = true;
    return;
  }
  std::span<std::byte> ciphertext;
  if (seal_next_->mode() == frame_auth::encrypt) {
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
  const sealed_envelope e = seal(f.h, std::span(f.payload, f.size), *seal_next_, next_counter_, ciphertext);
  std::copy(e.header.begin(), e.header.end(), f.header.begin());
  std::copy(e.tag.begin(), e.tag.end(), f.trailer.begin());
  if (!ciphertext.empty()) f.payload = ciphertext.data();
  f.counter = next_counter_++;
  f.sealed = true;
}

// Seals queued frames up to seal_window bytes ahead of what the socket has
// taken (at least the first).
void link::seal_ahead() {
  std::size_t ahead = 0;
  for (out_frame& f : sendq_) {
    if (ahead >= seal_window) return;
    if (!f.sealed) seal_frame(f);
    ahead += f.total() - f.sent;
  }
}

bool link::try_send() {
  bool progress = false;
  while (!sendq_.empty()) {
    seal_ahead();
    constexpr std::size_t max_frames = 32;
    std::array<iovec, 3 * max_frames> iov{};
    std::size_t k = 0;
    std::size_t frames = 0;
    for (auto it = sendq_.begin(); it != sendq_.end() && frames < max_frames && it->sealed; ++it, ++frames) {
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
    const ssize_t sent = ::sendmsg(links_.next.fd(), &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return progress;
      const int err = errno;
      // The next rank may have failed first and said why before closing.
      (void)check_upstream(false);
      fail(comm_errc::peer_lost, next_, "connection to " + rank_name(next_) + " lost while sending: " + std::strerror(err));
    }
    progress = true;
    auto left = static_cast<std::size_t>(sent);
    while (left > 0) {
      out_frame& f = sendq_.front();
      const std::size_t take = std::min(left, f.total() - f.sent);
      f.sent += take;
      left -= take;
      if (f.sent == f.total()) {
        if (f.slot >= 0) scratch_free_.push_back(f.slot);
        if (f.cipher_slot >= 0) cipher_free_.push_back(f.cipher_slot);
        sendq_.pop_front();
      }
    }
  }
  return progress;
}

// Reads what is there; false if nothing was.
bool link::try_recv(plan& p, receiver& r) {
  bool progress = false;
  while (received_ < p.expected) {
    // After a payload and its CRC the next header may be read in the same
    // call, but never past this collective's last frame.
    std::array<std::span<std::byte>, 3> bufs;
    const std::size_t k = decoder_.buffers(bufs, received_ + 1 < p.expected);
    std::array<iovec, 3> iov{};
    for (std::size_t i = 0; i < k; ++i) iov[i] = {bufs[i].data(), bufs[i].size()};
    const ssize_t got = ::readv(links_.prev.fd(), iov.data(), static_cast<int>(k));
    if (got == 0) {
      fail(comm_errc::peer_lost, prev_,
           inbound() + ": connection from " + rank_name(prev_) + " closed (did it die?)");
    }
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return progress;
      fail(comm_errc::peer_lost, prev_,
           inbound() + ": connection from " + rank_name(prev_) + " lost: " + std::strerror(errno));
    }
    progress = true;
    const auto s = decoder_.advance(static_cast<std::size_t>(got), r);
    if (s) continue;
    const error_code e = s.error();
    if (e == errc::limit_exceeded) {
      fail(e, prev_,
           inbound() + ": " + rank_name(prev_) + " announced a frame larger than the negotiated maximum of " +
               std::to_string(cfg_.max_frame_bytes) + " bytes; refused before reading it");
    }
    if (e == errc::checksum_mismatch) {
      fail(e, prev_,
           inbound() + ": CRC32C mismatch in chunk " + std::to_string(received_) + " of collective #" +
               std::to_string(sequence_) + " (or in an ABORT) from " + rank_name(prev_) +
               ": the bytes were corrupted on the way");
    }
    if (e == comm_errc::forged_frame) {
      fail(e, prev_,
           inbound() + ": message #" + std::to_string(decoder_.counter()) + " on the link (chunk " +
               std::to_string(received_) + " of collective #" + std::to_string(sequence_) + ", " + p.name +
               ") failed authentication (FERRY_AUTH=" + std::string(comm::name(cfg_.auth)) +
               "): a frame or ABORT altered, injected, replayed, reordered or dropped on the way");
    }
    fail(e, prev_, inbound() + ": malformed frame or ABORT from " + rank_name(prev_));
  }
  return progress;
}

bool link::check_upstream(bool sending_done) {
  for (;;) {
    const std::size_t need = open_next_ ? sealed_abort_size : abort_size;
    const ssize_t got = ::recv(links_.next.fd(), up_head_.data() + up_got_, need - up_got_, 0);
    if (got == 0 && sending_done && up_got_ == 0) return false;
    if (got == 0) fail(comm_errc::peer_lost, next_, "connection to " + rank_name(next_) + " closed (did it die?)");
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (sending_done && up_got_ == 0) return false;
      fail(comm_errc::peer_lost, next_, "connection to " + rank_name(next_) + " lost: " + std::strerror(errno));
    }
    up_got_ += static_cast<std::size_t>(got);
    if (up_got_ >= 4 && !is_abort(up_head_)) {
      fail(comm_errc::protocol_error, next_, rank_name(next_) + " sent data against the ring's direction");
    }
    if (up_got_ == need) {
      const auto a = open_next_ ? open_abort(up_head_, *open_next_, up_counter_)
                                : parse_abort(std::span(up_head_).first<abort_size>());
      if (!a && a.error() == comm_errc::forged_frame) {
        fail(a.error(), next_,
             "link from " + rank_name(rank_) + " to " + rank_name(next_) + ": an ABORT from " + rank_name(next_) +
                 " failed authentication (FERRY_AUTH=" + std::string(comm::name(cfg_.auth)) +
                 "): altered or injected on the way");
      }
      if (!a) fail(a.error(), next_, rank_name(next_) + " sent a malformed ABORT");
      ++up_counter_;
      fail_from_abort(*a, next_);
    }
  }
}


void link::pump(plan& p) {
  receiver r(*this, p);
  auto last = clock::now();
  bool watch_next = true;
  while (received_ < p.expected || !sendq_.empty() || queued_ < p.sends) {
    bool progress = try_send();
    progress = try_recv(p, r) || progress;
    if (progress) {
      last = clock::now();
      continue;
    }
    const bool receiving = received_ < p.expected;
    const bool sending_done = queued_ == p.sends && sendq_.empty();
    waiting_on_ = receiving ? prev_ : next_;
    // A neighbour that is done with this collective may close; its end
    // of the link is ignored from then on.
    std::array<pollfd, 2> fds{};
    fds[0] = {receiving ? links_.prev.fd() : -1, POLLIN, 0};
    fds[1] = {watch_next ? links_.next.fd() : -1, static_cast<short>(POLLIN | (sendq_.empty() ? 0 : POLLOUT)), 0};
    const int rc = ::poll(fds.data(), fds.size(), poll_timeout(last + cfg_.timeout));
    if (rc < 0 && errno != EINTR) fail(comm_errc::peer_lost, std::nullopt, std::string("poll: ") + std::strerror(errno));
    if (rc == 0) {
      const std::uint32_t silent = receiving ? prev_ : next_;
      fail(comm_errc::timed_out, silent,
           "no progress for " + std::to_string(cfg_.timeout.count()) + " ms in collective #" +
               std::to_string(sequence_) + " (" + p.name + ") " + (receiving ? "waiting for " : "sending to ") +
               rank_name(silent));
    }
    // When the previous rank has data too, read it first: an error in the
    // data path names its cause, while a relayed ABORT from upstream only
    // echoes a failure that the data would have shown here.
    const bool prev_ready = (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
    if (watch_next && !prev_ready && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      watch_next = check_upstream(sending_done);
    }
  }
}


void link::run(plan& p, const std::function<void()>& start) {
  if (broken_) {
    throw comm_error(comm_errc::aborted, broken_->peer(),
                     rank_name(rank_) + ": communicator unusable after an earlier failure: " + broken_->what());
  }
  ++sequence_;
  received_ = 0;
  queued_ = 0;
  scratch_free_.clear();
  for (int i = static_cast<int>(scratch_.size()) - 1; i >= 0; --i) scratch_free_.push_back(i);
  cipher_free_.clear();
  for (int i = static_cast<int>(cipher_bufs_.size()) - 1; i >= 0; --i) cipher_free_.push_back(i);
  waiting_on_.reset();
  if (n_ == 1) return;
  running_ = &p;
  try {
    start();
    pump(p);
    running_ = nullptr;
  } catch (const comm_error& e) {
    running_ = nullptr;
    broken_ = e;
    abort_links(e);
    throw;
  } catch (const std::exception& e) {
    // Out of memory, say: the frames still queued belong to this
    // collective and the neighbours expect them; nothing can go on.
    running_ = nullptr;
    broken_ = comm_error(comm_errc::aborted, std::nullopt, rank_name(rank_) + ": " + e.what());
    abort_links(*broken_);
    throw;
  }
}

}  // namespace ferry::comm::detail
