#include "trainer.h"

#include <signal.h>

#include <algorithm>
#include <charconv>
#include <exception>
#include <limits>
#include <optional>
#include <bit>
#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "collectives.h"
#include "ferry/checkpoint/torch/torch.h"
#include "ferry/codec/crc32c.h"
#include "ferry/comm/handshake.h"
#include "ferry/trainer/error.h"
#include "ferry/trainer/residual.h"
#include "ferry/trainer/sampler.h"
#include "gradient_sync.h"
#include "model.h"
#include "saver.h"
#include "ferry/wire/bulk.h"
#include "report.h"

namespace ferry::trainer {
namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

[[noreturn]] void fail(error_code code, std::string text) { throw ferry::exception(error(code, std::move(text))); }

std::span<float> floats(const at::Tensor& t) {
  return {t.data_ptr<float>(), static_cast<std::size_t>(t.numel())};
}

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
  auto t = ::torch::empty({static_cast<std::int64_t>(idx.size())}, ::torch::kInt64);
  std::copy(idx.begin(), idx.end(), t.data_ptr<std::int64_t>());
  return t;
}

class job {
 public:
  job(const train_config& c, collectives& comm, const train_data& data)
      : c_(c), comm_(comm), rank_(comm.rank()), world_(comm.world_size()), train_(data.train), test_(data.test) {
    ::torch::manual_seed(c.seed);
    const std::int64_t classes = std::max(train_.labels.max().item<std::int64_t>(), test_.labels.max().item<std::int64_t>()) + 1;
    model_ = std::make_shared<mlp_impl>(train_.images.size(1), c.hidden, std::max<std::int64_t>(classes, 2));
    params_ = model_->parameters();
    for (const auto layer : c.freeze) {
      for (const auto& prefix : {"fc" + std::to_string(layer) + ".", "bn" + std::to_string(layer) + "."}) {
        for (auto& item : model_->named_parameters()) {
          if (item.key().starts_with(prefix)) item.value().set_requires_grad(false);
        }
      }
    }
    std::vector<at::Tensor> trained;
    for (const auto& p : params_) {
      if (p.requires_grad()) trained.push_back(p);
    }
    for (const auto& item : model_->named_buffers()) {
      (item.value().is_floating_point() ? float_buffers_ : int_buffers_).push_back(item.value());
    }
    // LibTorch's Adam holds the state ferry's step updates, so checkpoints
    // carry it under LibTorch's names (ferry::torch::optimizer_state).
    adam_ = std::make_unique<::torch::optim::Adam>(params_, ::torch::optim::AdamOptions(c.lr));
    for (const auto& p : params_) {
      auto st = std::make_unique<::torch::optim::AdamParamState>();
      st->step(0);
      st->exp_avg(::torch::zeros_like(p));
      st->exp_avg_sq(::torch::zeros_like(p));
      moments_.push_back(st->exp_avg());
      moments_.push_back(st->exp_avg_sq());
      states_.push_back(st.get());
      adam_->state()[c10::guts::to_string(p.unsafeGetTensorImpl())] = std::move(st);
    }
    sync_ = std::make_unique<gradient_sync>(trained, comm_, c.compress, c.overlap, c.bucket_bytes);
    sampler_ = std::make_unique<distributed_sampler>(train_.count, world_, rank_, c.seed, true, c.drop_last);
    const auto per_rank = static_cast<std::int64_t>(sampler_->num_samples());
    steps_ = (per_rank + c.batch - 1) / c.batch;
    if (steps_ == 0) fail(errc::size_mismatch, "no training samples for this rank (fewer samples than ranks)");
    if (rank_ == 0) report_ = std::make_unique<reporter>(c.progress, c.metrics, !c.resume.empty());
    saver_ = std::make_unique<saver>(
        saver_options{.path = c.checkpoint,
                      .sharded = c.checkpoint_sharded || c.checkpoint_incremental,
                      .async = c.checkpoint_async,
                      .full_every = c.checkpoint_incremental ? c.checkpoint_full_every : 1,
                      .keep_copies = c.keep_saves},
        comm_, report_.get());
  }

  train_result run(clock_type::time_point started) {
    started_ = started;
    begin();
    train_result result;
    const std::int64_t steps = steps_;
    for (; epoch_ < c_.epochs; ++epoch_, step_ = 0) {
      sampler_->set_epoch(static_cast<std::uint64_t>(epoch_));
      const auto indices = sampler_->indices();
      const auto epoch_start = clock_type::now();
      double compute = 0, wait = 0;
      std::int64_t window_steps = 0;
      double window_loss = 0;
      for (; step_ < steps; ++step_) {
        const auto t = clock_type::now();
        const auto first = static_cast<std::size_t>(step_ * c_.batch);
        const auto idx = std::span(indices).subspan(first, std::min<std::size_t>(static_cast<std::size_t>(c_.batch), indices.size() - first));
        const auto rows = index_tensor(idx);
        const auto x = train_.images.index_select(0, rows);
        const auto y = train_.labels.index_select(0, rows);
        model_->train();
        // Gradients from the last step are dropped, not zeroed: backward
        // then stores new ones instead of adding to zeros.
        for (auto& p : params_) p.mutable_grad() = at::Tensor();
        sync_->before_backward();
        const auto out = model_->forward(x);
        const auto loss = ::torch::nn::functional::cross_entropy(out, y);
        loss.backward();
        const double waited = sync_->after_backward();
        saver_->before_update();  // a pending asynchronous save has copied what the step changes
        optimizer_step();
        const double l = loss.item<double>();
        partial_[0] += l * static_cast<double>(idx.size());
        partial_[1] += static_cast<double>(out.argmax(1).eq(y).sum().item<std::int64_t>());
        partial_[2] += static_cast<double>(idx.size());
        ++global_step_;
        compute += since(t) - waited;
        wait += waited;
        window_loss += l;
        ++window_steps;
        if (rank_ == 0) {
          if (c_.log_every > 0 && global_step_ % c_.log_every == 0) {
            report_->step_record(epoch_ + 1, step_ + 1, steps, global_step_, window_loss / static_cast<double>(window_steps));
            window_loss = 0;
            window_steps = 0;
          }
          const double elapsed = since(epoch_start);
          const double rate = static_cast<double>((step_ + 1) * c_.batch * world_) / elapsed;
          const double left = static_cast<double>((steps - step_ - 1) + (c_.epochs - epoch_ - 1) * steps) *
                              elapsed / static_cast<double>(step_ + 1);
          report_->progress(epoch_ + 1, c_.epochs, step_ + 1, steps, l, rate, left);
        }
        saver_->poll();  // a pending asynchronous save's progress
        if (c_.die_rank == rank_ && global_step_ == c_.die_at_step) raise(SIGKILL);
        if (c_.flip_rank == rank_ && global_step_ == c_.flip_at_step) {
          auto* weight = params_[0].data_ptr<float>();
          *weight = std::bit_cast<float>(std::bit_cast<std::uint32_t>(*weight) ^ 1u);
        }
        if (c_.checkpoint_steps > 0 && (step_ + 1) % c_.checkpoint_steps == 0 && step_ + 1 < steps) {
          ++step_;
          save(false);
          --step_;
        }
      }
      epoch_end(epoch_start, compute, wait, result);
    }
    saver_->finish();
    result.epochs = c_.epochs;
    return result;
  }

 private:
  // start: rank 0's model, optimizer and position, or its checkpoint's.
  void begin() {
    // Rank 0 tells the others whether it could, then fails with its reason.
    std::int64_t status = 0;
    std::exception_ptr why;
    if (rank_ == 0 && !c_.resume.empty()) {
      try {
        load(c_.resume);
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
    auto state = all_float_state();
    auto flat = pack(state);
    comm_.broadcast(std::span(flat));
    unpack(flat, state);
    std::vector<std::int64_t> ints = int_state();
    comm_.broadcast(std::span(ints));
    set_int_state(ints);
    // Per-rank state (error-feedback residuals, the partial epoch's
    // counters) continues only with the same number of ranks.
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
    saver_->prepare(save_state_now());
  }

  std::vector<at::Tensor> all_float_state() {
    std::vector<at::Tensor> s = params_;
    s.insert(s.end(), float_buffers_.begin(), float_buffers_.end());
    s.insert(s.end(), moments_.begin(), moments_.end());
    return s;
  }
  std::vector<std::int64_t> int_state() {
    std::vector<std::int64_t> v{epoch_, step_, global_step_, adam_step_};
    for (const auto& b : int_buffers_) v.push_back(b.item<std::int64_t>());
    return v;
  }
  void set_int_state(const std::vector<std::int64_t>& v) {
    epoch_ = v[0];
    step_ = v[1];
    global_step_ = v[2];
    adam_step_ = v[3];
    for (std::size_t i = 0; i < int_buffers_.size(); ++i) int_buffers_[i].fill_(v[4 + i]);
    for (auto* st : states_) st->step(adam_step_);
  }

  // ferry's Adam (trainer/adam.h) on LibTorch's state tensors.
  void optimizer_step() {
    ++adam_step_;
    const adam_options o{.lr = c_.lr};
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (params_[i].requires_grad()) {  // not frozen
        adam_step(floats(params_[i]), floats(params_[i].grad()), floats(moments_[2 * i]),
                  floats(moments_[2 * i + 1]), adam_step_, o);
      }
      states_[i]->step(adam_step_);
    }
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
      wire::convert_in_place(le, width, wire::host_order, wire::byte_order::little);
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
    ::torch::NoGradGuard no_grad;
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

  void epoch_end(clock_type::time_point epoch_start, double compute, double wait, train_result& result) {
    average_buffers();
    std::vector<double> all(5 * world_);
    const double mine[5] = {partial_[0], partial_[1], partial_[2], compute, wait};
    comm_.allgather(std::span<const double>(mine, 5), all);
    const double test_acc = evaluate();
    const auto crc = replica_crc();
    check_replicas(crc);
    epoch_stats s;
    s.epoch = epoch_ + 1;
    s.epochs = c_.epochs;
    double loss = 0, correct = 0, seen = 0;
    for (std::uint32_t r = 0; r < world_; ++r) {
      loss += all[5 * r];
      correct += all[5 * r + 1];
      seen += all[5 * r + 2];
      s.compute_s.push_back(all[5 * r + 3]);
      s.comm_s.push_back(all[5 * r + 4]);
    }
    s.train_loss = loss / seen;
    s.train_acc = correct / seen;
    s.test_acc = test_acc;
    s.seconds = since(epoch_start);
    s.images_per_s = seen / s.seconds;
    s.crc = crc;
    partial_ = {0, 0, 0};
    result.train_loss = s.train_loss;
    result.train_acc = s.train_acc;
    result.test_acc = s.test_acc;
    result.wall_s = s.wall_s = since(started_);
    if (rank_ == 0) report_->epoch_end(s);
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

  // The state a checkpoint holds, over the live tensors: the model, Adam's
  // state, per-rank rows (residuals, the partial epoch's counters) and, on
  // rank 0, its generator.
  save_state save_state_now() {
    save_state s;
    s.replicated = ferry::torch::state_dict(*model_);
    ferry::torch::optimizer_state(*adam_, *model_, s.replicated, s.metadata).value();
    if (rank_ == 0) {
      // LibTorch's generator state is its C struct's bytes: meaningful only
      // to a host of the same architecture (the job draws nothing from it
      // after start; the sampler's order is seeded by seed + epoch).
      s.alone["trainer.rng.cpu"] = at::detail::getDefaultCPUGenerator().get_state();
      s.metadata["trainer.rng.cpu.arch"] = std::string(comm::host_arch());
    }
    const auto res = sync_->residuals();
    if (!res.empty()) {
      // residuals() is a copy, gathered from the buckets.
      s.own.push_back({"trainer.residual", ::torch::from_blob(const_cast<float*>(res.data()),
                                                             {static_cast<std::int64_t>(res.size())}, ::torch::kFloat32)
                                               .clone()});
    }
    s.own.push_back({"trainer.partial", ::torch::from_blob(partial_.data(), {3}, ::torch::kFloat64)});
    position(s.metadata);
    // What only the optimizer step changes: everything but the buffers
    // (BatchNorm's statistics change in every forward).
    for (const auto& [name, t] : s.replicated) s.until_update.insert(name);
    for (const auto& item : model_->named_buffers()) s.until_update.erase(item.key());
    return s;
  }

  // Where the job is, for a checkpoint's metadata.
  void position(ferry::torch::metadata_map& meta) const {
    meta["trainer.epoch"] = std::to_string(epoch_);
    meta["trainer.step"] = std::to_string(step_);
    meta["trainer.global_step"] = std::to_string(global_step_);
    meta["trainer.world_size"] = std::to_string(world_);
    meta["trainer.config"] = to_json(c_);
    meta["trainer.producer"] = "ferry-train";
  }

  // Rank 0 only; throws on any problem, naming the file.
  void load(const std::filesystem::path& path) {
    auto l = ferry::torch::load(path).value();
    const auto where = path.string() + ": ";
    // A whole decimal number in [lo, hi], or bad_checkpoint naming the key.
    const auto number = [&](const std::string& key, std::int64_t lo, std::int64_t hi) {
      const auto it = l.metadata.find(key);
      if (it == l.metadata.end()) fail(trainer_errc::bad_checkpoint, where + "no " + key);
      std::int64_t v = 0;
      const auto& text = it->second;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) {
        fail(trainer_errc::bad_checkpoint, where + key + " is '" + text + "', not a whole number from " +
                                               std::to_string(lo) + " to " + std::to_string(hi));
      }
      return v;
    };
    constexpr auto most = std::numeric_limits<std::int64_t>::max();
    const auto world = number("trainer.world_size", 1, most);
    const auto epoch = number("trainer.epoch", 0, most);
    const auto step = number("trainer.step", 0, most);
    const auto global = number("trainer.global_step", 0, most);
    if (epoch >= c_.epochs) {
      fail(trainer_errc::bad_checkpoint, where + "already trained " + std::to_string(epoch) +
                                             " epoch(s); ask for more with --epochs");
    }
    // A mid-epoch position means a place in this epoch's shards, which
    // exist only for the world that wrote it.
    if (step != 0 && (world != world_ || step >= steps_)) {
      fail(trainer_errc::bad_checkpoint, where + "written in the middle of an epoch by " + std::to_string(world) +
                                             " rank(s) (step " + std::to_string(step) +
                                             "): resume it with that many ranks and the same --batch and --limit");
    }
    ferry::torch::tensor_map model, optim;
    at::Tensor rng, residual, partial;
    for (auto& [name, t] : l.tensors) {
      if (name == "trainer.rng.cpu") rng = t;
      else if (name == "trainer.residual") residual = t;
      else if (name == "trainer.partial") partial = t;
      else (name.starts_with("optimizer.") ? optim : model).emplace(name, t);
    }
    const auto in_file = [&](result<void, error> r) {
      if (!r) throw ferry::exception(r.error().wrap(path.string()));
    };
    in_file(ferry::torch::load_state_dict(*model_, model));
    in_file(ferry::torch::load_optimizer_state(*adam_, *model_, optim, l.metadata));
    // load_optimizer_state replaced the state objects: find them again
    // (every parameter must have one), contiguous for ferry's Adam step.
    moments_.clear();
    states_.clear();
    std::optional<std::int64_t> adam_step;
    for (const auto& item : model_->named_parameters()) {
      const auto it = adam_->state().find(c10::guts::to_string(item.value().unsafeGetTensorImpl()));
      if (it == adam_->state().end()) fail(trainer_errc::bad_checkpoint, where + "no Adam state for " + item.key());
      auto& st = static_cast<::torch::optim::AdamParamState&>(*it->second);
      if (adam_step && *adam_step != st.step()) {
        fail(trainer_errc::bad_checkpoint, where + "the parameters' Adam steps differ (" + item.key() + ")");
      }
      adam_step = st.step();
      st.exp_avg(st.exp_avg().contiguous());
      st.exp_avg_sq(st.exp_avg_sq().contiguous());
      moments_.push_back(st.exp_avg());
      moments_.push_back(st.exp_avg_sq());
      states_.push_back(&st);
    }
    adam_step_ = adam_step.value_or(0);
    if (adam_step_ < 0) fail(trainer_errc::bad_checkpoint, where + "a negative Adam step");
    const auto rng_arch = l.metadata.find("trainer.rng.cpu.arch");
    if (rng.defined() && rng_arch != l.metadata.end() && rng_arch->second == comm::host_arch()) {
      auto generator = at::detail::getDefaultCPUGenerator();
      generator.set_state(rng);
    }
    epoch_ = epoch;
    step_ = step;
    global_step_ = global;
    // Per-rank state: the residuals carried over (trainer/residual.h), the
    // partial epoch's counters only by the same world.
    const auto table = [](const at::Tensor& t, at::ScalarType type, std::int64_t rows, std::int64_t columns) {
      return t.defined() && t.scalar_type() == type && t.dim() == 2 && t.size(0) == rows && t.size(1) == columns;
    };
    if (table(residual, at::kFloat, world, static_cast<std::int64_t>(sync_->size()))) {
      const auto r = residual.contiguous();
      resumed_residuals_ = carry_residuals(std::span(r.data_ptr<float>(), static_cast<std::size_t>(r.numel())),
                                           static_cast<std::size_t>(world), sync_->size(), world_);
    }
    if (world == world_ && table(partial, at::kDouble, world_, 3)) {
      const auto p = partial.contiguous();
      resumed_partial_.assign(p.data_ptr<double>(), p.data_ptr<double>() + p.numel());
    }
    // Options that change the result: the run goes on with this run's.
    const auto saved = l.metadata.find("trainer.config");
    if (saved != l.metadata.end()) {
      const auto before = nlohmann::json::parse(saved->second, nullptr, false);
      const auto now = nlohmann::json::parse(to_json(c_));
      std::string changed;
      for (const char* key : {"hidden", "freeze", "lr", "batch", "seed", "drop_last", "limit", "compress"}) {
        if (before.is_object() && before.contains(key) && before[key] != now[key]) {
          changed += std::string(changed.empty() ? "" : ", ") + "--" + key + " " + before[key].dump() + " -> " +
                     now[key].dump();
        }
      }
      if (world != world_) changed += std::string(changed.empty() ? "" : ", ") + std::to_string(world) + " -> " +
                                      std::to_string(world_) + " ranks";
      if (!changed.empty()) {
        report_->line("note: resuming with other settings than the checkpoint's (" + changed +
                      "): training continues, but not as the uninterrupted run would have");
      }
    }
    report_->line("resumed from " + path.string() + " at epoch " + std::to_string(epoch_ + 1) + ", step " +
                  std::to_string(step_));
  }

  const train_config& c_;
  collectives& comm_;
  std::uint32_t rank_, world_;
  const data_split& train_;
  const data_split& test_;
  std::shared_ptr<mlp_impl> model_;
  std::vector<at::Tensor> params_, float_buffers_, int_buffers_, moments_;
  std::unique_ptr<::torch::optim::Adam> adam_;
  std::vector<::torch::optim::AdamParamState*> states_;
  std::unique_ptr<gradient_sync> sync_;
  std::unique_ptr<distributed_sampler> sampler_;
  std::unique_ptr<reporter> report_;
  std::unique_ptr<saver> saver_;
  std::int64_t steps_ = 0;  // per epoch, the same on every rank
  std::int64_t epoch_ = 0, step_ = 0, global_step_ = 0, adam_step_ = 0;
  std::array<double, 3> partial_{};  // loss sum, correct, seen in this epoch
  std::vector<float> resumed_residuals_;
  std::vector<double> resumed_partial_;
  clock_type::time_point started_;
};

}  // namespace

std::string to_json(const train_config& c) {
  const std::string comp(comm::name(c.compress));
  return nlohmann::json{{"data", c.data.string()}, {"hidden", c.hidden}, {"lr", c.lr}, {"batch", c.batch},
                        {"epochs", c.epochs}, {"seed", c.seed}, {"drop_last", c.drop_last}, {"limit", c.limit},
                        {"test_limit", c.test_limit}, {"compress", comp}, {"backend", c.backend},
                        {"overlap", c.overlap}, {"bucket_bytes", c.bucket_bytes},
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
