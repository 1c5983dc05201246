#include "resume.h"

#include <charconv>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>

#include "ferry/checkpoint/torch/torch.h"
#include "ferry/base/arch.h"
#include "ferry/trainer/error.h"
#include "ferry/trainer/residual.h"
#include "common.h"

namespace ferry::trainer {
namespace {

// The checkpoint's position, checked against this run.
struct saved_position {
  std::int64_t world = 0, epoch = 0, step = 0, global_step = 0;
};

// A whole decimal number in [lo, hi] under `key`, or bad_checkpoint naming
// the key. `where` is "PATH: ".
std::int64_t metadata_number(const ferry::libtorch::metadata_map& meta, const std::string& where, const std::string& key,
                             std::int64_t lo, std::int64_t hi) {
  const auto it = meta.find(key);
  if (it == meta.end()) fail(trainer_errc::bad_checkpoint, where + "no " + key);
  std::int64_t v = 0;
  const auto& text = it->second;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) {
    fail(trainer_errc::bad_checkpoint, where + key + " is '" + text + "', not a whole number from " +
                                           std::to_string(lo) + " to " + std::to_string(hi));
  }
  return v;
}

saved_position read_position(const ferry::libtorch::metadata_map& meta, const std::string& where, const train_config& c,
                             std::uint32_t world, std::int64_t steps_per_epoch) {
  constexpr auto most = std::numeric_limits<std::int64_t>::max();
  saved_position p;
  p.world = metadata_number(meta, where, "trainer.world_size", 1, most);
  p.epoch = metadata_number(meta, where, "trainer.epoch", 0, most);
  p.step = metadata_number(meta, where, "trainer.step", 0, most);
  p.global_step = metadata_number(meta, where, "trainer.global_step", 0, most);
  if (p.epoch >= c.epochs) {
    fail(trainer_errc::bad_checkpoint, where + "already trained " + std::to_string(p.epoch) +
                                           " epoch(s); ask for more with --epochs");
  }
  // A mid-epoch position means a place in this epoch's shards, which
  // exist only for the world that wrote it.
  if (p.step != 0 && (p.world != world || p.step >= steps_per_epoch)) {
    fail(trainer_errc::bad_checkpoint, where + "written in the middle of an epoch by " + std::to_string(p.world) +
                                           " rank(s) (step " + std::to_string(p.step) +
                                           "): resume it with that many ranks and the same --batch and --limit");
  }
  return p;
}

// The checkpoint's tensors by owner: the model's, the optimizer's, and the
// trainer's own (LibTorch's generator, residuals, the partial epoch).
struct saved_tensors {
  ferry::libtorch::tensor_map model, optim;
  at::Tensor rng, residual, partial;
};

saved_tensors sort_tensors(const ferry::libtorch::tensor_map& tensors) {
  saved_tensors s;
  for (const auto& [name, t] : tensors) {
    if (name == "trainer.rng.cpu") s.rng = t;
    else if (name == "trainer.residual") s.residual = t;
    else if (name == "trainer.partial") s.partial = t;
    else (name.starts_with("optimizer.") ? s.optim : s.model).emplace(name, t);
  }
  return s;
}

// The optimizer steps taken: trainer.updates (checked against the steps
// the states record, where the kind records them), else the states' own.
std::int64_t updates_of(const ferry::libtorch::metadata_map& meta, const optimizer& optim, mlp_impl& model,
                        const std::string& where) {
  const auto recorded = optim.recorded_step(model);
  if (meta.contains("trainer.updates")) {
    const auto updates = metadata_number(meta, where, "trainer.updates", 0, std::numeric_limits<std::int64_t>::max());
    if (recorded && *recorded != updates) {
      fail(trainer_errc::bad_checkpoint, where + "trainer.updates is " + std::to_string(updates) + ", the " +
                                             std::string(name(optim.options().kind)) + " state's step " +
                                             std::to_string(*recorded));
    }
    return updates;
  }
  if (!recorded) fail(trainer_errc::bad_checkpoint, where + "no trainer.updates");
  return *recorded;
}

// LibTorch's generator state is its C struct's bytes: restored only on a
// host of the architecture that wrote it.
void restore_generator(const at::Tensor& rng, const ferry::libtorch::metadata_map& meta) {
  const auto rng_arch = meta.find("trainer.rng.cpu.arch");
  if (rng.defined() && rng_arch != meta.end() && rng_arch->second == base::host_arch()) {
    auto generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(rng);
  }
}

// Per-rank state: the residuals carried over (trainer/residual.h), the
// partial epoch's counters only by the same world.
void carry_per_rank_state(const saved_tensors& t, const saved_position& p, std::uint32_t world,
                          std::size_t residual_size, resume_point& out) {
  const auto table = [](const at::Tensor& x, at::ScalarType type, std::int64_t rows, std::int64_t columns) {
    return x.defined() && x.scalar_type() == type && x.dim() == 2 && x.size(0) == rows && x.size(1) == columns;
  };
  if (table(t.residual, at::kFloat, p.world, static_cast<std::int64_t>(residual_size))) {
    const auto r = t.residual.contiguous();
    out.residuals = carry_residuals(std::span(r.data_ptr<float>(), static_cast<std::size_t>(r.numel())),
                                    static_cast<std::size_t>(p.world), residual_size, world);
  }
  if (p.world == world && table(t.partial, at::kDouble, world, 3)) {
    const auto x = t.partial.contiguous();
    out.partial.assign(x.data_ptr<double>(), x.data_ptr<double>() + x.numel());
  }
}

// Options that change the result: the run goes on with this run's, and
// says which differ from the checkpoint's.
void note_changed_settings(const ferry::libtorch::metadata_map& meta, const train_config& c, std::int64_t saved_world,
                           std::uint32_t world, reporter& report) {
  const auto saved = meta.find("trainer.config");
  if (saved == meta.end()) return;
  const auto before = nlohmann::json::parse(saved->second, nullptr, false);
  const auto now = nlohmann::json::parse(to_json(c));
  std::string changed;
  for (const char* key : {"hidden", "activation", "batchnorm", "freeze", "lr", "momentum", "dampening", "nesterov",
                          "weight_decay", "alpha", "centered", "eps", "accumulate", "precision", "batch", "seed",
                          "drop_last",
                          "limit", "compress"}) {
    if (before.is_object() && before.contains(key) && before[key] != now[key]) {
      changed += std::string(changed.empty() ? "" : ", ") + "--" + key + " " + before[key].dump() + " -> " +
                 now[key].dump();
    }
  }
  if (saved_world != world) changed += std::string(changed.empty() ? "" : ", ") + std::to_string(saved_world) +
                                       " -> " + std::to_string(world) + " ranks";
  if (!changed.empty()) {
    report.line("note: resuming with other settings than the checkpoint's (" + changed +
                "): training continues, but not as the uninterrupted run would have");
  }
}

}  // namespace

resume_point load_checkpoint(const std::filesystem::path& path, const train_config& c, std::uint32_t world,
                             std::int64_t steps_per_epoch, mlp_impl& model, optimizer& optim,
                             std::size_t residual_size, reporter& report) {
  auto l = ferry::libtorch::load(path).value();
  const auto where = path.string() + ": ";
  const auto position = read_position(l.metadata, where, c, world, steps_per_epoch);
  const auto tensors = sort_tensors(l.tensors);
  const auto in_file = [&](result<void, error> r) {
    if (!r) throw ferry::exception(r.error().wrap(path.string()));
  };
  in_file(ferry::libtorch::load_state_dict(model, tensors.model));
  in_file(ferry::libtorch::load_optimizer_state(optim.libtorch(), model, tensors.optim, l.metadata));
  resume_point out;
  try {
    optim.bind(model);
    out.updates = updates_of(l.metadata, optim, model, where);
  } catch (const ferry::exception& e) {
    if (e.error().context().starts_with(where)) throw;  // updates_of's own errors name the file
    throw ferry::exception(e.error().wrap(path.string()));
  }
  restore_generator(tensors.rng, l.metadata);
  out.epoch = position.epoch;
  out.step = position.step;
  out.global_step = position.global_step;
  carry_per_rank_state(tensors, position, world, residual_size, out);
  note_changed_settings(l.metadata, c, position.world, world, report);
  report.line("resumed from " + path.string() + " at epoch " + std::to_string(out.epoch + 1) + ", step " +
              std::to_string(out.step));
  return out;
}

}  // namespace ferry::trainer
