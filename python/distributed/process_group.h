// ferry/python/distributed/process_group.h: the torch.distributed backend
// "ferry" over ferry::comm::communicator: a c10d::Backend on torch 2.x, a
// c10d::ProcessGroup on torch 1.13, from this one implementation (the
// differences: torch_api.h).
//
//   import torch.distributed as dist
//   import ferry.distributed            # registers "ferry"
//   dist.init_process_group("ferry")    # torchrun's variables, or ferry-run's
//
// Rendezvous. torch.distributed hands the creator its store (with env://,
// ferry.distributed's; python/ferry/_store.py), the rank, the world size
// and the timeout. The group's rank 0 binds ferry's listener on its
// address toward MASTER_ADDR (MASTER_ADDR itself for the world group) at a
// port its kernel picks, and publishes "<port> <address>" in the store
// under "ferry/listener"; the others read it there and join the ring
// (comm/detail/rendezvous.h). So MASTER_PORT stays the store's, and every
// group of dist.new_group() forms its own ring under its own store prefix.
// The rest of the configuration is ferry's (comm/config.h): FERRY_SECRET
// or FERRY_SECRET_FILE (required above one rank), FERRY_AUTH,
// FERRY_TIMEOUT, FERRY_CHUNK_BYTES, FERRY_RING_ORDER, FERRY_SEND_BUFFER.
// The timeout of every blocking step is FERRY_TIMEOUT when set, else
// init_process_group's timeout when one was given, else comm/'s 60 s
// (torch's default of 30 min counts as none given).
//
// Collectives. Each runs on the group's one worker thread, in call order
// (every rank must issue the same collectives in the same order, as with
// any backend), and returns a Work whose wait() blocks and rethrows a
// failure; its future (get_future()) holds the output tensors. CPU tensors
// only; a non-contiguous tensor is copied in and out.
//
//   allreduce, reduce, reduce_scatter, allreduce_coalesced: every op on
//     every dtype travels the ring in its own dtype (communicator.h's
//     allreduce and reduce_scatter, comm/detail/reduce.h's kernels): every
//     rank ends with the same bits whatever its architecture. f16 and bf16
//     with SUM or AVG are widened to f32, reduced on the ring and rounded
//     back once (round to nearest even), so they agree bit for bit too.
//     AVG of an integer tensor is refused, as PyTorch's other backends do.
//   broadcast, allgather, _allgather_base, gather, scatter, barrier: every
//     dtype above, converted to each receiver's byte order on the way.
//   allgather_into_tensor_coalesced, reduce_scatter_tensor_coalesced
//     (torch 2.x: all_gather_into_tensor and reduce_scatter_tensor under
//     dist._coalescing_manager, as FSDP calls them): each pair in turn, in
//     one queued task.
//   alltoall, alltoall_base (all_to_all, all_to_all_single): straight
//     from each rank to each other (communicator.h's all_to_all).
//   send, recv, recvAnysource (send, recv, isend, irecv): comm/'s
//     point-to-point messages, tagged, between any two ranks.
//   monitored_barrier: not supported; it raises "ProcessGroup ferry does
//     not support <op>".
//
// Errors. A failed collective (a dead or silent rank, a forged frame, a
// configuration that differs between ranks) fails its Work with the
// comm_error that names the rank at fault (comm/error.h); the ring is then
// broken and every later collective fails with the same text. Python sees
// ferry.CommError (a ferry.Error, and a RuntimeError) with .peer. A call
// the backend refuses throws ferry::exception at once: comm_errc::
// unsupported (a dtype, device, layout or reduce op), bad_argument (tensors
// or a root that do not fit the collective) or bad_config; Python sees
// ferry.Error (docs/errors.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "ferry/comm/communicator.h"
#include "ferry/comm/detail/worker.h"
#include "torch_api.h"

namespace ferry::distributed {

class process_group final : public torch_api::base {
 public:
  /// Forms the ring for torch.distributed (the rendezvous above). Throws
  /// ferry::exception (a bad environment) or comm::comm_error.
  static c10::intrusive_ptr<torch_api::base> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                    std::chrono::milliseconds timeout);

  /// comm/'s configuration from the environment (comm::config::from_env)
  /// for this rank and world size; throws ferry::exception (bad_config: a
  /// bad variable, a rank outside the world).
  static comm::config config_for(int rank, int size);

  explicit process_group(comm::communicator comm);
  /// Finishes the queued collectives, then closes the ring.
  ~process_group() override;

  const std::string getBackendName() const override { return "ferry"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  /// outputs[r][i] = rank r's inputs[i]: one allgather of the inputs
  /// concatenated (torch's all_gather_coalesced; complex tensors arrive
  /// viewed as real ones).
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) FERRY_OVERRIDE_2;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts)
      FERRY_OVERRIDE_2;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  /// Pieces along the first dimension, equal ones when the splits are
  /// empty (communicator.h's all_to_all, complex tensors as pairs of reals).
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<std::int64_t>& outputSplitSizes,
                                               std::vector<std::int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  /// Point to point (communicator.h's send and recv): one tensor, straight
  /// to comm/'s worker, not behind the group's queued collectives (a
  /// receive never holds up what follows it). The Work of recvAnysource
  /// names the sender (sourceRank()).
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  /// The average of an f32 `tensor` over the ranks, sent rounded to bf16 or
  /// f16 with error feedback (communicator.h's compression): the residual
  /// of each `key` (a DDP bucket's index) is kept between calls and reset
  /// when the bucket's size changes. Other dtypes are averaged uncompressed.
  /// What ferry.distributed.bf16_hook and fp16_hook call.
  c10::intrusive_ptr<c10d::Work> allreduce_compressed(at::Tensor tensor, comm::compression comp, std::int64_t key);

  [[nodiscard]] const comm::communicator& communicator() const noexcept { return comm_; }

  /// Waits until every live group's queued collectives have run and their
  /// outputs are released. ferry.distributed calls it at interpreter exit
  /// (atexit), while the worker threads may still take the GIL: a task
  /// that completes a future with Python callbacks, or releases a tensor
  /// Python still knows, must not run once the interpreter is finalising.
  static void drain_all();

 private:
  /// Queues `body`; its work's result() is `outputs`, and its future
  /// completes with the list `outputs`, or with `value`.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                         std::function<void()> body);
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<at::Tensor> outputs, c10::IValue value,
                                         std::function<void()> body);
  void stop();
  void check_root(std::int64_t root, const char* what) const;
  void check_peer(int peer, const char* what) const;
  c10::intrusive_ptr<c10d::Work> post_recv(std::vector<at::Tensor>& tensors, std::optional<int> src, int tag);
  /// Keeps `w` in in_flight_ (dropping those done) and returns it.
  c10::intrusive_ptr<c10d::Work> keep(c10::intrusive_ptr<c10d::Work> w);
  void allreduce_now(at::Tensor& t, c10d::ReduceOp op);
  /// `in` (contiguous, every rank's piece in rank order, counts[r]
  /// elements each) reduce-scattered into `out`.
  void reduce_scatter_now(const at::Tensor& in, const std::vector<std::size_t>& counts, at::Tensor& out,
                          c10d::ReduceOp op);
  void allgather_now(const at::Tensor& in, at::Tensor& out);
  void broadcast_now(at::Tensor& t, std::uint32_t root);

  // Sends and receives in flight, kept (with the tensors comm/'s worker
  // reads or writes) until they are done, whether or not Python still
  // holds their Work. Declared before comm_, so they outlive it: its
  // destructor finishes the sends and fails the receives.
  std::mutex p2p_m_;
  std::vector<c10::intrusive_ptr<c10d::Work>> in_flight_;
  comm::communicator comm_;
  std::unordered_map<std::int64_t, comm::error_feedback> feedback_;  // worker thread only
  // Runs the collectives, one at a time in call order. Declared last, so
  // it stops before what its tasks use goes.
  comm::detail::worker worker_;
};

}  // namespace ferry::distributed
