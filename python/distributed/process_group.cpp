#include "process_group.h"

#include <Python.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <exception>
#include <numeric>
#include <optional>
#include <cstdlib>
#include <span>
#include <string_view>
#include <unordered_set>
#include <utility>

#include <ATen/core/ivalue.h>

#include "ferry/base/float16.h"

namespace ferry::distributed {
namespace {

using c10d::OpType;
using c10d::ReduceOp;

/// Throws ferry::exception with `code` and the text of `parts`, which
/// Python sees as ferry.Error (python/distributed/module.cpp): a call the
/// backend cannot serve (comm_errc::unsupported), arguments that do not fit
/// the collective (bad_argument), a bad configuration (bad_config).
template <class... Parts>
[[noreturn]] void fail(error_code code, const Parts&... parts) {
  throw ferry::exception(ferry::error(code, c10::str(parts...)));
}

/// fail(code, parts...) unless `ok`.
template <class... Parts>
void require(bool ok, error_code code, const Parts&... parts) {
  if (!ok) fail(code, parts...);
}

/// Work::getFutureResult's future (torch >= 2.6): completes when `done`
/// does, never with an error: work_result::success, timeout for ferry's
/// timed_out, comm_error for any other failure.
c10::intrusive_ptr<c10::ivalue::Future> result_of(c10::ivalue::Future& done) {
  using torch_api::work_result;
  auto result = c10::make_intrusive<c10::ivalue::Future>(c10::IntType::get());
  done.addCallback([result](c10::ivalue::Future& f) {
    auto outcome = work_result::success;
    if (f.hasError()) {
      outcome = work_result::comm_error;
      try {
        std::rethrow_exception(f.exception_ptr());
      } catch (const ferry::exception& e) {
        if (e.code() == comm_errc::timed_out) outcome = work_result::timeout;
      } catch (...) {
      }
    }
    result->markCompleted(c10::IValue(static_cast<std::int64_t>(outcome)));
  });
  return result;
}

/// A collective's handle: the future the worker completes with the output
/// tensors, or fails with the collective's exception.
class work final : public c10d::Work {
 public:
  work(int rank, OpType type, c10::intrusive_ptr<c10::ivalue::Future> future, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type), future_(std::move(future)), outputs_(std::move(outputs)) {}

  bool isCompleted() override { return future_->completed(); }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override { return future_->exception_ptr(); }
  std::vector<at::Tensor> result() override {
    wait(kNoTimeout);
    return outputs_;
  }
  void synchronize() override {}
  bool wait(std::chrono::milliseconds timeout) override {
    if (timeout != kNoTimeout) {
      // c10's Future has no timed wait; a collective that outlives the
      // caller's patience is rare enough for a 1 ms poll.
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      while (!future_->completed()) {
        require(std::chrono::steady_clock::now() < deadline, comm_errc::timed_out,
                "ferry: ", c10d::opTypeToString(retrieveOpType()), " did not finish within ", timeout.count(), " ms");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    future_->waitAndThrow();
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFutureResult() FERRY_OVERRIDE_2_6 { return result_of(*future_); }

 private:
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::vector<at::Tensor> outputs_;
};

/// A send's or a receive's handle: comm/'s work, the tensor it reads or
/// writes (kept alive until then), and for a receive from any rank the
/// sender. A receive into a tensor that is not contiguous lands in a
/// contiguous copy, put back by the first wait().
class p2p_work final : public c10d::Work {
 public:
  p2p_work(int rank, OpType type, at::Tensor user, at::Tensor dense)
      : c10d::Work(rank, type), user_(std::move(user)), dense_(std::move(dense)) {}
  comm::work handle;
  std::uint32_t source = 0;  // written by comm/'s worker before the work is done

  bool isCompleted() override { return handle.done(); }
  bool isSuccess() const override {
    if (!handle.done()) return false;
    try {
      comm::work(handle).wait();
      return true;
    } catch (...) {
      return false;
    }
  }
  std::exception_ptr exception() const override {
    if (!handle.done()) return nullptr;
    try {
      comm::work(handle).wait();
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  }
  int sourceRank() const override { return static_cast<int>(source); }
  std::vector<at::Tensor> result() override {
    wait(kNoTimeout);
    return {user_};
  }
  void synchronize() override {}
  bool wait(std::chrono::milliseconds timeout) override {
    if (timeout != kNoTimeout) {
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      while (!handle.done()) {
        require(std::chrono::steady_clock::now() < deadline, comm_errc::timed_out, "ferry: ",
                c10d::opTypeToString(retrieveOpType()), " did not finish within ", timeout.count(), " ms");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    handle.wait();  // (torch's binding of wait() lets the GIL go)
    std::lock_guard lock(m_);
    if (!dense_.is_same(user_) && !copied_) {
      const at::NoGradGuard no_grad;
      user_.copy_(dense_);
      copied_ = true;
    }
    return true;
  }

 private:
  at::Tensor user_;
  at::Tensor dense_;
  std::mutex m_;
  bool copied_ = false;
};

/// Calls f(T{}) with the C++ element type communicator.h moves for `type`.
template <class F>
decltype(auto) with_element(at::ScalarType type, F&& f) {
  switch (type) {
    case at::kFloat: return f(float{});
    case at::kDouble: return f(double{});
    case at::kHalf: return f(ferry::f16{});
    case at::kBFloat16: return f(ferry::bf16{});
    case at::kLong: return f(std::int64_t{});
    case at::kInt: return f(std::int32_t{});
    case at::kShort: return f(std::int16_t{});
    case at::kChar: return f(std::int8_t{});
    case at::kByte: return f(std::uint8_t{});
    case at::kBool: return f(bool{});
    default:
      fail(comm_errc::unsupported, "ferry: tensors of dtype ", type, " are not supported");
  }
}

/// A complex tensor as its real view (…, 2); others as they are.
at::Tensor as_real(const at::Tensor& t) { return t.is_complex() ? at::view_as_real(t) : t; }

/// The dtype comm/ moves a tensor's elements as.
codec::dtype dtype_of(const at::Tensor& t) {
  return with_element(t.scalar_type(), []<class T>(T) { return comm::element_dtype<T>; });
}

/// A contiguous tensor's bytes.
std::span<std::byte> bytes_of(const at::Tensor& t) {
  return {static_cast<std::byte*>(t.data_ptr()), static_cast<std::size_t>(t.numel() * t.element_size())};
}

template <class T>
std::span<T> elements(const at::Tensor& t) {
  return {static_cast<T*>(t.data_ptr()), static_cast<std::size_t>(t.numel())};
}

void check_tensor(const at::Tensor& t, const char* op) {
  require(t.defined(), comm_errc::bad_argument, "ferry: ", op, " was given an undefined tensor");
  require(t.device().is_cpu(), comm_errc::unsupported, "ferry: ", op, " takes CPU tensors, not ", t.device(), " ones");
  require(t.layout() == at::kStrided, comm_errc::unsupported, "ferry: ", op, " takes dense tensors, not ", t.layout(),
          " ones");
  with_element(t.scalar_type(), [](auto) {});
}

const at::Tensor& one_tensor(const std::vector<at::Tensor>& tensors, const char* op) {
  require(tensors.size() == 1, comm_errc::bad_argument, "ferry: ", op, " takes one tensor per rank, not ",
          tensors.size());
  check_tensor(tensors[0], op);
  return tensors[0];
}

/// one_tensor() for the ops that move complex tensors as pairs of reals.
const at::Tensor& one_tensor_or_complex(const std::vector<at::Tensor>& tensors, const char* op) {
  require(tensors.size() == 1, comm_errc::bad_argument, "ferry: ", op, " takes one tensor, not ", tensors.size());
  check_tensor(as_real(tensors[0]), op);
  return tensors[0];
}

/// Each of `list` is a tensor with like's size and dtype: "ferry: OP's
/// WHAT must have the REF's size and dtype".
void check_like(const std::vector<at::Tensor>& list, const at::Tensor& like, const char* op, const char* what,
                const char* ref) {
  for (const at::Tensor& t : list) {
    check_tensor(t, op);
    require(t.numel() == like.numel() && t.scalar_type() == like.scalar_type(), comm_errc::bad_argument, "ferry: ", op,
            "'s ", what, " must have the ", ref, "'s size and dtype");
  }
}

void check_op(ReduceOp op, at::ScalarType type, const char* name) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::PRODUCT:
    case ReduceOp::MIN:
    case ReduceOp::MAX: return;
    case ReduceOp::AVG:
      require(at::isFloatingType(type), comm_errc::unsupported, "ferry: ", name,
              " with AVG needs a floating-point tensor, not ", type);
      return;
    case ReduceOp::BAND:
    case ReduceOp::BOR:
    case ReduceOp::BXOR:
      require(at::isIntegralType(type, /*includeBool=*/true), comm_errc::unsupported, "ferry: ", name,
              " with a bitwise op needs an integer or bool tensor, not ", type);
      return;
    default:
      fail(comm_errc::unsupported, "ferry: ", name, " does not support reduce op ", static_cast<int>(op.op_));
  }
}

/// Runs `body` on a contiguous tensor with t's values, then puts the
/// result back into t if that was a copy.
template <class F>
void on_dense(at::Tensor& t, F&& body) {
  at::Tensor dense = t.contiguous();
  body(dense);
  if (!dense.is_same(t)) t.copy_(dense);
}

/// The tensors' values, flattened and concatenated (one fresh tensor).
at::Tensor concatenated(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const at::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

/// Copies consecutive pieces of the flat `from` into each of `to`.
void split_into(const at::Tensor& from, std::vector<at::Tensor>& to) {
  std::int64_t offset = 0;
  for (at::Tensor& t : to) {
    t.copy_(from.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

// The address of this host's interface that routes toward `host`, as text
// (a UDP socket connected there sends nothing); `host` itself if the
// system cannot say. What a group's rank 0 binds and publishes: for the
// world group it is MASTER_ADDR itself, for a group whose rank 0 is on
// another node that node's address.
std::string local_address_toward(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr) return host;
  std::string address = host;
  const int fd = ::socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_storage me{};
    socklen_t size = sizeof me;
    char text[INET6_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &size) == 0) {
      const void* bytes = me.ss_family == AF_INET6
                              ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&me)->sin6_addr)
                              : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&me)->sin_addr);
      if (::inet_ntop(me.ss_family, bytes, text, sizeof text) != nullptr) address = text;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  return address;
}

// The live groups, for drain_all().
std::mutex live_mutex;
std::unordered_set<process_group*> live;

// A coalesced collective's tensors: at least one, each fit for `op`, all
// of one dtype.
void check_one_dtype(const std::vector<at::Tensor>& tensors, const char* op) {
  require(!tensors.empty(), comm_errc::bad_argument, "ferry: ", op, " was given no tensors");
  for (const at::Tensor& t : tensors) {
    check_tensor(t, op);
    require(t.scalar_type() == tensors[0].scalar_type(), comm_errc::bad_argument, "ferry: ", op,
            " takes tensors of one dtype, not ", tensors[0].scalar_type(), " and ", t.scalar_type());
  }
}

// The deprecated multi-tensor forms (several tensors per rank, as Gloo
// takes them): at least one, each of the first's size and dtype.
void check_alike(const std::vector<at::Tensor>& tensors, const char* op) {
  require(!tensors.empty(), comm_errc::bad_argument, "ferry: ", op, " was given no tensors");
  check_tensor(tensors[0], op);
  check_like(tensors, tensors[0], op, "tensors", "first");
}

// Sums of f16/bf16 values are formed in f32 and rounded once at the end.
bool summed_in_f32(at::ScalarType type, ReduceOp op) {
  return (type == at::kHalf || type == at::kBFloat16) && (op == ReduceOp::SUM || op == ReduceOp::AVG);
}

// torch's reduce op as comm/'s (check_op has refused the others).
comm::reduce_op comm_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::AVG: return comm::reduce_op::avg;
    case ReduceOp::PRODUCT: return comm::reduce_op::product;
    case ReduceOp::MIN: return comm::reduce_op::min;
    case ReduceOp::MAX: return comm::reduce_op::max;
    case ReduceOp::BAND: return comm::reduce_op::band;
    case ReduceOp::BOR: return comm::reduce_op::bor;
    case ReduceOp::BXOR: return comm::reduce_op::bxor;
    default: return comm::reduce_op::sum;
  }
}

}  // namespace

comm::config process_group::config_for(int rank, int size) {
  require(size >= 1 && rank >= 0 && rank < size, comm_errc::bad_config, "ferry: rank ", rank, " of a world of ", size);
  return comm::config::from_env(static_cast<std::uint32_t>(rank), static_cast<std::uint32_t>(size)).value();
}

c10::intrusive_ptr<torch_api::base> process_group::create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                          int size, std::chrono::milliseconds timeout) {
  comm::config c = config_for(rank, size);
  // torch's default timeout (30 min) means none was chosen: comm/'s applies.
  if (std::getenv("FERRY_TIMEOUT") == nullptr && timeout.count() > 0 && timeout != kProcessGroupDefaultTimeout) {
    c.timeout = timeout;
  }
  // "<port> <address>" of the group's rank 0's listener.
  static constexpr const char* listener_key = "ferry/listener";
  if (size > 1 && rank == 0) {
    c.master_addr = local_address_toward(c.master_addr);
    c.master_port = 0;
    comm::listener listener(c);
    const std::string where = std::to_string(listener.port()) + " " + c.master_addr;
    store->set(listener_key, std::vector<std::uint8_t>(where.begin(), where.end()));
    return c10::make_intrusive<process_group>(comm::communicator(c, std::move(listener)));
  }
  if (size > 1) {
    const std::vector<std::uint8_t> bytes = store->get(listener_key);
    const std::string text(bytes.begin(), bytes.end());
    const std::size_t space = text.find(' ');
    std::uint16_t port = 0;
    const char* end = text.data() + (space == std::string::npos ? text.size() : space);
    const auto [stop, ec] = std::from_chars(text.data(), end, port);
    require(space != std::string::npos && space + 1 < text.size() && ec == std::errc{} && stop == end && port != 0,
            comm_errc::protocol_error, "ferry: the store's ", listener_key, " is '", text, "', not '<port> <address>'");
    c.master_port = port;
    c.master_addr = text.substr(space + 1);
  }
  return c10::make_intrusive<process_group>(comm::communicator(c));
}

process_group::process_group(comm::communicator comm)
    : torch_api::base(static_cast<int>(comm.rank()), static_cast<int>(comm.world_size())),
      comm_(std::move(comm)) {
  std::lock_guard lock(live_mutex);
  live.insert(this);
}

process_group::~process_group() {
  // The last reference may go in Python (a DDP model collected with the
  // GIL held), and the worker may need the GIL to finish: a tensor it
  // releases can own a Python object, a future's callback can be Python.
  // So the GIL is let go before anything here waits (drain_all may hold
  // live_mutex while it waits for a worker).
  if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) {
    Py_BEGIN_ALLOW_THREADS stop();
    Py_END_ALLOW_THREADS
  } else {
    stop();
  }
}

void process_group::stop() {
  {
    std::lock_guard lock(live_mutex);
    live.erase(this);
  }
  worker_.stop();
}

void process_group::drain_all() {
  std::lock_guard hold(live_mutex);
  for (process_group* group : live) group->worker_.drain();
}

c10::intrusive_ptr<c10d::Work> process_group::enqueue(OpType type, std::vector<at::Tensor> outputs,
                                                      std::function<void()> body) {
  c10::IValue value(outputs);
  return enqueue(type, std::move(outputs), std::move(value), std::move(body));
}

c10::intrusive_ptr<c10d::Work> process_group::enqueue(OpType type, std::vector<at::Tensor> outputs,
                                                      c10::IValue value, std::function<void()> body) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(value.type());
  auto handle = c10::make_intrusive<work>(getRank(), type, future, outputs);
  if (getSize() == 1) {
    // A world of one sends nothing: the collective runs here, at once,
    // without the worker's hand-off (the queue is empty: every earlier
    // collective ran here too).
    const at::NoGradGuard no_grad;
    try {
      body();
    } catch (...) {
      future->setError(std::current_exception());
      return handle;
    }
    future->markCompleted(std::move(value));
    return handle;
  }
  // The future carries the outcome; the worker's own state goes unused.
  (void)worker_.submit([future, value = std::move(value), body = std::move(body)]() mutable {
    std::exception_ptr failed;
    {
      // Outputs are written in place, as by any backend: not an autograd
      // op, even on a leaf that requires grad.
      const at::NoGradGuard no_grad;
      try {
        body();
      } catch (...) {
        failed = std::current_exception();
      }
    }
    // The body's tensors (and on failure the outputs' value) are let go
    // before the future completes: once it has, the caller may drop the
    // last count and free them, and only what this thread did before
    // completing is ordered before that (through the future's mutex; the
    // caller's count is dropped inside LibTorch).
    body = nullptr;
    if (failed) {
      value = c10::IValue();
      future->setError(failed);
    } else {
      future->markCompleted(std::move(value));
    }
  });
  return handle;
}

void process_group::allgather_now(const at::Tensor& in, at::Tensor& out) {
  with_element(in.scalar_type(), [&]<class T>(T) { comm_.allgather(elements<const T>(in), elements<T>(out)); });
}

void process_group::broadcast_now(at::Tensor& t, std::uint32_t root) {
  with_element(t.scalar_type(), [&]<class T>(T) { comm_.broadcast(elements<T>(t), root); });
}

void process_group::allreduce_now(at::Tensor& t, ReduceOp op) {
  const comm::allreduce_options o{.op = comm_op(op)};
  if (summed_in_f32(t.scalar_type(), op)) {
    at::Tensor wide = t.to(at::kFloat);
    comm_.allreduce(elements<float>(wide), o);
    t.copy_(wide);
    return;
  }
  with_element(t.scalar_type(), [&]<class T>(T) { comm_.allreduce(elements<T>(t), o); });
}

void process_group::reduce_scatter_now(const at::Tensor& in, const std::vector<std::size_t>& counts, at::Tensor& out,
                                       ReduceOp op) {
  const comm::allreduce_options o{.op = comm_op(op)};
  if (summed_in_f32(out.scalar_type(), op)) {
    const at::Tensor wide_in = in.to(at::kFloat);
    at::Tensor wide_out = at::empty({out.numel()}, wide_in.options());
    comm_.reduce_scatter(elements<const float>(wide_in), counts, elements<float>(wide_out), o);
    out.copy_(wide_out.view(out.sizes()));
    return;
  }
  on_dense(out, [&](at::Tensor& d) {
    with_element(out.scalar_type(), [&]<class T>(T) { comm_.reduce_scatter(elements<const T>(in), counts, elements<T>(d), o); });
  });
}

void process_group::check_peer(int peer, const char* what) const {
  require(peer >= 0 && peer < getSize() && peer != getRank(), comm_errc::bad_argument, "ferry: ", what, " rank ",
          peer, ": not another rank of this group of ", getSize());
}

void process_group::check_root(std::int64_t root, const char* what) const {
  require(root >= 0 && root < getSize(), comm_errc::bad_argument, "ferry: ", what, " rank ", root, " of a world of ",
          getSize());
}

c10::intrusive_ptr<c10d::Work> process_group::broadcast(std::vector<at::Tensor>& tensors,
                                                        const c10d::BroadcastOptions& opts) {
  check_alike(tensors, "broadcast");
  check_root(opts.rootRank, "broadcast from");
  require(opts.rootTensor >= 0 && static_cast<std::size_t>(opts.rootTensor) < tensors.size(), comm_errc::bad_argument,
          "ferry: broadcast's root tensor ", opts.rootTensor, " is not one of the ", tensors.size(), " given");
  const auto root = static_cast<std::uint32_t>(opts.rootRank);
  const auto which = static_cast<std::size_t>(opts.rootTensor);
  // The root's tensor `which` reaches every tensor of every rank.
  return enqueue(OpType::BROADCAST, tensors, [this, tensors, root, which]() mutable {
    at::Tensor& t = tensors[which];
    on_dense(t, [&](at::Tensor& d) { broadcast_now(d, root); });
    for (at::Tensor& other : tensors) {
      if (!other.is_same(t)) other.copy_(t);
    }
  });
}

c10::intrusive_ptr<c10d::Work> process_group::allreduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  check_alike(tensors, "allreduce");
  check_op(opts.reduceOp, tensors[0].scalar_type(), "allreduce");
  const ReduceOp op = opts.reduceOp;
  require(tensors.size() == 1 || op != ReduceOp::AVG, comm_errc::unsupported,
          "ferry: allreduce AVG takes one tensor per rank, not ", tensors.size());
  if (tensors.size() == 1) {
    return enqueue(OpType::ALLREDUCE, tensors, [this, t = tensors[0], op]() mutable {
      on_dense(t, [&](at::Tensor& d) { allreduce_now(d, op); });
    });
  }
  // Several per rank: each rank folds its own in order (comm::combine,
  // with the collectives' rules; f16/bf16 sums in f32), one allreduce
  // combines the folds, and every tensor receives the result.
  return enqueue(OpType::ALLREDUCE, tensors, [this, tensors, op]() mutable {
    const bool wide = summed_in_f32(tensors[0].scalar_type(), op);
    const auto operand = [&](const at::Tensor& t) { return (wide ? t.to(at::kFloat) : t).contiguous(); };
    at::Tensor acc = operand(tensors[0]).clone();
    with_element(acc.scalar_type(), [&]<class T>(T) {
      for (std::size_t i = 1; i < tensors.size(); ++i) {
        const at::Tensor in = operand(tensors[i]);
        comm::combine(comm_op(op), comm::element_dtype<T>, std::as_writable_bytes(elements<T>(acc)),
                      std::as_bytes(elements<const T>(in)));
      }
    });
    allreduce_now(acc, op);
    for (at::Tensor& t : tensors) t.copy_(acc.view(t.sizes()));
  });
}

c10::intrusive_ptr<c10d::Work> process_group::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                  const c10d::AllreduceCoalescedOptions& opts) {
  check_one_dtype(tensors, "allreduce_coalesced");
  check_op(opts.reduceOp, tensors[0].scalar_type(), "allreduce_coalesced");
  const ReduceOp op = opts.reduceOp;
  return enqueue(OpType::ALLREDUCE_COALESCED, tensors, [this, tensors, op]() mutable {
    at::Tensor flat = concatenated(tensors);
    allreduce_now(flat, op);
    split_into(flat, tensors);
  });
}

c10::intrusive_ptr<c10d::Work> process_group::reduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::ReduceOptions& opts) {
  at::Tensor t = one_tensor(tensors, "reduce");
  check_op(opts.reduceOp, t.scalar_type(), "reduce");
  check_root(opts.rootRank, "reduce to");
  // An allreduce: the root gets the result, and so does everyone else.
  const ReduceOp op = opts.reduceOp;
  return enqueue(OpType::REDUCE, {t}, [this, t, op]() mutable {
    on_dense(t, [&](at::Tensor& d) { allreduce_now(d, op); });
  });
}

c10::intrusive_ptr<c10d::Work> process_group::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::AllgatherOptions&) {
  check_alike(inputs, "allgather");
  // With k inputs per rank (the multi-tensor form), k output lists, each
  // receiving every rank's k inputs in rank order.
  const std::size_t k = inputs.size();
  const std::size_t per_list = k * static_cast<std::size_t>(getSize());
  require(outputs.size() == k, comm_errc::bad_argument, "ferry: allgather takes one output list per input tensor (",
          k, "), not ", outputs.size());
  std::vector<at::Tensor> outs;
  for (const auto& list : outputs) {
    require(list.size() == per_list, comm_errc::bad_argument, "ferry: allgather's output lists must hold ", per_list,
            " tensors, not ", list.size());
    check_like(list, inputs[0], "allgather", "outputs", "input");
    outs.insert(outs.end(), list.begin(), list.end());
  }
  // The future holds what Gloo's does: the list, or with several inputs
  // the list of lists.
  c10::IValue value = k == 1 ? c10::IValue(outputs[0]) : c10::IValue(outputs);
  return enqueue(OpType::ALLGATHER, outs, std::move(value), [this, ins = inputs, lists = outputs]() mutable {
    const at::Tensor mine = concatenated(ins);
    at::Tensor all = at::empty({getSize() * mine.numel()}, mine.options());
    allgather_now(mine, all);
    for (auto& list : lists) split_into(all, list);
  });
}

c10::intrusive_ptr<c10d::Work> process_group::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                  std::vector<at::Tensor>& inputs,
                                                                  const c10d::AllgatherOptions&) {
  check_one_dtype(inputs, "allgather_coalesced");
  require(outputs.size() == static_cast<std::size_t>(getSize()), comm_errc::bad_argument,
          "ferry: allgather_coalesced takes ", getSize(), " output lists, one per rank, not ", outputs.size());
  std::vector<at::Tensor> outs;  // rank by rank, input by input: the order of the gathered values
  for (const auto& list : outputs) {
    require(list.size() == inputs.size(), comm_errc::bad_argument, "ferry: allgather_coalesced's output lists must ",
            "hold one tensor per input, ", inputs.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
      check_tensor(list[i], "allgather_coalesced");
      require(list[i].numel() == inputs[i].numel() && list[i].scalar_type() == inputs[i].scalar_type(),
              comm_errc::bad_argument, "ferry: allgather_coalesced's output ", i,
              " must have input ", i, "'s size and dtype");
      outs.push_back(list[i]);
    }
  }
  return enqueue(OpType::ALLGATHER_COALESCED, outs, [this, ins = inputs, outs]() mutable {
    const at::Tensor mine = concatenated(ins);
    at::Tensor all = at::empty({getSize() * mine.numel()}, mine.options());
    allgather_now(mine, all);
    split_into(all, outs);
  });
}

c10::intrusive_ptr<c10d::Work> process_group::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                              const c10d::AllgatherOptions&) {
  check_tensor(input, "_allgather_base");
  check_tensor(output, "_allgather_base");
  require(output.numel() == getSize() * input.numel() && output.scalar_type() == input.scalar_type(),
          comm_errc::bad_argument,
          "ferry: _allgather_base's output must hold world size times the input, of its dtype");
  return enqueue(OpType::_ALLGATHER_BASE, {output}, [this, in = input, out = output]() mutable {
    at::Tensor mine = in.contiguous();
    on_dense(out, [&](at::Tensor& d) { allgather_now(mine, d); });
  });
}

c10::intrusive_ptr<c10d::Work> process_group::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::GatherOptions& opts) {
  const at::Tensor& in = one_tensor(inputs, "gather");
  check_root(opts.rootRank, "gather to");
  std::vector<at::Tensor> outs;
  if (getRank() == opts.rootRank) {
    require(outputs.size() == 1 && outputs[0].size() == static_cast<std::size_t>(getSize()), comm_errc::bad_argument,
            "ferry: gather's root takes one list of ", getSize(), " output tensors");
    outs = outputs[0];
    check_like(outs, in, "gather", "outputs", "input");
  } else {
    require(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), comm_errc::bad_argument,
            "ferry: gather takes output tensors on the root only");
  }
  // An allgather whose result only the root keeps.
  return enqueue(OpType::GATHER, outs, [this, in, outs]() mutable {
    at::Tensor mine = in.contiguous();
    at::Tensor all = at::empty({getSize() * in.numel()}, in.options());
    allgather_now(mine, all);
    if (!outs.empty()) split_into(all, outs);
  });
}

c10::intrusive_ptr<c10d::Work> process_group::scatter(std::vector<at::Tensor>& outputs,
                                                      std::vector<std::vector<at::Tensor>>& inputs,
                                                      const c10d::ScatterOptions& opts) {
  at::Tensor out = one_tensor(outputs, "scatter");
  check_root(opts.rootRank, "scatter from");
  std::vector<at::Tensor> ins;
  if (getRank() == opts.rootRank) {
    require(inputs.size() == 1 && inputs[0].size() == static_cast<std::size_t>(getSize()), comm_errc::bad_argument,
            "ferry: scatter's root takes one list of ", getSize(), " input tensors");
    ins = inputs[0];
    check_like(ins, out, "scatter", "inputs", "output");
  }
  // A broadcast of the root's concatenated inputs; each rank keeps its piece.
  const auto root = static_cast<std::uint32_t>(opts.rootRank);
  return enqueue(OpType::SCATTER, {out}, [this, out, ins, root]() mutable {
    at::Tensor all = ins.empty() ? at::empty({getSize() * out.numel()}, out.options()) : concatenated(ins);
    broadcast_now(all, root);
    out.copy_(all.narrow(0, getRank() * out.numel(), out.numel()).view(out.sizes()));
  });
}

c10::intrusive_ptr<c10d::Work> process_group::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  at::Tensor out = one_tensor(outputs, "reduce_scatter");
  require(inputs.size() == 1 && inputs[0].size() == static_cast<std::size_t>(getSize()), comm_errc::bad_argument,
          "ferry: reduce_scatter takes one list of ", getSize(), " input tensors");
  // Pieces may differ in size (torch's reduce_scatter_v): input i is what
  // rank i keeps, so this rank's input must have its output's size, and
  // every rank must pass the same sizes in the same order (as with gloo,
  // a rank that does not is a bug its peers cannot see).
  for (const at::Tensor& t : inputs[0]) {
    check_tensor(t, "reduce_scatter");
    require(t.scalar_type() == out.scalar_type(), comm_errc::bad_argument,
            "ferry: reduce_scatter's inputs must have the output's dtype, ", out.scalar_type(), ", not ",
            t.scalar_type());
  }
  require(inputs[0][static_cast<std::size_t>(getRank())].numel() == out.numel(), comm_errc::bad_argument,
          "ferry: reduce_scatter's input ", getRank(), " (this rank's piece) must have the output's size, ",
          out.numel(), " elements");
  check_op(opts.reduceOp, out.scalar_type(), "reduce_scatter");
  std::vector<std::size_t> counts;
  for (const at::Tensor& t : inputs[0]) counts.push_back(static_cast<std::size_t>(t.numel()));
  const ReduceOp op = opts.reduceOp;
  return enqueue(OpType::REDUCE_SCATTER, {out}, [this, out, ins = inputs[0], op, counts]() mutable {
    reduce_scatter_now(concatenated(ins), counts, out, op);
  });
}

c10::intrusive_ptr<c10d::Work> process_group::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::ReduceScatterOptions& opts) {
  check_tensor(input, "_reduce_scatter_base");
  check_tensor(output, "_reduce_scatter_base");
  require(input.numel() == getSize() * output.numel() && output.scalar_type() == input.scalar_type(),
          comm_errc::bad_argument,
          "ferry: _reduce_scatter_base's input must hold world size times the output, of its dtype");
  check_op(opts.reduceOp, output.scalar_type(), "_reduce_scatter_base");
  const ReduceOp op = opts.reduceOp;
  const std::vector<std::size_t> counts(static_cast<std::size_t>(getSize()), static_cast<std::size_t>(output.numel()));
  return enqueue(OpType::_REDUCE_SCATTER_BASE, {output}, [this, out = output, in = input, op, counts]() mutable {
    reduce_scatter_now(in.reshape({-1}).contiguous(), counts, out, op);
  });
}

// Each pair as _allgather_base and _reduce_scatter_base do it, in turn, in
// one task: the outputs are ready together.
c10::intrusive_ptr<c10d::Work> process_group::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                              std::vector<at::Tensor>& inputs,
                                                                              const c10d::AllgatherOptions&) {
  require(outputs.size() == inputs.size(), comm_errc::bad_argument, "ferry: allgather_into_tensor_coalesced takes ",
          "one output per input, not ", outputs.size(), " for ", inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check_tensor(inputs[i], "allgather_into_tensor_coalesced");
    check_tensor(outputs[i], "allgather_into_tensor_coalesced");
    require(outputs[i].numel() == getSize() * inputs[i].numel() && outputs[i].scalar_type() == inputs[i].scalar_type(),
            comm_errc::bad_argument, "ferry: allgather_into_tensor_coalesced's output ", i,
            " must hold world size times input ", i, ", of its dtype");
  }
  return enqueue(OpType::ALLGATHER_COALESCED, outputs, [this, ins = inputs, outs = outputs]() mutable {
    for (std::size_t i = 0; i < ins.size(); ++i) {
      at::Tensor mine = ins[i].contiguous();
      on_dense(outs[i], [&](at::Tensor& d) { allgather_now(mine, d); });
    }
  });
}

c10::intrusive_ptr<c10d::Work> process_group::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                              std::vector<at::Tensor>& inputs,
                                                                              const c10d::ReduceScatterOptions& opts) {
  require(outputs.size() == inputs.size(), comm_errc::bad_argument, "ferry: reduce_scatter_tensor_coalesced takes ",
          "one output per input, not ", outputs.size(), " for ", inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check_tensor(inputs[i], "reduce_scatter_tensor_coalesced");
    check_tensor(outputs[i], "reduce_scatter_tensor_coalesced");
    require(inputs[i].numel() == getSize() * outputs[i].numel() && outputs[i].scalar_type() == inputs[i].scalar_type(),
            comm_errc::bad_argument, "ferry: reduce_scatter_tensor_coalesced's input ", i,
            " must hold world size times output ", i, ", of its dtype");
    check_op(opts.reduceOp, outputs[i].scalar_type(), "reduce_scatter_tensor_coalesced");
  }
  const ReduceOp op = opts.reduceOp;
  return enqueue(OpType::_REDUCE_SCATTER_BASE, outputs, [this, ins = inputs, outs = outputs, op]() mutable {
    for (std::size_t i = 0; i < ins.size(); ++i) {
      const std::vector<std::size_t> counts(static_cast<std::size_t>(getSize()),
                                            static_cast<std::size_t>(outs[i].numel()));
      reduce_scatter_now(ins[i].reshape({-1}).contiguous(), counts, outs[i], op);
    }
  });
}

c10::intrusive_ptr<c10d::Work> process_group::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  const at::Tensor& t = one_tensor_or_complex(tensors, "send");
  check_peer(dstRank, "send to");
  const at::Tensor dense = as_real(t).contiguous();
  auto w = c10::make_intrusive<p2p_work>(getRank(), OpType::SEND, t, dense);
  w->handle = comm_.start_send_bytes(dtype_of(dense), bytes_of(dense), static_cast<std::uint32_t>(dstRank), tag);
  return keep(w);
}

c10::intrusive_ptr<c10d::Work> process_group::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  check_peer(srcRank, "recv from");
  return post_recv(tensors, srcRank, tag);
}

c10::intrusive_ptr<c10d::Work> process_group::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return post_recv(tensors, std::nullopt, tag);
}

c10::intrusive_ptr<c10d::Work> process_group::post_recv(std::vector<at::Tensor>& tensors,
                                                        std::optional<int> src, int tag) {
  const at::Tensor& t = one_tensor_or_complex(tensors, "recv");
  // Into the tensor itself when it is contiguous, else into a copy.
  const at::Tensor real = as_real(t);
  const at::Tensor dense = real.is_contiguous() ? real : at::empty_like(real, at::MemoryFormat::Contiguous);
  auto w = c10::make_intrusive<p2p_work>(getRank(), src ? OpType::RECV : OpType::RECVANYSOURCE, real, dense);
  const std::optional<std::uint32_t> peer =
      src ? std::optional<std::uint32_t>(static_cast<std::uint32_t>(*src)) : std::nullopt;
  w->handle = comm_.start_recv_bytes(dtype_of(dense), bytes_of(dense), peer, tag, &w->source);
  return keep(w);
}

c10::intrusive_ptr<c10d::Work> process_group::keep(c10::intrusive_ptr<c10d::Work> w) {
  std::lock_guard lock(p2p_m_);
  std::erase_if(in_flight_, [](const c10::intrusive_ptr<c10d::Work>& x) { return x->isCompleted(); });
  in_flight_.push_back(w);
  return w;
}

c10::intrusive_ptr<c10d::Work> process_group::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                            std::vector<std::int64_t>& outputSplitSizes,
                                                            std::vector<std::int64_t>& inputSplitSizes,
                                                            const c10d::AllToAllOptions&) {
  check_tensor(as_real(input), "all_to_all");
  check_tensor(as_real(output), "all_to_all");
  require(input.scalar_type() == output.scalar_type(), comm_errc::bad_argument,
          "ferry: all_to_all takes input and output of one dtype, not ", input.scalar_type(), " and ",
          output.scalar_type());
  // Pieces are slices along the first dimension: `splits` of them, or
  // equal ones.
  const auto counts = [&](const at::Tensor& t, const std::vector<std::int64_t>& splits, const char* what) {
    const std::int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const std::int64_t row = rows == 0 ? 0 : as_real(t).numel() / rows;
    std::vector<std::size_t> c(static_cast<std::size_t>(getSize()));
    if (splits.empty()) {
      require(rows % getSize() == 0, comm_errc::bad_argument, "ferry: all_to_all's ", what, " has ", rows,
              " rows, which do not split evenly among ", getSize(), " ranks");
      std::fill(c.begin(), c.end(), static_cast<std::size_t>(rows / getSize() * row));
      return c;
    }
    require(splits.size() == c.size(), comm_errc::bad_argument, "ferry: all_to_all's ", what, " splits name ",
            splits.size(), " pieces for ", getSize(), " ranks");
    std::int64_t sum = 0;
    for (std::size_t r = 0; r < c.size(); ++r) {
      require(splits[r] >= 0 && splits[r] <= rows - sum, comm_errc::bad_argument, "ferry: all_to_all's ", what,
              " splits name more than its ", rows, " rows");
      sum += splits[r];
      c[r] = static_cast<std::size_t>(splits[r] * row);
    }
    require(sum == rows, comm_errc::bad_argument, "ferry: all_to_all's ", what, " splits add up to ", sum,
            " rows, not its ", rows);
    return c;
  };
  std::vector<std::size_t> send = counts(input, inputSplitSizes, "input");
  std::vector<std::size_t> recv = counts(output, outputSplitSizes, "output");
  return enqueue(OpType::ALLTOALL_BASE, {output},
                 [this, in = input, out = output, send = std::move(send), recv = std::move(recv)]() mutable {
                   const at::Tensor dense_in = as_real(in).contiguous();
                   at::Tensor real_out = as_real(out);
                   on_dense(real_out, [&](at::Tensor& d) {
                     comm_.all_to_all_bytes(dtype_of(dense_in), bytes_of(dense_in), send, bytes_of(d), recv);
                   });
                 });
}

c10::intrusive_ptr<c10d::Work> process_group::alltoall(std::vector<at::Tensor>& outputs,
                                                       std::vector<at::Tensor>& inputs, const c10d::AllToAllOptions&) {
  const auto check = [&](const std::vector<at::Tensor>& list, const char* what) {
    require(list.size() == static_cast<std::size_t>(getSize()), comm_errc::bad_argument, "ferry: all_to_all takes ",
            getSize(), " ", what, " tensors, one per rank, not ", list.size());
    for (const at::Tensor& t : list) {
      check_tensor(as_real(t), "all_to_all");
      require(t.scalar_type() == list[0].scalar_type(), comm_errc::bad_argument,
              "ferry: all_to_all takes tensors of one dtype, not ", list[0].scalar_type(), " and ", t.scalar_type());
    }
  };
  check(inputs, "input");
  check(outputs, "output");
  require(inputs[0].scalar_type() == outputs[0].scalar_type(), comm_errc::bad_argument,
          "ferry: all_to_all takes inputs and outputs of one dtype");
  std::vector<std::size_t> send, recv;
  for (const at::Tensor& t : inputs) send.push_back(static_cast<std::size_t>(as_real(t).numel()));
  for (const at::Tensor& t : outputs) recv.push_back(static_cast<std::size_t>(as_real(t).numel()));
  return enqueue(OpType::ALLTOALL, outputs,
                 [this, inputs, outputs, send = std::move(send), recv = std::move(recv)]() mutable {
                   std::vector<at::Tensor> real_in, real_out;
                   for (const at::Tensor& t : inputs) real_in.push_back(as_real(t));
                   for (const at::Tensor& t : outputs) real_out.push_back(as_real(t));
                   const at::Tensor flat_in = concatenated(real_in);
                   at::Tensor flat_out = at::empty({static_cast<std::int64_t>(std::accumulate(recv.begin(), recv.end(), std::size_t{0}))},
                                                   flat_in.options());
                   comm_.all_to_all_bytes(dtype_of(flat_in), bytes_of(flat_in), send, bytes_of(flat_out), recv);
                   split_into(flat_out, real_out);
                 });
}

c10::intrusive_ptr<c10d::Work> process_group::barrier(const c10d::BarrierOptions&) {
  return enqueue(OpType::BARRIER, {}, [this] { comm_.barrier(); });
}

c10::intrusive_ptr<c10d::Work> process_group::allreduce_compressed(at::Tensor tensor, comm::compression comp,
                                                                   std::int64_t key) {
  check_tensor(tensor, "allreduce_compressed");
  require(at::isFloatingType(tensor.scalar_type()), comm_errc::unsupported,
          "ferry: a compressed allreduce needs a floating-point tensor");
  return enqueue(OpType::ALLREDUCE, {tensor}, [this, t = tensor, comp, key]() mutable {
    on_dense(t, [&](at::Tensor& d) {
      if (d.scalar_type() != at::kFloat || comp == comm::compression::none) {
        allreduce_now(d, ReduceOp::AVG);
        return;
      }
      comm::error_feedback& feedback = feedback_[key];
      if (feedback.residual().size() != static_cast<std::size_t>(d.numel())) {
        feedback = comm::error_feedback(static_cast<std::size_t>(d.numel()));
      }
      comm_.allreduce(elements<float>(d), {.op = comm::reduce_op::avg, .comp = comp, .feedback = &feedback});
    });
  });
}

}  // namespace ferry::distributed
