#include "gradient_sync.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "ferry/base/error.h"
#include "common.h"

namespace ferry::trainer {
namespace {

using clock_type = std::chrono::steady_clock;

[[noreturn]] void missing(const char* what) { throw ferry::exception(error(errc::bad_value, what)); }

}  // namespace

gradient_sync::gradient_sync(const std::vector<at::Tensor>& params, collectives& comm, comm::compression comp,
                             bool overlap, std::size_t bucket_bytes, int zero)
    : comm_(comm),
      comp_(comp),
      overlap_(overlap && comm.world_size() > 1),
      alone_(comm.world_size() == 1),
      zero_(alone_ ? 0 : zero) {
  for (auto it = params.rbegin(); it != params.rend(); ++it) order_.push_back(*it);
  bucket_of_.resize(order_.size());
  offset_.resize(order_.size());
  for (std::size_t k = 0; k < order_.size(); ++k) {
    const auto n = static_cast<std::size_t>(order_[k].numel());
    if (buckets_.empty() || (overlap_ && buckets_.back().count > 0 && (buckets_.back().count + n) * 4 > bucket_bytes)) {
      auto& b = buckets_.emplace_back();
      b.offset = total_;
      b.param0 = k;
    }
    bucket_of_[k] = buckets_.size() - 1;
    offset_[k] = total_;
    buckets_.back().count += n;
    buckets_.back().params += 1;
    total_ += n;
  }
  for (auto& b : buckets_) feedback_.emplace_back(comp_ == comm::compression::none ? 0 : b.count);
  if (zero_ != 2) flat_.assign(total_, 0.0f);
  // Each parameter's piece: its part of its bucket's owned block.
  owned_.resize(order_.size());
  std::size_t kept = 0;
  for (auto& b : buckets_) {
    std::tie(b.first, b.size) = zero_ > 0 ? comm_.owned_block(b.count) : std::pair<std::size_t, std::size_t>{0, b.count};
    b.kept = kept;
    kept += b.size;
  }
  if (zero_ == 2) kept_.assign(kept, 0.0f);
  for (std::size_t k = 0; k < order_.size(); ++k) {
    const auto& b = buckets_[bucket_of_[k]];
    const std::size_t start = offset_[k] - b.offset, end = start + static_cast<std::size_t>(order_[k].numel());
    const std::size_t lo = std::max(start, b.first), hi = std::min(end, b.first + b.size);
    if (lo < hi) owned_of(k) = {lo - start, hi - lo};
  }
  if (overlap_) {
    for (std::size_t k = 0; k < order_.size(); ++k) {
      auto acc = torch::autograd::impl::grad_accumulator(order_[k]);
      acc->add_post_hook(std::make_unique<ready_hook>(this, k));
      accumulators_.push_back(std::move(acc));
    }
  }
}

void gradient_sync::before_backward(bool sync) {
  syncing_ = sync;
  for (auto& b : buckets_) {
    b.ready = 0;
    b.wait = nullptr;
    b.launched = b.done = false;
  }
  next_ = 0;
}

double gradient_sync::after_backward() {
  if (alone_) return 0;  // one rank's average is its own gradient
  const auto t = clock_type::now();
  if (!overlap_) {
    for (std::size_t k = 0; k < order_.size(); ++k) copy_in(k);
    for (std::size_t b = 0; b < buckets_.size(); ++b) launch(b);
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (!buckets_[b].launched) missing("a gradient bucket was never filled (a parameter without gradient)");
    finish(b);
  }
  if (zero_ == 0) {
    for (std::size_t k = 0; k < order_.size(); ++k) {
      auto& g = order_[k].mutable_grad();
      if (!g.is_contiguous()) g = g.contiguous();
      std::copy_n(flat_.begin() + static_cast<std::ptrdiff_t>(offset_[k]), g.numel(), g.data_ptr<float>());
    }
  }
  return since(t);
}

std::span<const float> gradient_sync::owned_grad(std::size_t i) const {
  const std::size_t k = order_.size() - 1 - i;
  const auto& b = buckets_[bucket_of_[k]];
  const auto p = owned_[i];
  if (p.count == 0) return {};
  if (zero_ == 2) return {kept_.data() + b.kept + (offset_[k] - b.offset + p.begin - b.first), p.count};
  return {flat_.data() + offset_[k] + p.begin, p.count};
}

double gradient_sync::gather_params() {
  if (zero_ == 0) return 0;
  const auto t = clock_type::now();
  // Stage 2 stages two buckets at a time; stage 1 sends from the flat
  // buffer, whose gradients the step has used.
  const std::size_t window = zero_ == 2 ? 2 : buckets_.size();
  const auto settle = [this](std::size_t b) {
    buckets_[b].wait();
    buckets_[b].wait = nullptr;
    scatter_params(b);
    buckets_[b].staged.reset();
  };
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (b >= window) settle(b - window);
    auto& bk = buckets_[b];
    float* data = data_of(bk);
    for (std::size_t k = bk.param0; k < bk.param0 + bk.params; ++k) {
      const auto p = owned_of(k);
      std::copy_n(order_[k].data_ptr<float>() + p.begin, p.count, data + (offset_[k] - bk.offset) + p.begin);
    }
    bk.wait = comm_.start_allgather_owned(std::span(data, bk.count));
  }
  for (std::size_t b = buckets_.size() - std::min(window, buckets_.size()); b < buckets_.size(); ++b) settle(b);
  return since(t);
}

std::size_t gradient_sync::held_bytes() const {
  std::size_t n = flat_.size() + kept_.size();
  for (const auto& f : feedback_) n += f.residual().size();
  return n * sizeof(float);
}

std::vector<float> gradient_sync::residuals() const {
  std::vector<float> out;
  for (const auto& f : feedback_) out.insert(out.end(), f.residual().begin(), f.residual().end());
  return out;
}

void gradient_sync::set_residuals(std::span<const float> r) {
  std::size_t at = 0;
  for (auto& f : feedback_) {
    std::copy_n(r.begin() + static_cast<std::ptrdiff_t>(at), f.residual().size(), f.residual().begin());
    at += f.residual().size();
  }
}

float* gradient_sync::data_of(bucket& b) {
  if (zero_ != 2) return flat_.data() + b.offset;
  if (!b.staged) b.staged.reset(new float[b.count]);  // written whole before it is read
  return b.staged.get();
}

void gradient_sync::copy_in(std::size_t k) {
  auto& param = order_[k];
  const auto& g = param.grad();
  if (!g.defined()) missing("a parameter has no gradient");
  auto& b = buckets_[bucket_of_[k]];
  std::copy_n(g.contiguous().data_ptr<float>(), g.numel(), data_of(b) + (offset_[k] - b.offset));
  if (zero_ == 2) param.mutable_grad() = at::Tensor();  // its copy is the gradient now
}

void gradient_sync::ready(std::size_t k) {
  if (!syncing_) return;
  copy_in(k);
  auto& b = buckets_[bucket_of_[k]];
  if (++b.ready < b.params) return;
  while (next_ < buckets_.size() && buckets_[next_].ready == buckets_[next_].params) launch(next_++);
}

void gradient_sync::launch(std::size_t b) {
  auto& bk = buckets_[b];
  const std::span<float> data(data_of(bk), bk.count);
  auto* feedback = comp_ == comm::compression::none ? nullptr : &feedback_[b];
  bk.wait = zero_ > 0 ? comm_.start_reduce_scatter_avg(data, comp_, feedback)
                      : comm_.start_allreduce_avg(data, comp_, feedback);
  bk.launched = true;
  // Stage 2 keeps two buckets staged: the one before last is kept now.
  if (zero_ == 2 && b >= 2) finish(b - 2);
}

void gradient_sync::finish(std::size_t b) {
  auto& bk = buckets_[b];
  if (bk.done) return;
  bk.wait();
  bk.wait = nullptr;
  bk.done = true;
  if (zero_ != 2) return;
  std::copy_n(bk.staged.get() + bk.first, bk.size, kept_.data() + bk.kept);
  bk.staged.reset();
}

void gradient_sync::scatter_params(std::size_t b) {
  auto& bk = buckets_[b];
  const float* data = data_of(bk);
  for (std::size_t k = bk.param0; k < bk.param0 + bk.params; ++k) {
    std::copy_n(data + (offset_[k] - bk.offset), order_[k].numel(), order_[k].data_ptr<float>());
  }
}

}  // namespace ferry::trainer
