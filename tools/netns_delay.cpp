// netns-delay: a fixed delay on every packet that some network namespaces
// send, for kernels built without netem (sch_netem). scripts/netns-cluster
// runs it for `up --delay D` when the kernel cannot delay packets itself;
// bench/comm_cluster's latency tables and tests/comm/cluster_test.cpp use it
// that way. It is not part of the library.
//
//   netns-delay --delay 50us [--queue 0] NAMESPACE...
//
// How: netfilter's NFQUEUE. In each namespace an iptables rule (the script
// adds it once this program says it is ready) hands every packet leaving
// the node to queue --queue; this program, bound to that queue in every
// namespace named (/run/netns/NAME, as `ip netns add` makes them), notes
// when each packet arrived and accepts it once D has passed, in the order
// they came (one batch verdict per queue for every packet that is due).
// The kernel keeps the packets meanwhile; only their metadata is copied
// out, and GSO packets come whole. So, as with netem at the root of the
// node's device, every packet waits D before the device's qdisc (the
// cluster's tbf) sees it.
//
// Precision: a packet's wait starts when this program reads it, so it
// waits D plus the time it took to wake; it runs SCHED_FIFO where allowed,
// to wake ahead of the ranks, with a timer slack of 1 ns. How late that is
// depends on the machine (docs/benchmarks.md has the figures of a 2-core
// VM, where a timer alone wakes about 40 us late). On SIGTERM or SIGINT it
// prints one line to stderr: how many packets it delayed and how late it
// released them beyond D (median, 99th percentile, most), then exits 0;
// packets still held are dropped with the queue, as a link that goes down
// drops them. While it is not running, the rules drop every packet (no
// --queue-bypass): a cluster without its delay line does not silently run
// undelayed.
//
// What it delays: IPv4 packets (the rule is iptables'; the cluster has no
// IPv6 addresses). Unlike netem, ARP is not delayed.
//
// Cost: each verdict carries its packets the rest of their way (the
// device's qdisc, the veth, often the receiving node's TCP), work netem
// would do in softirq, and each wake-up is a context switch. One thread
// serves every namespace: with one per core, on two cores, the real-time
// threads crowded out the ranks (round trips and 16 MB allreduces slower).
//
// Exit status: 0 after SIGTERM/SIGINT; 1 with one line on stderr when a
// namespace or queue cannot be used; 2 for a usage error. Needs root
// (CAP_NET_ADMIN in each namespace, CAP_SYS_ADMIN for setns).

// glibc's network headers before the kernel's, which skip what they define.
#include <arpa/inet.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

extern "C" {
#include <libnetfilter_queue/libnetfilter_queue.h>
}

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "cli11.h"

namespace {

constexpr const char* prog = "netns-delay";
constexpr std::uint32_t queue_max_packets = 1U << 16;  // the kernel drops beyond it, as a full link would
constexpr int receive_buffer_bytes = 8 << 20;          // metadata of tens of thousands of packets
constexpr std::size_t lateness_buckets = 10'000;       // microseconds; later ones count in the last
constexpr std::size_t message_bytes = 1 << 16;        // netlink messages sent and received (metadata only)

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", prog, what.c_str());
  std::exit(1);
}

std::string os_error(const std::string& what) { return what + ": " + std::strerror(errno); }

std::int64_t now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

// A tc time ("50us", "1.5ms", "2s") in nanoseconds; nullopt if malformed.
std::optional<std::int64_t> parse_time(const std::string& text) {
  static const std::regex form(R"(([0-9]+(\.[0-9]+)?)(ns|us|usec|ms|msec|s|sec))");
  std::smatch m;
  if (!std::regex_match(text, m, form)) return std::nullopt;
  const std::string unit = m[3];
  const double scale = unit == "ns" ? 1 : unit[0] == 'u' ? 1e3 : unit[0] == 'm' ? 1e6 : 1e9;
  const double ns = std::stod(m[1]) * scale;
  if (ns < 1 || ns > 10e9) return std::nullopt;
  return static_cast<std::int64_t>(ns);
}

struct held {
  std::uint32_t id;
  std::int64_t due_ns;
};

// One namespace's queue: its netlink socket (which stays in the namespace
// it was opened in) and the packets it holds, oldest first.
struct queue {
  std::string name;
  std::unique_ptr<mnl_socket, int (*)(mnl_socket*)> socket{nullptr, mnl_socket_close};
  unsigned portid = 0;
  std::deque<held> packets;
};

// Sends one message, with NLM_F_ACK, and reads the kernel's answer.
void request(queue& q, nlmsghdr* nlh, const std::string& what) {
  nlh->nlmsg_flags |= NLM_F_ACK;
  if (mnl_socket_sendto(q.socket.get(), nlh, nlh->nlmsg_len) < 0) fail(os_error(q.name + ": " + what));
  std::array<char, message_bytes> answer{};
  const ssize_t got = mnl_socket_recvfrom(q.socket.get(), answer.data(), answer.size());
  if (got < 0 || mnl_cb_run(answer.data(), static_cast<std::size_t>(got), 0, q.portid, nullptr, nullptr) < 0) {
    fail(os_error(q.name + ": " + what));
  }
}

// Opens queue `number` in namespace `name`, metadata only, GSO packets whole.
queue open_queue(const std::string& name, std::uint16_t number) {
  const int ns = ::open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (ns < 0) fail(os_error("namespace " + name));
  if (::setns(ns, CLONE_NEWNET) != 0) fail(os_error("cannot enter namespace " + name));
  ::close(ns);
  queue q;
  q.name = "namespace " + name;
  q.socket.reset(mnl_socket_open(NETLINK_NETFILTER));
  if (!q.socket) fail(os_error(q.name + ": netlink socket"));
  if (mnl_socket_bind(q.socket.get(), 0, MNL_SOCKET_AUTOPID) < 0) fail(os_error(q.name + ": netlink bind"));
  q.portid = mnl_socket_get_portid(q.socket.get());
  const int fd = mnl_socket_get_fd(q.socket.get());
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &receive_buffer_bytes, sizeof receive_buffer_bytes);
  ::setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);

  std::array<char, message_bytes> buf{};
  nlmsghdr* nlh = nfq_nlmsg_put(buf.data(), NFQNL_MSG_CONFIG, number);
  nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, NFQNL_CFG_CMD_BIND);
  request(q, nlh, "cannot bind queue " + std::to_string(number) + " (is another program bound to it?)");
  nlh = nfq_nlmsg_put(buf.data(), NFQNL_MSG_CONFIG, number);
  nfq_nlmsg_cfg_put_params(nlh, NFQNL_COPY_META, 0);
  nfq_nlmsg_cfg_put_qmaxlen(nlh, queue_max_packets);
  mnl_attr_put_u32(nlh, NFQA_CFG_FLAGS, htonl(NFQA_CFG_F_GSO));
  mnl_attr_put_u32(nlh, NFQA_CFG_MASK, htonl(NFQA_CFG_F_GSO));
  request(q, nlh, "cannot configure queue " + std::to_string(number));
  if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) fail(os_error(q.name + ": fcntl"));
  return q;
}

// The lateness of released packets beyond the delay, in microseconds.
struct lateness {
  std::vector<std::uint64_t> count = std::vector<std::uint64_t>(lateness_buckets + 1);
  std::uint64_t packets = 0;

  void add(std::int64_t late_ns) {
    ++count[std::min(static_cast<std::size_t>(late_ns / 1000), lateness_buckets)];
    ++packets;
  }
  std::uint64_t percentile(double p) const {
    const auto rank = static_cast<std::uint64_t>(p * static_cast<double>(packets - 1));
    std::uint64_t seen = 0;
    for (std::size_t us = 0; us < count.size(); ++us) {
      seen += count[us];
      if (seen > rank) return us;
    }
    return lateness_buckets;
  }
};

void add_to_epoll(int epoll, int fd, std::uint64_t tag) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag;
  if (::epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &ev) != 0) fail(os_error("epoll_ctl"));
}

// The queues of every namespace, served by one thread at real-time
// priority (see "Cost" above for why one).
class delay_line {
 public:
  delay_line(std::int64_t delay_ns, std::uint16_t number) : delay_ns_(delay_ns), number_(number) {}

  void add(queue q) { queues_.push_back(std::move(q)); }

  // Sets up, says it is ready on stdout, then reads packets and releases
  // those that are due until SIGTERM or SIGINT; prints the summary.
  int run() {
    sigset_t stop{};
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    ::sigprocmask(SIG_BLOCK, &stop, nullptr);
    const int signals = ::signalfd(-1, &stop, SFD_CLOEXEC);
    const int timer = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
    if (signals < 0 || timer < 0 || epoll < 0) fail(os_error("signalfd, timerfd or epoll"));
    const std::uint64_t signal_tag = queues_.size(), timer_tag = signal_tag + 1;
    for (std::size_t i = 0; i < queues_.size(); ++i) add_to_epoll(epoll, mnl_socket_get_fd(queues_[i].socket.get()), i);
    add_to_epoll(epoll, signals, signal_tag);
    add_to_epoll(epoll, timer, timer_tag);
    // Wake ahead of the ranks that keep the cores busy, and exactly on time.
    ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    sched_param rt{};
    rt.sched_priority = 10;
    if (::sched_setscheduler(0, SCHED_FIFO, &rt) != 0) {
      std::fprintf(stderr, "%s: runs without SCHED_FIFO (%s): releases may be later\n", prog, std::strerror(errno));
    }
    std::printf("%s: ready, every packet sent in %zu namespace(s) waits %.1f us\n", prog, queues_.size(),
                static_cast<double>(delay_ns_) / 1e3);
    std::fflush(stdout);

    std::array<epoll_event, 64> events{};
    std::int64_t armed = 0;  // the timer's expiry, 0 when disarmed
    for (;;) {
      const int n = ::epoll_wait(epoll, events.data(), static_cast<int>(events.size()), -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail(os_error("epoll_wait"));
      for (int i = 0; i < n; ++i) {
        const std::uint64_t tag = events[static_cast<std::size_t>(i)].data.u64;
        if (tag == signal_tag) {
          summary();
          return 0;
        }
        if (tag == timer_tag) {
          std::uint64_t expirations = 0;
          [[maybe_unused]] const ssize_t r = ::read(timer, &expirations, sizeof expirations);
        } else {
          receive(queues_[tag]);
        }
      }
      const std::int64_t now = now_ns();
      for (auto& q : queues_) release(q, now);
      // Re-armed only when the oldest packet changed (a wake for a new
      // packet behind it leaves the timer as it is): timerfd_settime took
      // 5.6 % of the samples under bulk traffic (perf, 8 nodes at 1 Gbit/s).
      const std::int64_t next = next_due().value_or(0);  // zero: disarmed while nothing is held
      if (next != armed) {
        itimerspec when{};
        when.it_value.tv_sec = static_cast<time_t>(next / 1'000'000'000);
        when.it_value.tv_nsec = static_cast<long>(next % 1'000'000'000);
        if (::timerfd_settime(timer, TFD_TIMER_ABSTIME, &when, nullptr) != 0) fail(os_error("timerfd_settime"));
        armed = next;
      }
    }
  }

 private:
  static int on_packet(const nlmsghdr* nlh, void* data) {
    auto* q = static_cast<queue*>(data);
    nlattr* attr[NFQA_MAX + 1] = {};
    if (nfq_nlmsg_parse(nlh, attr) < 0 || attr[NFQA_PACKET_HDR] == nullptr) return MNL_CB_OK;
    std::uint32_t id_be = 0;  // nfqnl_msg_packet_hdr opens with the packet id, big-endian
    std::memcpy(&id_be, mnl_attr_get_payload(attr[NFQA_PACKET_HDR]), sizeof id_be);
    q->packets.push_back({ntohl(id_be), 0});
    return MNL_CB_OK;
  }

  // Reads the packets the queue has for us, up to a batch (the others
  // wait for the next wake, after the due ones are released); each is
  // due delay_ns_ from now.
  void receive(queue& q) {
    for (int batch = 0; batch < 64; ++batch) {
      const ssize_t got = ::recv(mnl_socket_get_fd(q.socket.get()), buf_.data(), buf_.size(), MSG_DONTWAIT);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
      if (got < 0 && errno == ENOBUFS) continue;  // packets lost to a full socket: the kernel dropped them
      if (got < 0) fail(os_error(q.name + ": netlink receive"));
      if (got == 0) fail(q.name + ": the netlink socket closed");
      const std::size_t before = q.packets.size();
      // An error the kernel returns for a verdict comes here too; it names
      // packets no longer held, so it is skipped.
      mnl_cb_run(buf_.data(), static_cast<std::size_t>(got), 0, q.portid, on_packet, &q);
      const std::int64_t due = now_ns() + delay_ns_;
      for (std::size_t i = before; i < q.packets.size(); ++i) q.packets[i].due_ns = due;
    }
  }

  // Accepts, with one batch verdict, every packet of q that is due: the
  // kernel accepts every packet of the queue with an id up to the one named,
  // and its ids grow in the order the packets came, as their due times do.
  void release(queue& q, std::int64_t now) {
    std::optional<std::uint32_t> last;
    while (!q.packets.empty() && q.packets.front().due_ns <= now) {
      late_.add(now - q.packets.front().due_ns);
      last = q.packets.front().id;
      q.packets.pop_front();
    }
    if (!last) return;
    nlmsghdr* nlh = nfq_nlmsg_put(buf_.data(), NFQNL_MSG_VERDICT_BATCH, number_);
    nfq_nlmsg_verdict_put(nlh, static_cast<int>(*last), NF_ACCEPT);
    if (mnl_socket_sendto(q.socket.get(), nlh, nlh->nlmsg_len) < 0) fail(os_error(q.name + ": verdict"));
  }

  std::optional<std::int64_t> next_due() const {
    std::optional<std::int64_t> next;
    for (const auto& q : queues_) {
      if (!q.packets.empty()) next = std::min(next.value_or(q.packets.front().due_ns), q.packets.front().due_ns);
    }
    return next;
  }

  void summary() const {
    if (late_.packets == 0) {
      std::fprintf(stderr, "%s: no packets delayed\n", prog);
      return;
    }
    const std::uint64_t most = late_.percentile(1);
    std::fprintf(stderr, "%s: %llu packets delayed by %.1f us, released later than that by median %llu us, "
                 "99th percentile %llu us, most %llu%s us\n", prog, static_cast<unsigned long long>(late_.packets),
                 static_cast<double>(delay_ns_) / 1e3, static_cast<unsigned long long>(late_.percentile(0.5)),
                 static_cast<unsigned long long>(late_.percentile(0.99)), static_cast<unsigned long long>(most),
                 most == lateness_buckets ? "+" : "");
  }

  std::int64_t delay_ns_;
  std::uint16_t number_;
  std::vector<queue> queues_;
  lateness late_;
  std::array<char, message_bytes> buf_{};
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Delays every packet that the named network namespaces send by a fixed time, through netfilter's "
               "NFQUEUE (for kernels without netem; scripts/netns-cluster adds the iptables rules).",
               prog};
  ferry::tools::share_option_defaults(app);
  std::string delay_text;
  unsigned queue_number = 0;
  std::vector<std::string> namespaces;
  app.add_option("--delay", delay_text, "the time every packet waits, as tc writes it: 50us, 1.5ms")->required();
  app.add_option("--queue", queue_number, "the NFQUEUE number the rules use")->check(CLI::Range(0, 65535));
  app.add_option("namespaces", namespaces, "namespaces, by their names under /run/netns")->required();
  if (const auto status = ferry::tools::parse_command_line(app, argc, argv)) return *status;
  const auto delay = parse_time(delay_text);
  if (!delay) {
    std::fprintf(stderr, "%s: --delay '%s' is not a time from 1ns to 10s such as 50us (see %s --help)\n", prog,
                 delay_text.c_str(), prog);
    return 2;
  }
  const auto number = static_cast<std::uint16_t>(queue_number);
  delay_line line(*delay, number);
  const int home = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home < 0) fail(os_error("/proc/self/ns/net"));
  for (const auto& name : namespaces) line.add(open_queue(name, number));
  if (::setns(home, CLONE_NEWNET) != 0) fail(os_error("cannot return to its own namespace"));
  ::close(home);
  return line.run();
}
