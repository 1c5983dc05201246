// The gloo backend: LibTorch's c10d ProcessGroupGloo. Only this file and
// the trainer's LibTorch sources include c10d headers.
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>
#include <utility>
#include <vector>

#include "collectives.h"
#include "ferry/comm/config.h"
#include "ferry/wire/byte_order.h"

namespace ferry::trainer {
namespace {

at::Tensor wrap(std::span<float> d) {
  return torch::from_blob(d.data(), {static_cast<std::int64_t>(d.size())}, torch::kFloat32);
}
at::Tensor wrap(std::span<double> d) {
  return torch::from_blob(d.data(), {static_cast<std::int64_t>(d.size())}, torch::kFloat64);
}
at::Tensor wrap(std::span<std::int64_t> d) {
  return torch::from_blob(d.data(), {static_cast<std::int64_t>(d.size())}, torch::kInt64);
}

// The address this host uses to reach `master` (a connected UDP socket
// sends nothing): Gloo must listen where the other ranks can reach it,
// which inside network namespaces is not what the host name resolves to.
std::string local_address_towards(const std::string& master, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const auto service = std::to_string(port);
  if (getaddrinfo(master.c_str(), service.c_str(), &hints, &found) != 0 || found == nullptr) return master;
  std::string out = master;
  const int fd = socket(found->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    char text[INET6_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&local), len, text, sizeof text, nullptr, 0, NI_NUMERICHOST) == 0) {
      out = text;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  return out;
}

// Gloo sends integers in host order and its store protocol sizes in host
// word size: a mixed ring would read garbage. A ferry ring, which can tell,
// checks first.
void require_uniform_hosts() {
  auto ring = comm::communicator::from_env();
  const std::int64_t mine = (wire::host_order == wire::byte_order::big ? 1000 : 0) + static_cast<std::int64_t>(sizeof(void*));
  std::vector<std::int64_t> all(ring.world_size());
  ring.allgather(std::span<const std::int64_t>(&mine, 1), all);
  const auto differ = ranks_unlike_rank0(all);
  if (!differ.empty()) {
    const auto describe = [](std::int64_t v) {
      return std::string(v >= 1000 ? "big-endian" : "little-endian") + ", " + std::to_string((v % 1000) * 8) + "-bit";
    };
    throw ferry::exception(error(comm_errc::bad_config,
                                 "the gloo backend needs ranks of one byte order and word size: rank 0 is " +
                                     describe(all[0]) + ", rank(s) " + differ + " differ; use --backend ferry"));
  }
}

class gloo_collectives final : public collectives {
 public:
  gloo_collectives() {
    require_uniform_hosts();
    const auto cfg = comm::config::from_env().value();
    rank_ = cfg.rank;
    world_ = cfg.world_size;
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(cfg.master_port + 1);
    so.isServer = cfg.rank == 0;
    so.numWorkers = cfg.world_size;
    so.timeout = cfg.timeout;
    // LibTorch 2.x's TCPStore asks for libuv by default, which Debian's
    // torch 2.6 is built without ("use_libuv was requested..."): the plain
    // one, as 1.13 has it.
    [](auto& o) {
      if constexpr (requires { o.useLibUV; }) o.useLibUV = false;
    }(so);
    auto store = c10::make_intrusive<c10d::TCPStore>(cfg.master_addr, so);
    auto options = c10d::ProcessGroupGloo::Options::create(cfg.timeout);
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname != '\0') {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(
          local_address_towards(cfg.master_addr, cfg.master_port)));
    }
    group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(rank_),
                                                         static_cast<int>(world_), options);
  }
  std::uint32_t rank() const override { return rank_; }
  std::uint32_t world_size() const override { return world_; }
  std::string name() const override { return "gloo"; }
  void broadcast(std::span<float> d) override { bcast(wrap(d)); }
  void broadcast(std::span<std::int64_t> d) override { bcast(wrap(d)); }
  void broadcast(std::span<double> d) override { bcast(wrap(d)); }
  std::function<void()> start_allreduce_avg(std::span<float> data, comm::compression comp,
                                            comm::error_feedback*) override {
    if (comp != comm::compression::none) {
      throw ferry::exception(error(comm_errc::bad_config, "the gloo backend has no bf16/f16 compression; use --backend ferry"));
    }
    std::vector<at::Tensor> t{wrap(data)};
    auto w = group_->allreduce(t);
    const auto n = static_cast<float>(world_);
    return [w, data, n] {
      w->wait();
      for (float& x : data) x = x / n;
    };
  }
  // ZeRO over Gloo: LibTorch 1.13's ProcessGroupGloo has no
  // reduce_scatter, so the first half is the allreduce (which completes
  // every block); blocks split the bucket by rank, larger first.
  std::pair<std::size_t, std::size_t> owned_block(std::size_t count) const override {
    return block_of(count, rank_);
  }
  std::function<void()> start_reduce_scatter_avg(std::span<float> data, comm::compression comp,
                                                 comm::error_feedback* feedback) override {
    return start_allreduce_avg(data, comp, feedback);
  }
  // Gloo gathers equal pieces: each block travels padded to the largest.
  std::function<void()> start_allgather_owned(std::span<float> data) override {
    const std::size_t widest = (data.size() + world_ - 1) / world_;
    auto mine = std::make_shared<std::vector<float>>(widest, 0.0f);
    auto all = std::make_shared<std::vector<float>>(widest * world_);
    const auto [first, size] = owned_block(data.size());
    std::copy_n(data.begin() + static_cast<std::ptrdiff_t>(first), size, mine->begin());
    std::vector<at::Tensor> inputs{wrap(std::span<float>(*mine))};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (std::uint32_t r = 0; r < world_; ++r) outputs[0].push_back(wrap(std::span<float>(*all).subspan(r * widest, widest)));
    auto w = group_->allgather(outputs, inputs);
    return [this, w, mine, all, data, widest] {
      w->wait();
      for (std::uint32_t r = 0; r < world_; ++r) {
        const auto [at, n] = block_of(data.size(), r);
        std::copy_n(all->begin() + static_cast<std::ptrdiff_t>(r * widest), n, data.begin() + static_cast<std::ptrdiff_t>(at));
      }
    };
  }
  void allgather(std::span<const double> mine, std::span<double> out) override { gather(mine, out); }
  void allgather(std::span<const float> mine, std::span<float> out) override { gather(mine, out); }
  void allgather(std::span<const std::int64_t> mine, std::span<std::int64_t> out) override { gather(mine, out); }
  void barrier() override { group_->barrier()->wait(); }

 private:
  void bcast(at::Tensor t) {
    std::vector<at::Tensor> v{std::move(t)};
    group_->broadcast(v)->wait();
  }
  template <class T>
  void gather(std::span<const T> mine, std::span<T> out) {
    std::vector<T> in(mine.begin(), mine.end());
    std::vector<at::Tensor> inputs{wrap(std::span<T>(in))};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (std::uint32_t r = 0; r < world_; ++r) outputs[0].push_back(wrap(out.subspan(r * mine.size(), mine.size())));
    group_->allgather(outputs, inputs)->wait();
  }

  // Rank r's block of a bucket of `count`: the bucket split by rank, sizes
  // differing by at most one, the larger first.
  std::pair<std::size_t, std::size_t> block_of(std::size_t count, std::uint32_t r) const {
    const std::size_t base = count / world_, extra = count % world_;
    return {r * base + std::min<std::size_t>(r, extra), base + (r < extra ? 1 : 0)};
  }

  std::uint32_t rank_ = 0;
  std::uint32_t world_ = 1;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
};

}  // namespace

std::unique_ptr<collectives> make_gloo_collectives() { return std::make_unique<gloo_collectives>(); }

}  // namespace ferry::trainer
