#include "ferry/comm/detail/receives.h"

#include <algorithm>
#include <string>

#include "ferry/comm/detail/plan_checks.h"
#include "ferry/wire/bulk.h"

namespace ferry::comm::detail {

namespace {

// How long an idle worker waits for input between looks at its queue.
constexpr std::chrono::milliseconds poll_slice{2};

std::string from_text(const std::optional<std::uint32_t>& peer) {
  return peer ? "from " + rank_name(*peer) : std::string("from any rank");
}

}  // namespace

void receives::post(receive r) {
  if (r.peer && (*r.peer >= l_.size() || *r.peer == l_.rank())) {
    l_.fail(comm_errc::bad_argument, std::nullopt,
            "a receive from rank " + std::to_string(*r.peer) + ": not another rank of this world of " +
                std::to_string(l_.size()));
  }
  if (r.data.size() % codec::size_of(r.type) != 0) {
    l_.fail(errc::size_mismatch, std::nullopt, "a receive buffer that is not a whole number of elements");
  }
  l_.check_usable();
  r.deadline = clock::now() + l_.config().timeout;
  posted_.push_back(std::move(r));
  deliver();
}

// The receive's buffer gets the message, or the receive fails.
void receives::fill(receive& r, const message& m) const {
  const std::size_t width = codec::size_of(r.type);
  const std::string what = "a message with tag " + std::to_string(m.tag) + " from " + rank_name(m.peer);
  if (m.type != r.type) {
    l_.fail(comm_errc::bad_argument, m.peer,
            what + " holds " + std::string(codec::name(m.type)) + " values; the receive takes " +
                std::string(codec::name(r.type)));
  }
  if (m.bytes.size() != r.data.size()) {
    l_.fail(errc::size_mismatch, m.peer,
            what + " holds " + std::to_string(m.elements) + " values; the receive takes " +
                std::to_string(r.data.size() / width));
  }
  if (r.type == codec::dtype::boolean) check_bools(l_, m.peer, m.bytes, "message");
  if (!m.bytes.empty()) wire::convert(m.bytes, m.order, r.data, wire::host_order, codec::order_width(r.type));
  if (r.source != nullptr) *r.source = m.peer;
}

// Each posted receive, oldest first, takes the oldest message that matches.
void receives::deliver() {
  std::deque<message>& box = l_.mailbox();
  for (auto it = posted_.begin(); it != posted_.end() && !box.empty();) {
    const auto m = std::find_if(box.begin(), box.end(), [&](const message& x) {
      return x.tag == it->tag && (!it->peer || x.peer == *it->peer);
    });
    if (m == box.end()) {
      ++it;
      continue;
    }
    const message taken = l_.take_message(static_cast<std::size_t>(m - box.begin()));
    std::exception_ptr error;
    try {
      fill(*it, taken);
    } catch (...) {
      error = std::current_exception();
    }
    worker::complete(*it->state, error);
    it = posted_.erase(it);
  }
}

bool receives::progress(bool may_wait) {
  if (posted_.empty()) return false;
  try {
    l_.poll_messages(may_wait ? poll_slice : std::chrono::milliseconds{0});
  } catch (...) {
    fail_all(std::current_exception());
    return false;
  }
  deliver();
  const auto now = clock::now();
  for (auto it = posted_.begin(); it != posted_.end();) {
    const bool gone = it->peer && l_.peer_closed(*it->peer);
    if (!gone && now < it->deadline) {
      ++it;
      continue;
    }
    const std::string what = "a receive with tag " + std::to_string(it->tag) + " " + from_text(it->peer);
    const comm_error e = gone ? comm_error(comm_errc::peer_lost, it->peer,
                                           rank_name(l_.rank()) + ": " + what + ": " + rank_name(*it->peer) +
                                               " closed its connection without sending it")
                              : comm_error(comm_errc::timed_out, it->peer,
                                           rank_name(l_.rank()) + ": " + what + " got no message within " +
                                               std::to_string(l_.config().timeout.count()) + " ms");
    worker::complete(*it->state, std::make_exception_ptr(e));
    it = posted_.erase(it);
  }
  return !posted_.empty();
}

void receives::fail_all(const std::exception_ptr& error) {
  for (receive& r : posted_) worker::complete(*r.state, error);
  posted_.clear();
}

}  // namespace ferry::comm::detail
