#include "ferry/comm/communicator.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "ferry/codec/crc32c.h"
#include "ferry/codec/half.h"
#include "ferry/comm/frame.h"
#include "ferry/wire/bulk.h"

namespace ferry::comm {

// ---------------------------------------------------------------------------
// work

struct work::state {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
};

void work::wait() {
  if (!state_) return;
  std::unique_lock lock(state_->m);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool work::done() const {
  if (!state_) return true;
  std::lock_guard lock(state_->m);
  return state_->done;
}

namespace {

using wire::byte_order;

std::string rank_name(std::uint32_t r) { return "rank " + std::to_string(r); }

// out[i] = a[i] + b[i]; `out` may be `a` (each 64-byte block is loaded
// before it is stored). Lane-wise IEEE additions, so the same bits as the
// scalar loop on every architecture; written with vector extensions so -O2
// uses the SIMD unit where there is one.
void add(float* out, const float* a, const float* __restrict b, std::size_t n) noexcept {
  using v4 = float __attribute__((vector_size(16)));
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    v4 x[4];
    v4 y[4];
    std::memcpy(x, a + i, sizeof x);
    std::memcpy(y, b + i, sizeof y);
    for (int k = 0; k < 4; ++k) x[k] += y[k];
    std::memcpy(out + i, x, sizeof x);
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

// The chunks of a ring collective: `total` elements cut into n blocks
// (sizes differing by at most one, the larger first), each cut into m
// chunks of at most `grain` elements; m is the same for every block, so
// every rank computes the same frame sequence.
struct chunking {
  std::size_t total = 0;
  std::size_t n = 1;
  std::size_t grain = 1;
  std::size_t base = 0;
  std::size_t rem = 0;
  std::size_t m = 1;

  chunking(std::size_t total_, std::size_t n_, std::size_t grain_)
      : total(total_), n(n_), grain(grain_), base(total_ / n_), rem(total_ % n_) {
    const std::size_t largest = base + (rem != 0 ? 1 : 0);
    m = std::max<std::size_t>(1, (largest + grain - 1) / grain);
  }
  [[nodiscard]] std::size_t block_start(std::size_t k) const { return base * k + std::min(k, rem); }
  [[nodiscard]] std::size_t block_size(std::size_t k) const { return base + (k < rem ? 1 : 0); }
  // Offset and length of chunk c of block k.
  [[nodiscard]] std::pair<std::size_t, std::size_t> chunk(std::size_t k, std::size_t c) const {
    const std::size_t size = block_size(k);
    const std::size_t from = std::min(size, c * grain);
    return {block_start(k) + from, std::min(grain, size - from)};
  }
};

struct out_frame {
  std::array<std::byte, frame_header_size> header{};
  const std::byte* payload = nullptr;
  std::size_t size = 0;
  std::array<std::byte, frame_trailer_size> crc{};
  std::size_t sent = 0;
  int slot = -1;  // the scratch buffer holding the payload, freed once sent
  [[nodiscard]] std::size_t total() const { return frame_header_size + size + frame_trailer_size; }
};

}  // namespace

// ---------------------------------------------------------------------------
// impl: the links, the engine that moves frames, the worker thread

struct communicator::impl {
  comm::config cfg;
  ring_links links;
  std::uint32_t rank = 0;
  std::uint32_t n = 1;
  std::uint32_t prev = 0;
  std::uint32_t next = 0;
  std::uint64_t sequence = 0;
  std::optional<comm_error> broken;

  // The collective being run: set by run().
  struct plan {
    virtual ~plan() = default;
    // Validates a frame's header (index = its position in this collective)
    // and says where its payload goes.
    virtual std::span<std::byte> on_header(const frame_header& h, std::uint32_t index) = 0;
    // The payload arrived and its CRC is right.
    virtual void on_frame(const frame_header& h, std::uint32_t index, std::span<std::byte> payload) = 0;
    std::uint32_t expected = 0;  // frames to receive
    std::size_t sends = 0;       // frames to send
    const char* name = "";
  };

  // Receive state.
  enum class rx_phase { header, payload, trailer };
  rx_phase phase = rx_phase::header;
  std::array<std::byte, abort_size> rx_head{};
  std::size_t rx_head_got = 0;
  frame_header rx_frame;
  std::uint32_t rx_header_crc = 0;
  std::span<std::byte> rx_dst;
  std::size_t rx_dst_got = 0;
  std::array<std::byte, frame_trailer_size> rx_crc{};
  std::size_t rx_crc_got = 0;
  std::uint32_t received = 0;
  std::size_t queued = 0;  // frames queued in this collective
  // An ABORT arriving against the flow, from the next rank.
  std::array<std::byte, abort_size> up_head{};
  std::size_t up_got = 0;
  std::optional<abort_message> abort_seen;
  std::optional<std::uint32_t> waiting_on;  // the neighbour the pump waits for

  std::deque<out_frame> sendq;
  // Staging reused across collectives (grown, never shrunk), so a call
  // does not fault fresh pages in.
  std::vector<float> rx_values, decoded_values;
  std::vector<std::uint16_t> tx_scatter_values, tx_gather_values;
  // Chunk-sized scratch buffers for partial sums in flight: a frame that
  // only passes a partial sum on never writes it to the (cache-cold) user
  // buffer. All are free again when a collective ends (its queue is empty).
  std::vector<std::vector<float>> scratch;
  std::vector<int> scratch_free;

  int scratch_acquire() {
    if (scratch_free.empty()) {
      scratch.emplace_back(cfg.chunk_bytes / 2);  // the largest chunk: 16-bit elements
      return static_cast<int>(scratch.size() - 1);
    }
    const int slot = scratch_free.back();
    scratch_free.pop_back();
    return slot;
  }

  // Worker.
  std::mutex queue_m;
  std::condition_variable queue_cv;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<work::state>>> queue;
  bool worker_busy = false;
  bool stopping = false;
  std::thread worker;
  std::mutex run_m;

  impl(const comm::config& c, std::optional<listener> l)
      : cfg(c), links(form_ring(c, std::move(l))), rank(c.rank), n(c.world_size) {
    prev = (rank + n - 1) % n;
    next = (rank + 1) % n;
  }

  ~impl() {
    {
      std::lock_guard lock(queue_m);
      stopping = true;
    }
    queue_cv.notify_all();
    if (worker.joinable()) worker.join();
  }

  // -- errors ---------------------------------------------------------------

  [[noreturn]] void fail(error_code code, std::optional<std::uint32_t> culprit, const std::string& what) const {
    throw comm_error(code, culprit, rank_name(rank) + ": " + what);
  }

  [[noreturn]] void fail_from_abort(const abort_message& a, std::uint32_t from) {
    if (a.code == comm_errc::timed_out && a.culprit == rank && waiting_on) {
      // Blamed for a silence while itself waiting: pass the blame on.
      abort_seen = abort_message{comm_errc::timed_out, rank, waiting_on, a.sequence};
      fail(comm_errc::timed_out, waiting_on,
           rank_name(a.reporter) + " timed out in collective #" + std::to_string(a.sequence) +
               " waiting for this rank, which was itself waiting for " + rank_name(*waiting_on));
    }
    abort_seen = a;
    std::string what = "collective #" + std::to_string(a.sequence) + " failed on " + rank_name(a.reporter) + " (" +
                       std::string(name(a.code)) + ": " + std::string(message(a.code)) + ")";
    if (a.culprit) what += ", caused by " + rank_name(*a.culprit);
    what += "; relayed by " + rank_name(from);
    throw comm_error(a.code, a.culprit, rank_name(rank) + ": " + what);
  }

  // Best effort, bounded: tell both neighbours, then close the links.
  void abort_links(const comm_error& e) noexcept {
    abort_message a;
    if (abort_seen) {
      a = *abort_seen;
    } else {
      a.code = e.code();
      a.reporter = rank;
      a.culprit = e.peer();
      a.sequence = sequence;
    }
    const auto bytes = encode_abort(a);
    const auto deadline = clock::now() + std::chrono::seconds(1);
    try {
      // A frame half sent must be finished first, or the ABORT would land
      // inside it.
      if (!sendq.empty() && sendq.front().sent > 0 && links.next.valid()) {
        out_frame& f = sendq.front();
        std::vector<std::byte> rest(f.total());
        std::memcpy(rest.data(), f.header.data(), frame_header_size);
        if (f.size > 0) std::memcpy(rest.data() + frame_header_size, f.payload, f.size);
        std::memcpy(rest.data() + frame_header_size + f.size, f.crc.data(), frame_trailer_size);
        send_all(links.next, std::span(rest).subspan(f.sent), deadline, "next");
      }
      if (links.next.valid()) send_all(links.next, bytes, deadline, "next");
    } catch (...) {
    }
    try {
      if (links.prev.valid()) send_all(links.prev, bytes, deadline, "prev");
    } catch (...) {
    }
    sendq.clear();
    for (socket* s : {&links.prev, &links.next}) {
      if (s->valid()) ::shutdown(s->fd(), SHUT_RDWR);
      s->close();
    }
  }

  // -- sending --------------------------------------------------------------

  void queue_frame(frame_header h, std::span<const std::byte> payload, int slot = -1) {
    out_frame f;
    f.slot = slot;
    h.order = wire::host_order;
    h.sender = rank;
    h.sequence = sequence;
    encode_header(h, f.header);
    f.payload = payload.data();
    f.size = payload.size();
    const std::uint32_t crc = codec::crc32c_extend(codec::crc32c(f.header), payload);
    wire::store<std::uint32_t>(crc, f.crc.data(), wire::host_order);
    sendq.push_back(f);
    ++queued;
  }

  bool try_send() {
    bool progress = false;
    while (!sendq.empty()) {
      constexpr std::size_t max_frames = 32;
      std::array<iovec, 3 * max_frames> iov{};
      std::size_t k = 0;
      std::size_t frames = 0;
      for (auto it = sendq.begin(); it != sendq.end() && frames < max_frames; ++it, ++frames) {
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
        add(it->crc.data(), frame_trailer_size);
      }
      msghdr msg{};
      msg.msg_iov = iov.data();
      msg.msg_iovlen = k;
      const ssize_t sent = ::sendmsg(links.next.fd(), &msg, MSG_NOSIGNAL);
      if (sent < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return progress;
        const int err = errno;
        // The next rank may have failed first and said why before closing.
        (void)check_upstream(false);
        fail(comm_errc::peer_lost, next, "connection to " + rank_name(next) + " lost while sending: " + std::strerror(err));
      }
      progress = true;
      auto left = static_cast<std::size_t>(sent);
      while (left > 0) {
        out_frame& f = sendq.front();
        const std::size_t take = std::min(left, f.total() - f.sent);
        f.sent += take;
        left -= take;
        if (f.sent == f.total()) {
          if (f.slot >= 0) scratch_free.push_back(f.slot);
          sendq.pop_front();
        }
      }
    }
    return progress;
  }

  // -- receiving ------------------------------------------------------------

  // The frame header in rx_head is complete: validate it and prepare for
  // its payload.
  void start_frame(plan& p) {
    if (is_abort(rx_head)) {
      const auto a = parse_abort(rx_head);
      if (!a) fail(a.error(), prev, rank_name(prev) + " sent a malformed ABORT");
      fail_from_abort(*a, prev);
    }
    const auto h = parse_header(std::span(rx_head).first(frame_header_size), cfg.max_frame_bytes);
    if (!h) {
      if (h.error() == errc::limit_exceeded) {
        fail(errc::limit_exceeded, prev,
             rank_name(prev) + " announced a frame larger than the negotiated maximum of " +
                 std::to_string(cfg.max_frame_bytes) + " bytes; refused before reading it");
      }
      fail(h.error(), prev, "malformed frame header from " + rank_name(prev) + ": " + std::string(message(h.error())));
    }
    if (h->sender != prev || h->sequence != sequence || h->chunk != received) {
      fail(comm_errc::sequence_mismatch, prev,
           "expected chunk " + std::to_string(received) + " of collective #" + std::to_string(sequence) + " (" + p.name +
               ") from " + rank_name(prev) + ", got chunk " + std::to_string(h->chunk) + " of collective #" +
               std::to_string(h->sequence) + " from sender " + std::to_string(h->sender) +
               ": do all ranks call the same collectives in the same order?");
    }
    rx_frame = *h;
    rx_header_crc = codec::crc32c(std::span(rx_head).first(frame_header_size));
    rx_dst = p.on_header(*h, received);
    rx_dst_got = 0;
    rx_crc_got = 0;
    phase = rx_dst.empty() ? rx_phase::trailer : rx_phase::payload;
  }

  void finish_frame(plan& p) {
    const std::uint32_t stored = wire::load<std::uint32_t>(rx_crc.data(), rx_frame.order);
    if (codec::crc32c_extend(rx_header_crc, rx_dst) != stored) {
      fail(errc::checksum_mismatch, prev,
           "CRC32C mismatch in chunk " + std::to_string(received) + " of collective #" + std::to_string(sequence) +
               " from " + rank_name(prev) + ": the frame was corrupted on the way");
    }
    const std::uint32_t index = received++;
    phase = rx_phase::header;
    p.on_frame(rx_frame, index, rx_dst);
  }

  // Reads what is there; false if nothing was.
  bool try_recv(plan& p) {
    bool progress = false;
    while (received < p.expected) {
      std::array<iovec, 3> iov{};
      std::size_t k = 0;
      // After the payload and CRC, the next header may be read in the same
      // call, but never past this collective's last frame.
      const bool more = received + 1 < p.expected;
      const std::size_t head_need = (rx_head_got >= 4 && is_abort(rx_head)) ? abort_size : frame_header_size;
      switch (phase) {
        case rx_phase::header: iov[k++] = {rx_head.data() + rx_head_got, head_need - rx_head_got}; break;
        case rx_phase::payload:
          iov[k++] = {rx_dst.data() + rx_dst_got, rx_dst.size() - rx_dst_got};
          [[fallthrough]];
        case rx_phase::trailer:
          iov[k++] = {rx_crc.data() + rx_crc_got, frame_trailer_size - rx_crc_got};
          if (more) iov[k++] = {rx_head.data(), frame_header_size};
          break;
      }
      const ssize_t got = ::readv(links.prev.fd(), iov.data(), static_cast<int>(k));
      if (got == 0) fail(comm_errc::peer_lost, prev, "connection from " + rank_name(prev) + " closed (did it die?)");
      if (got < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return progress;
        fail(comm_errc::peer_lost, prev, "connection from " + rank_name(prev) + " lost: " + std::strerror(errno));
      }
      progress = true;
      auto left = static_cast<std::size_t>(got);
      if (phase == rx_phase::header) {
        rx_head_got += left;
        left = 0;
      }
      if (phase == rx_phase::payload) {
        const std::size_t take = std::min(left, rx_dst.size() - rx_dst_got);
        rx_dst_got += take;
        left -= take;
        if (rx_dst_got == rx_dst.size()) phase = rx_phase::trailer;
      }
      if (phase == rx_phase::trailer && left > 0) {
        const std::size_t take = std::min(left, frame_trailer_size - rx_crc_got);
        rx_crc_got += take;
        left -= take;
        if (rx_crc_got == frame_trailer_size) {
          finish_frame(p);
          rx_head_got = left;  // read ahead into rx_head
          left = 0;
        }
      }
      // A complete header (possibly read ahead) starts its frame at once.
      if (phase == rx_phase::header && rx_head_got >= frame_header_size) {
        if (is_abort(rx_head) && rx_head_got < abort_size) continue;
        rx_head_got = 0;
        start_frame(p);
      }
    }
    return progress;
  }

  // Watches the next rank's side: it only ever sends an ABORT, or closes.
  // Closing is normal once it has every frame of this collective from us
  // (it may be done and gone); returns false then, to stop watching.
  bool check_upstream(bool sending_done) {
    for (;;) {
      const ssize_t got = ::recv(links.next.fd(), up_head.data() + up_got, abort_size - up_got, 0);
      if (got == 0 && sending_done && up_got == 0) return false;
      if (got == 0) fail(comm_errc::peer_lost, next, "connection to " + rank_name(next) + " closed (did it die?)");
      if (got < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
        if (sending_done && up_got == 0) return false;
        fail(comm_errc::peer_lost, next, "connection to " + rank_name(next) + " lost: " + std::strerror(errno));
      }
      up_got += static_cast<std::size_t>(got);
      if (up_got >= 4 && !is_abort(up_head)) {
        fail(comm_errc::protocol_error, next, rank_name(next) + " sent data against the ring's direction");
      }
      if (up_got == abort_size) {
        const auto a = parse_abort(up_head);
        if (!a) fail(a.error(), next, rank_name(next) + " sent a malformed ABORT");
        fail_from_abort(*a, next);
      }
    }
  }

  void pump(plan& p) {
    auto last = clock::now();
    bool watch_next = true;
    while (received < p.expected || !sendq.empty() || queued < p.sends) {
      bool progress = try_send();
      progress = try_recv(p) || progress;
      if (progress) {
        last = clock::now();
        continue;
      }
      const bool receiving = received < p.expected;
      const bool sending_done = queued == p.sends && sendq.empty();
      waiting_on = receiving ? prev : next;
      // A neighbour that is done with this collective may close; its end
      // of the link is ignored from then on.
      std::array<pollfd, 2> fds{};
      fds[0] = {receiving ? links.prev.fd() : -1, POLLIN, 0};
      fds[1] = {watch_next ? links.next.fd() : -1, static_cast<short>(POLLIN | (sendq.empty() ? 0 : POLLOUT)), 0};
      const int rc = ::poll(fds.data(), fds.size(), poll_timeout(last + cfg.timeout));
      if (rc < 0 && errno != EINTR) fail(comm_errc::peer_lost, std::nullopt, std::string("poll: ") + std::strerror(errno));
      if (rc == 0) {
        const std::uint32_t silent = receiving ? prev : next;
        fail(comm_errc::timed_out, silent,
             "no progress for " + std::to_string(cfg.timeout.count()) + " ms in collective #" +
                 std::to_string(sequence) + " (" + p.name + ") " + (receiving ? "waiting for " : "sending to ") +
                 rank_name(silent));
      }
      if (watch_next && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) watch_next = check_upstream(sending_done);
    }
  }

  // Runs one collective on the calling thread; the caller holds run_m.
  template <class Plan, class Start>
  void execute(Plan& p, Start&& start) {
    if (broken) {
      throw comm_error(comm_errc::aborted, broken->peer(),
                       rank_name(rank) + ": communicator unusable after an earlier failure: " + broken->what());
    }
    ++sequence;
    received = 0;
    queued = 0;
    scratch_free.clear();
    for (int i = static_cast<int>(scratch.size()) - 1; i >= 0; --i) scratch_free.push_back(i);
    waiting_on.reset();
    if (n == 1) return;
    try {
      start();
      pump(p);
    } catch (const comm_error& e) {
      broken = e;
      abort_links(e);
      throw;
    }
  }

  // -- queue ----------------------------------------------------------------

  std::shared_ptr<work::state> submit(std::function<void()> task) {
    auto st = std::make_shared<work::state>();
    {
      std::lock_guard lock(queue_m);
      queue.emplace_back(std::move(task), st);
      if (!worker.joinable()) worker = std::thread([this] { worker_loop(); });
    }
    queue_cv.notify_all();
    return st;
  }

  void worker_loop() {
    std::unique_lock lock(queue_m);
    for (;;) {
      queue_cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;  // stopping, and everything queued ran
      auto [task, st] = std::move(queue.front());
      queue.pop_front();
      worker_busy = true;
      lock.unlock();
      std::exception_ptr error;
      try {
        std::lock_guard run(run_m);
        task();
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard done(st->m);
        st->done = true;
        st->error = error;
      }
      st->cv.notify_all();
      lock.lock();
      worker_busy = false;
      queue_cv.notify_all();
    }
  }

  // Runs `task` inline once everything queued before it has run.
  template <class F>
  void run_inline(F&& task) {
    {
      std::unique_lock lock(queue_m);
      queue_cv.wait(lock, [&] { return queue.empty() && !worker_busy; });
    }
    std::lock_guard run(run_m);
    task();
  }

  // -- the collectives ------------------------------------------------------

  void allreduce(std::span<float> data, const allreduce_options& o);
  void broadcast(std::span<std::byte> data, codec::dtype type, std::uint32_t root);
  void allgather(codec::dtype type, const std::byte* mine, std::size_t count, std::byte* out);
};

namespace {

using impl_t = communicator::impl;

const char* encoding_name(encoding e) {
  return e == encoding::bf16 ? "bf16" : e == encoding::f16 ? "f16" : "raw";
}

// Shared checks of an incoming header against what the plan expects.
void expect_header(const impl_t& c, const frame_header& h, codec::dtype type, encoding enc, std::size_t count,
                   const char* what) {
  if (h.type != type || h.enc != enc) {
    throw comm_error(comm_errc::config_mismatch, c.prev,
                     rank_name(c.rank) + ": " + rank_name(c.prev) + " sent " + std::string(codec::name(h.type)) +
                         " as " + encoding_name(h.enc) + " in the " + what + " where this rank expects " +
                         std::string(codec::name(type)) + " as " + encoding_name(enc) +
                         ": do all ranks pass the same options?");
  }
  if (h.count != count) {
    throw comm_error(errc::size_mismatch, c.prev,
                     rank_name(c.rank) + ": " + rank_name(c.prev) + " sent " + std::to_string(h.count) +
                         " elements for chunk " + std::to_string(h.chunk) + " of the " + what + " where " +
                         std::to_string(count) + " were expected: do all ranks pass buffers of the same size?");
  }
}

void check_frame_count(const impl_t& c, std::size_t frames) {
  if (frames > UINT32_MAX) {
    throw comm_error(errc::limit_exceeded, std::nullopt,
                     rank_name(c.rank) + ": a collective this large needs more than 2^32 frames; raise chunk_bytes");
  }
}

std::span<std::byte> bytes_of(float* p, std::size_t n) { return std::as_writable_bytes(std::span(p, n)); }

// Rounds `in + residual` to 16 bits into `out`; keeps what the rounding
// lost in `residual` (if any) and the rounded values, widened, in `back`
// (if any). Non-finite residuals are dropped, not carried. The loops use
// vector extensions: lane-wise IEEE operations, the same bits everywhere.
void quantize(compression comp, std::span<const float> in, std::span<float> residual, std::span<std::uint16_t> out,
              std::span<float> back) {
  using v4f = float __attribute__((vector_size(16)));
  using v4i = std::int32_t __attribute__((vector_size(16)));
  constexpr std::size_t step = 2048;
  std::array<float, step> sum;
  std::array<float, step> wide;
  for (std::size_t i = 0; i < in.size(); i += step) {
    const std::size_t len = std::min(step, in.size() - i);
    std::span<const float> s = in.subspan(i, len);
    if (!residual.empty()) {
      // Without a residual the values go as they are (adding 0 would turn
      // -0 into +0 and change forwarded bits).
      add(sum.data(), in.data() + i, residual.data() + i, len);
      s = std::span<const float>(sum).first(len);
    }
    const auto o = out.subspan(i, len);
    if (comp == compression::bf16) {
      (void)codec::to_bf16(s, std::span(reinterpret_cast<bf16*>(o.data()), len));
    } else {
      (void)codec::to_f16(s, std::span(reinterpret_cast<f16*>(o.data()), len));
    }
    if (residual.empty() && back.empty()) continue;
    const auto w = back.empty() ? std::span(wide).first(len) : back.subspan(i, len);
    if (comp == compression::bf16) {
      (void)codec::to_float(std::span(reinterpret_cast<const bf16*>(o.data()), len), w);
    } else {
      (void)codec::to_float(std::span(reinterpret_cast<const f16*>(o.data()), len), w);
    }
    if (residual.empty()) continue;
    float* r = residual.data() + i;
    std::size_t j = 0;
    for (; j + 4 <= len; j += 4) {
      v4f x, y;
      std::memcpy(&x, s.data() + j, 16);
      std::memcpy(&y, w.data() + j, 16);
      const v4f d = x - y;
      v4i bits;
      std::memcpy(&bits, &d, 16);
      bits &= ((d - d) == 0);  // inf - inf and NaN - NaN are NaN: keep finite lanes only
      std::memcpy(r + j, &bits, 16);
    }
    for (; j < len; ++j) {
      const float d = s[j] - w[j];
      r[j] = std::isfinite(d) ? d : 0.0f;
    }
  }
}

encoding encoding_of(compression c) {
  switch (c) {
    case compression::bf16: return encoding::bf16;
    case compression::f16: return encoding::f16;
    case compression::none: break;
  }
  return encoding::raw;
}

}  // namespace

// Ring allreduce. Stage t < n-1 (reduce-scatter): send block (r - t), receive
// block (r - t - 1) and add it in. Stage n-1+u (all-gather): send block
// (r + 1 - u), receive block (r - u) and copy it. Chunk c of stage t+1 is
// sent as soon as chunk c of stage t is in.
void communicator::impl::allreduce(std::span<float> data, const allreduce_options& o) {
  if (o.comp != compression::none && o.feedback != nullptr && o.feedback->residual().size() != data.size()) {
    fail(errc::size_mismatch, std::nullopt,
         "error_feedback holds " + std::to_string(o.feedback->residual().size()) + " values for a buffer of " +
             std::to_string(data.size()));
  }
  struct ring_plan final : plan {
    impl& c;
    std::span<float> data;
    allreduce_options o;
    encoding enc;
    chunking ch;
    std::size_t stages;
    std::vector<float>& rx;       // a received chunk
    std::vector<float>& decoded;  // the same, in host floats
    std::vector<std::uint16_t>& tx_scatter;
    std::vector<std::uint16_t>& tx_gather;

    ring_plan(impl& c_, std::span<float> d, const allreduce_options& o_)
        : c(c_), data(d), o(o_), enc(encoding_of(o_.comp)),
          ch(d.size(), c_.n, c_.cfg.chunk_bytes / (o_.comp == compression::none ? 4 : 2)),
          stages(2 * (std::size_t{c_.n} - 1)),
          rx(c_.rx_values),
          decoded(c_.decoded_values),
          tx_scatter(c_.tx_scatter_values),
          tx_gather(c_.tx_gather_values) {
      name = "allreduce";
      check_frame_count(c, stages * ch.m);
      expected = static_cast<std::uint32_t>(stages * ch.m);
      sends = expected;
      const std::size_t chunk = std::min(ch.grain, ch.base + 1);
      if (rx.size() < chunk) rx.resize(chunk);
      if (enc != encoding::raw) {
        if (decoded.size() < chunk) decoded.resize(chunk);
        if (tx_scatter.size() < d.size()) tx_scatter.resize(d.size());
        if (tx_gather.size() < d.size()) tx_gather.resize(d.size());
      }
    }
    [[nodiscard]] std::size_t mod(std::int64_t k) const {
      const auto ranks = static_cast<std::int64_t>(c.n);
      return static_cast<std::size_t>(((k % ranks) + ranks) % ranks);
    }
    [[nodiscard]] std::size_t send_block(std::size_t t) const {
      const auto r = static_cast<std::int64_t>(c.rank);
      const auto st = static_cast<std::int64_t>(t);
      return t + 1 < c.n ? mod(r - st) : mod(r + 1 - (st - (c.n - 1)));
    }
    [[nodiscard]] std::size_t recv_block(std::size_t t) const {
      const auto r = static_cast<std::int64_t>(c.rank);
      const auto st = static_cast<std::int64_t>(t);
      return t + 1 < c.n ? mod(r - st - 1) : mod(r - (st - (c.n - 1)));
    }

    // Sends chunk `chunk` of stage t: the values in the user's buffer, or
    // (a partial sum in flight) those in scratch buffer `slot`.
    void send(std::size_t t, std::size_t chunk, int slot = -1) {
      const auto [off, len] = ch.chunk(send_block(t), chunk);
      frame_header h;
      h.type = codec::dtype::f32;
      h.enc = enc;
      h.chunk = static_cast<std::uint32_t>(t * ch.m + chunk);
      h.count = static_cast<std::uint32_t>(len);
      const auto values =
          slot < 0 ? data.subspan(off, len) : std::span(c.scratch[static_cast<std::size_t>(slot)]).first(len);
      if (enc == encoding::raw) {
        c.queue_frame(h, std::as_bytes(values), slot);
        return;
      }
      if (slot >= 0) c.scratch_free.push_back(slot);  // rounded into tx below, before anything reuses it
      const bool scatter = t + 1 < c.n;
      const bool owner = t + 1 == c.n;  // the first all-gather stage: this rank's reduced block
      auto& tx = scatter ? tx_scatter : tx_gather;
      const auto out = std::span(tx).subspan(off, len);
      const auto residual = (o.feedback != nullptr && (scatter || owner)) ? o.feedback->residual().subspan(off, len)
                                                                          : std::span<float>();
      // The owner keeps exactly what it sends, so every rank ends equal;
      // forwarded blocks are already representable and round exactly.
      quantize(o.comp, values, residual, out, owner ? values : std::span<float>());
      c.queue_frame(h, std::as_bytes(out));
    }

    std::span<std::byte> on_header(const frame_header& h, std::uint32_t index) override {
      const std::size_t t = index / ch.m;
      const auto [off, len] = ch.chunk(recv_block(t), index % ch.m);
      expect_header(c, h, codec::dtype::f32, enc, len, "allreduce");
      const bool gather = t + 1 >= c.n;
      if (gather && enc == encoding::raw && h.order == wire::host_order) return bytes_of(data.data() + off, len);
      return std::as_writable_bytes(std::span(rx)).first(len * wire_element_size(h));
    }

    void on_frame(const frame_header& h, std::uint32_t index, std::span<std::byte> payload) override {
      const std::size_t t = index / ch.m;
      const std::size_t chunk = index % ch.m;
      const auto [off, len] = ch.chunk(recv_block(t), chunk);
      const auto region = data.subspan(off, len);
      const bool direct = enc == encoding::raw && h.order == wire::host_order;
      if (t + 1 < c.n) {  // reduce-scatter
        const float* src = rx.data();
        if (enc != encoding::raw) {
          (void)payload_to_f32(frame_view{h, payload}, std::span(decoded.data(), len));
          src = decoded.data();
        } else if (!direct) {
          (void)wire::convert_in_place(payload, 4, h.order, wire::host_order);
        }
        if (t + 2 < c.n) {  // a partial sum, only passed on
          const int slot = c.scratch_acquire();
          add(c.scratch[static_cast<std::size_t>(slot)].data(), region.data(), src, len);
          send(t + 1, chunk, slot);
          return;
        }
        add(region.data(), region.data(), src, len);  // the block is complete here
        if (o.op == reduce_op::avg) {
          const auto div = static_cast<float>(c.n);
          for (float& v : region) v /= div;
        }
        send(t + 1, chunk);
      } else {  // all-gather
        if (!direct) (void)payload_to_f32(frame_view{h, payload}, region);
        if (t + 1 < stages) send(t + 1, chunk);
      }
    }
  };

  ring_plan p(*this, data, o);
  execute(p, [&] {
    for (std::size_t chunk = 0; chunk < p.ch.m; ++chunk) p.send(0, chunk);
  });
}

// Pipelined along the ring from the root: each rank but the root receives
// every chunk and forwards it unless its successor is the root.
void communicator::impl::broadcast(std::span<std::byte> data, codec::dtype type, std::uint32_t root) {
  if (root >= n) fail(comm_errc::bad_config, std::nullopt, "broadcast root " + std::to_string(root) + " is not a rank");
  struct bcast_plan final : plan {
    impl& c;
    std::span<std::byte> data;
    codec::dtype type;
    std::size_t width;
    chunking ch;
    bool forward;
    bcast_plan(impl& c_, std::span<std::byte> d, codec::dtype t, std::uint32_t root)
        : c(c_), data(d), type(t), width(codec::size_of(t)),
          ch(d.size() / codec::size_of(t), 1, c_.cfg.chunk_bytes / codec::size_of(t)), forward(c_.next != root) {
      name = "broadcast";
      check_frame_count(c, ch.m);
      expected = c.rank == root ? 0 : static_cast<std::uint32_t>(ch.m);
      sends = forward ? ch.m : 0;
    }
    void send(std::size_t chunk) {
      const auto [off, len] = ch.chunk(0, chunk);
      frame_header h;
      h.type = type;
      h.chunk = static_cast<std::uint32_t>(chunk);
      h.count = static_cast<std::uint32_t>(len);
      c.queue_frame(h, data.subspan(off * width, len * width));
    }
    std::span<std::byte> on_header(const frame_header& h, std::uint32_t index) override {
      const auto [off, len] = ch.chunk(0, index);
      expect_header(c, h, type, encoding::raw, len, "broadcast");
      return data.subspan(off * width, len * width);
    }
    void on_frame(const frame_header& h, std::uint32_t index, std::span<std::byte> payload) override {
      (void)wire::convert_in_place(payload, width, h.order, wire::host_order);
      if (forward) send(index);
    }
  };
  if (data.size() % codec::size_of(type) != 0) {
    fail(errc::size_mismatch, std::nullopt, "broadcast buffer is not a whole number of elements");
  }
  bcast_plan p(*this, data, type, root);
  execute(p, [&] {
    if (rank == root) {
      for (std::size_t chunk = 0; chunk < p.ch.m; ++chunk) p.send(chunk);
    }
  });
}

// Ring all-gather: stage t sends block (r - t) and receives block (r - t - 1).
void communicator::impl::allgather(codec::dtype type, const std::byte* mine, std::size_t count, std::byte* out) {
  struct gather_plan final : plan {
    impl& c;
    std::byte* out;
    codec::dtype type;
    std::size_t width;
    chunking ch;
    gather_plan(impl& c_, codec::dtype t, std::size_t count, std::byte* o)
        : c(c_), out(o), type(t), width(codec::size_of(t)),
          ch(count * c_.n, c_.n, c_.cfg.chunk_bytes / codec::size_of(t)) {
      name = "allgather";
      check_frame_count(c, (std::size_t{c.n} - 1) * ch.m);
      expected = static_cast<std::uint32_t>((std::size_t{c.n} - 1) * ch.m);
      sends = expected;
    }
    [[nodiscard]] std::size_t block(std::size_t back) const { return (c.rank + c.n - back % c.n) % c.n; }
    void send(std::size_t t, std::size_t chunk) {
      const auto [off, len] = ch.chunk(block(t), chunk);
      frame_header h;
      h.type = type;
      h.chunk = static_cast<std::uint32_t>(t * ch.m + chunk);
      h.count = static_cast<std::uint32_t>(len);
      c.queue_frame(h, std::span<const std::byte>(out + off * width, len * width));
    }
    std::span<std::byte> on_header(const frame_header& h, std::uint32_t index) override {
      const auto [off, len] = ch.chunk(block(index / ch.m + 1), index % ch.m);
      expect_header(c, h, type, encoding::raw, len, "allgather");
      return {out + off * width, len * width};
    }
    void on_frame(const frame_header& h, std::uint32_t index, std::span<std::byte> payload) override {
      (void)wire::convert_in_place(payload, width, h.order, wire::host_order);
      const std::size_t t = index / ch.m;
      if (t + 2 < c.n) send(t + 1, index % ch.m);
    }
  };
  if (count != 0) std::memcpy(out + std::size_t{rank} * count * codec::size_of(type), mine, count * codec::size_of(type));
  gather_plan p(*this, type, count, out);
  execute(p, [&] {
    for (std::size_t chunk = 0; chunk < p.ch.m; ++chunk) p.send(0, chunk);
  });
}

// ---------------------------------------------------------------------------
// communicator

communicator::communicator(const comm::config& c, std::optional<listener> rank0)
    : impl_(std::make_unique<impl>(c, std::move(rank0))) {}

communicator communicator::from_env() { return communicator(config::from_env()); }

communicator::communicator(communicator&&) noexcept = default;
communicator& communicator::operator=(communicator&&) noexcept = default;
communicator::~communicator() = default;

std::uint32_t communicator::rank() const noexcept { return impl_->rank; }
std::uint32_t communicator::world_size() const noexcept { return impl_->n; }
const config& communicator::config() const noexcept { return impl_->cfg; }
const hello& communicator::prev_peer() const noexcept { return impl_->links.prev_hello; }
const hello& communicator::next_peer() const noexcept { return impl_->links.next_hello; }

void communicator::allreduce(std::span<float> data, const allreduce_options& o) {
  impl_->run_inline([&] { impl_->allreduce(data, o); });
}

work communicator::start_allreduce(std::span<float> data, const allreduce_options& o) {
  impl* p = impl_.get();
  return work(p->submit([p, data, o] { p->allreduce(data, o); }));
}

void communicator::broadcast(std::span<float> data, std::uint32_t root) {
  impl_->run_inline([&] { impl_->broadcast(std::as_writable_bytes(data), codec::dtype::f32, root); });
}

void communicator::broadcast(std::span<std::byte> data, std::uint32_t root) {
  impl_->run_inline([&] { impl_->broadcast(data, codec::dtype::u8, root); });
}

work communicator::start_broadcast(std::span<float> data, std::uint32_t root) {
  impl* p = impl_.get();
  return work(p->submit([p, data, root] { p->broadcast(std::as_writable_bytes(data), codec::dtype::f32, root); }));
}

void communicator::barrier() {
  const std::uint32_t me = rank();
  const auto all = allgather(me);
  for (std::uint32_t r = 0; r < all.size(); ++r) {
    if (all[r] != r) {
      throw comm_error(comm_errc::protocol_error, r, rank_name(me) + ": barrier saw rank " + std::to_string(r) +
                                                    " report itself as " + std::to_string(all[r]));
    }
  }
}

void communicator::allgather_elements(codec::dtype type, const void* mine, std::size_t count, void* out) {
  impl_->run_inline([&] {
    impl_->allgather(type, static_cast<const std::byte*>(mine), count, static_cast<std::byte*>(out));
  });
}

}  // namespace ferry::comm
