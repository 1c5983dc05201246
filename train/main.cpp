// ferry-train: the reference job (an MLP on Fashion-MNIST), data-parallel
// over ferry's ring or Gloo. Run it under ferry-run, torchrun or SLURM, or
// with MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and FERRY_SECRET set by
// hand; alone, it is one rank.
//
// Exit status: 0 done, 1 the job failed (a peer lost, a bad checkpoint,
// data files missing or corrupt), 2 bad options.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include "cli11.h"
#include "collectives.h"
#include "ferry/base/cpu.h"
#include "ferry/comm/error.h"
#include "job.h"
#include "test_hooks.h"

namespace {

using ferry::trainer::train_config;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

// LibTorch threads: --threads, else OMP_NUM_THREADS (ferry-run and torchrun
// set it), else the cores split evenly between this node's ranks.
int thread_count(int requested) {
  if (requested > 0) return requested;
  if (const int omp = std::atoi(env_or("OMP_NUM_THREADS", "0").c_str()); omp > 0) return omp;
  const int local = std::max(1, std::atoi(env_or("LOCAL_WORLD_SIZE", "1").c_str()));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local);
}

// Ranks per node, from LOCAL_WORLD_SIZE (torchrun, ferry-run) or
// SLURM_NTASKS_PER_NODE; every rank on one node when neither is set.
std::uint32_t ranks_per_node(std::uint32_t world) {
  const int local = std::atoi(env_or("LOCAL_WORLD_SIZE", env_or("SLURM_NTASKS_PER_NODE", "0")).c_str());
  if (local <= 0 || world % static_cast<std::uint32_t>(local) != 0) return world;
  return static_cast<std::uint32_t>(local);
}

// "1 node x 4 processes".
std::string layout(std::uint32_t world) {
  const auto local = ranks_per_node(world);
  const auto nodes = world / local;
  return std::to_string(nodes) + (nodes == 1 ? " node x " : " nodes x ") + std::to_string(local) +
         (local == 1 ? " process" : " processes");
}

}  // namespace

int main(int argc, char** argv) {
  train_config c;
  std::string compress = "none", hidden = "32", die;
  CLI::App app{"ferry-train: data-parallel training of an MLP on an IDX image set (Fashion-MNIST by default), "
               "with ranks of any architecture. Rank and world come from MASTER_ADDR, MASTER_PORT, RANK, "
               "WORLD_SIZE (as torchrun or ferry-run set them; SLURM_PROCID and SLURM_NTASKS also work) and the "
               "shared secret from FERRY_SECRET or FERRY_SECRET_FILE.",
               "ferry-train"};
  ferry::tools::share_option_defaults(app);
  app.add_option("--data", c.data, "folder of IDX files: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]");
  app.add_option("--hidden", hidden, "hidden layer widths, comma-separated (each Linear, BatchNorm1d, activation)");
  std::string activation = "relu";
  std::vector<std::string> activations;
  for (const auto a : ferry::trainer::all_activations) activations.emplace_back(ferry::trainer::name(a));
  app.add_option("--activation", activation, "the hidden layers' activation")->check(CLI::IsMember(activations));
  std::string precision = "f32";
  app.add_option("--precision", precision,
                 "forward and backward in this precision (LibTorch's CPU autocast); parameters, gradients on the "
                 "wire and the optimizer stay f32")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  bool profile = false;
  std::int64_t profile_batches = 100;
  auto* profiling = app.add_flag("--profile", profile,
                                 "profile the first batches with LibTorch's profiler: time and memory per kind of "
                                 "module, forward and backward (rank 0, printed at the end and written to --metrics)");
  app.add_option("--profile-batches", profile_batches, "batches --profile covers (the course's 100)")
      ->check(CLI::Range(1, 1 << 20))
      ->needs(profiling);
  bool no_batchnorm = false;
  app.add_flag("--no-batchnorm", no_batchnorm, "no BatchNorm1d after the hidden Linear layers");
  std::string freeze;
  app.add_option("--freeze", freeze, "hidden layers not trained, comma-separated from 1 (their Linear and BatchNorm "
                                     "parameters get no gradient and no optimizer step)");
  // The optimizer: LibTorch's names and defaults (trainer/optimizers.h).
  std::string optimizer = "adam";
  std::vector<std::string> optimizers;
  for (const auto k : ferry::trainer::all_optimizers) optimizers.emplace_back(ferry::trainer::name(k));
  app.add_option("--optimizer", optimizer, "ferry's step of LibTorch's optimizer of that name")
      ->check(CLI::IsMember(optimizers));
  auto& o = c.optimizer;
  auto* lr = app.add_option("--lr", o.lr, "learning rate (default: 1e-3 for adam and adamw, 1e-2 for sgd and rmsprop)")
                 ->check(CLI::PositiveNumber);
  auto* weight_decay = app.add_option("--weight-decay", o.weight_decay,
                                      "L2 penalty added to the gradient; decoupled for adamw (default: 1e-2 for "
                                      "adamw, 0 for the others)")
                           ->check(CLI::NonNegativeNumber);
  using ferry::trainer::optimizer_kind;
  // Options of some optimizers only: given to another, a usage error.
  const std::vector<std::pair<CLI::Option*, std::vector<optimizer_kind>>> only_for{
      {app.add_option("--momentum", o.momentum, "sgd, rmsprop: momentum (default 0)")->check(CLI::NonNegativeNumber),
       {optimizer_kind::sgd, optimizer_kind::rmsprop}},
      {app.add_option("--dampening", o.dampening, "sgd: dampening of the momentum (default 0)"), {optimizer_kind::sgd}},
      {app.add_flag("--nesterov", o.nesterov, "sgd: Nesterov momentum (needs --momentum, no --dampening)"),
       {optimizer_kind::sgd}},
      {app.add_option("--alpha", o.alpha, "rmsprop: smoothing constant (default 0.99)")->check(CLI::NonNegativeNumber),
       {optimizer_kind::rmsprop}},
      {app.add_flag("--centered", o.centered, "rmsprop: normalise by the gradient's estimated variance"),
       {optimizer_kind::rmsprop}},
      {app.add_option("--eps", o.eps, "adam, adamw, rmsprop: term added to the denominator (default 1e-8)")
           ->check(CLI::NonNegativeNumber),
       {optimizer_kind::adam, optimizer_kind::adamw, optimizer_kind::rmsprop}},
  };
  app.add_option("--batch", c.batch, "batch size per rank (of each micro-batch with --accumulate)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--accumulate", c.accumulate,
                 "micro-batches whose gradients are summed before one exchange and one optimizer step")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--epochs", c.epochs, "epochs")->check(CLI::Range(1, 1 << 20));
  app.add_option("--seed", c.seed, "seed of the model's initial values and of the sampler (seed + epoch)");
  app.add_flag("--drop-last", c.drop_last, "drop the tail that does not divide evenly between ranks");
  app.add_option("--limit", c.limit, "train on the first N samples only (0: all)");
  app.add_option("--test-limit", c.test_limit, "evaluate on the first N test samples only (0: all)");
  std::vector<std::string> compressions;
  for (const auto k : ferry::comm::all_compressions) compressions.emplace_back(ferry::comm::name(k));
  app.add_option("--compress", compress, "gradients travel as f32 (none) or 16-bit with error feedback")
      ->check(CLI::IsMember(compressions));
  app.add_option("--backend", c.backend, "ferry (any mix of architectures) or gloo (LibTorch's ProcessGroupGloo)")
      ->check(CLI::IsMember({"ferry", "gloo"}));
  app.add_flag("--overlap,!--no-overlap", c.overlap,
               "start each gradient bucket's allreduce from backward's hooks instead of one allreduce after it");
  app.add_option("--zero", c.zero,
                 "ZeRO: 1 shards the optimizer's state over the ranks, 2 the gradients too (the parameters stay "
                 "bit-identical to a run without; checkpoints become sets, each rank writing its shard)")
      ->check(CLI::Range(0, 2));
  std::size_t bucket_kb = c.bucket_bytes / 1024;
  app.add_option("--bucket-kb", bucket_kb, "gradient bucket size in KiB, with --overlap")->check(CLI::Range(1, 1 << 20));
  app.add_option("--checkpoint", c.checkpoint, "checkpoint file rank 0 writes (atomically)");
  app.add_flag("--checkpoint-sharded", c.checkpoint_sharded,
               "every rank writes a shard of the checkpoint at once (the state split by bytes), rank 0 the index "
               "at --checkpoint, last, in the same folder (shared by every host); --resume reads it with any number "
               "of ranks");
  app.add_flag("--checkpoint-async", c.checkpoint_async,
               "training pauses only to copy the state into staging memory (allocated at the start, reused); a "
               "background thread writes, fsyncs and publishes it; a failure stops the job at the next step");
  auto* incremental = app.add_flag("--checkpoint-incremental", c.checkpoint_incremental,
               "write a checkpoint set (as --checkpoint-sharded) whose pieces equal to the last save's are kept in "
               "that save's shards, not written again");
  app.add_option("--checkpoint-full-every", c.checkpoint_full_every,
                 "with --checkpoint-incremental: every Kth save is whole, so no chain is longer than K saves")
      ->check(CLI::Range(1, 1 << 20))
      ->needs(incremental);
  app.add_option("--checkpoint-every", c.checkpoint_every, "epochs between checkpoints; 0: at the end only")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--checkpoint-steps", c.checkpoint_steps, "also every N steps within an epoch (BatchNorm statistics are averaged there too); 0: never")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--resume", c.resume, "continue from this checkpoint (read by rank 0)");
  app.add_option("--metrics", c.metrics, "JSON-lines metrics file rank 0 writes (see ferry plot)");
  app.add_option("--summary", c.summary, "JSON file rank 0 writes at the end: wall time and accuracies");
  app.add_option("--log-every", c.log_every, "steps between step records in --metrics")->check(CLI::NonNegativeNumber);
  std::string progress = "auto";
  app.add_option("--progress", progress, "progress line: redraw on a terminal (auto), always redraw, or plain lines")
      ->check(CLI::IsMember({"auto", "redraw", "plain"}));
  app.add_option("--threads", c.threads, "LibTorch threads (default: OMP_NUM_THREADS, else cores / local ranks)")
      ->check(CLI::NonNegativeNumber);
  if (const auto status = ferry::tools::parse_command_line(app, argc, argv)) return *status;
  if (auto env = ferry::base::check_cpu_features_env(); !env) {  // an unknown name in FERRY_CPU_FEATURES
    std::fprintf(stderr, "ferry-train: %s\n", env.error().what().c_str());
    return 2;
  }
  c.compress = ferry::comm::compression_from_name(compress).value();  // checked by --compress's IsMember
  c.act = ferry::trainer::activation_from_name(activation).value();   // IsMember too
  c.batchnorm = !no_batchnorm;
  c.profile = profile ? profile_batches : 0;
  c.precision = precision == "bf16" ? at::kBFloat16 : precision == "f16" ? at::kHalf : at::kFloat;
  o.kind = ferry::trainer::optimizer_from_name(optimizer).value();    // IsMember too
  const auto kind_defaults = ferry::trainer::defaults(o.kind);
  if (lr->count() == 0) o.lr = kind_defaults.lr;
  if (weight_decay->count() == 0) o.weight_decay = kind_defaults.weight_decay;
  for (const auto& [option, kinds] : only_for) {
    if (option->count() > 0 && std::find(kinds.begin(), kinds.end(), o.kind) == kinds.end()) {
      std::fprintf(stderr, "ferry-train: %s is not an option of --optimizer %s\n", option->get_name().c_str(),
                   optimizer.c_str());
      return 2;
    }
  }
  if (const auto why = ferry::trainer::invalid(o)) {
    std::fprintf(stderr, "ferry-train: --optimizer %s: %s\n", optimizer.c_str(), why->c_str());
    return 2;
  }
  if (c.checkpoint_steps % c.accumulate != 0) {
    std::fprintf(stderr, "ferry-train: --checkpoint-steps %lld is not a multiple of --accumulate %lld (a checkpoint "
                         "is taken between updates)\n",
                 static_cast<long long>(c.checkpoint_steps), static_cast<long long>(c.accumulate));
    return 2;
  }
  c.bucket_bytes = bucket_kb * 1024;
  c.progress = progress == "auto" ? -1 : progress == "redraw" ? 1 : 0;
  c.hidden.clear();
  for (std::size_t at = 0; at <= hidden.size();) {
    const auto end = std::min(hidden.find(',', at), hidden.size());
    std::int64_t w = 0;
    const auto [stop, ec] = std::from_chars(hidden.data() + at, hidden.data() + end, w);
    if (ec != std::errc() || stop != hidden.data() + end || w <= 0 || w > (1 << 20)) {
      std::fprintf(stderr, "ferry-train: --hidden: '%s' is not a list of positive widths (see --help)\n", hidden.c_str());
      return 2;
    }
    c.hidden.push_back(w);
    at = end + 1;
  }
  for (std::size_t at = 0; !freeze.empty() && at <= freeze.size();) {
    const auto end = std::min(freeze.find(',', at), freeze.size());
    std::int64_t layer = 0;
    const auto [stop, ec] = std::from_chars(freeze.data() + at, freeze.data() + end, layer);
    if (ec != std::errc() || stop != freeze.data() + end || layer < 1 ||
        layer > static_cast<std::int64_t>(c.hidden.size())) {
      std::fprintf(stderr, "ferry-train: --freeze: '%s' is not a list of hidden layers from 1 to %zu (see --help)\n",
                   freeze.c_str(), c.hidden.size());
      return 2;
    }
    c.freeze.push_back(layer);
    at = end + 1;
  }
  if (c.backend == "gloo" && c.compress != ferry::comm::compression::none) {
    std::fputs("ferry-train: --compress needs --backend ferry (Gloo has no 16-bit allreduce with error feedback)\n",
               stderr);
    return 2;
  }
  ferry::trainer::read_test_hooks(c);  // in the tests' ferry-train-hooked only

  const std::string rank = env_or("RANK", env_or("SLURM_PROCID", "0"));
  const std::string who = "ferry-train: rank " + rank + ": ";
  if (const auto why = ferry::trainer::precision_unsupported(c.precision, c.act, c.batchnorm)) {
    std::fprintf(stderr, "%s--precision %s: LibTorch cannot compute the model in it on this CPU (%s)\n", who.c_str(),
                 precision.c_str(), why->c_str());
    return 1;
  }
  // One line; for a failure while training (a peer lost), the way back
  // when there is a checkpoint to go back to.
  const auto failed = [&](std::string text, bool while_training) {
    std::replace(text.begin(), text.end(), '\n', ' ');
    std::string hint;
    std::error_code ec;
    if (while_training && std::filesystem::exists(c.checkpoint, ec)) {
      hint = "; to continue, run the job again with --resume " + c.checkpoint.string() + " (the last checkpoint)";
    } else if (while_training) {
      hint = "; no checkpoint was written yet (" + c.checkpoint.string() + "): run the job again from the start";
    }
    // comm/'s errors already begin with "rank N: ".
    const bool named = text.rfind("rank " + rank + ": ", 0) == 0;
    std::fprintf(stderr, "%s%s%s\n", named ? "ferry-train: " : who.c_str(), text.c_str(), hint.c_str());
    return 1;
  };
  std::unique_ptr<ferry::trainer::collectives> comm;
  try {
    at::set_num_threads(thread_count(c.threads));
    // Data first: the wall time runs from the rendezvous on, as PyTorch's
    // reference script measures it.
    const auto data = ferry::trainer::load_data(c);
    const auto started = std::chrono::steady_clock::now();
    if (std::getenv("RANK") == nullptr && std::getenv("SLURM_PROCID") == nullptr) {
      // Alone: a world of one, with a secret nobody else needs.
      setenv("RANK", "0", 0);
      setenv("WORLD_SIZE", "1", 0);
      setenv("MASTER_PORT", "0", 0);
      setenv("FERRY_SECRET", "ferry-train-single", 0);
    } else if (env_or("TORCHELASTIC_USE_AGENT_STORE", "") == "True") {
      // Under torchrun, its agent's store holds MASTER_PORT on node 0: the
      // ring (and Gloo's store, one further) take the ports after it.
      setenv("MASTER_PORT", std::to_string(std::atoi(env_or("MASTER_PORT", "29500").c_str()) + 1).c_str(), 1);
    }
    comm = c.backend == "gloo" ? ferry::trainer::make_gloo_collectives() : ferry::trainer::make_ferry_collectives();
    if (comm->rank() == 0) {
      std::printf("ferry-train: %u rank(s), %s backend, %s, batch %lld per rank, %lld epochs\n", comm->world_size(),
                  comm->name().c_str(), layout(comm->world_size()).c_str(), static_cast<long long>(c.batch),
                  static_cast<long long>(c.epochs));
      std::fflush(stdout);
    }
    const auto r = ferry::trainer::train(c, *comm, *data, started);
    if (comm->rank() == 0) {
      std::printf("\n| layout | backend | wall time | train accuracy | test accuracy | peak memory per rank |\n"
                  "|---|---|---|---|---|---|\n"
                  "| %s | %s%s | %.1f s | %.1f %% | %.1f %% | %.1f MB |\n\ncheckpoint: %s\n",
                  layout(comm->world_size()).c_str(), comm->name().c_str(),
                  c.compress == ferry::comm::compression::none ? "" : (", " + compress).c_str(), r.wall_s,
                  100 * r.train_acc, 100 * r.test_acc, static_cast<double>(r.peak_rss_bytes) / 1e6,
                  c.checkpoint.c_str());
      if (!c.metrics.empty()) std::printf("metrics: %s (draw them with: ferry plot %s -o curves.svg)\n", c.metrics.c_str(), c.metrics.c_str());
      if (!c.summary.empty()) {
        std::ofstream out(c.summary);
        out << nlohmann::json{{"trainer", "ferry"}, {"backend", comm->name()}, {"compress", compress},
                              {"world", comm->world_size()},
                              {"nodes", comm->world_size() / ranks_per_node(comm->world_size())},
                              {"layout", layout(comm->world_size())},
                              {"wall_s", r.wall_s}, {"train_loss", r.train_loss}, {"train_acc", r.train_acc},
                              {"test_acc", r.test_acc}, {"epochs", r.epochs}, {"optimizer", optimizer},
                              {"activation", activation}, {"precision", precision}, {"accumulate", c.accumulate},
                              {"batch", c.batch}, {"train_samples", data->train.count},
                              {"peak_rss_bytes", r.peak_rss_bytes}}
                   .dump()
            << '\n';
        if (!out) {
          std::fprintf(stderr, "%scannot write %s\n", who.c_str(), c.summary.c_str());
          return 1;
        }
      }
    }
    return 0;
  } catch (const ferry::comm::comm_error& e) {
    return failed(e.what(), true);
  } catch (const c10::Error& e) {  // Gloo's failures among them
    return failed(e.what_without_backtrace(), true);
  } catch (const std::exception& e) {  // options, data, checkpoints
    return failed(e.what(), false);
  }
}
