// ferry/checkpoint/torch/torch.h: LibTorch tensors, modules and optimizers
// through ferry checkpoints (target ferry::torch, built where LibTorch is).
//
//   ferry::libtorch::save_checkpoint("run.ferry", *model, &adam, {{"epoch", "3"}}).value();
//   ...
//   auto meta = ferry::libtorch::load_checkpoint("run.ferry", *model, &adam).value();
//
// Any format checkpoint::open() reads can be loaded (.ferry, .safetensors).
//
// - Tensors that share a storage in LibTorch (tied weights, a view and its
//   base) share it in the file and again after load(): the loaded tensors
//   are views over one new storage each, with the saved offsets and strides,
//   so tied tensors have equal data_ptr().
// - Modules: parameters and buffers by their dotted names
//   (named_parameters() and named_buffers()), so BatchNorm's running_mean,
//   running_var and num_batches_tracked travel too.
// - Optimizers (Adam, AdamW, SGD, RMSprop): each parameter's state under
//   the parameter's name, "optimizer.<name>.<field>" (exp_avg, exp_avg_sq,
//   max_exp_avg_sq, step; momentum_buffer; square_avg, grad_avg), never by address as LibTorch's
//   own serializer does; hyper-parameters per group as metadata
//   ("optimizer.type", "optimizer.group.<g>.lr", ...), written with 17
//   significant digits so they read back exactly.
// - Non-CPU tensors are copied to the CPU first. dtypes: bool, uint8, int8,
//   int16, int32, int64, float16, bfloat16, float32, float64; anything else
//   is codec_errc::unknown_dtype.
//
// Errors are ferry::error values naming the file and the tensor; a module
// or optimizer that does not match the file (a missing or unexpected name,
// another shape or dtype) is errc::size_mismatch or
// checkpoint_errc::tensor_not_found, and nothing is changed.
#pragma once

#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include "ferry/base/error.h"
#include "ferry/checkpoint/options.h"
#include "ferry/checkpoint/tensor.h"

namespace ferry::libtorch {

using tensor_map = std::map<std::string, at::Tensor>;
using metadata_map = std::map<std::string, std::string>;

/// Saves `tensors` with `metadata` as a .ferry file (atomically).
[[nodiscard]] result<void, error> save(const std::filesystem::path& path, const tensor_map& tensors,
                                       const metadata_map& metadata = {},
                                       const checkpoint::write_options& opt = {});

/// checkpoint::tensor_refs over `tensors` (each copied to the CPU where it
/// is not), valid while this object and `tensors` live: for the
/// checkpoint writers that take refs (save(), checkpoint::save_set(),
/// shard_writer). Tensors sharing a LibTorch storage give refs with equal
/// storage spans. Errors: unknown_dtype, bad_value (not strided), naming
/// `where` and the tensor.
class tensor_refs {
 public:
  [[nodiscard]] static result<tensor_refs, error> make(const tensor_map& tensors, const std::filesystem::path& where);
  [[nodiscard]] std::span<const checkpoint::tensor_ref> refs() const noexcept { return refs_; }

 private:
  std::vector<at::Tensor> cpu_;
  std::vector<std::vector<std::uint64_t>> shapes_, strides_;
  std::vector<checkpoint::tensor_ref> refs_;
};

struct loaded {
  tensor_map tensors;
  metadata_map metadata;
};
/// Loads every tensor of a checkpoint as CPU tensors (every CRC checked).
[[nodiscard]] result<loaded, error> load(const std::filesystem::path& path, const checkpoint::limits& lim = {});

/// A module's parameters and buffers by name (tensors alias the module's).
[[nodiscard]] tensor_map state_dict(const torch::nn::Module& module);
/// Copies `tensors` into the module's parameters and buffers. With `strict`,
/// every name must be present on both sides. Nothing is changed on error.
[[nodiscard]] result<void, error> load_state_dict(torch::nn::Module& module, const tensor_map& tensors,
                                                  bool strict = true);

/// An optimizer's state and hyper-parameters keyed by `module`'s parameter
/// names. Adam, AdamW, SGD and RMSprop; other optimizers are
/// errc::bad_value.
[[nodiscard]] result<void, error> optimizer_state(const torch::optim::Optimizer& optimizer,
                                                  const torch::nn::Module& module, tensor_map& tensors,
                                                  metadata_map& metadata);
/// Restores what optimizer_state() produced into an optimizer of the same
/// type built over `module`'s parameters.
[[nodiscard]] result<void, error> load_optimizer_state(torch::optim::Optimizer& optimizer,
                                                       const torch::nn::Module& module, const tensor_map& tensors,
                                                       const metadata_map& metadata);

/// A module (and optionally its optimizer) in one file, with `metadata`.
[[nodiscard]] result<void, error> save_checkpoint(const std::filesystem::path& path, const torch::nn::Module& module,
                                                  const torch::optim::Optimizer* optimizer = nullptr,
                                                  const metadata_map& metadata = {},
                                                  const checkpoint::write_options& opt = {});
/// Loads what save_checkpoint() wrote; returns the metadata (optimizer
/// entries included).
[[nodiscard]] result<metadata_map, error> load_checkpoint(const std::filesystem::path& path,
                                                          torch::nn::Module& module,
                                                          torch::optim::Optimizer* optimizer = nullptr);

}  // namespace ferry::libtorch
