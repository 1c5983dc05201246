#include "ferry/checkpoint/torch/torch.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/version.h>

#include "ferry/checkpoint/detail/parsed.h"
#include "ferry/checkpoint/ferry/layout.h"
#include "ferry/checkpoint/torch/optimizer_key.h"
#include "ferry/checkpoint/reader.h"
#include "ferry/checkpoint/writer.h"

namespace ferry::libtorch {
namespace {

namespace ckpt = ferry::checkpoint;

// The dtypes LibTorch gained after 1.13: the float8s (2.1), their fnuz
// variants (2.2), uint16..64 (2.3).
#define FERRY_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

std::optional<codec::dtype> to_dtype(at::ScalarType t) {
  switch (t) {
    case at::kBool: return codec::dtype::boolean;
    case at::kByte: return codec::dtype::u8;
    case at::kChar: return codec::dtype::i8;
    case at::kShort: return codec::dtype::i16;
    case at::kInt: return codec::dtype::i32;
    case at::kLong: return codec::dtype::i64;
    case at::kHalf: return codec::dtype::f16;
    case at::kBFloat16: return codec::dtype::bf16;
    case at::kFloat: return codec::dtype::f32;
    case at::kDouble: return codec::dtype::f64;
    case at::kComplexHalf: return codec::dtype::c32;
    case at::kComplexFloat: return codec::dtype::c64;
    case at::kComplexDouble: return codec::dtype::c128;
#if FERRY_TORCH_AT_LEAST(2, 1)
    case at::kFloat8_e4m3fn: return codec::dtype::f8_e4m3;
    case at::kFloat8_e5m2: return codec::dtype::f8_e5m2;
#endif
#if FERRY_TORCH_AT_LEAST(2, 2)
    case at::kFloat8_e4m3fnuz: return codec::dtype::f8_e4m3fnuz;
    case at::kFloat8_e5m2fnuz: return codec::dtype::f8_e5m2fnuz;
#endif
#if FERRY_TORCH_AT_LEAST(2, 3)
    case at::kUInt16: return codec::dtype::u16;
    case at::kUInt32: return codec::dtype::u32;
    case at::kUInt64: return codec::dtype::u64;
#endif
    default: return std::nullopt;
  }
}

std::optional<at::ScalarType> to_scalar_type(codec::dtype t) {
  switch (t) {
    case codec::dtype::boolean: return at::kBool;
    case codec::dtype::u8: return at::kByte;
    case codec::dtype::i8: return at::kChar;
    case codec::dtype::i16: return at::kShort;
    case codec::dtype::i32: return at::kInt;
    case codec::dtype::i64: return at::kLong;
    case codec::dtype::f16: return at::kHalf;
    case codec::dtype::bf16: return at::kBFloat16;
    case codec::dtype::f32: return at::kFloat;
    case codec::dtype::f64: return at::kDouble;
    case codec::dtype::c32: return at::kComplexHalf;
    case codec::dtype::c64: return at::kComplexFloat;
    case codec::dtype::c128: return at::kComplexDouble;
#if FERRY_TORCH_AT_LEAST(2, 1)
    case codec::dtype::f8_e4m3: return at::kFloat8_e4m3fn;
    case codec::dtype::f8_e5m2: return at::kFloat8_e5m2;
#endif
#if FERRY_TORCH_AT_LEAST(2, 2)
    case codec::dtype::f8_e4m3fnuz: return at::kFloat8_e4m3fnuz;
    case codec::dtype::f8_e5m2fnuz: return at::kFloat8_e5m2fnuz;
#endif
#if FERRY_TORCH_AT_LEAST(2, 3)
    case codec::dtype::u16: return at::kUInt16;
    case codec::dtype::u32: return at::kUInt32;
    case codec::dtype::u64: return at::kUInt64;
#endif
    default: return std::nullopt;
  }
}

std::string tensor_context(const std::filesystem::path& path, const std::string& name) {
  return ckpt::detail::tensor_context(path.string(), name);
}

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::vector<std::int64_t> to_int64(std::span<const std::uint64_t> v) {
  return {v.begin(), v.end()};
}

std::string shape_text(at::IntArrayRef s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The optimizer kinds the adapter knows, and their per-parameter tensors.
// (trainer/optimizers.h names the same four: checkpoint/ sits below the
// trainer and cannot use its table.)
enum class optimizer_kind { adam, adamw, sgd, rmsprop };

std::optional<optimizer_kind> kind_of(const torch::optim::Optimizer& o) {
  if (dynamic_cast<const torch::optim::Adam*>(&o) != nullptr) return optimizer_kind::adam;
  if (dynamic_cast<const torch::optim::AdamW*>(&o) != nullptr) return optimizer_kind::adamw;
  if (dynamic_cast<const torch::optim::SGD*>(&o) != nullptr) return optimizer_kind::sgd;
  if (dynamic_cast<const torch::optim::RMSprop*>(&o) != nullptr) return optimizer_kind::rmsprop;
  return std::nullopt;
}

const char* kind_name(optimizer_kind k) {
  switch (k) {
    case optimizer_kind::adam: return "adam";
    case optimizer_kind::adamw: return "adamw";
    case optimizer_kind::sgd: return "sgd";
    case optimizer_kind::rmsprop: return "rmsprop";
  }
  return "?";
}

using state_key_t = optimizer_key_t;
state_key_t state_key(const at::Tensor& p) { return optimizer_key(p); }

// Parameter names by TensorImpl (the first name of a tied parameter).
std::unordered_map<const void*, std::string> parameter_names(const torch::nn::Module& module) {
  std::unordered_map<const void*, std::string> names;
  for (const auto& p : module.named_parameters(true)) names.emplace(p.value().unsafeGetTensorImpl(), p.key());
  return names;
}

// Options of one group as metadata, and back.
template <class Options>
void adam_options_out(const Options& o, const std::string& prefix, metadata_map& m) {
  m[prefix + "lr"] = number(o.lr());
  m[prefix + "beta1"] = number(std::get<0>(o.betas()));
  m[prefix + "beta2"] = number(std::get<1>(o.betas()));
  m[prefix + "eps"] = number(o.eps());
  m[prefix + "weight_decay"] = number(o.weight_decay());
  m[prefix + "amsgrad"] = o.amsgrad() ? "true" : "false";
}

// A metadata number, if present.
std::optional<double> meta_number(const metadata_map& m, const std::string& key) {
  const auto it = m.find(key);
  if (it == m.end()) return std::nullopt;
  return std::strtod(it->second.c_str(), nullptr);
}

template <class Options>
void adam_options_in(Options& o, const std::string& prefix, const metadata_map& m) {
  if (auto v = meta_number(m, prefix + "lr")) o.lr(*v);
  const auto b1 = meta_number(m, prefix + "beta1"), b2 = meta_number(m, prefix + "beta2");
  if (b1 && b2) o.betas(std::make_tuple(*b1, *b2));
  if (auto v = meta_number(m, prefix + "eps")) o.eps(*v);
  if (auto v = meta_number(m, prefix + "weight_decay")) o.weight_decay(*v);
  if (const auto it = m.find(prefix + "amsgrad"); it != m.end()) o.amsgrad(it->second == "true");
}

using commit_fn = std::function<void()>;

// Checks `tensors` against the module and returns what copies them in.
result<commit_fn, error> prepare_state_dict(torch::nn::Module& module, const tensor_map& tensors, bool strict,
                                            const std::string& where) {
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;
  std::unordered_map<std::string, bool> used;
  const auto take = [&](const std::string& name, const at::Tensor& target) -> result<void, error> {
    const auto it = tensors.find(name);
    if (it == tensors.end()) {
      if (strict) return error(checkpoint_errc::tensor_not_found, tensor_context(where, name));
      return {};
    }
    used[name] = true;
    const at::Tensor& src = it->second;
    if (src.sizes() != target.sizes() || src.scalar_type() != target.scalar_type()) {
      return error(errc::size_mismatch, tensor_context(where, name) + ": " + std::string(c10::toString(src.scalar_type())) +
                                            shape_text(src.sizes()) + " in the file, " +
                                            std::string(c10::toString(target.scalar_type())) +
                                            shape_text(target.sizes()) + " in the module");
    }
    copies.emplace_back(target, src);
    return {};
  };
  for (const auto& p : module.named_parameters(true)) FERRY_TRY(take(p.key(), p.value()));
  for (const auto& b : module.named_buffers(true)) FERRY_TRY(take(b.key(), b.value()));
  if (strict) {
    for (const auto& [name, t] : tensors) {
      if (!used.contains(name)) {
        return error(errc::size_mismatch, tensor_context(where, name) + ": not a parameter or buffer of the module");
      }
    }
  }
  return commit_fn([copies = std::move(copies)] {
    torch::NoGradGuard no_grad;
    for (const auto& [target, src] : copies) target.copy_(src);
  });
}

result<commit_fn, error> prepare_optimizer(torch::optim::Optimizer& optimizer, const torch::nn::Module& module,
                                           const tensor_map& tensors, const metadata_map& metadata,
                                           const std::string& where) {
  const auto kind = kind_of(optimizer);
  if (!kind) return error(errc::bad_value, where + ": only Adam, AdamW, SGD and RMSprop state can be loaded");
  const auto type = metadata.find("optimizer.type");
  if (type == metadata.end() || type->second != kind_name(*kind)) {
    return error(errc::bad_value, where + ": the file holds " +
                                      (type == metadata.end() ? std::string("no optimizer") : type->second) +
                                      " state, the optimizer is " + kind_name(*kind));
  }
  const auto names = parameter_names(module);
  std::vector<std::pair<state_key_t, std::unique_ptr<torch::optim::OptimizerParamState>>> states;
  const auto find = [&](const std::string& name, const char* field, const at::Tensor& like,
                        bool required) -> result<at::Tensor, error> {
    const std::string key = "optimizer." + name + "." + field;
    const auto it = tensors.find(key);
    if (it == tensors.end()) {
      if (required) return error(checkpoint_errc::tensor_not_found, tensor_context(where, key));
      return at::Tensor();
    }
    if (like.defined() && (it->second.sizes() != like.sizes() || it->second.scalar_type() != like.scalar_type())) {
      return error(errc::size_mismatch, tensor_context(where, key) + ": does not match its parameter");
    }
    return it->second.clone();
  };
  for (auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      const auto n = names.find(p.unsafeGetTensorImpl());
      if (n == names.end()) return error(errc::bad_value, where + ": an optimizer parameter is not in the module");
      const std::string& name = n->second;
      if (*kind == optimizer_kind::sgd) {
        FERRY_TRY_ASSIGN(auto buf, find(name, "momentum_buffer", p, false));
        if (!buf.defined()) continue;
        auto st = std::make_unique<torch::optim::SGDParamState>();
        st->momentum_buffer(buf);
        states.emplace_back(state_key(p), std::move(st));
        continue;
      }
      FERRY_TRY_ASSIGN(auto step, find(name, "step", at::Tensor(), false));
      if (!step.defined()) continue;  // no state yet for this parameter
      if (step.numel() != 1 || step.scalar_type() != at::kLong) {
        return error(errc::size_mismatch, tensor_context(where, "optimizer." + name + ".step"));
      }
      if (*kind == optimizer_kind::rmsprop) {
        FERRY_TRY_ASSIGN(auto sq, find(name, "square_avg", p, true));
        FERRY_TRY_ASSIGN(auto buf, find(name, "momentum_buffer", p, false));
        FERRY_TRY_ASSIGN(auto avg, find(name, "grad_avg", p, false));
        auto st = std::make_unique<torch::optim::RMSpropParamState>();
        st->step(step.item<std::int64_t>());
        st->square_avg(sq);
        if (buf.defined()) st->momentum_buffer(buf);
        if (avg.defined()) st->grad_avg(avg);
        states.emplace_back(state_key(p), std::move(st));
        continue;
      }
      FERRY_TRY_ASSIGN(auto m1, find(name, "exp_avg", p, true));
      FERRY_TRY_ASSIGN(auto m2, find(name, "exp_avg_sq", p, true));
      FERRY_TRY_ASSIGN(auto mx, find(name, "max_exp_avg_sq", p, false));
      const auto fill = [&](auto st) {
        st->step(step.item<std::int64_t>());
        st->exp_avg(m1);
        st->exp_avg_sq(m2);
        if (mx.defined()) st->max_exp_avg_sq(mx);
        states.emplace_back(state_key(p), std::move(st));
      };
      if (*kind == optimizer_kind::adam) fill(std::make_unique<torch::optim::AdamParamState>());
      else fill(std::make_unique<torch::optim::AdamWParamState>());
    }
  }
  return commit_fn([&optimizer, kind = *kind, &metadata, states = std::make_shared<decltype(states)>(std::move(states))] {
    auto& groups = optimizer.param_groups();
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const std::string prefix = "optimizer.group." + std::to_string(g) + ".";
      auto& o = groups[g].options();
      if (kind == optimizer_kind::adam) {
        adam_options_in(static_cast<torch::optim::AdamOptions&>(o), prefix, metadata);
      } else if (kind == optimizer_kind::adamw) {
        adam_options_in(static_cast<torch::optim::AdamWOptions&>(o), prefix, metadata);
      } else if (kind == optimizer_kind::rmsprop) {
        auto& r = static_cast<torch::optim::RMSpropOptions&>(o);
        if (auto v = meta_number(metadata, prefix + "lr")) r.lr(*v);
        if (auto v = meta_number(metadata, prefix + "alpha")) r.alpha(*v);
        if (auto v = meta_number(metadata, prefix + "eps")) r.eps(*v);
        if (auto v = meta_number(metadata, prefix + "weight_decay")) r.weight_decay(*v);
        if (auto v = meta_number(metadata, prefix + "momentum")) r.momentum(*v);
        if (const auto it = metadata.find(prefix + "centered"); it != metadata.end()) r.centered(it->second == "true");
      } else {
        auto& s = static_cast<torch::optim::SGDOptions&>(o);
        if (auto v = meta_number(metadata, prefix + "lr")) s.lr(*v);
        if (auto v = meta_number(metadata, prefix + "momentum")) s.momentum(*v);
        if (auto v = meta_number(metadata, prefix + "dampening")) s.dampening(*v);
        if (auto v = meta_number(metadata, prefix + "weight_decay")) s.weight_decay(*v);
        if (const auto it = metadata.find(prefix + "nesterov"); it != metadata.end()) s.nesterov(it->second == "true");
      }
    }
    optimizer.state().clear();
    for (auto& [key, st] : *states) optimizer.state()[key] = std::move(st);
  });
}

std::string path_string(const std::filesystem::path& p) { return p.string(); }

}  // namespace

result<tensor_refs, error> tensor_refs::make(const tensor_map& tensors, const std::filesystem::path& where) {
  tensor_refs out;
  out.cpu_.reserve(tensors.size());
  for (const auto& [name, original] : tensors) {
    const auto dtype = to_dtype(original.scalar_type());
    if (!dtype) {
      return error(codec_errc::unknown_dtype, tensor_context(where, name) + ": " + c10::toString(original.scalar_type()));
    }
    if (original.layout() != at::kStrided) return error(errc::bad_value, tensor_context(where, name) + ": not a strided tensor");
    out.cpu_.push_back(original.device().is_cpu() ? original : original.cpu());
    const at::Tensor& t = out.cpu_.back();
    out.shapes_.emplace_back(t.sizes().begin(), t.sizes().end());
    out.strides_.emplace_back(t.strides().begin(), t.strides().end());
  }
  // Spans into the vectors above, filled now that they no longer grow.
  std::size_t i = 0;
  for (const auto& [name, original] : tensors) {
    const at::Tensor& t = out.cpu_[i];
    const c10::Storage& st = t.storage();
    out.refs_.push_back({name, *to_dtype(t.scalar_type()), out.shapes_[i], out.strides_[i],
                         static_cast<std::uint64_t>(t.storage_offset()),
                         std::span(static_cast<const std::byte*>(st.data()), st.nbytes())});
    ++i;
  }
  return out;
}

result<void, error> save(const std::filesystem::path& path, const tensor_map& tensors, const metadata_map& metadata,
                         const checkpoint::write_options& opt) {
  // Every tensor stays alive through the call, so checkpoint::save() can
  // find shared storages by address.
  FERRY_TRY_ASSIGN(const auto refs, tensor_refs::make(tensors, path));
  return ckpt::save(path, refs.refs(), metadata, opt);
}

result<loaded, error> load(const std::filesystem::path& path, const checkpoint::limits& lim) {
  FERRY_TRY_ASSIGN(auto r, ckpt::open(path, lim));
  loaded out;
  out.metadata = r.metadata();
  std::vector<at::Tensor> storages(r.storages().size());
  for (const auto& info : r.tensors()) {
    const auto type = to_scalar_type(info.dtype);
    if (!type) {
      return error(codec_errc::unknown_dtype, tensor_context(path, info.name) + ": no LibTorch dtype for " +
                                                  std::string(codec::name(info.dtype)));
    }
    const auto too_big = [](std::uint64_t v) { return v > static_cast<std::uint64_t>(INT64_MAX); };
    if (too_big(info.offset) || std::any_of(info.shape.begin(), info.shape.end(), too_big) ||
        std::any_of(info.strides.begin(), info.strides.end(), too_big)) {
      return error(checkpoint_errc::shape_overflow, tensor_context(path, info.name) + ": beyond LibTorch's int64 sizes");
    }
    at::Tensor& base = storages[info.storage];
    if (!base.defined()) {
      FERRY_TRY_ASSIGN(const auto t, r.get(info));
      const auto bytes = t.storage_bytes();
      const auto storage_type = to_scalar_type(r.storages()[info.storage].dtype).value_or(*type);
      base = at::empty({static_cast<std::int64_t>(bytes.size() / codec::size_of(info.dtype))},
                       at::TensorOptions().dtype(storage_type));
      if (!bytes.empty()) std::memcpy(base.data_ptr(), bytes.data(), bytes.size());
    }
    at::Tensor view = at::empty({0}, at::TensorOptions().dtype(*type));
    view.set_(base.storage(), static_cast<std::int64_t>(info.offset), to_int64(info.shape), to_int64(info.strides));
    out.tensors.emplace(info.name, std::move(view));
  }
  return out;
}

tensor_map state_dict(const torch::nn::Module& module) {
  tensor_map m;
  for (const auto& p : module.named_parameters(true)) m.emplace(p.key(), p.value());
  for (const auto& b : module.named_buffers(true)) m.emplace(b.key(), b.value());
  return m;
}

result<void, error> load_state_dict(torch::nn::Module& module, const tensor_map& tensors, bool strict) {
  FERRY_TRY_ASSIGN(auto commit, prepare_state_dict(module, tensors, strict, "state dict"));
  commit();
  return {};
}

result<void, error> optimizer_state(const torch::optim::Optimizer& optimizer, const torch::nn::Module& module,
                                    tensor_map& tensors, metadata_map& metadata) {
  const auto kind = kind_of(optimizer);
  if (!kind) return error(errc::bad_value, "only Adam, AdamW, SGD and RMSprop state can be saved");
  metadata["optimizer.type"] = kind_name(*kind);
  const auto names = parameter_names(module);
  const auto& groups = optimizer.param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::string prefix = "optimizer.group." + std::to_string(g) + ".";
    const auto& o = groups[g].options();
    if (*kind == optimizer_kind::adam) {
      adam_options_out(static_cast<const torch::optim::AdamOptions&>(o), prefix, metadata);
    } else if (*kind == optimizer_kind::adamw) {
      adam_options_out(static_cast<const torch::optim::AdamWOptions&>(o), prefix, metadata);
    } else if (*kind == optimizer_kind::rmsprop) {
      const auto& r = static_cast<const torch::optim::RMSpropOptions&>(o);
      metadata[prefix + "lr"] = number(r.lr());
      metadata[prefix + "alpha"] = number(r.alpha());
      metadata[prefix + "eps"] = number(r.eps());
      metadata[prefix + "weight_decay"] = number(r.weight_decay());
      metadata[prefix + "momentum"] = number(r.momentum());
      metadata[prefix + "centered"] = r.centered() ? "true" : "false";
    } else {
      const auto& s = static_cast<const torch::optim::SGDOptions&>(o);
      metadata[prefix + "lr"] = number(s.lr());
      metadata[prefix + "momentum"] = number(s.momentum());
      metadata[prefix + "dampening"] = number(s.dampening());
      metadata[prefix + "weight_decay"] = number(s.weight_decay());
      metadata[prefix + "nesterov"] = s.nesterov() ? "true" : "false";
    }
    std::string members;
    for (const auto& p : groups[g].params()) {
      const auto n = names.find(p.unsafeGetTensorImpl());
      if (n == names.end()) return error(errc::bad_value, "an optimizer parameter is not in the module");
      members += (members.empty() ? "" : "\n") + n->second;
      const auto it = optimizer.state().find(state_key(p));
      if (it == optimizer.state().end()) continue;
      const std::string key = "optimizer." + n->second + ".";
      if (*kind == optimizer_kind::sgd) {
        const auto& st = static_cast<const torch::optim::SGDParamState&>(*it->second);
        if (st.momentum_buffer().defined()) tensors[key + "momentum_buffer"] = st.momentum_buffer();
        continue;
      }
      if (*kind == optimizer_kind::rmsprop) {
        const auto& st = static_cast<const torch::optim::RMSpropParamState&>(*it->second);
        tensors[key + "step"] = at::scalar_tensor(st.step(), at::kLong);
        tensors[key + "square_avg"] = st.square_avg();
        if (st.momentum_buffer().defined()) tensors[key + "momentum_buffer"] = st.momentum_buffer();
        if (st.grad_avg().defined()) tensors[key + "grad_avg"] = st.grad_avg();
        continue;
      }
      const auto out = [&](const auto& st) {
        tensors[key + "step"] = at::scalar_tensor(st.step(), at::kLong);
        tensors[key + "exp_avg"] = st.exp_avg();
        tensors[key + "exp_avg_sq"] = st.exp_avg_sq();
        if (st.max_exp_avg_sq().defined()) tensors[key + "max_exp_avg_sq"] = st.max_exp_avg_sq();
      };
      if (*kind == optimizer_kind::adam) out(static_cast<const torch::optim::AdamParamState&>(*it->second));
      else out(static_cast<const torch::optim::AdamWParamState&>(*it->second));
    }
    metadata[prefix + "params"] = members;
  }
  return {};
}

result<void, error> load_optimizer_state(torch::optim::Optimizer& optimizer, const torch::nn::Module& module,
                                         const tensor_map& tensors, const metadata_map& metadata) {
  FERRY_TRY_ASSIGN(auto commit, prepare_optimizer(optimizer, module, tensors, metadata, "optimizer state"));
  commit();
  return {};
}

result<void, error> save_checkpoint(const std::filesystem::path& path, const torch::nn::Module& module,
                                    const torch::optim::Optimizer* optimizer, const metadata_map& metadata,
                                    const checkpoint::write_options& opt) {
  tensor_map tensors = state_dict(module);
  metadata_map meta = metadata;
  if (optimizer != nullptr) {
    if (auto r = optimizer_state(*optimizer, module, tensors, meta); !r) return r.error().wrap(path_string(path));
  }
  return save(path, tensors, meta, opt);
}

result<metadata_map, error> load_checkpoint(const std::filesystem::path& path, torch::nn::Module& module,
                                            torch::optim::Optimizer* optimizer) {
  FERRY_TRY_ASSIGN(auto l, load(path));
  tensor_map model, optim;
  for (auto& [name, t] : l.tensors) (name.starts_with("optimizer.") ? optim : model).emplace(name, std::move(t));
  // Check both before changing either: an error leaves module and optimizer as they were.
  FERRY_TRY_ASSIGN(auto commit_model, prepare_state_dict(module, model, true, path_string(path)));
  commit_fn commit_optim;
  if (optimizer != nullptr) {
    FERRY_TRY_ASSIGN(commit_optim, prepare_optimizer(*optimizer, module, optim, l.metadata, path_string(path)));
  }
  commit_model();
  if (commit_optim) commit_optim();
  return std::move(l.metadata);
}

}  // namespace ferry::libtorch
