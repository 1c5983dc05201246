// ferry/checkpoint/torch/optimizer_key.h: the key of a parameter's state
// in LibTorch's Optimizer::state(), which changed between releases: the
// parameter's TensorImpl address printed as text (LibTorch 1.13), or the
// address itself (2.x). The adapter (torch.cpp) and ferry-train's optimizer
// (train/optimizer.cpp) find and store states through it.
#pragma once

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include <torch/optim/optimizer.h>

namespace ferry::libtorch {

/// Optimizer::state()'s key type in this LibTorch.
using optimizer_key_t = std::remove_cvref_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

/// The key of parameter `p`'s state. (A template, so that the branch of the
/// other release is never compiled.)
template <class Key = optimizer_key_t>
Key optimizer_key(const at::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;
    s << p.unsafeGetTensorImpl();  // the text c10::guts::to_string gave
    return s.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

}  // namespace ferry::libtorch
