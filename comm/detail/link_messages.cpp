// Point-to-point messages over the link's connections (link.h; the frames:
// frame.h's POINT TO POINT). A message is read whole into the mailbox, in
// the sender's byte order; communicator.cpp's receives take it from there.
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "ferry/comm/detail/link.h"

namespace ferry::comm::detail {

namespace {

constexpr std::uint32_t envelope_count = 3;  // tag, elements, dtype code

}  // namespace

// Reads only messages (and ABORTs): what peek_head() found at the head.
class link::message_reader final : public frame_sink {
 public:
  message_reader(link& l, channel& c) : l_(l), c_(c) {}
  result<std::span<std::byte>> on_header(const frame_header& h) override {
    if (!h.p2p) {
      l_.fail(comm_errc::protocol_error, c_.peer,
              l_.inbound(c_) + ": a collective's frame inside a message from " + rank_name(c_.peer));
    }
    return l_.message_header(c_, h);
  }
  result<void> on_frame(const frame_header& h, std::span<std::byte>) override {
    l_.message_frame(c_, h);
    return {};
  }
  result<void> on_abort(const abort_message& a) override { l_.fail_from_abort(a, c_.peer); }

 private:
  link& l_;
  channel& c_;
};

std::span<std::byte> link::message_header(channel& c, const frame_header& h) {
  const std::string where = inbound(c) + ": message #" + std::to_string(c.messages_in);
  if (h.sender != c.peer || h.sequence != c.messages_in || h.enc != encoding::raw) {
    fail(comm_errc::sequence_mismatch, c.peer,
         where + " expected from " + rank_name(c.peer) + ", got a frame of message #" + std::to_string(h.sequence) +
             " from sender " + std::to_string(h.sender));
  }
  if (!c.incoming) {
    if (h.chunk != 0 || h.type != codec::dtype::u64 || h.count != envelope_count) {
      fail(comm_errc::protocol_error, c.peer, where + " does not begin with its envelope (chunk 0, U64, 3 values)");
    }
    return c.envelope;
  }
  const message& m = *c.incoming;
  const std::size_t grain = elements_per_frame(codec::size_of(m.type));
  const std::uint64_t before = std::uint64_t{c.incoming_read} * grain;
  const std::uint64_t count = std::min<std::uint64_t>(grain, m.elements - before);
  if (h.chunk != c.incoming_read + 1 || h.type != m.type || h.count != count || h.order != m.order) {
    fail(comm_errc::protocol_error, c.peer,
         where + ": frame " + std::to_string(h.chunk) + " with " + std::to_string(h.count) + " " +
             std::string(codec::name(h.type)) + " values where frame " + std::to_string(c.incoming_read + 1) +
             " of " + std::to_string(count) + " " + std::string(codec::name(m.type)) +
             " values in the envelope's byte order was due");
  }
  // The buffer grows with what arrives, never ahead of it.
  const std::size_t bytes = static_cast<std::size_t>(count) * codec::size_of(m.type);
  std::vector<std::byte>& b = c.incoming->bytes;
  b.resize(b.size() + bytes);
  return std::span(b).last(bytes);
}

void link::message_frame(channel& c, const frame_header& h) {
  if (!c.incoming) {
    const auto u64 = [&](std::size_t i) { return wire::load<std::uint64_t>(c.envelope.data() + 8 * i, h.order); };
    message m;
    m.peer = c.peer;
    m.tag = static_cast<std::int64_t>(u64(0));
    m.elements = u64(1);
    m.order = h.order;
    const std::uint64_t code = u64(2);
    const auto type = codec::dtype_from_code(static_cast<std::uint8_t>(code));
    if (code > 0xff || !type) {
      fail(type ? error_code(errc::bad_value) : type.error(), c.peer,
           inbound(c) + ": a message of dtype code " + std::to_string(code));
    }
    m.type = *type;
    const std::uint64_t grain = elements_per_frame(codec::size_of(m.type));
    const std::uint64_t frames = m.elements / grain + (m.elements % grain != 0);
    if (m.elements > SIZE_MAX / codec::size_of(m.type) || frames > UINT32_MAX - 1) {
      fail(errc::limit_exceeded, c.peer,
           inbound(c) + ": a message of " + std::to_string(m.elements) + " elements does not fit this machine");
    }
    c.incoming = std::move(m);
    c.incoming_frames = static_cast<std::uint32_t>(frames);
    c.incoming_read = 0;
  } else {
    ++c.incoming_read;
  }
  if (c.incoming_read < c.incoming_frames) return;
  mailbox_bytes_ += c.incoming->bytes.size();
  mailbox_.push_back(std::move(*c.incoming));
  c.incoming.reset();
  ++c.messages_in;
}

message link::take_message(std::size_t i) {
  message m = std::move(mailbox_[i]);
  mailbox_.erase(mailbox_.begin() + static_cast<std::ptrdiff_t>(i));
  mailbox_bytes_ -= m.bytes.size();
  return m;
}

bool link::peer_closed(std::uint32_t peer) const noexcept {
  return std::any_of(channels_.begin(), channels_.end(), [&](const channel& c) { return c.peer == peer && c.closed; });
}

// What waits at the head of a channel's socket, between frames.
link::head link::peek_head(channel& c) {
  std::array<std::byte, 6> b{};  // magic, version, flags
  ssize_t seen = 0;
  do {
    seen = ::recv(c.sock.fd(), b.data(), b.size(), MSG_PEEK | MSG_DONTWAIT);
  } while (seen < 0 && errno == EINTR);
  if (seen == 0) return head::closed;
  if (seen < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return head::nothing;
    fail(comm_errc::peer_lost, c.peer,
         inbound(c) + ": connection from " + rank_name(c.peer) + " lost: " + std::strerror(errno));
  }
  if (seen >= 4 && is_abort(std::span(b).first(4))) return head::abort;
  if (seen < 6) return head::nothing;
  return (std::to_integer<unsigned>(b[5]) & frame_message_flag) != 0 ? head::message : head::collective;
}

// Reads messages (whole frames, never past one) while they come; true if
// one or more completed.
bool link::read_messages(channel& c) {
  const std::size_t before = mailbox_.size();
  message_reader sink(*this, c);
  while (!c.closed && !c.head_blocked) {
    if (c.decoder.idle() && !c.incoming) {
      if (mailbox_bytes_ >= mailbox_limit) break;  // the sender waits
      const head h = peek_head(c);
      if (h == head::nothing) break;
      if (h == head::collective) {
        c.head_blocked = true;  // a collective this rank has not reached
        break;
      }
      if (h == head::closed) {  // a peer done with the communicator
        c.closed = true;
        break;
      }
    }
    std::array<std::span<std::byte>, 3> bufs;
    const std::size_t k = c.decoder.buffers(bufs, false);
    std::array<iovec, 3> iov{};
    for (std::size_t i = 0; i < k; ++i) iov[i] = {bufs[i].data(), bufs[i].size()};
    const ssize_t got = ::readv(c.sock.fd(), iov.data(), static_cast<int>(k));
    if (got == 0) {
      fail(comm_errc::peer_lost, c.peer,
           inbound(c) + ": connection from " + rank_name(c.peer) + " closed inside a message (did it die?)");
    }
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      fail(comm_errc::peer_lost, c.peer,
           inbound(c) + ": connection from " + rank_name(c.peer) + " lost: " + std::strerror(errno));
    }
    const auto s = c.decoder.advance(static_cast<std::size_t>(got), sink);
    if (s) continue;
    const error_code e = s.error();
    if (e == comm_errc::forged_frame) {
      fail(e, c.peer,
           inbound(c) + ": message #" + std::to_string(c.decoder.counter()) +
               " on the link failed authentication (FERRY_AUTH=" + std::string(comm::name(cfg_.auth)) +
               "): altered, injected, replayed, reordered or dropped on the way");
    }
    if (e == errc::checksum_mismatch) {
      fail(e, c.peer, inbound(c) + ": CRC32C mismatch in a message from " + rank_name(c.peer));
    }
    fail(e, c.peer, inbound(c) + ": malformed message frame from " + rank_name(c.peer));
  }
  return mailbox_.size() > before;
}

void link::send_message(std::uint32_t peer, std::int64_t tag, codec::dtype type, std::span<const std::byte> data) {
  // A call that does not fit fails alone; the link stays usable.
  if (peer >= n_ || peer == rank_) {
    fail(comm_errc::bad_argument, std::nullopt,
         "a message to rank " + std::to_string(peer) + ": not another rank of this world of " + std::to_string(n_));
  }
  const std::size_t width = codec::size_of(type);
  if (data.size() % width != 0) {
    fail(errc::size_mismatch, std::nullopt, "a message buffer that is not a whole number of elements");
  }
  const std::size_t grain = elements_per_frame(codec::size_of(type));
  if (data.size() / width / grain >= UINT32_MAX - 1) {
    fail(errc::limit_exceeded, std::nullopt, "a message of more than 2^32 - 2 frames of chunk_bytes");
  }
  guarded([&] {
    const std::size_t to = send_channel(peer);
    channel& c = channels_[to];
    const std::size_t elements = data.size() / width;
    std::array<std::byte, 24> envelope{};
    wire::store<std::uint64_t>(static_cast<std::uint64_t>(tag), envelope.data(), wire::host_order);
    wire::store<std::uint64_t>(elements, envelope.data() + 8, wire::host_order);
    wire::store<std::uint64_t>(codec::code(type), envelope.data() + 16, wire::host_order);
    frame_header h;
    h.p2p = true;
    h.type = codec::dtype::u64;
    h.count = envelope_count;
    h.sequence = c.messages_out;
    queue(to, h, envelope.data(), envelope.size(), -1, true);
    h.type = type;
    std::uint32_t chunk = 0;
    for (std::size_t at = 0; at < elements; at += grain) {
      const std::size_t count = std::min(grain, elements - at);
      h.chunk = ++chunk;
      h.count = static_cast<std::uint32_t>(count);
      queue(to, h, data.data() + at * width, count * width, -1, true);
    }
    ++c.messages_out;
    // Until it is on the wire, reading what comes meanwhile.
    auto last = clock::now();
    std::vector<pollfd> fds(channels_.size());
    for (;;) {
      bool progress = try_send(c);
      for (channel& in : channels_) progress = read_messages(in) || progress;
      if (c.sendq.empty()) break;
      if (progress) {
        last = clock::now();
        continue;
      }
      for (std::size_t i = 0; i < channels_.size(); ++i) {
        const channel& in = channels_[i];
        short events = (&in == &c) ? POLLOUT : 0;
        if (!in.closed && !in.head_blocked && (in.incoming || mailbox_bytes_ < mailbox_limit)) events |= POLLIN;
        fds[i] = {events != 0 ? in.sock.fd() : -1, events, 0};
      }
      const int rc = ::poll(fds.data(), fds.size(), poll_timeout(last + cfg_.timeout));
      if (rc < 0 && errno != EINTR) fail(comm_errc::peer_lost, std::nullopt, std::string("poll: ") + std::strerror(errno));
      if (rc == 0) {
        fail(comm_errc::timed_out, peer,
             "no progress for " + std::to_string(cfg_.timeout.count()) + " ms sending a message to " +
                 rank_name(peer) + " (is it receiving?)");
      }
    }
    queued_ = 0;
  });
}

bool link::poll_messages(std::chrono::milliseconds wait) {
  return guarded([&] {
    bool done = false;
    for (channel& c : channels_) done = read_messages(c) || done;
    if (done || wait.count() <= 0) return done;
    std::vector<pollfd> fds(channels_.size());
    bool any = false;
    for (std::size_t i = 0; i < channels_.size(); ++i) {
      const channel& c = channels_[i];
      const bool readable = !c.closed && !c.head_blocked && (c.incoming || mailbox_bytes_ < mailbox_limit);
      fds[i] = {readable ? c.sock.fd() : -1, POLLIN, 0};
      any = any || readable;
    }
    if (!any) {
      std::this_thread::sleep_for(wait);  // nothing to read: no busy wait either
      return false;
    }
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
    if (rc <= 0) return false;
    for (channel& c : channels_) done = read_messages(c) || done;
    return done;
  });
}

}  // namespace ferry::comm::detail
