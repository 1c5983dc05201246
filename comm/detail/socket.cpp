#include "ferry/comm/detail/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "ferry/comm/detail/fail.h"
#include "ferry/comm/error.h"

namespace ferry::comm::detail {
namespace {

std::string os_error(int err) { return std::strerror(err); }

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) fail(comm_errc::connect_failed, "fcntl: " + os_error(errno));
}

void set_int_option(int fd, int level, int name, int value) {
  // Best effort: an option a kernel lacks only costs its benefit.
  (void)::setsockopt(fd, level, name, &value, sizeof value);
}

struct addrinfo_list {
  addrinfo* head = nullptr;
  ~addrinfo_list() {
    if (head != nullptr) ::freeaddrinfo(head);
  }
};

// Resolves host:port to a list of TCP addresses (numeric service).
addrinfo_list resolve(const std::string& host, std::uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo_list list;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list.head);
  if (rc != 0) fail(comm_errc::connect_failed, "cannot resolve '" + host + "': " + ::gai_strerror(rc));
  return list;
}

endpoint to_endpoint(const addrinfo* ai) {
  endpoint e;
  std::memcpy(&e.storage, ai->ai_addr, ai->ai_addrlen);
  e.length = ai->ai_addrlen;
  return e;
}

// Waits for `events` on fd; false at the deadline.
bool wait_for(int fd, short events, clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, poll_timeout(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) fail(comm_errc::connect_failed, "poll: " + os_error(errno));
  }
}

}  // namespace

socket& socket::operator=(socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.release();
  }
  return *this;
}

int socket::release() noexcept {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void socket::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::uint16_t endpoint::port() const noexcept {
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
}

void endpoint::set_port(std::uint16_t port) noexcept {
  if (family() == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  }
}

std::string endpoint::to_string() const {
  char host[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(port());
  }
  ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, host, sizeof host);
  return std::string(host) + ":" + std::to_string(port());
}

endpoint local_endpoint(const socket& s) {
  endpoint e;
  e.length = sizeof e.storage;
  if (::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&e.storage), &e.length) != 0) {
    fail(comm_errc::connect_failed, "getsockname: " + os_error(errno));
  }
  return e;
}

endpoint remote_endpoint(const socket& s) {
  endpoint e;
  e.length = sizeof e.storage;
  if (::getpeername(s.fd(), reinterpret_cast<sockaddr*>(&e.storage), &e.length) != 0) {
    fail(comm_errc::peer_lost, "getpeername: " + os_error(errno));
  }
  return e;
}

socket listen_on(const endpoint& at) {
  socket s(::socket(at.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) fail(comm_errc::connect_failed, "socket: " + os_error(errno));
  set_int_option(s.fd(), SOL_SOCKET, SO_REUSEADDR, 1);
  // A wildcard IPv6 listener also takes IPv4 clients.
  if (at.family() == AF_INET6) set_int_option(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, 0);
  if (::bind(s.fd(), reinterpret_cast<const sockaddr*>(&at.storage), at.length) != 0) {
    fail(comm_errc::connect_failed, "cannot bind " + at.to_string() + ": " + os_error(errno));
  }
  if (::listen(s.fd(), 128) != 0) fail(comm_errc::connect_failed, "listen on " + at.to_string() + ": " + os_error(errno));
  set_nonblocking(s.fd());
  return s;
}

socket listen_on(const std::string& host, std::uint16_t port) {
  const addrinfo_list list = resolve(host, port, true);
  // With no host, prefer the IPv6 wildcard: dual-stack covers both families.
  const addrinfo* pick = list.head;
  if (host.empty()) {
    for (const addrinfo* ai = list.head; ai != nullptr; ai = ai->ai_next) {
      if (ai->ai_family == AF_INET6) pick = ai;
    }
  }
  std::string last = "no address";
  for (const addrinfo* ai = pick; ai != nullptr; ai = ai->ai_next) {
    try {
      return listen_on(to_endpoint(ai));
    } catch (const comm_error& e) {
      last = e.what();
    }
  }
  fail(comm_errc::connect_failed, "cannot listen on '" + host + "' port " + std::to_string(port) + ": " + last);
}

socket accept_until(const socket& listener, clock::time_point deadline) {
  for (;;) {
    const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) return socket(fd);
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) fail(comm_errc::connect_failed, "accept: " + os_error(errno));
    if (!wait_for(listener.fd(), POLLIN, deadline)) return socket();
  }
}

namespace {

// One connection attempt, bounded by `deadline`; on failure returns an
// invalid socket and says why in `error`.
socket try_connect(const endpoint& to, clock::time_point deadline, std::string& error) {
  socket s(::socket(to.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid()) fail(comm_errc::connect_failed, "socket: " + os_error(errno));
  int err = 0;
  if (::connect(s.fd(), reinterpret_cast<const sockaddr*>(&to.storage), to.length) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      if (!wait_for(s.fd(), POLLOUT, deadline)) {
        error = "no answer";
        return socket();
      }
      socklen_t len = sizeof err;
      (void)::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    }
  }
  if (err != 0) {
    error = os_error(err);
    return socket();
  }
  set_int_option(s.fd(), IPPROTO_TCP, TCP_NODELAY, 1);
  return s;
}

constexpr auto retry_pause = std::chrono::milliseconds(50);

}  // namespace

socket connect_to(const endpoint& to, clock::time_point deadline, const std::string& who) {
  for (;;) {
    std::string error;
    socket s = try_connect(to, deadline, error);
    if (s.valid()) return s;
    // Refused or unreachable: the listener may not be up yet.
    if (clock::now() + retry_pause >= deadline) {
      fail(comm_errc::connect_failed, "cannot connect to " + who + " at " + to.to_string() + ": " + error);
    }
    std::this_thread::sleep_for(retry_pause);
  }
}

socket connect_to(const std::string& host, std::uint16_t port, clock::time_point deadline) {
  for (;;) {
    const addrinfo_list list = resolve(host, port, false);
    std::string error;
    for (const addrinfo* ai = list.head; ai != nullptr; ai = ai->ai_next) {
      // Each address gets a few seconds, so one that never answers does not
      // hide the next.
      socket s = try_connect(to_endpoint(ai), std::min(deadline, clock::now() + std::chrono::seconds(3)), error);
      if (s.valid()) return s;
      error = to_endpoint(ai).to_string() + ": " + error;
    }
    if (clock::now() + retry_pause >= deadline) {
      fail(comm_errc::connect_failed,
           "cannot reach the rendezvous at " + host + " port " + std::to_string(port) + " (" + error + ")");
    }
    std::this_thread::sleep_for(retry_pause);
  }
}

void send_all(const socket& s, std::span<const std::byte> bytes, clock::time_point deadline, const std::string& who) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(s.fd(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes = bytes.subspan(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(s.fd(), POLLOUT, deadline)) fail(comm_errc::timed_out, "timed out sending to " + who);
      continue;
    }
    fail(comm_errc::peer_lost, "connection to " + who + " lost while sending: " + os_error(errno));
  }
}

void recv_all(const socket& s, std::span<std::byte> bytes, clock::time_point deadline, const std::string& who) {
  while (!bytes.empty()) {
    const ssize_t n = ::recv(s.fd(), bytes.data(), bytes.size(), 0);
    if (n > 0) {
      bytes = bytes.subspan(static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) fail(comm_errc::peer_lost, "connection to " + who + " closed");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(s.fd(), POLLIN, deadline)) fail(comm_errc::timed_out, "timed out waiting for " + who);
      continue;
    }
    fail(comm_errc::peer_lost, "connection to " + who + " lost: " + os_error(errno));
  }
}

void tune_for_collectives(const socket& s, std::chrono::milliseconds timeout, std::uint32_t send_buffer) {
  set_int_option(s.fd(), IPPROTO_TCP, TCP_NODELAY, 1);
  set_int_option(s.fd(), SOL_SOCKET, SO_KEEPALIVE, 1);
  const auto ms = static_cast<int>(std::min<std::int64_t>(timeout.count(), INT_MAX));
  set_int_option(s.fd(), IPPROTO_TCP, TCP_USER_TIMEOUT, ms);
  // Probe an idle link after a quarter of the timeout, so a vanished host
  // is noticed between collectives too.
  const int idle = std::max(1, ms / 4000);
  set_int_option(s.fd(), IPPROTO_TCP, TCP_KEEPIDLE, idle);
  set_int_option(s.fd(), IPPROTO_TCP, TCP_KEEPINTVL, idle);
  set_int_option(s.fd(), IPPROTO_TCP, TCP_KEEPCNT, 3);
  if (send_buffer > 0) set_int_option(s.fd(), SOL_SOCKET, SO_SNDBUF, static_cast<int>(std::min<std::uint32_t>(send_buffer, INT_MAX)));
}

int poll_timeout(clock::time_point deadline) noexcept {
  const auto now = clock::now();
  if (deadline <= now) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
  return static_cast<int>(std::min<std::int64_t>(ms, INT_MAX));
}

}  // namespace ferry::comm::detail
