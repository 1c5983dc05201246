// ferry/comm/detail/socket.h: TCP sockets with deadlines (POSIX, IPv4 and IPv6).
//
// Every socket is non-blocking; every wait is a poll() bounded by a
// deadline, so no call here can block forever. Failures throw comm_error
// (connect_failed, peer_lost, timed_out) naming `who`, the peer as the
// caller knows it ("rank 3", "the rendezvous at host:port").
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace ferry::comm::detail {

using clock = std::chrono::steady_clock;

/// An owned file descriptor of a socket; closed on destruction.
class socket {
 public:
  socket() noexcept = default;
  explicit socket(int fd) noexcept : fd_(fd) {}
  socket(socket&& o) noexcept : fd_(o.release()) {}
  socket& operator=(socket&& o) noexcept;
  socket(const socket&) = delete;
  socket& operator=(const socket&) = delete;
  ~socket() { close(); }

  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  int release() noexcept;
  void close() noexcept;

 private:
  int fd_ = -1;
};

/// A socket address of either family.
struct endpoint {
  sockaddr_storage storage{};
  socklen_t length = 0;
  [[nodiscard]] int family() const noexcept { return storage.ss_family; }
  [[nodiscard]] std::uint16_t port() const noexcept;
  void set_port(std::uint16_t port) noexcept;
  /// "127.0.0.1:29500" or "[::1]:29500".
  [[nodiscard]] std::string to_string() const;
};

/// The local and remote addresses of a connected or bound socket.
endpoint local_endpoint(const socket& s);
endpoint remote_endpoint(const socket& s);

/// A listening socket on `host` (a name or literal; empty means every
/// interface, IPv6 and IPv4) and `port` (0: the kernel picks one).
socket listen_on(const std::string& host, std::uint16_t port);
/// The same, on an address already resolved (its port is used as is).
socket listen_on(const endpoint& at);

/// Accepts one connection, or returns an invalid socket at `deadline`.
socket accept_until(const socket& listener, clock::time_point deadline);

/// Connects to `host`:`port`, trying every resolved address and retrying
/// refused connections until `deadline` (the listener may start later).
socket connect_to(const std::string& host, std::uint16_t port, clock::time_point deadline);
socket connect_to(const endpoint& to, clock::time_point deadline, const std::string& who);

/// Sends all of `bytes` or throws (peer_lost, timed_out).
void send_all(const socket& s, std::span<const std::byte> bytes, clock::time_point deadline, const std::string& who);
/// Fills all of `bytes` or throws (peer_lost on end of stream, timed_out).
void recv_all(const socket& s, std::span<std::byte> bytes, clock::time_point deadline, const std::string& who);

/// Options for a connection that carries collectives: no Nagle delay,
/// keepalive, unacknowledged data failing after `timeout`, and a send
/// buffer of `send_buffer` bytes (0: the kernel's autotuning).
void tune_for_collectives(const socket& s, std::chrono::milliseconds timeout, std::uint32_t send_buffer);

/// Milliseconds left until `deadline` for poll(): at least 0, at most INT_MAX.
int poll_timeout(clock::time_point deadline) noexcept;

}  // namespace ferry::comm::detail
