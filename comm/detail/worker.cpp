#include "ferry/comm/detail/worker.h"

#include <cassert>

namespace ferry::comm {

void work::wait() {
  if (!state_) return;
  std::unique_lock lock(state_->m);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool work::done() const {
  if (!state_) return true;
  std::lock_guard lock(state_->m);
  return state_->done;
}

namespace detail {

worker::~worker() { stop(); }

void worker::stop() {
  {
    std::lock_guard lock(queue_m_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void worker::drain() {
  std::unique_lock lock(queue_m_);
  queue_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void worker::complete(work::state& st, std::exception_ptr error) {
  {
    std::lock_guard done(st.m);
    st.done = true;
    st.error = std::move(error);
  }
  st.cv.notify_all();
}

std::shared_ptr<work::state> worker::submit(std::function<void()> task) {
  return submit_deferred([task = std::move(task)](const std::shared_ptr<work::state>& st) {
    task();
    complete(*st);
  });
}

std::shared_ptr<work::state> worker::submit_deferred(
    std::function<void(const std::shared_ptr<work::state>&)> task) {
  auto st = std::make_shared<work::state>();
  {
    std::lock_guard lock(queue_m_);
    assert(!stopping_ && "worker::submit after stop()");
    queue_.emplace_back(std::move(task), st);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  queue_cv_.notify_all();
  return st;
}

void worker::loop() {
  std::unique_lock lock(queue_m_);
  bool pending = true;  // progress_ has work to do (as far as is known)
  for (;;) {
    while (queue_.empty() && !stopping_ && progress_ && pending) {
      if (inline_waiting_ > 0) {
        queue_cv_.wait(lock, [&] { return inline_waiting_ == 0 || stopping_ || !queue_.empty(); });
        continue;
      }
      lock.unlock();
      {
        std::lock_guard run(run_m_);
        pending = progress_(true);
      }
      lock.lock();
    }
    queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued ran
    auto [task, st] = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      std::lock_guard run(run_m_);
      task(st);
    } catch (...) {
      error = std::current_exception();
    }
    task = nullptr;  // what it captured goes before the worker counts as idle
    if (error) complete(*st, error);
    if (progress_) {
      std::lock_guard run(run_m_);
      pending = progress_(false);
    }
    lock.lock();
    busy_ = false;
    queue_cv_.notify_all();
  }
}

}  // namespace detail
}  // namespace ferry::comm
