// tests/comm/world.h: runs a world of ranks as forked processes on loopback.
//
// The parent binds rank 0's listener on an ephemeral port before forking,
// so no port is guessed; each child runs `body` and reports either the
// bytes it returns or the comm_error it hit (code, culprit, text, and the
// CLOCK_MONOTONIC instant, which is system-wide, so the parent can time
// failures against a kill).
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ferry/comm/communicator.h"

namespace ferry::comm::test {

struct outcome {
  bool ok = false;
  std::vector<std::byte> bytes;  // what body returned
  error_code code;
  std::optional<std::uint32_t> culprit;
  std::string text;
  std::chrono::steady_clock::time_point at;  // when the child finished
  int status = 0;                            // waitpid status
};

using body_fn = std::function<std::vector<std::byte>(std::uint32_t rank, config& c, std::optional<listener>& l)>;

/// Whether a parameter sweep runs every shape. Under qemu-user and the
/// sanitizers (no FERRY_TEST_NATIVE_SPEED), the sweeps keep one case of
/// each kind of shape: the others differ in logic that no architecture
/// changes, which the native tree runs.
#ifdef FERRY_TEST_NATIVE_SPEED
inline constexpr bool every_shape = true;
#else
inline constexpr bool every_shape = false;
#endif

inline config base_config(std::uint32_t rank, std::uint32_t n, std::uint16_t port) {
  config c;
  c.rank = rank;
  c.world_size = n;
  c.master_addr = "127.0.0.1";
  c.master_port = port;
  c.secret = "test-secret-0123456789";
  c.timeout = std::chrono::milliseconds(20'000);
  // The forked ranks share this host; the tests of the TCP algorithms keep
  // them apart (shared_memory_test turns it on).
  c.shared_memory = false;
  // The ring's tests take the ring; the other algorithms' tests, and auto's
  // (the default), say so.
  c.algorithm = algorithm::ring;
  return c;
}

namespace detail {
inline void write_all(int fd, const void* p, std::size_t n) {
  const auto* b = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, b, n);
    if (w <= 0) return;
    b += w;
    n -= static_cast<std::size_t>(w);
  }
}
}  // namespace detail

/// Runs n ranks. `tweak(rank, config)` adjusts each rank's config;
/// `on_started(pids)` runs in the parent once all are forked (to kill one).
inline std::vector<outcome> run_world(std::uint32_t n, const body_fn& body,
                                      const std::function<void(std::uint32_t, config&)>& tweak = {},
                                      const std::function<void(const std::vector<pid_t>&)>& on_started = {},
                                      const std::string& host = "127.0.0.1") {
  config c0 = base_config(0, n, 0);
  c0.master_addr = host;
  std::optional<listener> l0(std::in_place, c0);
  const std::uint16_t port = l0->port();
  std::vector<pid_t> pids(n);
  std::vector<int> pipes(n);
  for (std::uint32_t r = 0; r < n; ++r) {
    int fds[2];
    if (::pipe(fds) != 0) std::abort();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      config c = base_config(r, n, port);
      c.master_addr = host;
      if (tweak) tweak(r, c);
      std::optional<listener> l;
      if (r == 0) l = std::move(l0);
      l0.reset();
      std::string msg;
      std::uint8_t ok = 0;
      std::uint16_t code = 0;
      std::uint32_t culprit = 0xFFFFFFFF;
      std::vector<std::byte> out;
      try {
        out = body(r, c, l);
        ok = 1;
      } catch (const comm_error& e) {
        code = e.code().value();
        culprit = e.peer().value_or(0xFFFFFFFF);
        msg = e.what();
      } catch (const std::exception& e) {
        code = 0xFFFF;
        msg = e.what();
      }
      const auto at = std::chrono::steady_clock::now().time_since_epoch().count();
      const std::uint64_t size = out.size();
      const std::uint64_t msize = msg.size();
      detail::write_all(fds[1], &ok, 1);
      detail::write_all(fds[1], &code, 2);
      detail::write_all(fds[1], &culprit, 4);
      detail::write_all(fds[1], &at, sizeof at);
      detail::write_all(fds[1], &msize, 8);
      detail::write_all(fds[1], msg.data(), msg.size());
      detail::write_all(fds[1], &size, 8);
      detail::write_all(fds[1], out.data(), out.size());
      ::close(fds[1]);
      ::_exit(0);
    }
    ::close(fds[1]);
    pids[r] = pid;
    pipes[r] = fds[0];
  }
  l0.reset();
  if (on_started) on_started(pids);
  std::vector<outcome> result(n);
  for (std::uint32_t r = 0; r < n; ++r) {
    std::vector<char> all;
    char buf[65536];
    for (;;) {
      const ssize_t got = ::read(pipes[r], buf, sizeof buf);
      if (got <= 0) break;
      all.insert(all.end(), buf, buf + got);
    }
    ::close(pipes[r]);
    ::waitpid(pids[r], &result[r].status, 0);
    outcome& o = result[r];
    if (all.size() < 1 + 2 + 4 + 8 + 8) {
      o.text = "rank died without reporting";
      continue;
    }
    std::size_t at = 0;
    auto take = [&](void* p, std::size_t len) {
      if (len != 0) std::memcpy(p, all.data() + at, len);
      at += len;
    };
    std::uint8_t ok = 0;
    std::uint16_t code = 0;
    std::uint32_t culprit = 0;
    std::chrono::steady_clock::rep when = 0;
    std::uint64_t msize = 0, size = 0;
    take(&ok, 1);
    take(&code, 2);
    take(&culprit, 4);
    take(&when, sizeof when);
    take(&msize, 8);
    o.text.assign(all.data() + at, msize);
    at += msize;
    take(&size, 8);
    o.bytes.resize(size);
    take(o.bytes.data(), size);
    o.ok = ok != 0;
    o.code = error_code::from_value(static_cast<std::uint16_t>(code));
    if (culprit != 0xFFFFFFFF) o.culprit = culprit;
    o.at = std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(when));
  }
  return result;
}

/// Runs n ranks that allreduce `floats` f32 (4 MiB by default) in a loop
/// (`tweak` sets each rank's config), kills `victim` with SIGKILL after
/// 1.5 s, and checks that every other rank fails within 5 s with peer_lost
/// naming it.
inline void expect_killed_rank_named_fast(std::uint32_t n, std::uint32_t victim,
                                          const std::function<void(std::uint32_t, config&)>& tweak,
                                          std::size_t floats = std::size_t{1} << 20) {
  using namespace std::chrono_literals;
  std::chrono::steady_clock::time_point killed;
  const auto out = run_world(
      n,
      [floats](std::uint32_t, config& c, std::optional<listener>& l) {
        communicator comm(c, std::move(l));
        std::vector<float> v(floats, 1.0f);
        for (int i = 0; i < 100000; ++i) comm.allreduce(v);
        return std::vector<std::byte>{};
      },
      [&](std::uint32_t r, config& c) {
        c.timeout = 60s;
        tweak(r, c);
      },
      [&](const std::vector<pid_t>& pids) {
        std::this_thread::sleep_for(1500ms);
        killed = std::chrono::steady_clock::now();
        ::kill(pids[victim], SIGKILL);
      });
  for (std::uint32_t r = 0; r < n; ++r) {
    if (r == victim) {
      EXPECT_TRUE(WIFSIGNALED(out[r].status));
      continue;
    }
    ASSERT_FALSE(out[r].ok) << "rank " << r;
    EXPECT_EQ(out[r].code, comm_errc::peer_lost) << "rank " << r << ": " << out[r].text;
    EXPECT_EQ(out[r].culprit, victim) << "rank " << r << ": " << out[r].text;
    EXPECT_LT(out[r].at - killed, 5s) << "rank " << r << ": " << out[r].text;
  }
}

/// Every rank of `out` succeeded (a failed one's text in the message).
inline void expect_all_ok(const std::vector<outcome>& out) {
  for (std::size_t r = 0; r < out.size(); ++r) ASSERT_TRUE(out[r].ok) << "rank " << r << ": " << out[r].text;
}

template <class T>
std::vector<std::byte> to_bytes(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

template <class T>
std::vector<T> from_bytes(const std::vector<std::byte>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

}  // namespace ferry::comm::test
