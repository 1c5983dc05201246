#include <utility>

#include "collectives.h"

namespace ferry::trainer {
namespace {

class ferry_collectives final : public collectives {
 public:
  explicit ferry_collectives(comm::communicator c) : comm_(std::move(c)) {}
  std::uint32_t rank() const override { return comm_.rank(); }
  std::uint32_t world_size() const override { return comm_.world_size(); }
  std::string name() const override { return "ferry"; }
  void broadcast(std::span<float> data) override { comm_.broadcast(data, 0); }
  void broadcast(std::span<std::int64_t> data) override { comm_.broadcast(data, 0); }
  void broadcast(std::span<double> data) override { comm_.broadcast(data, 0); }
  std::function<void()> start_allreduce_avg(std::span<float> data, comm::compression comp,
                                            comm::error_feedback* feedback) override {
    auto w = comm_.start_allreduce(data, {.op = comm::reduce_op::avg, .comp = comp, .feedback = feedback});
    return [w]() mutable { w.wait(); };
  }
  std::pair<std::size_t, std::size_t> owned_block(std::size_t count) const override {
    return comm_.owned_block(count);
  }
  // The ring's first half where an allreduce of these bytes would run the
  // ring (the same bits); else the allreduce, which completes every block.
  std::function<void()> start_reduce_scatter_avg(std::span<float> data, comm::compression comp,
                                                 comm::error_feedback* feedback) override {
    const comm::allreduce_options o{.op = comm::reduce_op::avg, .comp = comp, .feedback = feedback};
    auto w = comm_.ring_allreduce_for(data.size_bytes(), comp) ? comm_.start_reduce_scatter_owned(data, o)
                                                                : comm_.start_allreduce(data, o);
    return [w]() mutable { w.wait(); };
  }
  std::function<void()> start_allgather_owned(std::span<float> data) override {
    auto w = comm_.start_allgather_owned(data);
    return [w]() mutable { w.wait(); };
  }
  void allgather(std::span<const double> mine, std::span<double> out) override { comm_.allgather(mine, out); }
  void allgather(std::span<const float> mine, std::span<float> out) override { comm_.allgather(mine, out); }
  void allgather(std::span<const std::int64_t> mine, std::span<std::int64_t> out) override {
    comm_.allgather(mine, out);
  }
  void barrier() override { comm_.barrier(); }

 private:
  comm::communicator comm_;
};

}  // namespace

std::string ranks_unlike_rank0(std::span<const std::int64_t> all) {
  std::string ranks;
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] != all[0]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  return ranks;
}

std::unique_ptr<collectives> make_ferry_collectives() {
  return std::make_unique<ferry_collectives>(comm::communicator::from_env());
}

}  // namespace ferry::trainer
