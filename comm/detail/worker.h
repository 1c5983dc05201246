// ferry/comm/detail/worker.h: INTERNAL. The queue that runs a
// communicator's collectives one at a time, in call order, and the state
// behind a `work` handle. The torch backend's process group
// (python/distributed/process_group.h) runs its collectives on one too.
// Not part of the API.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "ferry/comm/communicator.h"

namespace ferry::comm {

struct work::state {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
};

namespace detail {

/// Runs tasks on one thread, started on first use, in submission order.
/// run_inline() runs a task on the calling thread once everything queued
/// before it has run, so inline and queued collectives keep call order.
class worker {
 public:
  worker() = default;
  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;
  /// stop().
  ~worker();

  /// Queues `task`; the state is marked done when it has run, with what it
  /// threw. Requires: stop() has not been called.
  std::shared_ptr<work::state> submit(std::function<void()> task);
  /// Queues `task`, which completes its state itself, now or later
  /// (complete()); if it throws, the state is done with that.
  std::shared_ptr<work::state> submit_deferred(std::function<void(const std::shared_ptr<work::state>&)> task);
  /// Marks `st` done with `error` (none: success) and wakes its waiters.
  static void complete(work::state& st, std::exception_ptr error = nullptr);

  /// `progress(may_wait)` runs on the worker thread, with tasks excluded,
  /// after every task and, while it returns true (work is pending, such as
  /// a receive), again and again while the queue is empty; with may_wait
  /// it may block a few milliseconds for input. Set before any submit().
  void set_progress(std::function<bool(bool may_wait)> progress) { progress_ = std::move(progress); }

  /// Blocks until every task submitted before the call has run and been
  /// destroyed (so what it captured is released).
  void drain();

  /// Runs what is queued, then joins the thread. Idempotent.
  void stop();

  template <class F>
  void run_inline(F&& task) {
    {
      std::unique_lock lock(queue_m_);
      queue_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
      ++inline_waiting_;  // the progress loop stands aside
    }
    std::unique_lock run(run_m_);
    {
      std::lock_guard lock(queue_m_);
      --inline_waiting_;
    }
    queue_cv_.notify_all();
    std::forward<F>(task)();
  }

 private:
  void loop();

  std::mutex queue_m_;
  std::condition_variable queue_cv_;
  std::deque<std::pair<std::function<void(const std::shared_ptr<work::state>&)>, std::shared_ptr<work::state>>>
      queue_;
  std::function<bool(bool)> progress_;
  bool busy_ = false;
  bool stopping_ = false;
  int inline_waiting_ = 0;  // run_inline() callers waiting for run_m_
  std::mutex run_m_;  // held while a task runs, inline or queued
  std::thread thread_;
};

}  // namespace detail
}  // namespace ferry::comm
