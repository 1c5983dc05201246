#include "saver.h"

#include "collectives.h"
#include "common.h"
#include "ferry/trainer/error.h"
#include "report.h"

namespace ferry::trainer {
namespace {

// What each rank says of its part of the pending save.
enum : std::int64_t { running = 0, written = 1, failed = 2 };

}  // namespace

at::Tensor staging::copy(const std::string& key, const at::Tensor& t) {
  const at::NoGradGuard no_grad;  // a parameter's values, not a step of its graph
  auto& slot = slots_[key];
  if (!slot.defined() || slot.sizes() != t.sizes() || slot.scalar_type() != t.scalar_type()) {
    slot = at::empty(t.sizes(), t.options().device(at::kCPU));
  }
  slot.copy_(t);
  used_[key] = true;
  return slot;
}

std::size_t staging::trim() {
  std::size_t bytes = 0;
  for (auto it = slots_.begin(); it != slots_.end();) {
    if (!used_[it->first]) {
      used_.erase(it->first);
      it = slots_.erase(it);
      continue;
    }
    used_[it->first] = false;
    bytes += static_cast<std::size_t>(it->second.nbytes());
    ++it;
  }
  return bytes;
}

saver::saver(saver_options o, collectives& comm, reporter* report)
    : o_(std::move(o)), comm_(comm), report_(report), rank_(comm.rank()), world_(comm.world_size()) {}

saver::~saver() {
  if (worker_.joinable()) worker_.join();
}

// Rank 0's file holds the per-rank rows as [world, n] tables: gathered here.
void saver::gather_rows(save_state& s) {
  for (const auto& row : s.own) {
    const auto n = row.values.numel();
    auto table = at::empty({static_cast<std::int64_t>(world_), n}, row.values.options());
    if (row.values.scalar_type() == at::kDouble) {
      comm_.allgather(std::span<const double>(row.values.data_ptr<double>(), static_cast<std::size_t>(n)),
                      std::span<double>(table.data_ptr<double>(), static_cast<std::size_t>(table.numel())));
    } else {
      comm_.allgather(std::span<const float>(row.values.data_ptr<float>(), static_cast<std::size_t>(n)),
                      std::span<float>(table.data_ptr<float>(), static_cast<std::size_t>(table.numel())));
    }
    s.alone.emplace(row.name, table);
  }
  s.own.clear();
}

// This rank's part of the checkpoint: a shard's entries, or (one file)
// everything on rank 0 and nothing elsewhere.
std::vector<shard_item> saver::entries_of(const save_state& s) {
  if (o_.sharded) {
    auto out = shard_entries(o_.path, rank_, world_, s.replicated, s.own, s.alone);
    out.insert(out.end(), s.pieces.begin(), s.pieces.end());
    return out;
  }
  std::vector<shard_item> out;
  if (rank_ != 0) return out;
  for (const auto* m : {&s.replicated, &s.alone}) {
    for (const auto& [name, t] : *m) out.push_back({name, t, true, {}, 0});
  }
  return out;
}

void saver::prepare(const save_state& s) {
  if (!o_.async) return;
  save_state all = s;
  if (!o_.sharded) gather_rows(all);
  // A snapshot now: the staging memory is allocated (and its pages
  // touched) before training, not during the first save's stall.
  const at::NoGradGuard no_grad;
  copies_.clear();
  for (const auto& e : entries_of(all)) snapshot(e);
  copies_.clear();
  staging_bytes_ = staging_.trim();
  const std::int64_t mine = static_cast<std::int64_t>(staging_bytes_);
  std::vector<std::int64_t> every(world_);
  comm_.allgather(std::span<const std::int64_t>(&mine, 1), every);
  if (report_ != nullptr) {
    std::int64_t most = 0;
    for (const auto b : every) most = std::max(most, b);
    char text[160];
    std::snprintf(text, sizeof text,
                  "asynchronous checkpoints: %.1f MiB of staging memory on the rank that holds most (%.1f MiB here)",
                  static_cast<double>(most) / (1 << 20), static_cast<double>(staging_bytes_) / (1 << 20));
    report_->line(text);
  }
}

void saver::start(std::function<void()> work) {
  if (worker_.joinable()) worker_.join();
  failure_ = nullptr;
  finished_.store(false, std::memory_order_release);
  worker_ = std::thread([this, work = std::move(work)] {
    try {
      work();
    } catch (...) {  // the next poll() throws it
      failure_ = std::current_exception();
    }
    copied_.store(true, std::memory_order_release);
    copied_.notify_all();
    finished_.store(true, std::memory_order_release);
  });
}

at::Tensor saver::snapshot(const shard_item& e) {
  const auto key = std::make_tuple(static_cast<const void*>(e.values.data_ptr()), e.values.sizes().vec(),
                                   e.values.strides().vec(), static_cast<int>(e.values.scalar_type()));
  auto [it, fresh] = copies_.emplace(key, at::Tensor());
  if (fresh) it->second = staging_.copy(e.name, e.values);
  return it->second;
}

void saver::save(const save_state& state, const std::string& where, std::int64_t global_step) {
  const at::NoGradGuard no_grad;
  save_started_ = clock_type::now();
  finish();  // the save before this one is published first
  save_state s = state;
  if (!o_.sharded) gather_rows(s);
  where_ = where;
  global_step_ = global_step;
  metadata_ = s.metadata;
  stall_s_ = poll_s_ = 0;
  bytes_ = 0;
  save_id_ = o_.sharded ? agree_save_id(comm_) : std::string();
  // Every rank decides alike: they publish together.
  incremental_ = previous_.has_value() && since_full_ + 1 < o_.full_every;
  entries_ = entries_of(s);
  started_ = clock_type::now();
  const auto write = [this] {
    if (o_.sharded) {
      written_ = write_shard(o_.path, save_id_, rank_, world_, entries_, o_.full_every > 1,
                             incremental_ ? &*previous_ : nullptr);
      record_ = written_->encode();
    } else if (rank_ == 0) {
      ferry::libtorch::tensor_map all;
      for (const auto& e : entries_) all.emplace(e.name, e.values);
      ferry::libtorch::save(o_.path, all, metadata_).value();
    }
  };
  phase_ = phase::writing;
  if (!o_.async) {
    // Written here, then the same exchange with nothing left to wait for.
    failure_ = nullptr;
    try {
      write();
    } catch (...) {
      failure_ = std::current_exception();
    }
    finish();
    return;
  }
  copies_.clear();
  for (auto& e : entries_) {
    if (!s.until_update.contains(e.name)) e.values = snapshot(e);
  }
  copied_.store(false, std::memory_order_release);
  start([this, write, later = std::move(s.until_update)] {
    for (auto& e : entries_) {
      if (later.contains(e.name)) e.values = snapshot(e);
    }
    staging_bytes_ = staging_.trim();
    copies_.clear();
    copied_.store(true, std::memory_order_release);
    copied_.notify_all();
    write();
  });
  stall_s_ = since(save_started_);
}

void saver::before_update() {
  if (copied_.load(std::memory_order_acquire)) return;
  const auto t0 = clock_type::now();
  copied_.wait(false, std::memory_order_acquire);
  stall_s_ += since(t0);
}

void saver::poll() {
  if (phase_ == phase::none) return;
  const auto t0 = clock_type::now();
  exchange(false);
  poll_s_ += since(t0);
}

void saver::finish() {
  while (phase_ != phase::none) exchange(true);
}

void saver::exchange(bool wait) {
  if (wait && worker_.joinable()) worker_.join();
  const bool over = finished_.load(std::memory_order_acquire);
  // record_ is the background thread's until it is over.
  const std::int64_t mine[2] = {!over ? running : failure_ ? failed : written,
                                over ? static_cast<std::int64_t>(record_.size()) : 0};
  std::vector<std::int64_t> all(2 * world_);
  comm_.allgather(std::span<const std::int64_t>(mine), all);
  bool all_written = true;
  for (std::uint32_t r = 0; r < world_; ++r) {
    if (all[2 * r] == failed) {
      phase_ = phase::none;
      if (r == rank_) std::rethrow_exception(failure_);
      throw ferry::exception(
          error(trainer_errc::save_failed, o_.path.string() + ": " + where_ + ", rank " + std::to_string(r)));
    }
    all_written = all_written && all[2 * r] == written;
  }
  if (!all_written) return;
  if (phase_ == phase::writing && o_.sharded) {
    std::vector<std::int64_t> sizes(world_);
    for (std::uint32_t r = 0; r < world_; ++r) sizes[r] = all[2 * r + 1];
    auto records = gather_records(comm_, record_, sizes);
    record_.clear();
    phase_ = phase::publishing;
    if (rank_ != 0) return;
    for (const auto& r : records) bytes_ += r.size;
    auto publish = [this, records = std::move(records)] {
      checkpoint::commit_set(o_.path, save_id_, world_, records, metadata_).value();
    };
    if (o_.async) {
      start(std::move(publish));
      return;
    }
    try {  // thrown by the next exchange, on every rank
      publish();
    } catch (...) {
      failure_ = std::current_exception();
    }
    return;
  }
  done();
}

void saver::done() {
  phase_ = phase::none;
  entries_.clear();
  if (o_.full_every > 1 && written_) {
    previous_ = std::move(written_);
    since_full_ = incremental_ ? since_full_ + 1 : 0;
  }
  written_.reset();
  if (o_.keep_copies && rank_ == 0) {
    auto copy = o_.path;
    copy.replace_filename(o_.path.stem().string() + ".step" + std::to_string(global_step_) + ".ferry");
    std::filesystem::copy_file(o_.path, copy, std::filesystem::copy_options::overwrite_existing);
  }
  if (report_ == nullptr) return;
  std::error_code ec;
  if (!o_.sharded) bytes_ = std::filesystem::file_size(o_.path, ec);
  if (!o_.async) stall_s_ = since(save_started_);
  report_->checkpoint({.where = where_, .global_step = global_step_, .path = o_.path.string(), .async = o_.async, .sharded = o_.sharded,
                       .stall_s = stall_s_, .poll_s = poll_s_, .seconds = since(started_), .bytes = bytes_,
                       .staging_bytes = staging_bytes_});
}

}  // namespace ferry::trainer
