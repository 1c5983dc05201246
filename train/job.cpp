#include "job.h"

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <exception>
#include <bit>
#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <utility>
#include <torch/torch.h>

#include "collectives.h"
#include "common.h"
#include "ferry/checkpoint/torch/torch.h"
#include "ferry/codec/crc32c.h"
#include "ferry/base/arch.h"
#include "ferry/trainer/error.h"
#include "ferry/trainer/sampler.h"
#include "gradient_sync.h"
#include "model.h"
#include "optimizer.h"
#include "resume.h"
#include "saver.h"
#include "zero.h"
#include "ferry/wire/bulk.h"
#include "report.h"

namespace ferry::trainer {
namespace {

using clock_type = std::chrono::steady_clock;

// Packs tensors (float32, contiguous) into one vector and back: the unit
// broadcast and allreduce move.
std::vector<float> pack(const std::vector<at::Tensor>& ts) {
  std::vector<float> out;
  for (const auto& t : ts) out.insert(out.end(), floats(t).begin(), floats(t).end());
  return out;
}
void unpack(std::span<const float> flat, const std::vector<at::Tensor>& ts) {
  std::size_t at = 0;
  for (const auto& t : ts) {
    std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(at), t.numel(), floats(t).begin());
    at += static_cast<std::size_t>(t.numel());
  }
}

at::Tensor index_tensor(std::span<const std::size_t> idx) {
  auto t = torch::empty({static_cast<std::int64_t>(idx.size())}, torch::kInt64);
  std::copy(idx.begin(), idx.end(), t.data_ptr<std::int64_t>());
  return t;
}

class job {
 public:
  // Setting up: the model, the optimizer, the gradient sync, this rank's
  // share of the data, the reports and the saver.
  job(const train_config& c, collectives& comm, const train_data& data)
      : c_(c), comm_(comm), rank_(comm.rank()), world_(comm.world_size()), train_(data.train), test_(data.test) {
    build_model();
    sync_ = std::make_unique<gradient_sync>(trained_parameters(), comm_, c.compress, c.overlap, c.bucket_bytes, c.zero);
    optim_ = std::make_unique<optimizer>(
        c.optimizer, params_, sync_->zero() > 0 ? owned_pieces(params_, trained_index_, *sync_, rank_) : std::vector<piece>{});
    sampler_ = std::make_unique<distributed_sampler>(train_.count, world_, rank_, c.seed, true, c.drop_last);
    const auto per_rank = static_cast<std::int64_t>(sampler_->num_samples());
    steps_ = (per_rank + c.batch - 1) / c.batch;
    if (steps_ == 0) fail(errc::size_mismatch, "no training samples for this rank (fewer samples than ranks)");
    if (rank_ == 0) report_ = std::make_unique<reporter>(c.progress, c.metrics, !c.resume.empty());
    saver_ = std::make_unique<saver>(
        saver_options{.path = c.checkpoint,
                      .sharded = c.checkpoint_sharded || c.checkpoint_incremental || sync_->zero() > 0,
                      .async = c.checkpoint_async,
                      .full_every = c.checkpoint_incremental ? c.checkpoint_full_every : 1,
                      .keep_copies = c.keep_saves},
        comm_, report_.get());
  }

  train_result run(clock_type::time_point started) {
    started_ = started;
    begin();
    train_result result;
    for (; epoch_ < c_.epochs; ++epoch_, step_ = 0) result = train_epoch();
    saver_->finish();
    profiler_.finish();
    if (rank_ == 0 && c_.profile > 0) report_->profile(profiler_.table(), profiler_.profiled_batches());
    result.epochs = c_.epochs;
    return result;
  }

 private:
  // The model from the seed (the same on every rank before rank 0's
  // values arrive), with --freeze's layers not trained; its buffers split
  // into floating point (averaged over ranks) and integers.
  void build_model() {
    torch::manual_seed(c_.seed);
    const std::int64_t classes = std::max(train_.labels.max().item<std::int64_t>(), test_.labels.max().item<std::int64_t>()) + 1;
    model_ = std::make_shared<mlp_impl>(train_.images.size(1), c_.hidden, std::max<std::int64_t>(classes, 2), c_.act,
                                        c_.batchnorm);
    params_ = model_->parameters();
    for (const auto layer : c_.freeze) {
      for (const auto& prefix : {"fc" + std::to_string(layer) + ".", "bn" + std::to_string(layer) + "."}) {
        for (auto& item : model_->named_parameters()) {
          if (item.key().starts_with(prefix)) item.value().set_requires_grad(false);
        }
      }
    }
    for (const auto& item : model_->named_buffers()) {
      (item.value().is_floating_point() ? float_buffers_ : int_buffers_).push_back(item.value());
    }
    std::ptrdiff_t trained = 0;
    for (const auto& p : params_) trained_index_.push_back(p.requires_grad() ? trained++ : -1);
  }

  // The parameters whose gradients are averaged (those not frozen).
  std::vector<at::Tensor> trained_parameters() const {
    std::vector<at::Tensor> trained;
    for (const auto& p : params_) {
      if (p.requires_grad()) trained.push_back(p);
    }
    return trained;
  }

  // Each parameter's averaged gradient for the step: all of it, or with
  // ZeRO this rank's piece; nothing for a frozen one.
  std::vector<std::span<const float>> gradients() const {
    std::vector<std::span<const float>> out(params_.size());
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto t = trained_index_[i];
      if (t < 0) continue;
      out[i] = sync_->zero() > 0 ? sync_->owned_grad(static_cast<std::size_t>(t)) : floats(params_[i].grad());
    }
    return out;
  }

  // Time and loss within the epoch under way, for the reports.
  struct epoch_progress {
    clock_type::time_point start = clock_type::now();
    double compute = 0, wait = 0;  // this rank's seconds computing, and waiting for the gradients
    double window_loss = 0;        // the loss summed since the last step record
    std::int64_t window_steps = 0;
  };

  // One epoch: this rank's batches in the sampler's order for the epoch,
  // then the epoch's end.
  train_result train_epoch() {
    sampler_->set_epoch(static_cast<std::uint64_t>(epoch_));
    const auto indices = sampler_->indices();
    epoch_progress progress;
    for (; step_ < steps_; ++step_) {
      const auto t = clock_type::now();
      const auto [l, waited] = train_step(indices);
      ++global_step_;
      progress.compute += since(t) - waited;
      progress.wait += waited;
      progress.window_loss += l;
      ++progress.window_steps;
      if (rank_ == 0) report_step(progress, l);
      saver_->poll();  // a pending asynchronous save's progress
      apply_test_hooks();
      if (c_.checkpoint_steps > 0 && (step_ + 1) % c_.checkpoint_steps == 0 && step_ + 1 < steps_) {
        ++step_;
        save(false);
        --step_;
      }
    }
    return epoch_end(progress);
  }

  struct step_result {
    double loss = 0;    // the batch's mean loss
    double waited = 0;  // seconds spent waiting for the gradients
  };

  // One step on this rank's next batch: forward and backward; at the last
  // batch of an update group (every one without --accumulate), gradients
  // averaged over ranks and ferry's optimizer step. The batch's loss and
  // correct answers are added to the epoch's counters.
  step_result train_step(std::span<const std::size_t> indices) {
    const auto batch = static_cast<std::size_t>(c_.batch);
    const auto first = static_cast<std::size_t>(step_) * batch;
    const auto idx = indices.subspan(first, std::min(batch, indices.size() - first));
    const auto rows = index_tensor(idx);
    const auto x = train_.images.index_select(0, rows);
    const auto y = train_.labels.index_select(0, rows);
    model_->train();
    // A group runs to the next multiple of --accumulate (or the epoch's
    // end); it starts where the last update left off.
    const auto group_end = std::min((step_ / c_.accumulate + 1) * c_.accumulate, steps_);
    const bool last = step_ + 1 == group_end;
    if (group_first_ < 0) {
      group_first_ = step_;
      // Gradients from the last update are dropped, not zeroed: backward
      // then stores new ones instead of adding to zeros.
      for (auto& p : params_) p.mutable_grad() = at::Tensor();
    }
    const auto group_rows =
        std::min(static_cast<std::size_t>(group_end) * batch, indices.size()) - static_cast<std::size_t>(group_first_) * batch;
    sync_->before_backward(last);
    if (rank_ == 0) profiler_.before_batch();
    at::Tensor out;
    {
      autocast_scope low(c_.precision);
      out = model_->forward(x);
    }
    const auto loss = torch::nn::functional::cross_entropy(out.to(at::kFloat), y);
    // Each batch's mean loss weighted by its share of the group's samples:
    // the summed gradients are the group's mean gradient.
    if (idx.size() == group_rows) {
      loss.backward();
    } else {
      (loss * (static_cast<double>(idx.size()) / static_cast<double>(group_rows))).backward();
    }
    double waited = 0;
    if (last) {
      waited = sync_->after_backward();
      saver_->before_update();  // a pending asynchronous save has copied what the step changes
      optim_->step(++updates_, gradients());
      waited += sync_->gather_params();  // ZeRO: every rank's updated pieces
      group_first_ = -1;
    }
    if (rank_ == 0) profiler_.after_batch();
    const double l = loss.item<double>();
    partial_[0] += l * static_cast<double>(idx.size());
    partial_[1] += static_cast<double>(out.argmax(1).eq(y).sum().item<std::int64_t>());
    partial_[2] += static_cast<double>(idx.size());
    return {l, waited};
  }

  // Rank 0, after each step: a step record every --log-every steps, and
  // the progress line.
  void report_step(epoch_progress& p, double l) {
    if (c_.log_every > 0 && global_step_ % c_.log_every == 0) {
      report_->step_record(epoch_ + 1, step_ + 1, steps_, global_step_, p.window_loss / static_cast<double>(p.window_steps));
      p.window_loss = 0;
      p.window_steps = 0;
    }
    const double elapsed = since(p.start);
    const double rate = static_cast<double>((step_ + 1) * c_.batch * world_) / elapsed;
    const double left = static_cast<double>((steps_ - step_ - 1) + (c_.epochs - epoch_ - 1) * steps_) *
                        elapsed / static_cast<double>(step_ + 1);
    report_->progress(epoch_ + 1, c_.epochs, step_ + 1, steps_, l, rate, left);
  }

  // The test hooks (ferry-train-hooked only; -1 in ferry-train): after the
  // chosen global step, this rank dies as a crash would, or flips one bit
  // of a parameter as a faulty replica would.
  void apply_test_hooks() {
    if (c_.die_rank == rank_ && global_step_ == c_.die_at_step) raise(SIGKILL);
    if (c_.flip_rank == rank_ && global_step_ == c_.flip_at_step) {
      auto* weight = params_[0].data_ptr<float>();
      *weight = std::bit_cast<float>(std::bit_cast<std::uint32_t>(*weight) ^ 1u);
    }
  }

  // start: rank 0's model, optimizer and position, or its checkpoint's.
  void begin() {
    restore_on_rank0();
    share_replicated_state();
    share_per_rank_state();
    saver_->prepare(save_state_now());
  }

  // --resume: rank 0 loads the checkpoint, tells the others whether it
  // could, then every rank fails when it could not (rank 0 with its reason).
  void restore_on_rank0() {
    std::int64_t status = 0;
    std::exception_ptr why;
    if (rank_ == 0 && !c_.resume.empty()) {
      try {
        resume(c_.resume);
      } catch (const c10::Error& e) {
        status = 1;
        why = std::make_exception_ptr(
            ferry::exception(error(trainer_errc::bad_checkpoint, c_.resume.string() + ": " + e.what_without_backtrace())));
      } catch (const std::exception&) {
        status = 1;
        why = std::current_exception();
      }
    }
    comm_.broadcast(std::span(&status, 1));
    if (status != 0) {
      if (rank_ == 0) std::rethrow_exception(why);
      fail(trainer_errc::bad_checkpoint, "rank 0 could not load " + c_.resume.string());
    }
  }

  // Rank 0 only: the checkpoint at `path` into the model, the optimizer's
  // state and the position (resume.h). Throws naming the file.
  // With ZeRO, the state goes into a whole optimizer whose pieces
  // share_replicated_state() then hands out.
  void resume(const std::filesystem::path& path) {
    if (optim_->sharded()) whole_optim_ = std::make_unique<optimizer>(c_.optimizer, params_);
    auto point = load_checkpoint(path, c_, world_, steps_, *model_, whole_optim_ ? *whole_optim_ : *optim_,
                                 sync_->size(), *report_);
    updates_ = point.updates;
    epoch_ = point.epoch;
    step_ = point.step;
    global_step_ = point.global_step;
    resumed_residuals_ = std::move(point.residuals);
    resumed_partial_ = std::move(point.partial);
  }

  // Every rank takes rank 0's parameters, buffers, optimizer state and
  // steps, and position: the replicas start identical.
  void share_replicated_state() {
    auto state = all_float_state();
    auto flat = pack(state);
    comm_.broadcast(std::span(flat));
    unpack(flat, state);
    std::vector<std::int64_t> ints = int_state();
    comm_.broadcast(std::span(ints));
    set_int_state(ints);
    // ZeRO, resuming: each rank's pieces of the state rank 0 loaded
    // (without --resume every state starts as zeros on every rank).
    if (optim_->sharded() && !c_.resume.empty()) share_pieces(comm_, whole_optim_.get(), *optim_, params_);
    whole_optim_.reset();
  }

  // Per-rank state (error-feedback residuals, the partial epoch's
  // counters) continues only with the same number of ranks.
  void share_per_rank_state() {
    std::vector<float> residuals(resumed_residuals_.size());
    std::int64_t n_res = static_cast<std::int64_t>(resumed_residuals_.size());
    comm_.broadcast(std::span(&n_res, 1));
    residuals.resize(static_cast<std::size_t>(n_res));
    if (rank_ == 0) residuals = resumed_residuals_;
    comm_.broadcast(std::span(residuals));
    if (!residuals.empty()) sync_->set_residuals(std::span(residuals).subspan(rank_ * sync_->size(), sync_->size()));
    std::vector<double> partial(3 * world_, 0.0);
    if (rank_ == 0 && resumed_partial_.size() == partial.size()) partial = resumed_partial_;
    comm_.broadcast(std::span(partial));
    std::copy_n(partial.begin() + 3 * rank_, 3, partial_.begin());
  }

  std::vector<at::Tensor> all_float_state() {
    std::vector<at::Tensor> s = params_;
    s.insert(s.end(), float_buffers_.begin(), float_buffers_.end());
    if (!optim_->sharded()) s.insert(s.end(), optim_->state().begin(), optim_->state().end());
    return s;
  }
  std::vector<std::int64_t> int_state() {
    std::vector<std::int64_t> v{epoch_, step_, global_step_, updates_};
    for (const auto& b : int_buffers_) v.push_back(b.item<std::int64_t>());
    return v;
  }
  void set_int_state(const std::vector<std::int64_t>& v) {
    epoch_ = v[0];
    step_ = v[1];
    global_step_ = v[2];
    updates_ = v[3];
    for (std::size_t i = 0; i < int_buffers_.size(); ++i) int_buffers_[i].fill_(v[4 + i]);
    optim_->set_step(updates_);
  }

  // BatchNorm's running statistics differ per rank (each saw its own
  // batches); their average over ranks is the model that is evaluated and
  // saved (pytorch #30718). num_batches_tracked is the same everywhere.
  void average_buffers() {
    auto flat = pack(float_buffers_);
    if (flat.empty()) return;
    comm_.start_allreduce_avg(flat, comm::compression::none, nullptr)();
    unpack(flat, float_buffers_);
  }

  // CRC32C of every parameter and buffer, in state-dict order, as
  // little-endian bytes: the same number on every rank of any architecture
  // exactly when the replicas are identical.
  std::uint32_t replica_crc() {
    std::uint32_t crc = 0;
    std::vector<std::byte> le;
    for (const auto& item : model_->named_parameters()) crc = crc_of(item.value(), crc, le);
    for (const auto& item : model_->named_buffers()) crc = crc_of(item.value(), crc, le);
    return crc;
  }
  static std::uint32_t crc_of(const at::Tensor& t, std::uint32_t crc, std::vector<std::byte>& le) {
    const auto c = t.contiguous();
    const auto width = static_cast<std::size_t>(c.element_size());
    le.resize(static_cast<std::size_t>(c.numel()) * width);
    std::memcpy(le.data(), c.data_ptr(), le.size());
    if (wire::host_order != wire::byte_order::little && width > 1) {
      // A complex element's parts are swapped each on its own.
      wire::convert_in_place(le, c.is_complex() ? width / 2 : width, wire::host_order, wire::byte_order::little);
    }
    return codec::crc32c_extend(crc, le);
  }
  void check_replicas(std::uint32_t crc) {
    std::vector<std::int64_t> all(world_);
    const std::int64_t mine = crc;
    comm_.allgather(std::span<const std::int64_t>(&mine, 1), all);
    if (const auto differ = ranks_unlike_rank0(all); !differ.empty()) {
      fail(trainer_errc::replica_mismatch, "replicas differ after epoch " + std::to_string(epoch_ + 1) + ": rank(s) " +
                                               differ + " disagree with rank 0 (CRC32C of parameters and buffers)");
    }
  }

  double evaluate() {
    torch::NoGradGuard no_grad;
    model_->eval();
    const auto shard = exact_shard(test_.count, world_, rank_);
    std::int64_t correct = 0;
    for (std::size_t at = 0; at < shard.size(); at += 1000) {
      const auto idx = std::span(shard).subspan(at, std::min<std::size_t>(1000, shard.size() - at));
      const auto rows = index_tensor(idx);
      correct += model_->forward(test_.images.index_select(0, rows))
                     .argmax(1)
                     .eq(test_.labels.index_select(0, rows))
                     .sum()
                     .item<std::int64_t>();
    }
    std::vector<std::int64_t> all(2 * world_);
    const std::int64_t mine[2] = {correct, static_cast<std::int64_t>(shard.size())};
    comm_.allgather(std::span<const std::int64_t>(mine, 2), all);
    std::int64_t c = 0, n = 0;
    for (std::uint32_t r = 0; r < world_; ++r) {
      c += all[2 * r];
      n += all[2 * r + 1];
    }
    return n == 0 ? 0.0 : static_cast<double>(c) / static_cast<double>(n);
  }

  // The end of an epoch, on every rank: BatchNorm statistics averaged, the
  // ranks' counters gathered, the test set evaluated, the replicas
  // compared, the epoch reported (rank 0) and saved when due.
  train_result epoch_end(const epoch_progress& p) {
    profiler_.finish();  // --profile covers training batches only, within the first epoch
    average_buffers();
    auto [s, seen] = gather_epoch_stats(p);
    s.test_acc = evaluate();
    s.crc = replica_crc();
    check_replicas(s.crc);
    s.seconds = since(p.start);
    s.images_per_s = seen / s.seconds;
    s.wall_s = since(started_);
    partial_ = {0, 0, 0};
    if (rank_ == 0) report_->epoch_end(s);
    save_if_due();
    double peak = 0;
    for (const auto& m : s.memory) peak = std::max(peak, m.peak_rss);
    return {.wall_s = s.wall_s, .train_loss = s.train_loss, .train_acc = s.train_acc, .test_acc = s.test_acc,
            .peak_rss_bytes = static_cast<std::uint64_t>(peak)};
  }

  // Every rank's counters and times for the epoch: the loss and accuracy
  // over all ranks' samples, compute and wait per rank; and the samples
  // all ranks trained on.
  std::pair<epoch_stats, double> gather_epoch_stats(const epoch_progress& p) {
    constexpr std::size_t n = 9;
    std::vector<double> all(n * world_);
    const auto m = memory();
    const double mine[n] = {partial_[0], partial_[1], partial_[2], p.compute, p.wait,
                            m.peak_rss, m.params, m.grads, m.optimizer};
    comm_.allgather(std::span<const double>(mine, n), all);
    epoch_stats s;
    s.epoch = epoch_ + 1;
    s.epochs = c_.epochs;
    double loss = 0, correct = 0, seen = 0;
    for (std::uint32_t r = 0; r < world_; ++r) {
      const double* row = all.data() + n * r;
      loss += row[0];
      correct += row[1];
      seen += row[2];
      s.compute_s.push_back(row[3]);
      s.comm_s.push_back(row[4]);
      s.memory.push_back({row[5], row[6], row[7], row[8]});
    }
    s.train_loss = loss / seen;
    s.train_acc = correct / seen;
    return {s, seen};
  }

  // This rank's memory: its peak resident set so far (getrusage), and the
  // bytes of the parameters, the gradients (with the exchange's flat
  // buffer) and the optimizer state it holds.
  rank_memory memory() const {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    rank_memory m;
    m.peak_rss = static_cast<double>(u.ru_maxrss) * 1024;  // KiB on Linux
    for (const auto& p : params_) {
      m.params += static_cast<double>(p.nbytes());
      if (p.grad().defined()) m.grads += static_cast<double>(p.grad().nbytes());
    }
    m.grads += static_cast<double>(sync_->held_bytes());
    m.optimizer = static_cast<double>(optim_->state_bytes());
    return m;
  }

  // A checkpoint at the end of the epoch when --checkpoint-every says so,
  // and after the last.
  void save_if_due() {
    const bool last = epoch_ + 1 == c_.epochs;
    if (last || (c_.checkpoint_every > 0 && (epoch_ + 1) % c_.checkpoint_every == 0)) {
      ++epoch_;
      step_ = 0;
      save(true);
      --epoch_;
    }
  }

  // Every rank takes part: BatchNorm statistics are averaged first (at a
  // step within an epoch), then saver.h writes what this rank writes.
  void save(bool averaged) {
    if (!averaged) average_buffers();
    saver_->save(save_state_now(), step_ == 0 ? "epoch " + std::to_string(epoch_)
                                              : "epoch " + std::to_string(epoch_ + 1) + " step " + std::to_string(step_),
                 global_step_);
  }

  // The state a checkpoint holds, over the live tensors: the model, the
  // optimizer's state, per-rank rows (residuals, the partial epoch's counters) and, on
  // rank 0, its generator.
  save_state save_state_now() {
    save_state s;
    s.replicated = ferry::libtorch::state_dict(*model_);
    ferry::libtorch::tensor_map optimizer_tensors;
    ferry::libtorch::optimizer_state(optim_->libtorch(), *model_, optimizer_tensors, s.metadata).value();
    if (optim_->sharded()) move_to_parts(optimizer_tensors, *optim_, *model_, s.pieces);
    s.replicated.merge(optimizer_tensors);
    if (rank_ == 0) {
      // LibTorch's generator state is its C struct's bytes: meaningful only
      // to a host of the same architecture (the job draws nothing from it
      // after start; the sampler's order is seeded by seed + epoch).
      s.alone["trainer.rng.cpu"] = at::detail::getDefaultCPUGenerator().get_state();
      s.metadata["trainer.rng.cpu.arch"] = std::string(base::host_arch());
    }
    const auto res = sync_->residuals();
    if (!res.empty()) {
      // residuals() is a copy, gathered from the buckets.
      s.own.push_back({"trainer.residual", torch::from_blob(const_cast<float*>(res.data()),
                                                             {static_cast<std::int64_t>(res.size())}, torch::kFloat32)
                                               .clone()});
    }
    s.own.push_back({"trainer.partial", torch::from_blob(partial_.data(), {3}, torch::kFloat64)});
    position(s.metadata);
    // What only the optimizer step changes: everything but the buffers
    // (BatchNorm's statistics change in every forward).
    for (const auto& [name, t] : s.replicated) s.until_update.insert(name);
    for (const auto& p : s.pieces) s.until_update.insert(p.name);
    for (const auto& item : model_->named_buffers()) s.until_update.erase(item.key());
    return s;
  }

  // Where the job is, for a checkpoint's metadata.
  void position(ferry::libtorch::metadata_map& meta) const {
    meta["trainer.epoch"] = std::to_string(epoch_);
    meta["trainer.step"] = std::to_string(step_);
    meta["trainer.global_step"] = std::to_string(global_step_);
    meta["trainer.updates"] = std::to_string(updates_);
    meta["trainer.world_size"] = std::to_string(world_);
    meta["trainer.config"] = to_json(c_);
    meta["trainer.producer"] = "ferry-train";
  }

  const train_config& c_;
  collectives& comm_;
  std::uint32_t rank_, world_;
  const data_split& train_;
  const data_split& test_;
  std::shared_ptr<mlp_impl> model_;
  std::vector<at::Tensor> params_, float_buffers_, int_buffers_;
  std::unique_ptr<optimizer> optim_;
  std::unique_ptr<optimizer> whole_optim_;  // ZeRO, rank 0, resuming: the checkpoint's whole state
  std::vector<std::ptrdiff_t> trained_index_;  // per parameter: its index among the trained ones, or -1
  std::unique_ptr<gradient_sync> sync_;
  std::unique_ptr<distributed_sampler> sampler_;
  std::unique_ptr<reporter> report_;
  std::unique_ptr<saver> saver_;
  batch_profiler profiler_{c_.profile};
  std::int64_t steps_ = 0;  // per epoch, the same on every rank
  std::int64_t epoch_ = 0, step_ = 0, global_step_ = 0;
  std::int64_t updates_ = 0;      // optimizer steps taken
  std::int64_t group_first_ = -1;  // the first step of the update group under way (-1: none)
  std::array<double, 3> partial_{};  // loss sum, correct, seen in this epoch
  std::vector<float> resumed_residuals_;
  std::vector<double> resumed_partial_;
  clock_type::time_point started_;
};

}  // namespace

std::string to_json(const train_config& c) {
  const std::string comp(comm::name(c.compress));
  const auto& o = c.optimizer;
  return nlohmann::json{{"data", c.data.string()}, {"hidden", c.hidden}, {"activation", name(c.act)},
                        {"batchnorm", c.batchnorm}, {"optimizer", name(o.kind)}, {"lr", o.lr},
                        {"momentum", o.momentum}, {"dampening", o.dampening}, {"nesterov", o.nesterov},
                        {"weight_decay", o.weight_decay}, {"alpha", o.alpha}, {"centered", o.centered},
                        {"eps", o.eps}, {"accumulate", c.accumulate},
                        {"precision", c.precision == at::kBFloat16 ? "bf16" : c.precision == at::kHalf ? "f16" : "f32"},
                        {"batch", c.batch},
                        {"epochs", c.epochs}, {"seed", c.seed}, {"drop_last", c.drop_last}, {"limit", c.limit},
                        {"test_limit", c.test_limit}, {"compress", comp}, {"backend", c.backend},
                        {"overlap", c.overlap}, {"bucket_bytes", c.bucket_bytes}, {"zero", c.zero},
                        {"checkpoint_every", c.checkpoint_every}, {"checkpoint_steps", c.checkpoint_steps},
                        {"checkpoint_sharded", c.checkpoint_sharded},
                        {"checkpoint_async", c.checkpoint_async},
                        {"checkpoint_incremental", c.checkpoint_incremental},
                        {"checkpoint_full_every", c.checkpoint_full_every}, {"freeze", c.freeze}}
      .dump();
}

train_result train(const train_config& c, collectives& comm, const train_data& data, clock_type::time_point started) {
  return job(c, comm, data).run(started);
}

}  // namespace ferry::trainer
